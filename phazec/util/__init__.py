"""phazec.util."""
