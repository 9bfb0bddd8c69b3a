"""Config schema of the `solver` group (filled by the scheduling issue)."""

from dataclasses import dataclass


@dataclass
class SolverConfig:
    """The scheduling ILP's backend and limits."""

    backend: str = "auto"
