"""phazec.solvers.placement."""
