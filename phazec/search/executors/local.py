"""Evaluate batches of designs in worker processes on this machine, or in this process.

Each worker gets a copy of the Evaluator once (pickled when it starts) and shares the on-disk
schedule cache, whose files are written atomically. Workers ignore SIGINT (the parent handles it),
exit as soon as their parent is gone (even after kill -9), and are terminated when the pool is left,
so no worker outlives its search. A task runs one Evaluator method on one batch
and returns its result with the seconds the worker spent on it; the caller takes results in its
own order, so the answer never depends on how many workers there are or which finishes first.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import TypeVar

from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator, Timings
from phazec.util.interrupt import deferred

T = TypeVar("T")
Task = Callable[[Evaluator, Designs], T]
"""One Evaluator method on one batch, e.g. `Evaluator.evaluate`."""

JOIN_S = 1.0
"""How long leaving the pool waits for each terminated worker to end."""

_WORKER: dict[str, Evaluator] = {}
"""The evaluator of this worker process, under "evaluator"."""


class BatchFailedError(PhazecError):
    """A batch that failed on every attempt the executor allows; the message says why."""


def _start_worker(evaluator: Evaluator) -> None:
    """Keep the evaluator; leave Ctrl-C to the parent (it stops the workers; SIGINT is blocked from
    the worker's start, `phazec.util.interrupt.deferred`, and now ignored); exit when the parent is gone,
    however it died."""
    _WORKER["evaluator"] = evaluator
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()


def _exit_with(parent_sentinel: int) -> None:
    """Wait until the parent process ends, then end this worker at once."""
    multiprocessing.connection.wait([parent_sentinel])
    os._exit(1)


def _run(evaluator: Evaluator, task: Task[T], designs: Designs) -> tuple[T, Timings]:
    """Run a task with fresh timings; returns its result and the timings it added."""
    evaluator.timings = Timings()
    return task(evaluator, designs), evaluator.timings


def _run_in_worker(task: Task[T], designs: Designs) -> tuple[T, Timings]:
    return _run(_WORKER["evaluator"], task, designs)


class Workers:
    """`count` processes (spawned, so nothing but the evaluator is inherited), or this process when
    `count` is 1. Use as a context manager; leaving it cancels tasks not yet started."""

    def __init__(self, evaluator: Evaluator, count: int) -> None:
        self.evaluator = evaluator
        self.count = count
        self._pool: ProcessPoolExecutor | None = None
        if count > 1:
            self._pool = ProcessPoolExecutor(
                max_workers=count,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(evaluator,),
            )

    def submit(self, task: Task[T], designs: Designs) -> Future[tuple[T, Timings]]:
        """Start a task (in this process: run it now)."""
        if self._pool is None:
            done: Future[tuple[T, Timings]] = Future()
            own = self.evaluator.timings
            try:
                done.set_result(_run(self.evaluator, task, designs))
            finally:
                self.evaluator.timings = own
            return done
        with deferred():  # a submit may start a worker: a signal waits until it has its data
            return self._pool.submit(_run_in_worker, task, designs)

    def result(self, future: Future[tuple[T, Timings]]) -> tuple[T, Timings]:
        """A task's result and timings. Raises BatchFailedError when a worker process ended without
        finishing it (killed, out of memory, or a crash in a solver or the C++ extension): the pool
        cannot run it again."""
        try:
            return future.result()
        except BrokenExecutor as err:
            raise BatchFailedError(
                f"a worker process ended before it finished (killed, out of memory, or a crash in a solver "
                f"or the C++ extension; {str(err).rstrip('.')})"
            ) from err

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the workers at once: batches still running are not wanted (the search took what it
        needed, or was interrupted; every batch that finished is saved)."""
        if self._pool is None:
            return
        processes = list(self._pool._processes.values())  # the executor's own map of its workers
        results = self._pool._result_queue  # shutdown forgets it
        for process in processes:
            process.terminate()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(JOIN_S)
        # A worker ended midway through sending a result leaves the executor's thread waiting for the
        # rest of it, and the interpreter's exit waits for that thread (the command would hang after
        # saying it was interrupted). This process holds the pipe's last writing end: closing it ends
        # the wait with end-of-file.
        results._writer.close()  # type: ignore[attr-defined]  # typeshed omits SimpleQueue's pipe ends

    @property
    def lookahead(self) -> int:
        """How many batches to keep in flight: two per worker, so none waits; one in this process."""
        return 1 if self._pool is None else 2 * self.count
