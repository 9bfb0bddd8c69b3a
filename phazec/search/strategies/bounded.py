"""The `bounded` strategy: exhaustive's answer without evaluating most designs.

It first drops every design an earlier design dominates in every resource (`phazec.search.dominance`;
only with a cost model that promises monotone latencies, no DP sync hiding behind a pass and the
throughput objective), then computes a proven lower bound on each kept design's time per batch
(`Evaluator.lower_bounds_s`, in batches saved for resuming), then evaluates the designs in order of
increasing bound, in batches of `search.batch_designs`; it stops at the first batch whose least bound
exceeds the best cost found, since no design in it or after it can beat or tie the best.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator, Timings
from phazec.search.dominance import dominated
from phazec.search.executors.base import Executor
from phazec.search.loop import Found, chunks, explore, in_order
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState
from phazec.util.progress import progress

log = logging.getLogger(__name__)


@dataclass
class Bounded:
    """Batches in order of increasing lower bound, while the least bound can still match the best."""

    batches: list[NDArray[np.int64]]
    least_bound_s: list[float]
    """The least lower bound of each batch on the objective's cost (its first design's)."""
    dominated: int
    """Designs dropped before bounding, each dominated by an earlier design."""
    ends_early = True

    def wanted(self, i: int, best_s: float) -> bool:
        """If a design of batch i could be as fast as the best so far."""
        return self.least_bound_s[i] <= best_s

    def record(self, improved: bool) -> None:
        """Nothing to note."""

    def status(self) -> str:
        """Nothing to say: the best time found ends the search at a bound the bar cannot foresee."""
        return ""


def bounded(
    designs: Designs,
    batch_designs: int,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None = None,
) -> Bounded:
    """The bounded strategy: the designs no earlier design dominates (every design when the cost model
    does not promise monotone latencies, when a DP sync can hide behind a pass or ZB-H1's bubble
    shrinks as a weight-gradient pass grows, so that a faster design can time a plan slower, or under
    an objective weight such as peak power, which grows with resources), their lower bounds (in
    batches, saved for resuming) times their objective weight (a lower bound on their cost), then
    those designs sorted by it, ties in design order."""
    evaluator = workers.evaluator
    monotone = evaluator.latency_model.monotone and not evaluator.knobs.time_can_fall and weight is None
    kept = np.flatnonzero(~dominated(designs) if monotone else np.ones(len(designs), dtype=np.bool_))
    log.info("bounded search: %d of %d designs dominated", len(designs) - len(kept), len(designs))
    bound_batches = chunks(kept.astype(np.int64), batch_designs)
    bounds_s = np.full(len(designs), np.inf)
    resumed = 0

    def save(i: int, batch: NDArray[np.int64], found: NDArray[np.float64], _: Timings) -> NDArray[np.float64]:
        state.put_bounds(i, batch, found)
        return found

    with progress("bounds", len(kept), "design") as bar:
        for _, batch, found, fresh in in_order(
            bound_batches,
            workers,
            saved=state.bounds,
            submit=lambda batch: workers.submit(Evaluator.lower_bounds_s, designs.take(batch)),
            save=save,
            wanted=lambda i: True,
        ):
            bounds_s[batch] = found
            if not fresh:
                resumed += len(batch)
            bar.update(len(batch))
    if resumed:
        log.info("resumed %d of %d bounds from %s", resumed, len(kept), state.directory)
    if weight is not None:
        bounds_s = bounds_s * weight
    order = kept[np.argsort(bounds_s[kept], kind="stable")].astype(np.int64)
    batches = chunks(order, batch_designs)
    return Bounded(batches, [float(bounds_s[b[0]]) for b in batches], len(designs) - len(kept))


def batch_count(designs: Designs, config: SearchConfig) -> int:
    """Batches of `search.batch_designs` designs (bounds first, then evaluations)."""
    return math.ceil(len(designs) / config.batch_designs)


def run(
    designs: Designs,
    config: SearchConfig,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None,
) -> Found:
    """Bound, then evaluate while a design could still match the best; the designs left are pruned as
    `dominated` or by `bound`."""
    strategy = bounded(designs, config.batch_designs, workers, state, weight)
    found = explore(strategy, designs, workers, state, "bounded", weight=weight)
    reasons = {"dominated": strategy.dominated, "bound": found.pruned - strategy.dominated}
    return replace(found, pruned_by={reason: n for reason, n in reasons.items() if n})
