"""The co-search's driver: the registry of strategies and `search`, which runs one on an executor.

A strategy is a module of `phazec.search.strategies` with two functions: `batch_count(designs,
config)`, the most batches it can evaluate (it sizes the worker pool), and `run(designs, config,
workers, state, weight) -> Found`, its search, which names in `Found.pruned_by` why it left designs
unevaluated. The registry maps each `search.strategy` to a function that imports its module only
when chosen (Optuna, which `bo` needs, is imported by no other).

Every strategy minimises the objective's cost (`phazec.search.objective`): the time per batch, times
the design's peak power under `search.objective=throughput_per_watt`. The answer is the candidate of
least cost, ties going to the first in design order, then microbatch, sequence parallelism and
variant order, as an exhaustive search in design order finds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator
from phazec.search.executors.base import EXECUTORS, Executor, start_executor
from phazec.search.loop import Found
from phazec.search.objective import OBJECTIVES, design_weights
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState

log = logging.getLogger(__name__)


class Strategy(Protocol):
    """What a strategy module provides."""

    def batch_count(self, designs: Designs, config: SearchConfig) -> int:
        """The most batches the strategy evaluates."""
        ...

    def run(
        self,
        designs: Designs,
        config: SearchConfig,
        workers: Executor,
        state: SearchState,
        weight: NDArray[np.float64] | None,
    ) -> Found:
        """The strategy's search."""
        ...


def _phaze() -> Strategy:
    from phazec.search.strategies import phaze

    return phaze


def _exhaustive() -> Strategy:
    from phazec.search.strategies import exhaustive

    return exhaustive


def _bounded() -> Strategy:
    from phazec.search.strategies import bounded

    return bounded


def _bo() -> Strategy:
    from phazec.search.strategies import bo

    return bo


def _wham() -> Strategy:
    from phazec.search.strategies import wham

    return wham


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "phaze": _phaze,
    "exhaustive": _exhaustive,
    "bounded": _bounded,
    "bo": _bo,
    "wham": _wham,
}
"""Each `search.strategy`, and the function importing its module."""


def search(
    evaluator: Evaluator, designs: Designs, config: SearchConfig, state: SearchState, cache_dir: str
) -> Found:
    """Run the configured strategy over the designs on the configured executor (`cache_dir`: the
    configured `cache_dir`, for the executor's schedule caches)."""
    strategy = STRATEGIES[config.strategy]()
    weight = design_weights(designs, config.objective)
    with start_executor(evaluator, config, cache_dir, strategy.batch_count(designs, config)) as workers:
        log.info(
            "%s search: %d designs, %d %s worker(s), state in %s",
            config.strategy,
            len(designs),
            workers.count,
            config.executor,
            state.directory,
        )
        return strategy.run(designs, config, workers, state, weight)


def check_search(search: SearchConfig) -> None:
    """Range checks of the search settings; raises PhazecError naming the bad value."""
    if search.strategy not in STRATEGIES:
        raise PhazecError(
            f"search.strategy={search.strategy!r} is not a strategy; valid: {list(STRATEGIES)}."
        )
    if search.objective not in OBJECTIVES:
        raise PhazecError(
            f"search.objective={search.objective!r} is not an objective; valid: {list(OBJECTIVES)} "
            "(samples/s, or samples/s per watt of the design's peak power)."
        )
    for name in ("bin_mm2", "patience", "batch_designs", "trials", "top_k", "max_designs"):
        if getattr(search, name) <= 0:
            raise PhazecError(f"search.{name}={getattr(search, name)} is not valid: it must be positive.")
    if search.workers is not None and search.workers < 1:
        raise PhazecError(
            f"search.workers={search.workers} is not valid: give a number of processes >= 1 (1 evaluates "
            "in this process), or leave it unset (null) for one per core."
        )
    if search.executor not in EXECUTORS:
        raise PhazecError(
            f"search.executor={search.executor!r} is not an executor; valid: {list(EXECUTORS)}."
        )
    if search.ray.retries < 0:
        raise PhazecError(
            f"search.ray.retries={search.ray.retries} is not valid: give how many times Ray may run a "
            "failed batch again (0 or more)."
        )
