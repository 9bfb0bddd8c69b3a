"""phazec.ir."""
