"""Config schema of the `solver` group: the per-layer scheduling ILP's backend and limits."""

from dataclasses import dataclass


@dataclass
class SolverConfig:
    """The scheduling ILP's backend and limits."""

    backend: str = "auto"
    """`auto` (Gurobi when its licence accepts the model, else HiGHS), `gurobi` or `highs`."""
    time_limit_s: float = 60.0
    """Wall-time limit of one solve; a feasible schedule found by then is returned with its gap."""
    mip_gap: float = 1e-6
    """Relative optimality gap at which a solve stops (the reference used 0.01)."""
    threads: int = 1
    """Solver threads; 1 keeps results repeatable bit for bit."""
    seed: int = 0
    """Solver random seed."""
    write_lp: bool = False
    """Write every model as an LP file to the directory the caller names."""
    collectives_as_vector: bool = False
    """Treat collectives as vector work on a vector core (the reference) instead of network time
    that overlaps compute."""
