"""The `exhaustive` strategy: every design, in batches of `search.batch_designs` in design order."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phazec.hw.designs import Designs
from phazec.search.executors.base import Executor
from phazec.search.loop import Found, chunks, explore
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState


@dataclass
class Exhaustive:
    """Every batch."""

    batches: list[NDArray[np.int64]]
    ends_early = False

    def wanted(self, i: int, best_s: float) -> bool:
        """Always."""
        return True

    def record(self, improved: bool) -> None:
        """Nothing to note."""

    def status(self) -> str:
        """Nothing to say."""
        return ""


def batch_count(designs: Designs, config: SearchConfig) -> int:
    """Batches of `search.batch_designs` designs."""
    return math.ceil(len(designs) / config.batch_designs)


def run(
    designs: Designs,
    config: SearchConfig,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None,
) -> Found:
    """Evaluate every design; none is pruned."""
    batches = chunks(np.arange(len(designs), dtype=np.int64), config.batch_designs)
    return explore(Exhaustive(batches), designs, workers, state, "exhaustive", weight=weight)
