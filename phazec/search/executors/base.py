"""Where a search's batches of designs are evaluated, behind one interface.

`search.executor=local` uses worker processes on this machine (`phazec.search.executors.local.Workers`); `ray`
sends each batch as a Ray task to a cluster (`phazec.search.executors.ray.RayWorkers`). Either way a
batch is saved as soon as it finishes and taken in the search's own order, so the answer does not
depend on the executor, the number of workers or which finishes first.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from typing import Protocol, Self, TypeVar

from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator, Timings
from phazec.search.executors.local import Task, Workers
from phazec.search.schema import SearchConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

EXECUTORS = ("local", "ray")
"""Values of `search.executor`."""


class Executor(Protocol):
    """Runs `Evaluator` methods on batches of designs; a context manager whose exit drops unread work."""

    evaluator: Evaluator
    """The search's evaluator (its timings collect those of every batch the search takes)."""
    count: int
    """Batches evaluated at once."""

    def submit(self, task: Task[T], designs: Designs) -> Future[tuple[T, Timings]]:
        """Start a task on a batch."""
        ...

    def result(self, future: Future[tuple[T, Timings]]) -> tuple[T, Timings]:
        """A finished task's result and timings. Raises what the task raised, or BatchFailedError when
        the executor gave up on the batch after its retries."""
        ...

    @property
    def lookahead(self) -> int:
        """How many batches to keep in flight."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


def worker_count(config: SearchConfig, batches: int) -> int:
    """Processes for `batches` batches: `search.workers` (unset: every core), at most one per core
    (more is capped with a warning) and one per batch."""
    return max(1, min(worker_cap(config.workers) or os.cpu_count() or 1, batches))


def start_executor(evaluator: Evaluator, config: SearchConfig, cache_dir: str, batches: int) -> Executor:
    """The executor `config.executor` names, for `batches` batches; `cache_dir` is the configured
    `cache_dir`, which a Ray task resolves on its own node for its schedule cache."""
    if config.executor == "ray":
        from phazec.search.executors.ray import RayWorkers

        return RayWorkers(evaluator, config, cache_dir, batches)
    return Workers(evaluator, worker_count(config, batches))


def worker_cap(requested: int | None, cores: int | None = None) -> int | None:
    """`search.workers` capped at the core count, with a warning (results never depend on it)."""
    cores = cores or os.cpu_count() or 1
    if requested is not None and requested > cores:
        log.warning(
            "search.workers=%d is more than the %d cores of this machine; using %d workers",
            requested,
            cores,
            cores,
        )
        return cores
    return requested
