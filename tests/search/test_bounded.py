"""The exact search on its own: bounded with dominance pruning gives exhaustive's answer on a slice of
PHAZE's space, the pruning's guard, and resumed bounds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.config.settings import typed
from phazec.cost.model import MODELS, LatencyModel
from phazec.hw.schema import HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import Model
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.evaluator import Evaluator
from phazec.predict.training import Knobs
from phazec.search.executors.local import Workers
from phazec.search.state import SearchState
from phazec.search.strategies.bounded import bounded
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config
from tests.search.test_search import SMALL, search

SLICE = (
    "model=bert_large",
    "hw=tpu_area",
    "hw.tc_width={pow2:[128,128]}",
    "hw.tc_depth={pow2:[64,128]}",
    "hw.glb_bytes={pow2:[33554432,33554432]}",
    "hw.num_tc={pow2:[4,16]}",
    "hw.num_vc={pow2:[2,4]}",
)
"""10 designs of PHAZE's space (32 MiB buffers, 128-wide arrays 64 or 128 deep, 4 to 16 tensor cores,
2 or 4 vector cores); only 1 is not dominated by an earlier design."""


def test_bounded_gives_exhaustives_answer_on_a_slice_of_phazes_space(tmp_path: Path, cache_dir: Path) -> None:
    runs = {s: search(tmp_path / s, cache_dir, *SLICE, f"search={s}") for s in ("exhaustive", "bounded")}
    for key in ("design", "plan", "time_per_batch_s"):
        assert runs["bounded"][key] == runs["exhaustive"][key]
    record = runs["bounded"]["search"]
    assert (record["designs_total"], record["designs_evaluated"]) == (10, 1)
    assert record["designs_pruned_by"] == {"dominated": 9}
    assert record["schedules_unproven"] == []


def _evaluator(lowered: Callable[[str], Model], latency_model: LatencyModel) -> Evaluator:
    cfg = compose_config(*SMALL)
    return Evaluator(
        graphs=training_graphs(
            lowered("bert_large"), [1], GraphSettings(optimizer="sgd", vocab_parallel=True)
        ),
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=latency_model,
        solver=SolverConfig(),
        knobs=Knobs.searching((32 * 10**9,), microbatch=[8], recompute=[False], optimizer="sgd"),
    )


def test_a_cost_model_without_the_promise_prunes_by_bound_alone(
    tmp_path: Path, lowered: Callable[[str], Model]
) -> None:
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config(*SMALL).hw, "hw")))
    tiled = MODELS["tiled"]
    unpromised = LatencyModel("tiled, unpromised", tiled.by_kind, tiled.hbm_traffic_s, monotone=False)
    kept = {}
    for model in (MODELS["tiled"], unpromised):
        with Workers(_evaluator(lowered, model), 1) as workers:
            strategy = bounded(designs, 8, workers, SearchState(tmp_path / model.name, resume=False))
        kept[model.name] = (strategy.dominated, sorted(np.concatenate(strategy.batches).tolist()))
    assert kept["tiled"][0] == 32
    assert kept["tiled, unpromised"] == (0, list(range(37)))
    assert set(kept["tiled"][1]) < set(range(37))


@pytest.mark.parametrize("setting", [{"overlap_grad_reduce": True}, {"pipeline_schedule": "zb_h1"}])
def test_a_time_that_can_fall_as_a_latency_grows_prunes_by_bound_alone(
    tmp_path: Path, lowered: Callable[[str], Model], setting: dict[str, Any]
) -> None:
    # With overlap_grad_reduce a faster design can time a plan slower (its passes hide less of the
    # DP sync), and under ZB-H1 too (a shorter weight-gradient pass defers less into the bubble), so no
    # design is dropped for being dominated.
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config(*SMALL).hw, "hw")))
    evaluator = _evaluator(lowered, MODELS["tiled"])
    knobs = evaluator.knobs
    hiding = replace(evaluator, knobs=replace(knobs, fixed=replace(knobs.fixed, **setting)))
    with Workers(hiding, 1) as workers:
        strategy = bounded(designs, 8, workers, SearchState(tmp_path, resume=False))
    assert (strategy.dominated, sorted(np.concatenate(strategy.batches).tolist())) == (0, list(range(37)))


def test_bounds_are_saved_and_resumed(
    tmp_path: Path, lowered: Callable[[str], Model], caplog: pytest.LogCaptureFixture
) -> None:
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config(*SMALL).hw, "hw")))
    evaluator = _evaluator(lowered, MODELS["tiled"])
    strategies = []
    for _ in range(2):
        with Workers(evaluator, 1) as workers, caplog.at_level(logging.INFO, logger=bounded.__module__):
            strategies.append(bounded(designs, 2, workers, SearchState(tmp_path, resume=True)))
    resumed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed")]
    assert resumed == [f"resumed 5 of 5 bounds from {tmp_path}"]
    first, second = strategies
    assert second.least_bound_s == first.least_bound_s
    assert [b.tolist() for b in second.batches] == [b.tolist() for b in first.batches]
