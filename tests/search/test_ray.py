"""The search on a real Ray cluster: a head node and a separate worker node, both on 127.0.0.1.

`ray.cluster_utils.Cluster` starts each node as its own processes (the head's GCS and raylet, the
worker's raylet), with one CPU each, no dashboard and the node address 127.0.0.1, so every server
listens on 127.0.0.1 only. Each node has its own $PHAZEC_CACHE_DIR, hence its own schedule cache.
`phazec` runs as a subprocess, the Ray driver, with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps
Ray from replacing 127.0.0.1 by the machine's own address (where nothing listens). The fixture stops
every process of the cluster by its pid, also when a test fails, and checks none is left.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phazec.commands.search import search_state
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.search.schema import RayConfig, SearchConfig
from tests.conftest import compose_config, sharing
from tests.search.test_search import QUICK, answer, search
from tests.track.test_mlflow import free_port

pytestmark = pytest.mark.ray

SPACE = ("model=bert_large", "hw=tpu_small", "hw.glb_bytes=[33554432]", "hw.num_vc=[4]")
"""8 designs around TPUv4."""
EXHAUSTIVE = (*QUICK, *SPACE, "search=exhaustive", "search.batch_designs=2")
"""4 batches of 2 designs."""
DESIGNS = 8


@dataclass
class RayCluster:
    """A running cluster: its GCS address, its nodes and each node's cache directory."""

    cluster: Any
    """The `ray.cluster_utils.Cluster`."""
    root: Path
    """Ray's temp dir and the nodes' cache directories."""
    worker: Any
    """The worker node (`ray._private.node.Node`)."""

    def cache(self, node: str) -> Path:
        """The schedule cache of node `head` or `worker` (the worker added last)."""
        return self.root / node / "schedules"

    def add_worker(self) -> None:
        """Start a new worker node with an empty cache (the old one's is removed)."""
        shutil.rmtree(self.root / "worker", ignore_errors=True)
        self.worker = self.cluster.add_node(**node_args(self.root, "worker"))

    def kill_worker(self) -> None:
        """Kill the worker node's raylet by its pid; its worker processes exit with it."""
        (raylet,) = self.worker.all_processes["raylet"]
        os.kill(raylet.process.pid, signal.SIGKILL)
        raylet.process.wait()


def node_args(root: Path, name: str) -> dict[str, Any]:
    """A node of one CPU on 127.0.0.1 with its own cache directory, no dashboard and no monitors."""
    return {
        "node_ip_address": "127.0.0.1",
        "num_cpus": 1,
        "include_dashboard": False,
        "include_log_monitor": False,
        "no_monitor": True,
        "temp_dir": str(root / "ray"),
        "env_vars": {"PHAZEC_CACHE_DIR": str(root / name)},
    }


def processes_under(root: Path) -> list[int]:
    """Pids of the other processes started with RAY_TMPDIR=`root`: every process of the cluster."""
    mark = f"RAY_TMPDIR={root}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                started = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in started:
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a worker node, stopped by pid afterwards."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # A short path: Ray's socket paths under it must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="phazec-ray-"))
    (root / "ray").mkdir()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")
        env.setenv("RAY_TMPDIR", str(root))
        cluster = Cluster()
        try:
            cluster.add_node(**node_args(root, "head"))
            running = RayCluster(cluster, root, None)
            running.add_worker()
            yield running
        finally:
            cluster.shutdown()  # type: ignore[no-untyped-call]
            left = processes_under(root)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(root, ignore_errors=True)
            assert not left, f"processes of the cluster left running: {left}"


