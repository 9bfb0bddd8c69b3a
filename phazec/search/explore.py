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
  (`phazec.search.bo`); the trials run in this process.
- `wham`: WHAM's critical-path local search per pipeline stage, then the union of each stage's top-k
  designs evaluated in batches (`phazec.search.wham`).

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
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from phazec.config import SearchConfig
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.report.progress import progress
from phazec.search.bo import tpe_design
from phazec.search.dominance import dominated
from phazec.search.evaluate import Candidate, Evaluator, Timings, best, objective_cost
from phazec.search.executor import Executor, start_executor
from phazec.search.objective import design_weights
from phazec.search.pool import BatchFailedError
from phazec.search.state import SearchState
from phazec.solvers.placement import Placement

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


def area_bins(designs: Designs, bin_mm2: float) -> list[NDArray[np.int64]]:
    """Design indices grouped by area bin, largest area first (designs are sorted by area)."""
    keys = np.floor(designs.area_mm2 / bin_mm2).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return np.split(np.arange(len(designs), dtype=np.int64), starts[1:])


def chunks(order: NDArray[np.int64], size: int) -> list[NDArray[np.int64]]:
    """`order` cut into consecutive batches of `size` (the last may be shorter)."""
    return [order[i : i + size] for i in range(0, len(order), size)]


def search(
    evaluator: Evaluator, designs: Designs, config: SearchConfig, state: SearchState, cache_dir: str
) -> Found:
    """Run the configured strategy over the designs on the configured executor (`cache_dir`: the
    configured `cache_dir`, for the executor's schedule caches)."""
    if config.strategy == "phaze":
        batches = len(area_bins(designs, config.bin_mm2))
    elif config.strategy == "bo":
        batches = 1
    else:
        batches = math.ceil(len(designs) / config.batch_designs)
    weight = design_weights(designs, config.objective)
    with start_executor(evaluator, config, cache_dir, batches) as workers:
        log.info(
            "%s search: %d designs, %d %s worker(s), state in %s",
            config.strategy,
            len(designs),
            workers.count,
            config.executor,
            state.directory,
        )
        if config.strategy == "wham":
            from phazec.search.wham import wham  # wham runs explore itself

            found, dropped = wham(designs, config, workers, state, weight), 0
        else:
            strategy = STRATEGIES[config.strategy](designs, config, workers, state)
            found = explore(strategy, designs, workers, state, config.strategy, weight=weight)
            dropped = strategy.dominated if isinstance(strategy, Bounded) else 0
    reasons = {"dominated": dropped, PRUNE_REASON.get(config.strategy, ""): found.pruned - dropped}
    return replace(found, pruned_by={reason: n for reason, n in reasons.items() if n})


PRUNE_REASON = {"bounded": "bound", "phaze": "patience", "bo": "not_chosen", "wham": "not_chosen"}
"""Why each strategy leaves designs unevaluated (besides dominance)."""


def bounded(
    designs: Designs,
    batch_designs: int,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None = None,
) -> Bounded:
    """The bounded strategy: the designs no earlier design dominates (every design when the cost model
    does not promise monotone latencies, when a DP sync can hide behind a pass, so that a faster
    design can time a plan slower, or under an objective weight such as peak power, which grows with
    resources), their lower bounds (in batches, saved for resuming) times their objective weight (a
    lower bound on their cost), then those designs sorted by it, ties in design order."""
    evaluator = workers.evaluator
    monotone = evaluator.latency_model.monotone and not evaluator.knobs.sync_hides and weight is None
    kept = np.flatnonzero(~dominated(designs) if monotone else np.ones(len(designs), dtype=np.bool_))
    log.info("bounded search: %d of %d designs dominated", len(designs) - len(kept), len(designs))
    bound_batches = chunks(kept.astype(np.int64), batch_designs)
    bounds_s = np.full(len(designs), np.inf)
    resumed = 0

    def save(i: int, batch: NDArray[np.int64], found: NDArray[np.float64], _: Timings) -> NDArray[np.float64]:
        state.put_bounds(i, batch, found)
        return found

    with progress("bounds", len(kept), "design") as bar:
        for _, batch, found, fresh in _in_order(
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


def _phaze(designs: Designs, config: SearchConfig, workers: Executor, state: SearchState) -> Strategy:
    return Phaze(area_bins(designs, config.bin_mm2), config.patience)


def _exhaustive(designs: Designs, config: SearchConfig, workers: Executor, state: SearchState) -> Strategy:
    return Exhaustive(chunks(np.arange(len(designs), dtype=np.int64), config.batch_designs))


def _bounded(designs: Designs, config: SearchConfig, workers: Executor, state: SearchState) -> Strategy:
    return bounded(designs, config.batch_designs, workers, state, design_weights(designs, config.objective))


def _bo(designs: Designs, config: SearchConfig, workers: Executor, state: SearchState) -> Strategy:
    weight = design_weights(designs, config.objective)
    chosen = tpe_design(workers.evaluator, designs, config.trials, config.seed, weight)
    return Exhaustive([np.array([chosen], dtype=np.int64)])


STRATEGIES: dict[str, Callable[[Designs, SearchConfig, Executor, SearchState], Strategy]] = {
    "phaze": _phaze,
    "exhaustive": _exhaustive,
    "bounded": _bounded,
    "bo": _bo,
}
"""How each `search.strategy` makes its batches (`bounded` bounds every design first)."""


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
        for i, batch, taken, fresh in _in_order(
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
    return [Candidate(int(batch[c.design]), c.microbatch, c.result) for c in found]


@dataclass(frozen=True)
class _Finished(Generic[T]):
    """A batch's result before its turn: read from the saved state (no timings), or finished ahead of
    its turn and saved (its timings, added to the evaluator's when the batch is taken)."""

    value: T
    timings: Timings | None


def _in_order(
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
