"""phazec.passes."""
