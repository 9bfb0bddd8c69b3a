"""Processes: SIGINT, SIGTERM and kill -9 of a `search.workers=2` search leave no process behind and
the rerun resumes to the uninterrupted answer; two processes share one SQLite MLflow store."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def start_and_stop(tmp_path: Path, cache: Path, signum: int, *extra: str) -> tuple[int, str, set[int], float]:
    """Start a search, send `signum` once two batches are saved and both workers run; returns the exit
    status, stderr, the worker pids and the seconds from the signal to the exit."""
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *QUICK, *OVERRIDES]
    process = subprocess.Popen(
        [*command, f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'stopped'}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    saved = cache / "search"
    while len(list(saved.glob("*/batch_*.json"))) < 2 or len(children(process.pid)) < 2:
        assert process.poll() is None, f"the search ended before it could be stopped: {process.stderr}"
        time.sleep(0.05)
    workers = children(process.pid)
    start = time.perf_counter()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr, workers, time.perf_counter() - start


def assert_resumes(tmp_path: Path, cache: Path) -> None:
    """The rerun resumes and gives the answer a search without interruption gives."""
    resumed = search(tmp_path / "resumed", cache, *OVERRIDES)
    fresh = search(tmp_path / "fresh", cache, *OVERRIDES, "search.resume=false")
    assert answer(resumed) == answer(fresh)
    assert (tmp_path / "resumed" / "explored.csv").read_bytes() == (
        tmp_path / "fresh" / "explored.csv"
    ).read_bytes()


def test_sigint_stops_workers_ends_the_run_killed_and_resumes(tmp_path: Path, cache_dir: Path) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    store = tmp_path / "mlflow.db"
    status, stderr, workers, seconds = start_and_stop(
        tmp_path, cache, signal.SIGINT, "tracking=mlflow", f"tracking.uri=sqlite:///{store}"
    )
    assert status == 130, stderr
    assert stderr.rstrip().endswith("phazec: interrupted; rerun the same command to resume")
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert len(workers) >= 2 and gone(workers, 1.0)  # the workers and multiprocessing's tracker
    assert seconds < 10  # the process itself; the workers were stopped on the way out
    with sqlite3.connect(store) as db:
        assert db.execute("select status from runs").fetchall() == [("KILLED",)]
    assert not (tmp_path / "stopped" / "result.json").exists()
    assert_resumes(tmp_path, cache)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_sigterm_and_kill_leave_no_worker_behind(
    tmp_path: Path, cache_dir: Path, signum: int, status: int
) -> None:
    cache = cold_cache(tmp_path, cache_dir)
    got, stderr, workers, _ = start_and_stop(tmp_path, cache, signum)
    assert got == status, stderr
    assert len(workers) >= 2 and gone(workers, 1.0)
    if signum == signal.SIGKILL:
        assert_resumes(tmp_path, cache)


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
    script = (
        "import time\n"
        "from phazec.search.pool import _exit_with, _start_worker\n"
        "import multiprocessing as mp\n"
        "def work():\n"
        "    _start_worker(None)\n"
        "    time.sleep(60)\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=work)\n"
        "    p.start()\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    time.sleep(0.5)
    assert alive(worker)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert gone({worker}, 1.0)
