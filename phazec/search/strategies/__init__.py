"""The search strategies, one module each, each giving `batch_count` and `run` (`phazec.search.driver`)."""