def start_phazec(
    run_dir: Path, cache_dir: Path, cluster: RayCluster, *overrides: str
) -> subprocess.Popen[str]:
    """`phazec` as the Ray driver of a search on the cluster, writing to `run_dir`."""
    env = {
        **os.environ,
        "PHAZEC_CACHE_DIR": str(cache_dir),
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": str(cluster.root),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    address = cluster.cluster.address
    command = [
        sys.executable, "-c", "from phazec.cli import main; main()", *overrides,
        "search.executor=ray", f"search.ray.address={address}", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for a `phazec` process; its exit status and stderr."""
    _, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


def kill_worker_mid_batch(cluster: RayCluster, process: subprocess.Popen[str]) -> None:
    """Kill the worker node once its first schedule is solved: it is evaluating a batch then."""
    deadline = time.monotonic() + 240
    while not list(cluster.cache("worker").glob("*.json")):
        assert process.poll() is None, "the search ended before the worker node ran a batch"
        assert time.monotonic() < deadline, "the worker node solved no schedule in 240 s"
        time.sleep(0.05)
    cluster.kill_worker()


def same_files(one: Path, other: Path) -> None:
    """result.json (apart from timings and executor settings) and explored.csv are equal."""
    assert answer(json.loads((one / "result.json").read_text())) == answer(
        json.loads((other / "result.json").read_text())
    )
    assert (one / "explored.csv").read_bytes() == (other / "explored.csv").read_bytes()


def test_ray_search_equals_the_local_search_and_runs_on_both_nodes(
    tmp_path: Path, cache_dir: Path, ray_cluster: RayCluster
) -> None:
    search(tmp_path / "local", cache_dir, *EXHAUSTIVE, "search.workers=1", "search.resume=false")
    # The nodes' caches are empty, so each batch takes seconds of ILP solves: Ray does not pass all four
    # to the first worker process it leased, as it would with batches of a few milliseconds.
    status, stderr = finish(
        start_phazec(tmp_path / "ray", cache_dir, ray_cluster, *EXHAUSTIVE, "search.resume=false")
    )
    assert status == 0, stderr
    same_files(tmp_path / "local", tmp_path / "ray")
    (log,) = (tmp_path / "ray").glob("*.log")
    assert "Ray ran 4 batches on 2 node(s)" in log.read_text()
    # Each node solved its batches' schedules into its own cache.
    assert list(ray_cluster.cache("head").glob("*.json"))
    assert list(ray_cluster.cache("worker").glob("*.json"))


def test_killing_the_worker_node_mid_search_keeps_the_answer(
    tmp_path: Path, cache_dir: Path, ray_cluster: RayCluster
) -> None:
    search(tmp_path / "local", cache_dir, *EXHAUSTIVE, "search.workers=1")
    shutil.copytree(cache_dir / "schedules", ray_cluster.cache("head"), dirs_exist_ok=True)
    shutil.rmtree(ray_cluster.cache("worker"))  # the worker solves schedules: slow enough to be killed
    process = start_phazec(tmp_path / "ray", cache_dir, ray_cluster, *EXHAUSTIVE, "search.resume=false")
    kill_worker_mid_batch(ray_cluster, process)
    status, stderr = finish(process)
    assert status == 0, stderr
    same_files(tmp_path / "local", tmp_path / "ray")


def test_a_batch_failing_every_attempt_stops_the_search_and_keeps_saved_batches(
    tmp_path: Path, cache_dir: Path, ray_cluster: RayCluster, caplog: pytest.LogCaptureFixture
) -> None:
    search(tmp_path / "local", cache_dir, *EXHAUSTIVE, "search.workers=1")
    state = (
        cache_dir / "search" / search_state(settings_from_config(compose_config(*EXHAUSTIVE))).directory.name
    )
    shutil.rmtree(state)  # the local run's batches: the failed search must save its own
    ray_cluster.add_worker()
    process = start_phazec(
        tmp_path / "ray", cache_dir, ray_cluster, *EXHAUSTIVE, "search.ray.retries=0", "search.resume=false"
    )
    kill_worker_mid_batch(ray_cluster, process)
    status, stderr = finish(process)
    assert status == 2, stderr
    (error,) = [line for line in stderr.splitlines() if line.startswith("phazec: error:")]
    assert "Traceback" not in stderr
    failed = int(error.split("the search stopped at batch ")[1].split()[0])
    assert f"batch {failed} (2 designs, the first design {2 * failed}): " in error
    assert "it failed on Ray 1 time(s) (search.ray.retries=0)" in error
    saved = {int(p.stem.removeprefix("batch_")) for p in state.glob("batch_*.json")}
    assert set(range(failed)) <= saved  # and any batch after it that finished ahead of its turn
    assert failed not in saved
    assert not (tmp_path / "ray" / "result.json").exists()

    # The same command resumes from the saved batches (here on the local executor) to the same answer.
    with caplog.at_level(logging.INFO, logger="phazec.search.loop"):
        search(tmp_path / "resumed", cache_dir, *EXHAUSTIVE, "search.workers=1")
    if saved:
        (message,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed")]
        assert message.startswith(f"resumed {2 * len(saved)} of {DESIGNS} evaluated designs")
    same_files(tmp_path / "local", tmp_path / "resumed")


def test_an_unreachable_cluster_is_one_paragraph_at_once() -> None:
    pytest.importorskip("ray")
    from phazec.search.executors.ray import connect

    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(
        PhazecError, match=rf"search.ray.address='{address}': no Ray cluster could be reached"
    ):
        connect(SearchConfig(executor="ray", ray=RayConfig(address=address)))


LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
"""Loopback addresses a socket may listen on (the last: an IPv6 socket bound to IPv4's loopback)."""


def listeners(pids: list[int]) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every TCP or UDP socket the processes `pids` listen on."""
    import psutil  # type: ignore[import-untyped]

    found = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            for conn in process.net_connections(kind="inet"):
                if conn.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and conn.laddr:
                    found.add((process.name(), conn.laddr.ip, conn.laddr.port))
    return found


def test_a_local_ray_search_listens_on_loopback_only(tmp_path: Path, cache_dir: Path) -> None:
    """`search.executor=ray` with no address: every socket of every process of the local Ray (GCS,
    raylet, agents, workers) and of `phazec` listens on loopback, sampled while the search runs; the
    GCS listened on every interface before. A cache of its own, sharing the session's exported models and
    the schedules the first test of this file solved (a cold cache spends a minute on ILP solves that
    show nothing more about sockets)."""
    pytest.importorskip("ray")
    root = Path(tempfile.mkdtemp(prefix="phazec-ray-"))  # short: Ray's socket paths must fit 107 bytes
    cache = sharing(tmp_path / "cache", cache_dir, ("onnx", "schedules"))
    env = {
        **os.environ,
        "PHAZEC_CACHE_DIR": str(cache),
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": str(root),
    }
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # phazec sets it itself
    command = [
        sys.executable, "-c", "from phazec.cli import main; main()", *EXHAUSTIVE, "search.executor=ray",
        "search.workers=1", f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, str, int]] = set()
    try:
        while process.poll() is None:
            seen |= listeners([process.pid, *processes_under(root)])
            time.sleep(0.1)
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        left = processes_under(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert "gcs_server" in {name for name, _, _ in seen}, seen
    assert {(name, ip, port) for name, ip, port in seen if ip not in LOOPBACK} == set()
    assert left == []


def test_a_local_ray_that_fails_to_start_is_one_paragraph_and_leaves_no_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's start timing out (here its wait for the GCS's port, cut to 0 s): Ray leaves the GCS it
    started running; phazec stops it and says so in one paragraph."""
    pytest.importorskip("ray")
    from phazec.search.executors.ray import LOOPBACK_ONLY, connect

    root = Path(tempfile.mkdtemp(prefix="phazec-ray-"))
    for key, value in {**LOOPBACK_ONLY, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(root)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "0")
    try:
        with pytest.raises(PhazecError) as error:
            connect(SearchConfig(executor="ray", workers=1))
        left = processes_under(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert str(error.value).startswith(
        "a local Ray could not be started for search.executor=ray (RuntimeError: Timed out waiting for file "
    )
    assert str(error.value).endswith(
        "every process it had started was stopped. Run again (a busy machine can time out Ray's start), use "
        "search.executor=local, or give search.ray.address of a running cluster."
    )
    assert left == []
