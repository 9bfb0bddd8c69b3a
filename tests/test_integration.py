"""The stages wired together on real lowered models: cost pass on the IR, placement of real graphs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from phazec.cli import conf_dir
from phazec.config.settings import typed
from phazec.cost.model import latency_model_from_config
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import LayerKind, Model, OpKind
from phazec.passes.pipeline import training_pipeline
from phazec.predict.evaluator import Evaluator
from phazec.predict.layer_costs import Split, class_costs
from phazec.predict.training import Knobs
from phazec.solvers.placement.problem import Placement
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config


def test_cost_pass_on_gpt3_block(lowered: Callable[[str], Model]) -> None:
    cfg = compose_config("model=gpt3_175b", "hw=tpu_area", "system=phaze_1024")
    trained, _ = training_pipeline(8).run(lowered("gpt3_175b"))
    block = next(trained.classes[layer.cls] for layer in trained.layers if layer.kind is LayerKind.BLOCK)
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw"))).take(
        np.arange(0, 29360, 2936)
    )
    costs = class_costs(
        block,
        designs,
        system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        Split(1),
    )
    assert costs.backward is not None
    kinds = [op.kind for op in block.graph.ops]
    # Ring all-reduce of one s x h bf16 activation over 8 devices on one 4 GiB/s link at 77 %, 2 us per
    # step and 15 us per call: 2 (t-1)/t * B / bandwidth + 2 (t-1) * 2 us + 15 us.
    expected_s = 2 * 7 / 8 * (2048 * 12288 * 2) / (0.77 * 2**32) + 14 * 2e-6 + 15e-6
    rows = [i for i, kind in enumerate(kinds) if kind is OpKind.COLLECTIVE]
    assert len(rows) == 2
    assert np.allclose(costs.forward.single_core_s[rows], expected_s, rtol=1e-12, atol=0)
    gemms = [i for i, kind in enumerate(kinds) if kind in (OpKind.GEMM, OpKind.FUSED)]
    assert (costs.forward.single_core_s[gemms] > 0).all()
    assert (costs.forward.all_cores_s[gemms] <= costs.forward.single_core_s[gemms]).all()
    free = [i for i, kind in enumerate(kinds) if kind is OpKind.DATA]
    assert (costs.forward.single_core_s[free] == 0).all()


def test_llama_exported_layer_graph_places(lowered: Callable[[str], Model]) -> None:
    # The exported Llama graph branches (the embedding feeds rotary tables and the mask to every block).
    cfg = compose_config("model=llama2_7b", "hw=tpuv4", "system=phaze_1024")
    model = lowered("llama2_7b")
    assert sorted(e.dst for e in model.edges if e.src == 0) == list(range(1, 33))
    evaluator = Evaluator(
        graphs={1: training_pipeline(1).run(model)[0]},
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        solver=SolverConfig(),
        knobs=Knobs.searching((80 * 10**9,), microbatch=[1], recompute=[True], optimizer="sgd"),
    )
    tpuv4 = enumerate_designs(
        hw_space_from_config(typed(HwConfig, OmegaConf.load(Path(conf_dir()) / "hw" / "tpuv4.yaml"), "hw"))
    )
    (candidate,) = evaluator.evaluate(tpuv4)
    placement = candidate.result
    assert isinstance(placement, Placement)
    assert sorted(i for stage in placement.stages for i in stage.layers) == list(range(34))
    assert placement.throughput_samples_per_s == pytest.approx(4096 / placement.time_per_batch_s)
