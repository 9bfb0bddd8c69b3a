"""Where a search's batches of designs are evaluated, behind one interface.

`search.executor=local` uses worker processes on this machine (`phazec.search.pool.Workers`); `ray`
sends each batch as a Ray task to a cluster (`phazec.search.ray_executor.RayWorkers`). Either way a
batch is saved as soon as it finishes and taken in the search's own order, so the answer does not
depend on the executor, the number of workers or which finishes first.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Protocol, Self, TypeVar

from phazec.config import SearchConfig
from phazec.hw.designs import Designs
from phazec.search.evaluate import Evaluator, Timings
from phazec.search.pool import Task, Workers
from phazec.validate import worker_cap

T = TypeVar("T")


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
        from phazec.search.ray_executor import RayWorkers

        return RayWorkers(evaluator, config, cache_dir, batches)
    return Workers(evaluator, worker_count(config, batches))
