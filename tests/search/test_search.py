"""The co-search end to end on real models: result.json, explored.csv, baselines and bad input."""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.commands.search import run_search, search_state, tpuv4_baseline
from phazec.config.presets import group_presets
from phazec.config.settings import settings_from_config, tpuv4_space, typed
from phazec.cost.model import latency_model_from_config
from phazec.errors import PhazecError
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import Model
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.evaluator import Candidate, Evaluator
from phazec.predict.training import Knobs, Training
from phazec.predict.usage import USAGE_KEYS
from phazec.report.table import result_table
from phazec.search.driver import STRATEGIES
from phazec.search.state import candidate_from_json, candidate_json, state_key
from phazec.solvers.placement.problem import NoFeasiblePlacement, Placement, Stage
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config, sharing

RESULT_KEYS = {
    "model",
    "design",
    "plan",
    "time_per_batch_s",
    "throughput_samples_per_s",
    "band",
    "baselines",
    "speedup_vs_tpuv4",
    "speedup_vs_megatron_default",
    "search",
    "config",
    "objective",
    *USAGE_KEYS,
}
QUICK = (
    "train.microbatch=[8]",
    "train.recompute=[false]",
    "system.hbm_gb=[32]",
    "tracking=none",
)
"""One knob setting, so a design evaluates in a few solves."""


def search(tmp_path: Path, cache_dir: Path, *overrides: str) -> dict[str, Any]:
    """Run the co-search with a shared ONNX cache; returns result.json as written."""
    cfg = compose_config(*QUICK, f"cache_dir={cache_dir}", *overrides)
    run_search(settings_from_config(cfg), tmp_path, tpuv4_space())
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


def test_the_search_tries_each_block_count_under_block_recompute(tmp_path: Path, cache_dir: Path) -> None:
    # BERT-large's 24 blocks at 32 GB fit without recompute, so recomputing one block a stage beats
    # recomputing all: a search trying both counts returns the plan and time of the one-block search,
    # faster than the all-blocks search, and names its count in the plan.
    def block(*layers: int) -> dict[str, Any]:
        counts = ",".join(str(n) for n in layers)
        return search(
            tmp_path / counts, cache_dir, "model=bert_large", "hw=tpuv4", "train.recompute=[block]",
            f"train.recompute_layers=[{counts}]",
        )  # fmt: skip

    both, one, every = block(1, 24), block(1), block(24)
    assert both["plan"]["recompute"] == "block" and both["plan"]["recompute_layers"] == 1
    assert (both["plan"], both["time_per_batch_s"]) == (one["plan"], one["time_per_batch_s"])
    assert every["plan"]["recompute_layers"] == 24
    assert one["time_per_batch_s"] < every["time_per_batch_s"]


def test_the_tpuv4_is_priced_with_the_searched_template_model(tmp_path: Path, cache_dir: Path) -> None:
    # A kernel latency on every op makes the TPUv4 slower; the baseline gets it too, so the TPUv4
    # searched alone is exactly as fast as itself.
    result = search(tmp_path, cache_dir, "model=bert_large", "hw=tpuv4", "hw.device.kernel_latency_s=2e-5")
    baseline = result["baselines"]["tpuv4_optimal_placement"]
    assert baseline["time_per_batch_s"] == result["time_per_batch_s"]
    assert result["speedup_vs_tpuv4"] == 1.0


