"""Processes: SIGINT, SIGTERM and kill -9 of a `search.workers=2` search leave no process behind and
the rerun resumes to the uninterrupted answer; two processes share one SQLite MLflow store."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phazec.interrupt import Interrupted, interruptible
from tests.test_search import QUICK, SMALL, answer, search

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
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache_dir / "onnx").mkdir(exist_ok=True)
    (cache / "onnx").symlink_to(cache_dir / "onnx", target_is_directory=True)
    return cache


def start_and_stop(tmp_path: Path, cache: Path, signum: int, *extra: str) -> tuple[int, str, float]:
    """Start a search, send `signum` once a batch is saved and both workers run; returns the exit
    status, stderr and the seconds from the signal until every child process of the search ended."""
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *QUICK, *OVERRIDES]
    process = subprocess.Popen(
        [*command, f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'stopped'}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    saved = cache / "search"
    while not list(saved.glob("*/batch_*.json")) or len(children(process.pid)) < 3:
        assert process.poll() is None, f"the search ended before it could be stopped: {process.stderr}"
        time.sleep(0.02)
    spawned = children(process.pid)  # the two workers and multiprocessing's resource tracker
    workers = {pid for pid in spawned if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()}
    assert len(workers) == 2
    start = time.perf_counter()
    process.send_signal(signum)
    assert gone(workers, 5.0)
    seconds = time.perf_counter() - start
    _, stderr = process.communicate(timeout=120)
    assert gone(spawned, 1.0)  # the tracker too, once the search has ended
    return process.returncode, stderr, seconds


def assert_resumes(tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The rerun resumes and gives the answer a search without interruption gives."""
    with caplog.at_level(logging.INFO, logger="phazec.search.explore"):
        resumed = search(tmp_path / "resumed", cache, *OVERRIDES)
    assert "resumed " in caplog.text
    fresh = search(tmp_path / "fresh", cache, *OVERRIDES, "search.resume=false")
    assert answer(resumed) == answer(fresh)
    assert (tmp_path / "resumed" / "explored.csv").read_bytes() == (
        tmp_path / "fresh" / "explored.csv"
    ).read_bytes()


def test_sigint_stops_workers_ends_the_run_killed_and_resumes(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    store = tmp_path / "mlflow.db"
    status, stderr, seconds = start_and_stop(
        tmp_path, cache, signal.SIGINT, "tracking=mlflow", f"tracking.uri=sqlite:///{store}"
    )
    assert status == 130, stderr
    assert stderr.rstrip().endswith("phazec: interrupted; rerun the same command to resume")
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert seconds < 1.0
    with sqlite3.connect(store) as db:
        assert db.execute("select status from runs").fetchall() == [("KILLED",)]
    assert not (tmp_path / "stopped" / "result.json").exists()
    assert_resumes(tmp_path, cache, caplog)


def test_kill_9_leaves_no_worker_behind_and_resumes(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    status, _, seconds = start_and_stop(tmp_path, cache, signal.SIGKILL)
    assert status == -signal.SIGKILL
    assert seconds < 1.0
    assert_resumes(tmp_path, cache, caplog)


def test_sigterm_is_interrupted_with_status_143() -> None:
    with pytest.raises(Interrupted) as stopped, interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert stopped.value.exit_status == 143
    assert Interrupted(signal.SIGINT).exit_status == 130
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the old handler is back


STORE_SCRIPT = """
import sys
from omegaconf import OmegaConf
from phazec.track.mlflow_runs import MlflowCallback
callback = MlflowCallback()
cfg = OmegaConf.create({"tracking": {"uri": sys.argv[1], "experiment": "shared", "artifacts": "",
                        "http_retries": 2, "http_timeout_s": 10}, "hydra": {"runtime": {"cwd": sys.argv[2]}}})
callback._guard(".", callback._open, cfg)
client = callback._client()
run = client.create_run(callback._experiment_id)
client.set_terminated(run.info.run_id, "FINISHED")
assert not callback._broken
"""


def test_two_processes_create_one_sqlite_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", STORE_SCRIPT, uri, str(tmp_path)], stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "MLflow logging failed" not in stderr
    with sqlite3.connect(tmp_path / "new.db") as db:
        assert db.execute("select status from runs").fetchall() == [("FINISHED",), ("FINISHED",)]
        assert db.execute("select count(*) from experiments where name = 'shared'").fetchone() == (1,)


def test_worker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    """The pool's watchdog alone (no search): a worker outlives a kill -9 of its parent by < 1 s."""
    ready = tmp_path / "ready"
    script = (
        "import pathlib, sys, time\n"
        "import multiprocessing as mp\n"
        "from phazec.search.pool import _start_worker\n"
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
