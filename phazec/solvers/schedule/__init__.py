"""phazec.solvers.schedule."""
