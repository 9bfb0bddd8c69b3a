"""phazec.config."""
