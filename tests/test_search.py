"""The co-search end to end on real models: result.json, explored.csv, baselines and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from phazec.cli import conf_dir
from phazec.errors import PhazecError
from phazec.search.run import run_search
from tests.conftest import compose_config

RESULT_KEYS = {
    "model",
    "design",
    "plan",
    "time_per_batch_s",
    "throughput_samples_per_s",
    "baselines",
    "speedup_vs_tpuv4",
    "search",
    "config",
}
QUICK = (
    "train.microbatch=[8]",
    "train.recompute=[false]",
    "system.hbm_gb=[32]",
    "tracking=none",
    "solver.time_limit_s=5",
)
"""One knob setting, so a design evaluates in a few solves."""


def search(tmp_path: Path, cache_dir: Path, *overrides: str) -> dict[str, Any]:
    """Run the co-search with a shared ONNX cache; returns result.json as written."""
    cfg = compose_config(*QUICK, f"cache_dir={cache_dir}", *overrides)
    run_search(cfg, tmp_path, Path(conf_dir()))
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


def test_single_tpuv4_design(tmp_path: Path, cache_dir: Path) -> None:
    result = search(tmp_path, cache_dir, "model=bert_large", "hw=tpuv4")
    assert set(result) == RESULT_KEYS
    assert result["design"] == result["baselines"]["tpuv4_optimal_placement"]["design"]
    assert result["design"]["num_tc"] == 8
    assert result["design"]["area_mm2"] == pytest.approx(278.8267, abs=1e-3)
    assert result["speedup_vs_tpuv4"] == 1.0
    assert result["search"]["designs_total"] == result["search"]["designs_evaluated"] == 1
    plan = result["plan"]
    assert plan["microbatch"] == 8
    assert plan["tp"] == 1
    layers = sorted(i for stage in plan["stages"] for i in stage["layers"])
    assert layers == list(range(26))  # embedding, 24 blocks, head
    assert plan["pp"] == len(plan["stages"])
    # Throughput is the global batch over the time per batch.
    assert result["throughput_samples_per_s"] == pytest.approx(4096 / result["time_per_batch_s"])
    # The fixed Megatron plan for BERT-large: 8 stages, 128 replicas.
    fixed = result["baselines"]["tpuv4_megatron_plan"]["plan"]
    assert (fixed["pp"], fixed["dp"], fixed["tp"]) == (8, 128, 1)
    megatron = result["baselines"]["tpuv4_megatron_plan"]
    assert result["throughput_samples_per_s"] >= megatron["throughput_samples_per_s"]
    rows = list(csv.DictReader((tmp_path / "explored.csv").open()))
    assert len(rows) == 1
    assert rows[0]["feasible"] == "True"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("search.strategy=random",), r"search.strategy='random' is not a strategy"),
        (("train.microbatch=[3]",), r"train.microbatch values \[3\] do not divide the global batch 4096"),
        (("system.hbm_gb=[0.001]",), r"no training plan fits in HBM of \[0.0\] GB on any design\. The plan"),
        (("hw.area_budget_mm2=1.0",), r"area"),
    ],
)
def test_bad_input(tmp_path: Path, cache_dir: Path, overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        search(tmp_path, cache_dir, "model=bert_large", "hw=tpuv4", *overrides)
