"""Config schema of the `solver` group: the per-layer scheduling ILP's backend and limits."""

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SolverConfig:
    """The scheduling ILP's backend and limits."""

    backend: str = "auto"
    """`auto` (Gurobi when its licence accepts the model, else HiGHS), `gurobi` or `highs`."""
    node_limit: int = 1000
    """Branch-and-bound nodes per solve; the best schedule found by then is returned with its gap.
    Unlike a time limit it stops every machine at the same point, so results stay reproducible."""
    search_node_limit: int = 500_000
    """Nodes of the exact schedule search that closes what the ILP leaves open (a C++ branch and
    bound, about a microsecond per node); 0 uses the ILP alone."""
    ilp_max_ops: int = 64
    """The largest graph (in ops) the ILP solves. A larger one, a MoE block of about 100 ops, goes to the
    exact search alone, with `search_node_limit` scaled by (ilp_max_ops / ops)^2: the ILP's order
    variables grow with the square of the ops, and on Qwen3-30B-A3B's blocks its solves took 15-45 s
    of CPU each, 5-20 times the search alone, for schedules at most 0.9 % shorter (2.3 % on a GPT-OSS
    block on an H100: docs/model/scheduling.md)."""
    time_limit_s: float = 600.0
    """Wall-time safety net per solve (a schedule it stops depends on the machine, so it is not
    stored on disk); the node limit normally stops first."""
    mip_gap: float = 1e-4
    """Relative optimality gap within which a schedule counts as proven optimal (Gurobi's and HiGHS's
    own default; the reference used 0.01). Tighter gaps cost far more on few cores: packing dozens of
    sub-microsecond ops around long ones, the last 1e-4 can take the whole node limit."""
    threads: int = 1
    """Solver threads; 1 keeps results repeatable bit for bit."""
    seed: int = 0
    """Solver random seed."""
    write_lp: bool = False
    """Write every model as an LP file to the directory the caller names."""
    collectives_as_vector: bool = False
    """Treat collectives as vector work on a vector core (the reference) instead of network time
    that overlaps compute."""
