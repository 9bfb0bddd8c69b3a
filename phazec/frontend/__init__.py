"""phazec.frontend."""
