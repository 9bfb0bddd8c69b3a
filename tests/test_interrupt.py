"""Processes: SIGINT, SIGTERM and kill -9 of a `search.workers=2` search leave no process behind and
the rerun resumes to the uninterrupted answer; a batch finished ahead of its turn is saved at once;
Ctrl-C stops a sweep, and a Gurobi or HiGHS solve, as an interrupt; two searches share one new SQLite
MLflow store and one cache."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing.queues
import os
import pickle
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import pytest

from phazec.config.settings import typed
from phazec.cost.model import MODELS
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.schema import HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.predict.evaluator import Evaluator, Timings
from phazec.predict.training import Knobs
from phazec.search import loop as explore
from phazec.search.executors.local import Workers
from phazec.solvers.schema import SolverConfig
from phazec.util.interrupt import (
    MESSAGE,
    SIGNALS,
    Interrupted,
    ends_as_signalled,
    held_by_the_system,
    interruptible,
    outside_jobs,
)
from tests.conftest import compose_config, sharing
from tests.search.test_search import QUICK, SMALL, answer, search

OVERRIDES = (
    *SMALL,
    "hw.glb_bytes=[33554432]",
    "hw.tc_depth=[128]",
    "hw.num_vc=[4]",
    "search=exhaustive",
    "search.batch_designs=1",
    "search.workers=2",
)
"""The designs of tpu_small with one buffer, depth and vector-core count, one per batch, over two
worker processes: slow enough from a cold schedule cache to be stopped midway."""


def children(pid: int) -> set[int]:
    """The process ids of `pid`'s children."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def workers_of(pid: int, started: bool) -> set[int]:
    """The worker processes `pid` spawned (not multiprocessing's resource tracker); if `started`,
    only those past their start-up (they ignore SIGINT once the pool's initializer ran)."""
    found = set()
    for child in children(pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" not in Path(f"/proc/{child}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{child}/status").read_text()
            ignored = int(status.split("SigIgn:")[1].split()[0], 16)
            if not started or ignored & (1 << (signal.SIGINT - 1)):
                found.add(child)
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone(pids: set[int], within_s: float) -> bool:
    """Whether every process of `pids` ends within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def cold_cache(tmp_path: Path, cache_dir: Path) -> Path:
    """A cache of its own sharing only the exported ONNX files, so every schedule is solved."""
    return sharing(tmp_path / "cache", cache_dir)


def start_and_stop(
    tmp_path: Path,
    cache: Path,
    signum: int,
    *extra: str,
    flags: tuple[str, ...] = (),
    saved: bool = True,
    starting: float | None = None,
    to_worker: bool = False,
) -> tuple[int, str, float]:
    """Start a search (`flags`: "-m" for a multirun) and send `signum` once both workers have started
    and, if `saved`, a batch is saved; or, if `starting` is given, that many seconds after the second
    worker is spawned, while it starts up.
    SIGINT goes to the whole process group, as a terminal's Ctrl-C does, another signal to the
    search's process, or with `to_worker` to one worker (as the kernel's out-of-memory killer does).
    Returns the exit status, stderr and the seconds from the signal until every worker ended."""
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *flags, *QUICK, *OVERRIDES]
    process = subprocess.Popen(
        [*command, f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'stopped'}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    batches = cache / "search"
    while True:
        assert process.poll() is None, f"the search ended before it could be stopped: {process.stderr}"
        workers = workers_of(process.pid, started=starting is None)
        if len(workers) == 2 and (not saved or starting is not None or list(batches.glob("*/batch_*.json"))):
            break
        time.sleep(0.002)
    time.sleep(starting or 0.0)
    start = time.perf_counter()
    if to_worker:
        os.kill(max(workers), signum)
    elif signum == signal.SIGINT:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    assert gone(workers_of(process.pid, started=False) | workers, 5.0)
    seconds = time.perf_counter() - start
    spawned = children(process.pid)  # multiprocessing's resource tracker
    _, stderr = process.communicate(timeout=120)
    assert gone(spawned, 1.0)  # it ends with the search
    return process.returncode, stderr, seconds


def assert_resumes(tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The rerun resumes and gives the answer a search without interruption gives."""
    with caplog.at_level(logging.INFO, logger="phazec.search.loop"):
        resumed = search(tmp_path / "resumed", cache, *OVERRIDES)
    assert "resumed " in caplog.text
    fresh = search(tmp_path / "fresh", cache, *OVERRIDES, "search.resume=false")
    assert answer(resumed) == answer(fresh)
    assert (tmp_path / "resumed" / "explored.csv").read_bytes() == (
        tmp_path / "fresh" / "explored.csv"
    ).read_bytes()


