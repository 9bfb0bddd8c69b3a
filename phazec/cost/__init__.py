"""phazec.cost."""