def test_one_gpu_design_compares_with_its_own_default_plan(tmp_path: Path, cache_dir: Path) -> None:
    # BERT-large (tp 1 only) on 16 A100s in nodes of 8: the default plan is tp 1, and at 80 GB one
    # stage fits, so pp 1 and dp 16. The TPUv4 is not solved: its entries are not applicable.
    result = search(
        tmp_path, cache_dir, "model=bert_large", "hw=a100", "system=dgx_a100", "system.devices=16",
        "system.hbm_gb=[80]",
    )  # fmt: skip
    assert set(result) == RESULT_KEYS
    compared = result["baselines"]
    assert "one GPU design" in compared["tpuv4_optimal_placement"]["not_applicable"]
    assert compared["tpuv4_optimal_placement"]["plan"] is None and result["speedup_vs_tpuv4"] is None
    default = compared["megatron_default_plan"]["plan"]
    assert (default["tp"], default["pp"], default["dp"]) == (1, 1, 16)
    # The DP searches every split and width, the default plan's among them: it is never faster.
    speedup = result["speedup_vs_megatron_default"]
    default_throughput = compared["megatron_default_plan"]["throughput_samples_per_s"]
    assert speedup == result["throughput_samples_per_s"] / default_throughput
    assert speedup >= 1.0
    # The model's fixed plan (pp 8 x dp 128) needs 1024 devices: not applicable on 16.
    assert "not_applicable" in compared["found_design_megatron_plan"]
    assert "vs default" in result_table(result)


