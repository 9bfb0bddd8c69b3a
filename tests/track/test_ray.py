"""The Ray launcher (the optional extra `phazec[ray]`) on a local Ray: same jobs as the basic launcher.

Skipped where hydra-ray-launcher is not installed (it pins cloudpickle below 3, so it lives in an extra).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.track.test_mlflow import JOB, job_dirs, phazec

pytestmark = pytest.mark.ray

pytest.importorskip("hydra_plugins.hydra_ray_launcher.ray_launcher")

SWEEP = [*JOB, "system.hbm_gb=[32]", "train.microbatch=[8],[16]", "tracking=none"]
RAY = [
    "hydra/launcher=ray",
    "+hydra.launcher.ray.init.num_cpus=2",
    "+hydra.launcher.ray.init.include_dashboard=false",
]
"""A local Ray with 2 CPUs and no dashboard (and RAY_AUTH_MODE=disabled: no token under ~/.ray)."""


def results(cwd: Path) -> list[dict[str, object]]:
    """Each job's result.json without its timings, by job number."""
    found = []
    for job_dir in job_dirs(cwd):
        result = json.loads((job_dir / "result.json").read_text())
        found.append({k: result[k] for k in ("design", "plan", "throughput_samples_per_s")})
    return found


def test_ray_launcher_runs_the_jobs_of_the_basic_launcher(tmp_path: Path, cache_dir: Path) -> None:
    basic = phazec(tmp_path / "basic", cache_dir, "-m", *SWEEP)
    assert basic.returncode == 0, basic.stderr
    ray = phazec(tmp_path / "ray", cache_dir, "-m", *RAY, *SWEEP, env={"RAY_AUTH_MODE": "disabled"})
    assert ray.returncode == 0, ray.stderr
    assert "Ray Launcher is launching 2 jobs" in ray.stdout + ray.stderr
    on_ray, on_basic = results(tmp_path / "ray"), results(tmp_path / "basic")
    assert [(r["design"], r["plan"]) for r in on_ray] == [(r["design"], r["plan"]) for r in on_basic]
    # The scheduling ILP stops at a node limit, not a time limit, so the launchers agree exactly.
    for r, b in zip(on_ray, on_basic, strict=True):
        assert r["throughput_samples_per_s"] == b["throughput_samples_per_s"]
    summaries = [(tmp_path / w / "multirun").glob("*/*/sweep_best.json") for w in ("ray", "basic")]
    best = [json.loads(next(s).read_text())["job"] for s in summaries]
    assert best[0] == best[1]
