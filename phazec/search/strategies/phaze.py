"""The `phaze` strategy (PHAZE section 7): one batch per area bin of `search.bin_mm2`, largest area
first, stopping after `search.patience` consecutive bins that do not improve the best cost (the time
per batch under the throughput objective). Fast, but a heuristic: it may miss the best design."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from phazec.hw.designs import Designs
from phazec.search.executors.base import Executor
from phazec.search.loop import Found, explore
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState


@dataclass
class Phaze:
    """Area bins until `patience` bins in a row bring no improvement."""

    batches: list[NDArray[np.int64]]
    patience: int
    stale: int = 0
    """Consecutive batches without improvement so far."""
    taken: int = 0
    """Bins taken so far."""
    ends_early = True

    def wanted(self, i: int, best_s: float) -> bool:
        """While patience lasts."""
        return self.stale < self.patience

    def record(self, improved: bool) -> None:
        """Count a stale bin, or start again after an improvement."""
        self.stale = 0 if improved else self.stale + 1
        self.taken += 1

    def status(self) -> str:
        """Bins visited and the patience left."""
        left = self.patience - self.stale
        return f"bin {self.taken} of {len(self.batches)}, patience {left} of {self.patience}"


def area_bins(designs: Designs, bin_mm2: float) -> list[NDArray[np.int64]]:
    """Design indices grouped by area bin, largest area first (designs are sorted by area)."""
    keys = np.floor(designs.area_mm2 / bin_mm2).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return np.split(np.arange(len(designs), dtype=np.int64), starts[1:])


def batch_count(designs: Designs, config: SearchConfig) -> int:
    """One batch per area bin."""
    return len(area_bins(designs, config.bin_mm2))


def run(
    designs: Designs,
    config: SearchConfig,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None,
) -> Found:
    """Evaluate the bins while patience lasts; the designs left are pruned by `patience`."""
    strategy = Phaze(area_bins(designs, config.bin_mm2), config.patience)
    found = explore(strategy, designs, workers, state, "phaze", weight=weight)
    return replace(found, pruned_by={"patience": found.pruned} if found.pruned else {})