def test_a_gpu_space_leaves_the_tpuv4_its_own_device_model() -> None:
    tpuv4 = tpuv4_space()
    preset = enumerate_designs(tpuv4).device
    shared = replace(preset, hbm_shared=True, kernel_latency_s=1e-5)
    assert tpuv4_baseline(tpuv4, shared).device == shared
    gpu = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=a100").hw, "hw"))).device
    assert tpuv4_baseline(tpuv4, gpu).device == preset
    assert tpuv4_baseline(tpuv4, replace(preset, shared_cores=True)).device == preset


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("search.strategy=random",), r"search.strategy='random' is not a strategy"),
        (("train.microbatch=[3]",), r"train.microbatch values \[3\] do not divide the global batch 4096"),
        (
            ("system.hbm_gb=[0.001]",),
            r"no training plan fits in HBM of \[0.001\] GB on any design\. The plan",
        ),
        (("hw.area_budget_mm2=1.0",), r"area"),
        (("search.workers=0",), r"search.workers=0 is not valid: give a number of processes >= 1"),
        (
            ("search.executor=slurm",),
            r"search.executor='slurm' is not an executor; valid: \['local', 'ray'\]",
        ),
        (("search.ray.retries=-1",), r"search.ray.retries=-1 is not valid"),
        (("search.batch_designs=0",), r"search.batch_designs=0 is not valid: it must be positive"),
        (("search=bo", "search.trials=0"), r"search.trials=0 is not valid: it must be positive"),
    ],
)
def test_bad_input(tmp_path: Path, cache_dir: Path, overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        search(tmp_path, cache_dir, "model=bert_large", "hw=tpuv4", *overrides)


BOUNDED = 1
"""Designs of tpu_small the bounded search evaluates one by one before its bound stops it."""
SMALL = ("model=bert_large", "hw=tpu_small")
"""37 designs around TPUv4; with QUICK knobs a design evaluates in a fraction of a second."""
TIMINGS = ("wall_s", "cost_s", "ilp_s", "dp_s", "ilp_cache_hits")


def answer(result: dict[str, Any]) -> dict[str, Any]:
    """result.json without the fields allowed to differ between runs of one search: timings, and the
    settings that cannot change the answer."""
    out: dict[str, Any] = json.loads(json.dumps(result))
    for key in TIMINGS:
        del out["search"][key]
    for key in ("workers", "resume", "executor", "ray"):
        del out["config"]["search"][key]
    del out["config"]["cache_dir"]
    return out


def test_strategies_agree_and_count_pruned_designs(tmp_path: Path, cache_dir: Path) -> None:
    runs = {
        strategy: search(
            tmp_path / strategy, cache_dir, *SMALL, f"search={strategy}", "search.batch_designs=1"
        )
        for strategy in ("exhaustive", "bounded", "phaze")
    }
    exhaustive, bounded, phaze = runs["exhaustive"], runs["bounded"], runs["phaze"]
    assert exhaustive["design"] == {
        "num_tc": 16, "tc_width": 128, "tc_depth": 128, "num_vc": 4, "vc_width": 128,
        "glb_bytes": 32 * 2**20, "hbm_bytes": 32 * 10**9, "area_mm2": pytest.approx(253.5583, abs=1e-3),
    }  # fmt: skip
    for key in ("design", "plan", "time_per_batch_s", "baselines"):
        assert bounded[key] == exhaustive[key]
        assert phaze[key] == exhaustive[key]
    counts = {s: (r["search"]["designs_evaluated"], r["search"]["designs_pruned"]) for s, r in runs.items()}
    assert counts == {
        "exhaustive": (37, 0),
        "bounded": (BOUNDED, 37 - BOUNDED),
        "phaze": (11, 26),
    }
    reasons = {s: r["search"]["designs_pruned_by"] for s, r in runs.items()}
    assert reasons == {
        "exhaustive": {},
        "bounded": {"dominated": 32, "bound": 37 - BOUNDED - 32},
        "phaze": {"patience": 26},
    }
    # Bounded evaluated whole designs: its rows of explored.csv are exhaustive's rows of those designs.
    rows = {s: (tmp_path / s / "explored.csv").read_text().splitlines() for s in runs}
    assert len(rows["bounded"]) == 1 + BOUNDED
    assert set(rows["bounded"]) <= set(rows["exhaustive"])


def test_lower_bounds_hold_on_every_design(lowered: Callable[[str], Model]) -> None:
    cfg = compose_config(*SMALL)
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    knobs = Knobs.searching(
        (32 * 10**9, 80 * 10**9), microbatch=[8], recompute=[False, True], optimizer="sgd"
    )
    evaluator = Evaluator(
        graphs=training_graphs(
            lowered("bert_large"), [1], GraphSettings(optimizer="sgd", vocab_parallel=True)
        ),
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        solver=SolverConfig(),
        knobs=knobs,
    )
    training = replace(knobs.fixed, microbatch=8)
    lower = evaluator.layer_lower_bounds_s(designs, training)[1]
    exact = evaluator.layer_latencies_s(designs, training)[1]
    assert np.all(lower <= exact)
    assert np.all(lower >= 0.5 * exact)  # not trivially loose
    bounds_s = evaluator.lower_bounds_s(designs)
    candidates = evaluator.evaluate(designs)
    for j in range(len(designs)):
        times = [
            c.result.time_per_batch_s for c in candidates if c.design == j and isinstance(c.result, Placement)
        ]
        assert bounds_s[j] <= min(times)
        assert bounds_s[j] >= 0.9 * min(times)


@pytest.mark.parametrize("strategy", ["exhaustive", "bounded"])
def test_two_workers_give_the_same_files_as_one(tmp_path: Path, cache_dir: Path, strategy: str) -> None:
    common = (*SMALL, f"search={strategy}", "search.batch_designs=4", "search.resume=false")
    one = search(tmp_path / "one", cache_dir, *common, "search.workers=1")
    two = search(tmp_path / "two", cache_dir, *common, "search.workers=2")
    assert json.dumps(answer(one)) == json.dumps(answer(two))
    assert (tmp_path / "one" / "explored.csv").read_bytes() == (
        tmp_path / "two" / "explored.csv"
    ).read_bytes()


def test_a_killed_search_resumes(tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A cache of its own (sharing the exported ONNX files) so the first run solves every schedule
    # and is slow enough to be killed midway.
    cache = sharing(tmp_path / "cache", cache_dir)
    overrides = (
        *SMALL,
        "hw.glb_bytes=[33554432]",
        "search=exhaustive",
        "search.batch_designs=1",
        "search.workers=1",
    )
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *QUICK, *overrides]
    killed = subprocess.Popen(
        [*command, f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'killed'}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    saved = cache / "search"
    while len(list(saved.glob("*/batch_*.json"))) < 2:
        assert killed.poll() is None, "the search ended before it could be killed"
        time.sleep(0.05)
    killed.kill()
    killed.wait()
    assert not (tmp_path / "killed" / "result.json").exists()

    with caplog.at_level(logging.INFO, logger="phazec.search.loop"):
        resumed = search(tmp_path / "resumed", cache, *overrides)
    (message,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed")]
    done = int(message.split()[1])
    assert 2 <= done < 16
    assert message.startswith(f"resumed {done} of 16 evaluated designs")
    fresh = search(tmp_path / "fresh", cache, *overrides, "search.resume=false")
    assert answer(resumed) == answer(fresh)
    assert (tmp_path / "resumed" / "explored.csv").read_bytes() == (
        tmp_path / "fresh" / "explored.csv"
    ).read_bytes()


def test_every_strategy_has_a_preset_and_a_module() -> None:
    assert set(STRATEGIES) == set(group_presets("search"))
    for name, load in STRATEGIES.items():
        strategy = load()
        assert callable(strategy.batch_count) and callable(strategy.run), name


def test_state_key_ignores_what_cannot_change_the_answer() -> None:
    key = search_state(settings_from_config(compose_config(*SMALL))).directory.name
    same = state_key(
        settings_from_config(
            compose_config(
                *SMALL, "search.workers=3", "search.resume=false", "tracking=mlflow", "cache_dir=/x"
            )
        ).config,
        "",
    )
    assert key == same
    assert (
        search_state(settings_from_config(compose_config(*SMALL, "train.microbatch=[8]"))).directory.name
        != key
    )
    assert search_state(settings_from_config(compose_config(*SMALL, "search=bounded"))).directory.name != key


def test_saved_candidates_read_back_bit_for_bit() -> None:
    placement = Placement(
        stages=(Stage((0, 1), 1, 0.1 + 0.2, 3 * 10**9), Stage((2,), 4, 1 / 3, 7)),
        t=4, d=2, hbm_bytes=80 * 10**9, microbatches_per_pipeline=3,
        time_per_batch_s=2 / 3, throughput_samples_per_s=4096 / (2 / 3), fits_hbm=True,
    )  # fmt: skip
    infeasible = NoFeasiblePlacement(
        t=1, hbm_bytes=32 * 10**9, min_memory_bytes=40 * 10**9,
        parameter_bytes=30 * 10**9, activation_bytes=6 * 10**9, stash_bytes=4 * 10**9,
    )  # fmt: skip
    full = Training(microbatch=8, recompute="full", sequence_parallel=True, interleave=2)
    for candidate in (Candidate(12, full, placement), Candidate(3, Training(), infeasible)):
        assert candidate_from_json(json.loads(json.dumps(candidate_json(candidate)))) == candidate


def test_bo_places_the_design_with_the_fastest_block(
    tmp_path: Path, cache_dir: Path, lowered: Callable[[str], Model]
) -> None:
    runs = [search(tmp_path / str(i), cache_dir, *SMALL, "search=bo", "search.trials=30") for i in range(2)]
    assert answer(runs[0]) == answer(runs[1])  # seeded: the same trials every time
    result = runs[0]
    assert (result["search"]["designs_evaluated"], result["search"]["designs_pruned"]) == (1, 36)
    # The 30 trials found the design whose block forward pass is fastest among all 37.
    cfg = compose_config(*QUICK, *SMALL)
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    evaluator = Evaluator(
        graphs=training_graphs(
            lowered("bert_large"), [1], GraphSettings(optimizer="sgd", vocab_parallel=True)
        ),
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        solver=SolverConfig(),
        knobs=Knobs.searching((32 * 10**9,), microbatch=[8], recompute=[False], optimizer="sgd"),
    )
    fastest = int(np.argmin(evaluator.block_forward_s(designs)))
    assert result["design"]["area_mm2"] == designs.area_mm2[fastest]
    assert result["design"]["num_tc"] == designs.num_tc[fastest]
    assert result["design"]["num_vc"] == designs.num_vc[fastest]
