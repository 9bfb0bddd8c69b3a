"""The real `phazec` command with MLflow tracking: multiruns into SQLite, a real server, failures.

Every test runs the command in a subprocess in its own working directory, on BERT-large and the
single TPUv4 design so a job takes a few seconds; the ONNX export and the schedule cache are shared
through the session's cache directory.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from phazec.report.sweep import BEST_JSON, COMPARISON_CSV, COMPARISON_TXT
from phazec.track.mlflow_runs import JOBS_JSON

JOB = ["hw=tpuv4", "model=bert_large", "train.recompute=[false]"]
"""One design, one recompute setting: a job takes a few seconds once the model is cached."""
PLOTS = {"pipeline.png", "throughput_vs_area.png", "bottleneck_gantt.png"}
JOB_ARTIFACTS = {"result.json", "explored.csv", "trace.json", "hydra/config.yaml", *PLOTS}
JOB_METRICS = {
    "throughput_samples_per_s", "time_per_batch_s", "area_mm2", "hbm_bytes",
    "speedup_vs_tpuv4_optimal_placement", "speedup_vs_tpuv4_megatron_plan",
    "speedup_vs_found_design_megatron_plan", "designs_total", "designs_evaluated", "designs_pruned",
    "ilp_cache_hits", "wall_s", "cost_s", "ilp_s", "dp_s",
}  # fmt: skip
USAGE_METRICS = {
    "peak_power_w", "throughput_per_watt", "tensor_core_utilisation_bottleneck",
    "tensor_core_utilisation_mean", "vector_core_utilisation_bottleneck", "vector_core_utilisation_mean",
    *(f"energy_per_{per}_j.{part}" for per in ("iteration", "sample")
      for part in ("compute", "buffers", "hbm", "network", "total")),
}  # fmt: skip
"""A one-model job's plan figures (`phazec.predict.usage`)."""
JOB_METRICS |= USAGE_METRICS
PARENT = "mlflow.parentRunId"


def phazec(
    cwd: Path, cache_dir: Path, *args: str, env: dict[str, str] | None = None, entry: str = "main"
) -> subprocess.CompletedProcess[str]:
    """Run the `phazec` command (`entry="ir_main"`: `phazec-ir`) in `cwd` with the shared model cache
    (and `env` added)."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PHAZEC_CACHE_DIR": str(cache_dir), **(env or {})}
    command = [sys.executable, "-c", f"from phazec.cli import {entry}; {entry}()", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def runs(uri: str) -> list[Run]:
    """Every run of the store, oldest first."""
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return sorted(client.search_runs(ids), key=lambda r: r.info.start_time)


def artifacts(uri: str, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact file of a run, recursively."""
    client = MlflowClient(tracking_uri=uri)
    found: set[str] = set()
    for entry in client.list_artifacts(run_id, path):
        found |= artifacts(uri, run_id, entry.path) if entry.is_dir else {entry.path}
    return found


def job_dirs(cwd: Path) -> list[Path]:
    """The job directories of the one sweep under `cwd/multirun`, by job number."""
    (sweep,) = (cwd / "multirun").glob("*/*")
    return sorted((p for p in sweep.iterdir() if p.is_dir()), key=lambda p: int(p.name))


