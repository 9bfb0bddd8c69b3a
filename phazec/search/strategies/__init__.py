"""phazec.search.strategies."""
