"""Evaluate batches of designs as Ray tasks on a cluster (`search.executor=ray`).

The evaluator goes into Ray's object store once per search. A Ray worker process fetches it the first
time one of its tasks needs it and keeps it, with its own schedule cache, for the search's later tasks.
That schedule cache is on the task's node: `<cache_dir>/schedules`, `cache_dir` resolved on the node
(`phazec.frontend.default_cache_dir`: the configured `cache_dir`, the same path on every node, else
the node's $PHAZEC_CACHE_DIR as `ray start` saw it, else ~/.cache/phazec there).

A local Ray (`search.ray.address` empty) binds 127.0.0.1 only: its node address stays 127.0.0.1
(`LOOPBACK_ONLY`), and Ray binds each server of a node at 127.0.0.1, GCS, raylet, agents and workers
alike, with the dashboard off. A local Ray that fails to start is one paragraph, and every process it
had started is stopped first.

Tasks are spread over the nodes (Ray's SPREAD strategy). Ray runs a task again when it raised, its
worker process died or its node died, up to `search.ray.retries` times (`max_retries` with
`retry_exceptions`); a batch that still fails raises BatchFailedError when the search reads it. Ray
is imported only here, when the executor is chosen.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from phazec.errors import PhazecError
from phazec.frontend import default_cache_dir
from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator, Timings
from phazec.search.executors.local import BatchFailedError, Task, _run
from phazec.search.schema import SearchConfig
from phazec.solvers.schedule.solve import ScheduleCache

log = logging.getLogger(__name__)

T = TypeVar("T")

_EVALUATOR: dict[str, Evaluator] = {}
"""This Ray worker process's evaluator, under the id of its object in the store (one search at a time)."""


def _node_evaluator(holder: list[Any], cache_dir: str) -> Evaluator:
    """The search's evaluator (its object id in a list, so Ray passes the id, not the object), fetched
    once per worker process and given this node's schedule cache."""
    import ray

    ref = holder[0]
    if ref.hex() not in _EVALUATOR:
        _EVALUATOR.clear()
        cache = ScheduleCache(default_cache_dir(cache_dir) / "schedules")
        _EVALUATOR[ref.hex()] = replace(ray.get(ref), cache=cache)
    return _EVALUATOR[ref.hex()]


def _run_batch(
    holder: list[Any], cache_dir: str, task: Task[T], designs: Designs
) -> tuple[tuple[T, Timings], str]:
    """A Ray task: one Evaluator method on one batch, with its timings; and the id of its node."""
    import ray

    found = _run(_node_evaluator(holder, cache_dir), task, designs)
    return found, ray.get_runtime_context().get_node_id()


LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray's switch, read when Ray is imported (here and in every process it starts), that keeps a local
node's address 127.0.0.1 instead of the machine's own; Ray binds every server of a node whose address
is 127.0.0.1 at 127.0.0.1."""
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _import_ray(local: bool = False) -> Any:
    """The `ray` module, or the error saying how to install it; with `local` (a local Ray is to be
    started), imported with `LOOPBACK_ONLY` set."""
    if local and "ray" not in sys.modules:
        os.environ.update(LOOPBACK_ONLY)
    try:
        import ray
    except ImportError as err:
        raise PhazecError(
            "search.executor=ray needs Ray, which is not installed here: install phazec with its cluster "
            "extra (`pip install -e .[cluster]`) on this machine and on every node of the cluster."
        ) from err
    return ray


def connect(config: SearchConfig) -> None:
    """Connect this process to the cluster `search.ray.address`, or start a local Ray on 127.0.0.1 with
    `search.workers` CPUs (None: one per core) and no dashboard when the address is empty
    (`start_local`)."""
    address = config.ray.address
    ray = _import_ray(local=not address)
    if not address:
        start_local(ray, config.workers)
        return
    try:
        _check_reachable(address)
        ray.init(address=address)
    except (OSError, RuntimeError, ValueError) as err:
        raise PhazecError(
            f"search.ray.address={address!r}: no Ray cluster could be reached there ({err}). Give `auto` "
            "on a node where `ray start` ran, the head's `host:port` (its --port, 6379 by default), "
            "`ray://host:10001` for Ray client, or leave it empty for a local Ray."
        ) from err


def start_local(ray: Any, workers: int | None) -> None:
    """Start a local Ray whose every server binds 127.0.0.1 (`LOOPBACK_ONLY`).

    Raises:
        PhazecError: it did not start (every process it had started is stopped first), or Ray was
            imported before phazec could keep its address on loopback.
    """
    before = descendants()
    try:
        ray.init(num_cpus=workers, include_dashboard=False, _node_ip_address="127.0.0.1")
        host = ray.get_runtime_context().gcs_address.rpartition(":")[0].strip("[]")
    except Exception as err:  # Ray raises Exception itself for a node that timed out during start-up
        stop_started(ray, before)
        reason = " ".join(str(err).split())
        raise PhazecError(
            f"a local Ray could not be started for search.executor=ray ({type(err).__name__}: {reason}); "
            "every process it had started was stopped. Run again (a busy machine can time out Ray's "
            "start), use search.executor=local, or give search.ray.address of a running cluster."
        ) from err
    if host not in LOOPBACK:
        stop_started(ray, before)
        raise PhazecError(
            f"a local Ray would have listened on {host}, not 127.0.0.1 only: Ray was imported before "
            f"phazec could set {', '.join(f'{k}={v}' for k, v in LOOPBACK_ONLY.items())}. Set it in the "
            "environment before starting, or give search.ray.address of a running cluster."
        )


def descendants() -> set[int]:
    """The process ids of this process's children, their children and so on (none where /proc is not)."""
    parents: dict[int, list[int]] = {}
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()  # "pid (name) state ppid ..."
                parents.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        children = parents.get(todo.pop(), [])
        found.update(children)
        todo.extend(children)
    return found