INTERRUPTED = "phazec: interrupted; rerun the same command to resume"


def assert_interrupted(status: int, stderr: str, expected_status: int) -> None:
    """The command ended with `expected_status` and the one interrupt line, without a traceback."""
    assert status == expected_status, stderr
    assert stderr.rstrip().endswith(INTERRUPTED)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


def stop_tracked_search(tmp_path: Path, cache: Path, signum: int, saved: bool) -> tuple[int, str, float]:
    """`start_and_stop` tracking into a new SQLite store: its one run ends KILLED."""
    store = tmp_path / "mlflow.db"
    uri = f"tracking.uri=sqlite:///{store}"
    stopped = start_and_stop(tmp_path, cache, signum, "tracking=mlflow", uri, saved=saved)
    with sqlite3.connect(store) as db:
        assert db.execute("select status from runs").fetchall() == [("KILLED",)]
    assert not (tmp_path / "stopped" / "result.json").exists()
    return stopped


def test_sigint_stops_workers_ends_the_run_killed_and_resumes(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    status, stderr, seconds = stop_tracked_search(tmp_path, cache, signal.SIGINT, saved=True)
    assert_interrupted(status, stderr, 130)
    assert seconds < 1.0
    assert_resumes(tmp_path, cache, caplog)


def test_sigterm_stops_workers_and_ends_the_run_killed_with_143(tmp_path: Path, cache_dir: Path) -> None:
    status, stderr, seconds = stop_tracked_search(
        tmp_path, cold_cache(tmp_path, cache_dir), signal.SIGTERM, saved=False
    )
    assert_interrupted(status, stderr, 143)
    assert seconds < 1.0


@pytest.mark.parametrize(
    ("signum", "after_s"), [(signal.SIGTERM, 0.0), (signal.SIGINT, 0.2)], ids=["TERM", "INT"]
)
def test_a_signal_while_workers_start(tmp_path: Path, cache_dir: Path, signum: int, after_s: float) -> None:
    """SIGTERM as the second worker is spawned (the search would cut the handing over of the worker's
    start-up data: the worker printed a traceback), and Ctrl-C to the group while it starts up (it
    reached the worker before it ignored SIGINT: a KeyboardInterrupt traceback): both stop the search
    as usual, without a traceback."""
    cache = cold_cache(tmp_path, cache_dir)
    status, stderr, _ = start_and_stop(tmp_path, cache, signum, starting=after_s)
    assert_interrupted(status, stderr, 128 + signum)


def test_ctrl_c_stops_a_sweep(tmp_path: Path, cache_dir: Path) -> None:
    """SIGINT during the first job of a two-job multirun: the sweep stops there, exit 130."""
    sweep = tmp_path / "sweep"
    status, stderr, seconds = start_and_stop(
        tmp_path, cold_cache(tmp_path, cache_dir), signal.SIGINT, f"hydra.sweep.dir={sweep}",
        "solver.seed=0,1", flags=("-m",), saved=False,
    )  # fmt: skip
    assert_interrupted(status, stderr, 130)
    assert seconds < 1.0
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0"]  # job 1 never started
    assert not (sweep / "0" / "result.json").exists()


def test_kill_9_leaves_no_worker_behind_and_resumes(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    status, _, seconds = start_and_stop(tmp_path, cache, signal.SIGKILL)
    assert status == -signal.SIGKILL
    assert seconds < 1.0
    assert_resumes(tmp_path, cache, caplog)


def test_a_killed_worker_stops_the_search_with_one_paragraph_and_it_resumes(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker killed mid-search (out of memory, a crash in a solver): the search stops the other
    worker and ends with one paragraph naming the batch, exit 2, and the rerun resumes."""
    cache = cold_cache(tmp_path, cache_dir)
    status, stderr, seconds = start_and_stop(tmp_path, cache, signal.SIGKILL, to_worker=True)
    assert status == 2, stderr
    assert "Traceback" not in stderr
    (error,) = [line for line in stderr.splitlines() if line.startswith("phazec: error:")]
    assert "the search stopped at batch " in error
    assert "a worker process ended before it finished (killed, out of memory" in error
    assert error.endswith("Every batch that finished is saved; the same command resumes from them.")
    assert seconds < 5.0
    assert_resumes(tmp_path, cache, caplog)


def test_a_batch_finished_ahead_of_its_turn_is_saved_at_once() -> None:
    """Batches 1 and 2 finish while batch 0 still runs: both are saved before it (batch 0 finishes when
    batch 2 is saved); each batch's timings join the evaluator's only when it is taken; batch 3, failed
    ahead of its turn, stops the search only when its turn comes."""
    evaluator = Evaluator(
        graphs={},
        system=system_from_config(typed(SystemConfig, compose_config(*SMALL).system, "system")),
        latency_model=MODELS["tiled"],
        solver=SolverConfig(),
        knobs=Knobs.searching((32 * 10**9,), microbatch=[8], recompute=[False], optimizer="sgd"),
    )
    futures: list[Future[tuple[str, Timings]]] = [Future() for _ in range(4)]
    futures[1].set_result(("one", Timings(ilp_solves=10)))
    futures[2].set_result(("two", Timings(ilp_solves=100)))
    futures[3].set_exception(BrokenProcessPool("a worker died"))
    saves: list[int] = []

    def save(i: int, batch: object, found: str, timings: Timings) -> str:
        saves.append(i)
        if i == 2:
            futures[0].set_result(("zero", Timings(ilp_solves=1)))
        return found.upper()

    with Workers(evaluator, 2) as workers:  # no task is submitted to its processes: only read back
        assert workers.lookahead == 4
        taken = explore.in_order(
            [np.array([i]) for i in range(4)],
            workers,
            saved=lambda i, batch: None,
            submit=lambda batch: futures[int(batch[0])],
            save=save,
            wanted=lambda i: True,
        )
        assert next(taken)[2:] == ("ZERO", True)
        assert saves == [1, 2, 0]
        assert evaluator.timings.ilp_solves == 1
        assert next(taken)[2:] == ("ONE", True)
        assert next(taken)[2:] == ("TWO", True)
        assert evaluator.timings.ilp_solves == 111
        stopped = r"^the search stopped at batch 3 \(1 designs, the first design 3\): a worker process ended"
        with pytest.raises(PhazecError, match=stopped):
            next(taken)
    assert saves == [1, 2, 0]


def send_half_a_result(evaluator: Evaluator, designs: Designs) -> None:
    """A task for a worker: the first bytes of a result on the pool's result pipe and never the rest,
    as a worker ended midway through sending a batch's result leaves them; then says so in the file
    PHAZEC_TEST_SENT names."""
    (results,) = [q for q in gc.get_objects() if isinstance(q, multiprocessing.queues.SimpleQueue)]
    writer = results._writer  # type: ignore[attr-defined]  # typeshed omits SimpleQueue's pipe ends
    os.write(writer.fileno(), struct.pack("!i", 2**20) + b"\x80")  # a 1 MiB message begun
    Path(os.environ["PHAZEC_TEST_SENT"]).touch()
    time.sleep(60)


def test_a_worker_stopped_midway_through_a_result_leaves_no_thread_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executor's thread reads the begun message until it ends; the interpreter's exit joins
    # that thread, so before the fix a Ctrl-C at that moment hung the command after its last line.
    sent = tmp_path / "sent"
    monkeypatch.setenv("PHAZEC_TEST_SENT", str(sent))
    cfg = compose_config(*SMALL)
    evaluator = Evaluator(
        graphs={},
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=MODELS["tiled"],
        solver=SolverConfig(),
        knobs=Knobs.searching((32 * 10**9,), microbatch=[8], recompute=[False], optimizer="sgd"),
    )
    with Workers(evaluator, 2) as workers:
        assert workers._pool is not None
        workers.submit(
            send_half_a_result, enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
        )
        thread: threading.Thread | None = workers._pool._executor_manager_thread  # type: ignore[assignment]
        results = workers._pool._result_queue
        assert thread is not None
        deadline = time.monotonic() + 60.0
        while not sent.exists():
            assert time.monotonic() < deadline, "the worker never began its result"
            time.sleep(0.01)
        time.sleep(0.2)  # the thread is reading the message's rest by now
    thread.join(10.0)
    waiting = thread.is_alive()
    results._writer.close()  # type: ignore[attr-defined]  # a failing run must not hang the session's exit
    assert not waiting


def test_sigterm_is_interrupted_with_status_143() -> None:
    before = signal.getsignal(signal.SIGTERM)  # the default, or a handler an earlier test left (Ray's)
    with pytest.raises(Interrupted) as stopped, interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert stopped.value.exit_status == 143
    assert Interrupted(signal.SIGINT).exit_status == 130
    assert pickle.loads(pickle.dumps(stopped.value)).exit_status == 143  # as a worker's result
    assert signal.getsignal(signal.SIGTERM) is before  # the old handler is back


def test_a_signal_held_by_the_system_is_handled_when_the_block_ends() -> None:
    """A signal during the commands' import waits until it ends: raised inside highspy's compiled
    initialisation, the handler's exit became an `ImportError` traceback (CI, stop 47)."""
    ran: list[str] = []
    with pytest.raises(Interrupted), interruptible():
        with held_by_the_system():
            signal.raise_signal(signal.SIGTERM)  # to this thread (pytest's other threads block nothing)
            time.sleep(0.2)  # a handler would have run by now
            ran.append("rest of the block")
        ran.append("after the block")
    assert ran == ["rest of the block"]
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the mask is back


def test_a_signal_a_library_turns_into_its_own_error_is_still_an_interrupt() -> None:
    """OmegaConf re-creates an error raised inside a merge from its type and a message, and
    `Interrupted` takes a signal number: a SIGTERM during the command's config checks left as a
    ValueError, exit 1 with a traceback (CI of this stop)."""
    with pytest.raises(Interrupted) as stopped, interruptible():
        try:
            signal.raise_signal(signal.SIGTERM)
        except Exception as err:  # as such a library does: its own error in place of the one raised
            raise ValueError("not a valid Signals") from err
    assert stopped.value.exit_status == 143
    with pytest.raises(ValueError, match="no signal"), interruptible():
        raise ValueError("no signal")  # without a signal, an error stays itself


def test_a_signal_a_library_turns_into_its_own_error_outside_a_job_still_exits_as_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outside a job the handler exits; a SIGTERM while Hydra composed the config had OmegaConf's
    `finally` raise an AttributeError in place of that exit, which Hydra reported: exit 2 (CI of this
    stop). The command still ends as the signal, its line last."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        outside_jobs()
        with pytest.raises(SystemExit) as stopped, ends_as_signalled():
            try:
                signal.raise_signal(signal.SIGTERM)
            finally:
                raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")
        assert stopped.value.code == 143
        assert capsys.readouterr().err.endswith(f"phazec: {MESSAGE}\n")
        with pytest.raises(ValueError, match="no signal"), ends_as_signalled():
            raise ValueError("no signal")  # without a signal, an error stays itself
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_two_searches_share_one_new_store_and_cache(tmp_path: Path, cache_dir: Path) -> None:
    """Two `phazec` processes started at once on one new SQLite store and one cold cache: both finish,
    both runs are recorded (the store is created once), and both give the same answer."""
    cache = cold_cache(tmp_path, cache_dir)
    store = tmp_path / "new.db"
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *QUICK, "model=bert_large"]
    command += ["hw=tpuv4", "tracking=mlflow", f"tracking.uri=sqlite:///{store}", f"cache_dir={cache}"]
    processes = [
        subprocess.Popen(
            [*command, f"hydra.run.dir={tmp_path / f'run{n}'}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        assert "MLflow logging failed" not in stderr
    with sqlite3.connect(store) as db:
        assert db.execute("select status from runs").fetchall() == [("FINISHED",), ("FINISHED",)]
        assert db.execute("select count(*) from experiments where name = 'phazec'").fetchone() == (1,)
    results = [json.loads((tmp_path / f"run{n}" / "result.json").read_text()) for n in range(2)]
    assert answer(results[0]) == answer(results[1])


def test_worker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    """The pool's watchdog alone (no search): a worker outlives a kill -9 of its parent by < 1 s."""
    ready = tmp_path / "ready"
    script = (
        "import pathlib, sys, time\n"
        "import multiprocessing as mp\n"
        "from phazec.search.executors.local import _start_worker\n"
        "def work(ready):\n"
        "    _start_worker(None)\n"
        "    pathlib.Path(ready).touch()\n"
        "    time.sleep(60)\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=work, args=(sys.argv[1],))\n"
        "    p.start()\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    (tmp_path / "parent.py").write_text(script)
    command = [sys.executable, str(tmp_path / "parent.py"), str(ready)]
    parent = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    while not ready.exists():
        time.sleep(0.02)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert gone({worker}, 1.0)


SOLVE_SCRIPT = """
import math, random, sys
from phazec.cli import user_errors
from phazec.util.interrupt import Interrupted, exit_interrupted, interruptible
from phazec.solvers.schedule.backends import Mip, solve
from phazec.solvers.schema import SolverConfig
from phazec.config.settings import typed
from phazec.hw.schema import HwConfig
from phazec.hw.schema import SystemConfig
# A market-split instance (Cornuejols and Dawande): 5 rows of 40 random binaries, each row's target half
# its sum, slack priced 1. Proving the optimum takes branch and bound tens of seconds.
rows, n = 5, 40
rng = random.Random(0)
a = [[rng.randrange(100) for _ in range(n)] for _ in range(rows)]
target = tuple(float(sum(r) // 2) for r in a)
cols = n + 2 * rows
mip = Mip(
    tuple(f"x{j}" for j in range(cols)), (0.0,) * cols, (1.0,) * n + (math.inf,) * (2 * rows),
    (0.0,) * n + (1.0,) * (2 * rows), (True,) * n + (False,) * (2 * rows),
    tuple(f"r{i}" for i in range(rows)), target, target,
    tuple(tuple([(j, float(a[i][j])) for j in range(n)] + [(n + i, 1.0), (n + rows + i, -1.0)])
          for i in range(rows)),
)
config = SolverConfig(backend=sys.argv[1], node_limit=10**9, time_limit_s=float(sys.argv[2]), mip_gap=0.0)
try:
    with user_errors(), interruptible():
        print("solving", flush=True)
        solve(mip, config)
except Interrupted as err:
    exit_interrupted(err)
"""


@pytest.mark.parametrize(
    ("backend", "time_limit_s"),
    [("gurobi", 60.0), ("highs", 2.0)],
)
def test_ctrl_c_during_a_solve_is_an_interrupt(backend: str, time_limit_s: float) -> None:
    """Gurobi catches Ctrl-C itself and stops with status 11 (INTERRUPTED): reported as the interrupt,
    at once. HiGHS runs its solve without returning to Python, so the signal takes effect when the
    solve ends (here at its 2 s time limit): the interrupt still, not a result or another error. "At
    once" means well inside Gurobi's 60 s limit: under 5 s, as the process's exit (its imports torn
    down) took 1.2 s on a loaded 2-core CI machine."""
    if backend == "gurobi":
        pytest.importorskip("gurobipy")
    command = [sys.executable, "-c", SOLVE_SCRIPT, backend, str(time_limit_s)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "solving\n"
    time.sleep(0.5)  # inside the solve
    start = time.perf_counter()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    seconds = time.perf_counter() - start
    assert_interrupted(process.returncode, stderr, 130)
    assert "status" not in stderr
    assert seconds < (5.0 if backend == "gurobi" else time_limit_s + 1.0)


PLACEMENT_SCRIPT = """
import sys, time
import numpy as np
from phazec.cli import user_errors
from phazec.hw.system import NetworkTier
from phazec.predict.training import Training, core_settings
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.problem import PlacementProblem, Variant
from phazec.util.interrupt import Interrupted, exit_interrupted, interruptible
# A chain of 512 layers on 1024 devices with 1 GB of HBM, where nothing fits: each variant's report of
# the least memory a plan needs (a table per stage count under interleaving), 0.1-0.5 s of DP each, for
# 48 variants that share no report (interleave 1-8, every recompute mode, both last-stage rules).
n = 512
ones = np.ones((1, n))
problem = PlacementProblem(
    t_values=np.array([1]), forward_latency_s=ones, backward_latency_s=2 * ones,
    param_bytes=(10**9 * ones).astype(np.int64), activation_bytes=(10**8 * ones).astype(np.int64),
    stash_bytes=(10**8 * ones).astype(np.int64), input_bytes=(10**7 * ones).astype(np.int64),
    tensor_parallel=np.ones((1, n), dtype=bool), edges=np.array([(v, v + 1) for v in range(n - 1)]),
    edge_bytes=np.full(n - 1, 10**7), device_count=1024, microbatch_count=1024, samples_per_microbatch=1,
    tiers=(NetworkTier(8, 300e9, 2e-6), NetworkTier(1024, 25e9, 5e-6)),
)
variants = [
    Variant(1, 10**9, core_settings(Training(interleave=v, recompute=mode, last_stage_recomputes=last)))
    for v in range(1, 9)
    for mode in ("none", "selective", "full")
    for last in (False, True)
]
try:
    with user_errors(), interruptible():
        print("solving", flush=True)
        try:
            solve_placements(problem, variants)
        finally:
            print(f"stopped {time.monotonic()!r}", flush=True)
except Interrupted as err:
    exit_interrupted(err)
"""


def test_ctrl_c_during_a_placement_solve_stops_it_within_a_second() -> None:
    """The C++ placement DP runs its Python signal handlers every few milliseconds: Ctrl-C half a second
    into a solve of many seconds stops it within a second (measured from the signal to the solve's
    end on the shared monotonic clock), and the command ends with the interrupt line and status 130."""
    command = [sys.executable, "-c", PLACEMENT_SCRIPT]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "solving\n"
    time.sleep(0.5)  # inside the solve
    assert process.poll() is None
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert_interrupted(process.returncode, stderr, 130)
    stopped = float(stdout.split("stopped ")[1])
    assert stopped - sent < 1.0
