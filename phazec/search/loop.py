"""Architecture exploration: the strategies, and the loop that evaluates their batches of designs.

A strategy is a fixed list of batches of design indices and a rule, checked before each batch in
order, saying whether the search still wants it; the first batch it does not want ends the search.
- `phaze`: one batch per area bin of `search.bin_mm2`, largest area first; stops after
  `search.patience` consecutive bins that do not improve the best cost (the time per batch under
  the throughput objective; PHAZE section 7).
- `exhaustive`: every design, in batches of `search.batch_designs` in design order.
- `bounded`: first drops every design an earlier design dominates in every resource
  (`phazec.search.dominance`; only with a cost model that promises monotone latencies and no DP sync
  hiding behind a pass), then a proven
  lower bound on each kept design's time per batch (`Evaluator.lower_bounds_s`), then the designs in
  order of increasing bound, in batches of `search.batch_designs`; stops at the first batch whose
  least bound exceeds the best time found, since no design in it or after it can beat or tie the
  best. Its answer is exhaustive's.
- `bo`: one batch, the design Bayesian optimisation of a block's forward latency picks
  (`phazec.search.strategies.bo`); the trials run in this process.
- `wham`: WHAM's critical-path local search per pipeline stage, then the union of each stage's top-k
  designs evaluated in batches (`phazec.search.strategies.wham`).

Every strategy minimises the objective's cost (`phazec.search.objective`): the time per batch, times
the design's peak power under `search.objective=throughput_per_watt`.

Batches never depend on the number of workers: with several workers up to two per worker are
evaluated ahead, and results are taken in batch order, so a search gives the same answer with any
number of processes. A batch is saved as soon as it finishes, ahead of its turn or not, so a killed
search loses only the batches still running. The answer is the candidate of least cost, ties going
to the first in design order, then microbatch, sequence parallelism and variant order, as an
exhaustive search in design order finds it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.predict.evaluator import Candidate, Evaluator, Timings, best, objective_cost
from phazec.search.executors.base import Executor
from phazec.search.executors.local import BatchFailedError
from phazec.search.state import SearchState
from phazec.solvers.placement.problem import Placement
from phazec.util.progress import progress

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Found:
    """A search's answer on one set of designs."""

    designs: Designs
    best: Candidate | None
    """The feasible candidate of least objective cost (global design index), or None if nothing fits."""
    evaluated: list[int]
    """Indices of the designs evaluated, in evaluation order."""
    candidates: list[Candidate]
    """Every evaluated candidate, in design order."""
    pruned_by: dict[str, int] = field(default_factory=dict)
    """Designs never evaluated, by reason: `dominated` (by an earlier design, `bounded`), `bound` (a
    proven bound above the best, `bounded`), `patience` (`phaze`, no proof) or `not_chosen` (`bo`, `wham`:
    never picked for evaluation)."""

    @property
    def pruned(self) -> int:
        """Designs never evaluated."""
        return len(self.designs) - len(self.evaluated)


class Strategy(Protocol):
    """Batches of design indices in evaluation order, and whether the search still wants the next."""

    batches: list[NDArray[np.int64]]
    ends_early: bool
    """Whether the strategy may stop before its last batch (its progress then shows no ETA)."""

    def wanted(self, i: int, best_s: float) -> bool:
        """Whether to evaluate batch i, given the best objective cost so far (inf: none)."""
        ...

    def status(self) -> str:
        """What the progress display says of the strategy's own state ("" for nothing)."""
        ...

    def record(self, improved: bool) -> None:
        """Note whether the batch just taken improved the best time."""
        ...


def chunks(order: NDArray[np.int64], size: int) -> list[NDArray[np.int64]]:
    """`order` cut into consecutive batches of `size` (the last may be shorter)."""
    return [order[i : i + size] for i in range(0, len(order), size)]


@dataclass
class _Tally:
    """What a search has taken so far."""

    evaluated: list[int] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    resumed: int = 0
    """Designs whose results were read from the saved state instead of evaluated by this run."""
    best: Candidate | None = None
    """The candidate of least cost so far (any of equally good ones)."""
    weight: NDArray[np.float64] | None = None
    """The objective's weight per design (None: throughput)."""

    @property
    def best_s(self) -> float:
        """The best objective cost so far; inf before any plan fits."""
        return math.inf if self.best is None else objective_cost(self.best, self.weight)

    @property
    def summary(self) -> str:
        """The best candidate's throughput so far, for the progress bar (under a per-watt objective,
        the throughput of the candidate of least cost, not the highest throughput seen)."""
        return (
            ""
            if self.best is None
            else f"best {_placement(self.best).throughput_samples_per_s:.5g} samples/s"
        )

    def take(self, batch: NDArray[np.int64], found: list[Candidate]) -> bool:
        """Add a batch's candidates; whether they improve the best cost."""
        self.evaluated += batch.tolist()
        self.candidates += found
        top = best(found, self.weight)
        improved = top is not None and objective_cost(top, self.weight) < self.best_s
        if improved:
            self.best = top
        return improved