def free_port() -> int:
    """A TCP port nothing listens on (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_multirun_logs_parent_and_nested_runs(tmp_path: Path, cache_dir: Path) -> None:
    done = phazec(tmp_path, cache_dir, "-m", *JOB, "system.hbm_gb=[32]", "train.microbatch=[8],[16]")
    assert done.returncode == 0, done.stderr
    uri = f"sqlite:///{tmp_path / 'phazec.db'}"  # the default store, in the starting directory
    parent, *children = runs(uri)
    assert PARENT not in parent.data.tags
    assert len(children) == 2  # the declared recompute sweep is replaced by the command line's value
    assert {c.data.tags[PARENT] for c in children} == {parent.info.run_id}
    assert [r.info.status for r in (parent, *children)] == ["FINISHED"] * 3
    results = [json.loads((d / "result.json").read_text()) for d in job_dirs(tmp_path)]
    for child, result in sorted(zip(children, results, strict=True), key=lambda p: p[0].info.run_name):
        # The run list shows the headline in the run's name: the job, its own overrides, its figures.
        microbatch = result["config"]["train"]["microbatch"][0]
        speedup = result["speedup_vs_tpuv4"]
        figures = f"{result['throughput_samples_per_s']:.4g} samples/s, {speedup:.2f}x TPUv4"
        job = f"job {results.index(result)}: train.microbatch=[{microbatch}]"
        assert child.info.run_name == f"{job}: {figures}"
        assert set(child.data.metrics) == JOB_METRICS
        assert child.data.metrics["throughput_samples_per_s"] == result["throughput_samples_per_s"]
        assert child.data.metrics["energy_per_sample_j.total"] == result["energy_per_sample_j"]["total"]
        assert child.data.params["train.microbatch"] == str(result["config"]["train"]["microbatch"])
        assert child.data.params["model.name"] == "bert_large"
        assert child.data.params["hw.name"] == "tpuv4"
        assert child.data.params["search.strategy"] == "phaze"
        assert child.data.params["found.design.num_tc"] == str(result["design"]["num_tc"])
        assert child.data.params["found.design.area_mm2"] == str(result["design"]["area_mm2"])
        assert child.data.params["found.plan.pp"] == str(result["plan"]["pp"])
        assert child.data.params["found.plan.microbatch"] == str(result["plan"]["microbatch"])
        assert not any(key.endswith(".stages") for key in child.data.params)
        assert artifacts(uri, child.info.run_id) == JOB_ARTIFACTS
        assert child.info.artifact_uri.startswith((tmp_path / "mlartifacts").as_uri())
    best = max(results, key=lambda r: r["throughput_samples_per_s"])
    assert parent.data.metrics["throughput_samples_per_s"] == best["throughput_samples_per_s"]
    assert artifacts(uri, parent.info.run_id) == {BEST_JSON, COMPARISON_CSV, COMPARISON_TXT, JOBS_JSON}
    saved = MlflowClient(tracking_uri=uri).download_artifacts(parent.info.run_id, JOBS_JSON, str(tmp_path))
    ran = json.loads(Path(saved).read_text())["jobs"]
    assert [(j["job"], j["status"]) for j in ran] == [(0, "ok"), (1, "ok")]
    assert [
        "train.microbatch=[8]" in ran[0]["overrides"],
        "train.microbatch=[16]" in ran[1]["overrides"],
    ] == [
        True,
        True,
    ]
    sweep_dir = job_dirs(tmp_path)[0].parent
    assert json.loads((sweep_dir / BEST_JSON).read_text())["result"] == best
    assert (sweep_dir / COMPARISON_CSV).read_text().count("\n") == 3
    for job_dir in job_dirs(tmp_path):
        for png in PLOTS:
            assert (job_dir / png).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    # The sweep's best equals one run searching both microbatch sizes.
    single = phazec(
        tmp_path, cache_dir, *JOB, "system.hbm_gb=[32]", "train.microbatch=[8,16]", "tracking=none"
    )
    assert single.returncode == 0, single.stderr
    (single_dir,) = (tmp_path / "outputs").glob("*/*")
    one_run = json.loads((single_dir / "result.json").read_text())
    assert (one_run["design"], one_run["plan"]) == (best["design"], best["plan"])
    assert one_run["throughput_samples_per_s"] == best["throughput_samples_per_s"]


def test_failed_job_ends_failed_and_the_other_job_finishes(tmp_path: Path, cache_dir: Path) -> None:
    # The failing job first, in batches of one: Hydra's basic sweeper would stop after it.
    uri = f"sqlite:///{tmp_path / 'store' / 'runs.db'}"
    (tmp_path / "store").mkdir()
    done = phazec(
        tmp_path,
        cache_dir,
        "-m",
        *JOB,
        "train.microbatch=[8]",
        "system.hbm_gb=[0.001],[32]",
        "hydra.sweeper.max_batch_size=1",
        f"tracking.uri={uri}",
    )
    assert done.returncode == 1
    sweep_dir = job_dirs(tmp_path)[0].parent
    message = (
        f"phazec: error: 1 of 2 jobs of the sweep failed; every job's outcome is in "
        f"{sweep_dir.relative_to(tmp_path) / 'sweep_comparison.txt'}, each failed job's error in error.txt "
        "in its directory.\n  job 0 (system.hbm_gb=[0.001]): no training plan fits in HBM of [0.001] GB "
        "on any design."
    )
    assert message in done.stderr
    assert "Traceback" not in done.stderr and "HYDRA_FULL_ERROR" not in done.stderr
    assert "job 0 failed: no training plan fits" in done.stdout  # said when it failed, too
    parent, *children = runs(uri)
    statuses = {c.data.params["system.hbm_gb"]: c.info.status for c in children}
    assert statuses == {"[32.0]": "FINISHED", "[0.001]": "FAILED"}
    (failed,) = (c for c in children if c.info.status == "FAILED")
    assert failed.data.tags["error"].startswith("no training plan fits in HBM of [0.001] GB")
    assert artifacts(uri, failed.info.run_id) == {"error.txt", "hydra/config.yaml"}
    assert (parent.info.status, parent.data.metrics["jobs_failed"]) == ("FAILED", 1.0)
    assert (tmp_path / "store" / "mlartifacts").is_dir()
    error_txt = (job_dirs(tmp_path)[0] / "error.txt").read_text()
    assert error_txt == failed.data.tags["error"] + "\n"  # a PhazecError's paragraph, no traceback
    rows = list(csv.DictReader((sweep_dir / COMPARISON_CSV).open()))
    assert [(row["status"], row["error"]) for row in rows] == [("failed", error_txt.strip()), ("ok", "")]


def test_single_run_user_error_exits_2_and_its_run_fails(tmp_path: Path, cache_dir: Path) -> None:
    done = phazec(tmp_path, cache_dir, *JOB, "train.microbatch=[8]", "system.hbm_gb=[0.001]")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("phazec: error:")]
    assert len(errors) == 1 and "no training plan fits in HBM" in errors[0]
    assert "Traceback" not in done.stderr
    (run,) = runs(f"sqlite:///{tmp_path / 'phazec.db'}")
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith("no training plan fits in HBM")
    assert run.info.run_name == "search bert_large over tpuv4 (phaze)"  # what it was, not its overrides


def test_a_plan_run_is_named_by_its_plan_and_logs_its_band_and_trace(tmp_path: Path, cache_dir: Path) -> None:
    plan = ["model=bert_large", "hw=a100", "system=dgx_a100", "system.devices=8", "system.global_batch=16",
            "plan.pp=2", "plan.dp=4", "plan.trace=true"]  # fmt: skip
    done = phazec(tmp_path, cache_dir, *plan, entry="plan_main")
    assert done.returncode == 0, done.stderr
    uri = f"sqlite:///{tmp_path / 'phazec.db'}"
    (run,) = runs(uri)
    content = json.loads(next((tmp_path / "outputs").glob("*/*/plan.json")).read_text())
    headline = f"{content['samples_per_s']:.4g} samples/s, MFU {content['mfu']:.1%}, fits"
    assert run.info.run_name == f"plan bert_large on a100: tp 1 x pp 2 x dp 4: {headline}"
    band = content["band"]
    assert (run.data.metrics["band.low_s"], run.data.metrics["band.high_s"]) == (
        band["low_s"],
        band["high_s"],
    )
    assert run.data.tags["band"] == "a100 held-out residuals (21 rows), 90%"
    assert artifacts(uri, run.info.run_id) == {"plan.json", "trace.json", "hydra/config.yaml"}


def test_several_models_log_each_models_figures_and_directory(tmp_path: Path, cache_dir: Path) -> None:
    models = ["bert_large", "opt_350m"]
    job = ["hw=tpuv4", f"model=[{','.join(models)}]", "train.recompute=[false]", "train.microbatch=[8]"]
    done = phazec(tmp_path, cache_dir, *job, "system.hbm_gb=[32]")
    assert done.returncode == 0, done.stderr
    assert "MLflow logging failed" not in done.stderr
    (run,) = runs(f"sqlite:///{tmp_path / 'phazec.db'}")
    assert run.info.status == "FINISHED"
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    result = json.loads((run_dir / "result.json").read_text())
    own = {"throughput_samples_per_s", "time_per_batch_s", "speedup_vs_own_best_design",
           "speedup_vs_tpuv4_optimal_placement"}  # fmt: skip
    expected = (
        JOB_METRICS
        - USAGE_METRICS
        - {"time_per_batch_s", *(m for m in JOB_METRICS if m.startswith("speedup"))}
    )
    assert set(run.data.metrics) == expected | {f"{m}.{name}" for m in own for name in models}
    per_model = result["throughput_samples_per_s"]
    assert run.data.metrics["throughput_samples_per_s"] == sum(per_model.values()) / 2
    for name in models:
        assert run.data.metrics[f"throughput_samples_per_s.{name}"] == per_model[name]
    assert run.data.params["model"] == f"[{','.join(models)}]"
    logged = artifacts(f"sqlite:///{tmp_path / 'phazec.db'}", run.info.run_id)
    assert {"result.json", "common.csv", "hydra/config.yaml"} <= logged
    for name in models:
        assert {f"{name}/result.json", f"{name}/explored.csv", f"{name}/bottleneck_gantt.png"} <= logged


def test_ir_logs_no_run_unless_asked_and_then_a_finished_one(tmp_path: Path, cache_dir: Path) -> None:
    small = ["model=bert_large", "parallel.tp=1"]
    quiet = phazec(tmp_path / "quiet", cache_dir, *small, entry="ir_main")
    assert quiet.returncode == 0, quiet.stderr
    assert sorted(p.name for p in (tmp_path / "quiet").iterdir()) == ["outputs"]  # no phazec.db
    tracked = phazec(tmp_path / "tracked", cache_dir, *small, "tracking=mlflow", entry="ir_main")
    assert tracked.returncode == 0, tracked.stderr
    assert "MLflow logging failed" not in tracked.stdout + tracked.stderr
    assert "database tables" not in tracked.stdout + tracked.stderr  # MLflow's news of a new store
    uri = f"sqlite:///{tmp_path / 'tracked' / 'phazec.db'}"
    (run,) = runs(uri)
    assert run.info.status == "FINISHED"
    assert (run.data.params["model.name"], run.data.params["parallel.tp"]) == ("bert_large", "1")
    assert artifacts(uri, run.info.run_id) == {"ir.json", "hydra/config.yaml"}


def test_a_failed_lowering_fails_its_run_and_an_ir_sweep_runs_every_job(
    tmp_path: Path, cache_dir: Path
) -> None:
    bad = ["model=bert_large", "parallel.tp=1", "model.seq_len=-1"]
    single = phazec(tmp_path / "single", cache_dir, *bad, "tracking=mlflow", entry="ir_main")
    assert single.returncode == 2
    assert "phazec: error: model.seq_len=-1 is not valid: give a positive number of tokens" in single.stderr
    (run,) = runs(f"sqlite:///{tmp_path / 'single' / 'phazec.db'}")
    assert (run.info.status, run.data.tags["error"]) == (
        "FAILED",
        "model.seq_len=-1 is not valid: give a positive number of tokens up to 1,048,576, e.g. 2048.",
    )
    # In parallel (joblib's processes): the failure is the job's, so the exit status is still 1.
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    swept = phazec(
        tmp_path / "sweep", cache_dir, "-m", *bad[:2], "model.seq_len=-1,512", *parallel, entry="ir_main"
    )
    assert swept.returncode == 1, swept.stderr
    assert (
        "job 0 (model.seq_len=-1): model.seq_len=-1 is not valid: give a positive number of tokens"
        in swept.stderr
    )
    failed, lowered = job_dirs(tmp_path / "sweep")
    assert (failed / "error.txt").is_file() and not (failed / "ir.json").exists()
    assert (lowered / "ir.json").is_file()
    rows = list(csv.DictReader((failed.parent / COMPARISON_CSV).open()))
    assert [row["status"] for row in rows] == ["failed", "ok"]
    # BERT-large: embeddings (30522 + 512 + 2 rows of 1024, a layer norm), 24 blocks (weights, biases,
    # two layer norms), the MLM head's transform, layer norm and output bias (its weight is the tied
    # word embedding).
    embedding, block, head = 31_036 * 1024 + 2048, 12 * 1024**2 + 9 * 1024 + 2 * 2048, 1024**2 + 3072 + 30_522
    assert (rows[1]["parameters"], rows[1]["seq_len"], rows[1]["layers"]) == (
        str(embedding + 24 * block + head), "512", "26"
    )  # fmt: skip
    assert (
        rows[0]["error"]
        == "model.seq_len=-1 is not valid: give a positive number of tokens up to 1,048,576, e.g. 2048."
    )


def test_job_logs_to_a_real_mlflow_server(tmp_path: Path, cache_dir: Path) -> None:
    port = free_port()
    store = f"sqlite:///{tmp_path / 'server.db'}"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # as `make ui`: stops in 2 s
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "mlflow server did not answer /health in 90 s"
                assert server.poll() is None, "mlflow server exited"
                time.sleep(0.5)
        job_dir = tmp_path / "job"
        job_dir.mkdir()
        done = phazec(
            job_dir, cache_dir, *JOB, "train.microbatch=[8]", "system.hbm_gb=[32]", f"tracking.uri={uri}"
        )
        assert done.returncode == 0, done.stderr
        (run,) = runs(uri)
        result = json.loads(next((job_dir / "outputs").glob("*/*/result.json")).read_text())
        assert run.info.status == "FINISHED"
        assert run.data.metrics["throughput_samples_per_s"] == result["throughput_samples_per_s"]
        assert artifacts(uri, run.info.run_id) == JOB_ARTIFACTS
        assert not (job_dir / "phazec.db").exists()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert server.returncode is not None


def test_unreachable_server_keeps_local_results_and_says_so(tmp_path: Path, cache_dir: Path) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    done = phazec(
        tmp_path, cache_dir, *JOB, "train.microbatch=[8]", "system.hbm_gb=[32]", f"tracking.uri={uri}"
    )
    assert done.returncode == 0, done.stderr
    (result,) = (tmp_path / "outputs").glob("*/*/result.json")
    assert json.loads(result.read_text())["throughput_samples_per_s"] > 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if uri in line or "MLflow" in line]
    assert len(lines) == 1 and "MLflow logging failed" in lines[0] and str(result.parent) in lines[0]
    assert "Retrying" not in done.stderr  # urllib3's own warning on every retry is silenced


@pytest.mark.parametrize("tracking", ["mlflow", "none"])
def test_tracking_presets_register_one_callback(tracking: str) -> None:
    from hydra import compose, initialize_config_dir

    from phazec.cli import conf_dir

    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        cfg = compose("config", overrides=[f"tracking={tracking}"], return_hydra_config=True)
    target = {"mlflow": "phazec.track.mlflow_runs.MlflowCallback", "none": "phazec.track.sweep.SweepCallback"}
    assert cfg.tracking.backend == tracking
    assert cfg.hydra.callbacks.phazec._target_ == target[tracking]
    assert dict(cfg.hydra.sweeper.params) == {
        "train.microbatch": "[1],[2],[4],[8]",
        "train.recompute": "[false],[true]",
    }
