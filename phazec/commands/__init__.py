"""phazec.commands."""
