"""phazec.report."""