def stop_started(ray: Any, before: set[int]) -> None:
    """Stop what a failed start left: Ray's own shutdown, then every process started since `before`
    (a node that timed out during start-up is not Ray's to shut down; its agents would run on). They
    are frozen first, looking again until no new one appears, then killed: on a busy machine a process
    killed at once can still be starting another, which would outlive it. It returns once each has
    ended (or after `STOP_WAIT_S`): a kill is delivered, not done, when `os.kill` returns."""
    with contextlib.suppress(Exception):
        ray.shutdown()
    frozen: set[int] = set()
    while started := descendants() - before - frozen:
        for pid in started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= started
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_WAIT_S
    while any(running(pid) for pid in frozen) and time.monotonic() < deadline:
        time.sleep(0.01)


STOP_WAIT_S = 10.0
"""How long `stop_started` waits for the processes it killed to end."""


def running(pid: int) -> bool:
    """Whether a process exists and has not ended (a zombie, ended but not yet reaped, has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _check_reachable(address: str) -> None:
    """Raise OSError if nothing listens at a `host:port` or `ray://host:port` address (Ray itself
    would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit():
        socket.create_connection((host, int(port)), timeout=10).close()


def cause(err: BaseException) -> str:
    """A Ray error as one line: the exception the task raised, or Ray's own message."""
    import ray.exceptions

    raised = err.cause if isinstance(err, ray.exceptions.RayTaskError) else None
    text = f"{type(raised).__name__}: {raised}" if raised is not None else str(err)
    return " ".join(text.split())


class RayWorkers:
    """Batches as Ray tasks on the cluster of `search.ray` (a local Ray started here when its address is
    empty); a process already connected to Ray (a job of the Ray launcher, a script that called
    `ray.init`) uses that cluster. At most `count` batches run at once: `search.workers`, else one per
    CPU of the cluster, and at most one per batch. Use as a context manager; leaving it cancels unread
    tasks and disconnects from the cluster it connected to."""

    def __init__(self, evaluator: Evaluator, config: SearchConfig, cache_dir: str, batches: int) -> None:
        ray = _import_ray(local=not config.ray.address)
        self.evaluator = evaluator
        self._retries = config.ray.retries
        self._connected = not ray.is_initialized()
        if self._connected:
            connect(config)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        self.count = max(1, min(config.workers or cpus, batches))
        self._evaluator = [ray.put(replace(evaluator, cache=ScheduleCache(), timings=Timings()))]
        self._cache_dir = cache_dir
        self._remote = ray.remote(_run_batch).options(
            num_returns=2, max_retries=config.ray.retries, retry_exceptions=True, scheduling_strategy="SPREAD"
        )
        self._pending: dict[Future[Any], tuple[Any, Any]] = {}
        self.batches_per_node: Counter[str] = Counter()
        """Batches finished so far (taken or not yet), by the id of the node that ran them."""
        log.info("Ray: %d CPUs in the cluster, %d batches at once", cpus, self.count)

    def submit(self, task: Task[T], designs: Designs) -> Future[tuple[T, Timings]]:
        """Start a task on the cluster."""
        found, node = self._remote.remote(self._evaluator, self._cache_dir, task, designs)
        future: Future[tuple[T, Timings]] = found.future()
        self._pending[future] = (found, node)
        return future

    def result(self, future: Future[tuple[T, Timings]]) -> tuple[T, Timings]:
        """A task's result and timings. Raises BatchFailedError when the task failed on every attempt."""
        import ray

        _, node = self._pending.pop(future)
        try:
            found = future.result()
            self.batches_per_node[ray.get(node)] += 1
        except ray.exceptions.RayError as err:
            raise BatchFailedError(
                f"it failed on Ray {self._retries + 1} time(s) (search.ray.retries={self._retries}): "
                f"{cause(err)}"
            ) from err
        return found

    def __enter__(self) -> RayWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self.batches_per_node:
            log.info(
                "Ray ran %d batches on %d node(s)",
                sum(self.batches_per_node.values()),
                len(self.batches_per_node),
            )
        if self._connected:
            ray.shutdown()
            return
        for found, _ in self._pending.values():
            ray.cancel(found)

    @property
    def lookahead(self) -> int:
        """How many batches to keep in flight: two per batch run at once, so no CPU waits."""
        return 2 * self.count
