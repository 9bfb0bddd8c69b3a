"""phazec.track."""
