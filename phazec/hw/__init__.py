"""phazec.hw."""
