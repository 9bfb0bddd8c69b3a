"""phazec.search.executors."""
