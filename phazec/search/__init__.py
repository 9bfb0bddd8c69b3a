"""phazec.search."""
