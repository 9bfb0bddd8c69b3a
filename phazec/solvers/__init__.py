"""Plain problems in, plain results out: the per-layer scheduling ILP and its bounds (`schedule/`),
the placement DP and the one model of a plan's time and memory (`placement/`), and the one wrapper of
the compiled core (`core`)."""
