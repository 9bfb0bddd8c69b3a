"""phazec.solvers."""