def explore(
    strategy: Strategy,
    designs: Designs,
    workers: Executor,
    state: SearchState,
    name: str,
    *,
    weight: NDArray[np.float64] | None = None,
) -> Found:
    """Evaluate the strategy's batches in order while it wants them, saving each new one; the answer
    minimises `objective_cost` with `weight`."""
    tally = _Tally(weight=weight)
    total = None if strategy.ends_early else sum(len(b) for b in strategy.batches)

    def save(i: int, batch: NDArray[np.int64], found: list[Candidate], timings: Timings) -> list[Candidate]:
        taken = _global(batch, found)
        state.put_candidates(i, batch, taken, timings.unproven)
        return taken

    with progress(name, total, "design") as bar:
        for i, batch, taken, fresh in in_order(
            strategy.batches,
            workers,
            saved=state.candidates,
            submit=lambda batch: workers.submit(Evaluator.evaluate, designs.take(batch)),
            save=save,
            wanted=lambda i: strategy.wanted(i, tally.best_s),
        ):
            if not fresh:
                tally.resumed += len(batch)
                workers.evaluator.timings.unproven.update(state.unproven(i, batch))
            strategy.record(tally.take(batch, taken))
            bar.set_postfix_str(", ".join(filter(None, [strategy.status(), tally.summary])), refresh=False)
            bar.update(len(batch))
    if tally.resumed:
        log.info(
            "resumed %d of %d evaluated designs from %s", tally.resumed, len(tally.evaluated), state.directory
        )
    ordered = sorted(tally.candidates, key=lambda c: c.design)
    return Found(designs, best(ordered, weight), tally.evaluated, ordered)


def _placement(candidate: Candidate) -> Placement:
    assert isinstance(candidate.result, Placement)
    return candidate.result


def _global(batch: NDArray[np.int64], found: list[Candidate]) -> list[Candidate]:
    """Candidates of a batch with their design indices into the whole space."""
    return [Candidate(int(batch[c.design]), c.training, c.result) for c in found]


@dataclass(frozen=True)
class _Finished(Generic[T]):
    """A batch's result before its turn: read from the saved state (no timings), or finished ahead of
    its turn and saved (its timings, added to the evaluator's when the batch is taken)."""

    value: T
    timings: Timings | None


def in_order(
    batches: list[NDArray[np.int64]],
    workers: Executor,
    *,
    saved: Callable[[int, NDArray[np.int64]], T | None],
    submit: Callable[[NDArray[np.int64]], Future[tuple[T, Timings]]],
    save: Callable[[int, NDArray[np.int64], T, Timings], T],
    wanted: Callable[[int], bool],
) -> Iterator[tuple[int, NDArray[np.int64], T, bool]]:
    """(index, batch, result, fresh) of each batch in order while `wanted(index)`; fresh is False for a
    result read from the saved state.

    Batches ahead of the current one that are wanted now (by the best so far) are started early, so
    every worker stays busy; one that turns out not to be wanted is never taken. Each batch is saved
    (`save(index, batch, result, its timings)`, which returns the result as the search keeps it) as
    soon as it finishes, ahead of its turn or not, so a killed search loses only the batches still
    running. A batch's timings join the evaluator's when it is taken, and a batch that failed ahead of
    its turn raises only when its turn comes, so neither depends on which batches finish first.
    """
    pending: dict[int, Future[tuple[T, Timings]] | _Finished[T]] = {}
    for i, batch in enumerate(batches):
        if not wanted(i):
            return
        for j in range(i, min(len(batches), i + workers.lookahead)):
            if j not in pending and wanted(j):
                got = saved(j, batches[j])
                pending[j] = submit(batches[j]) if got is None else _Finished(got, None)
        while isinstance(pending[i], Future):
            running = {
                future: j
                for j, future in pending.items()
                if isinstance(future, Future) and (j == i or not (future.done() and future.exception()))
            }
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for j in sorted(running[future] for future in done):
                future = pending[j]
                assert isinstance(future, Future)
                if j == i or future.exception() is None:
                    pending[j] = _finish(j, batches[j], future, save, workers)
        entry = pending.pop(i)
        assert isinstance(entry, _Finished)
        if entry.timings is not None:
            workers.evaluator.timings.add(entry.timings)
        yield i, batch, entry.value, entry.timings is not None


def _finish(
    i: int,
    batch: NDArray[np.int64],
    future: Future[tuple[T, Timings]],
    save: Callable[[int, NDArray[np.int64], T, Timings], T],
    workers: Executor,
) -> _Finished[T]:
    """Batch i read from its finished task and saved, or the error saying where the search stopped."""
    try:
        found, timings = workers.result(future)
    except BatchFailedError as err:
        raise PhazecError(
            f"the search stopped at batch {i} ({len(batch)} designs, the first design {batch[0]}): "
            f"{str(err).rstrip('.')}. Every batch that finished is saved; the same command resumes "
            "from them."
        ) from err
    return _Finished(save(i, batch, found, timings), timings)
