"""phazec.predict."""
