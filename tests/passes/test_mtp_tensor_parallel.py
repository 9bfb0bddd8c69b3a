"""Tensor parallelism of DeepSeek's multi-token-prediction module, as Megatron-Core's
`MultiTokenPredictionLayer` runs it under sequence parallelism (`phazec.passes.tensor_parallel.mtp_layout`):
the tiny DeepSeek-V3 with one module at t = 2, ep 2, by hand; `phazec-plan` and the search on it."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.cost.network import network_latency_s, sent_bytes
from phazec.cost.ops import OpKind as CostKind
from phazec.frontend import load_model
from phazec.hw.system import NetworkTier, System
from phazec.ir.core import LayerKind
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.layer_costs import Split, op_table
from tests.conftest import compose_config
from tests.passes.test_moe_tensor_parallel import gemm_shapes
from tests.passes.test_up_projection import TINY_MLA

S, H, VOCAB, E, F = 32, 64, 256, 8, 32
"""The tiny DeepSeek-V3's sequence, hidden width, vocabulary, routed experts and expert FFN."""


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The MTP module's class of the tiny model (`TINY_MLA`, one module) at t = 2 with ep 2, flash
    attention, a parallel vocabulary (Adam)."""
    lowered = load_model(replace(TINY_MLA, mtp_layers=1), tmp_path_factory.mktemp("mtp-tp"))
    settings = GraphSettings(
        expert_parallel=2, optimizer="adam", attention="flash", causal=True, vocab_parallel=True
    )
    model = training_graphs(lowered, [2], settings)[2]
    assert model.layers[3].kind is LayerKind.MTP
    return model.classes[model.layers[3].cls]


def test_the_projection_is_column_parallel_and_the_block_splits_as_the_models(module: Any) -> None:
    """Per device at t = 2: the projection eh_proj reads the gathered 32 tokens' 2h = 128 features and
    writes h / t = 32 of the 64 (column-parallel, Megatron-Core's `gather_output=False`); then the block
    as the model's MoE block at t = 2 (tests/passes/test_moe_tensor_parallel.py): the down-projections
    64 -> 32 and 64 -> 24 whole, the up-projections 32 -> 2 heads x 16 and 16 -> 2 x (8 + 8), the flash
    kernel, the output projection 16 -> 64 row-parallel; the router on the rank's 16 tokens, 4 experts
    of 8 tokens, the shared expert 64 -> 16, 16 -> 64."""
    attention = [(1, S, H, 32, None), (1, S, 32, 32, "column"), (1, S, H, 24, None), (1, S, 16, 32, "column")]
    shapes = gemm_shapes(module)
    assert shapes[0] == (1, S, 2 * H, H // 2, "gathered")
    assert shapes[1:5] == attention
    assert shapes[6:] == [
        (1, S, 16, H, "row"), (1, S // 2, H, E, None), (E // 2, 8, H, 2 * F, None), (E // 2, 8, F, H, None),
        (1, S, H, F // 2, "column"), (1, S, H, F // 2, "column"), (1, S, F // 2, H, "row"),
    ]  # fmt: skip


def collectives(graph: Any) -> list[tuple[str, int]]:
    """(type, bytes of the whole tensor a sample) of each tensor-parallel collective, in graph order."""
    return [
        (op.op_type, op.attrs["bytes"])
        for op in graph.ops
        if op.op_type in ("AllReduce", "AllGather", "ReduceScatter")
    ]


def test_its_collectives_are_megatron_cores_by_hand(module: Any) -> None:
    """A sample's 32 tokens of bf16. Forward: the lookup of the shifted tokens keeps 128 of the 256 rows
    and all-reduces its [32, 64] output (4,096 B: as the embedding's, its reduce-scatter and the block's
    first all-gather); the concatenation [32, 128] is all-gathered from the ranks' 16 tokens (8,192 B)
    into eh_proj, whose [32, 32] output is all-gathered along the hidden width to [32, 64] (4,096 B); the
    block's two all-reduces after the output projection and the shared expert (4,096 B each). Backward:
    the all-reduces of the shared expert's input gradient (4,096 B) and of the up-projections' (the
    key-value latent's [32, 16], 1,024 B, the query latent's [32, 32], 2,048 B), then the projection's
    two gathers' gradients, reduce-scatters of 4,096 B (for the all-gather along the sequence that the
    scatter after the gather reverses to) and 8,192 B (the concatenation's gradient, summed over the
    ranks)."""
    sample = S * H * 2
    assert collectives(module.graph) == [
        ("AllReduce", sample), ("AllGather", 2 * sample), ("AllGather", sample), ("AllReduce", sample),
        ("AllReduce", sample),
    ]  # fmt: skip
    assert collectives(module.backward) == [
        ("AllReduce", sample), ("AllReduce", S * 16 * 2), ("AllReduce", S * 32 * 2),
        ("ReduceScatter", sample), ("ReduceScatter", 2 * sample),
    ]  # fmt: skip


PAIR = System("pair", 2, 4, (80e9,), (NetworkTier(2, 1e9, 1e-6, 1e-5),))
"""Two devices on one tier of 1 GB/s, 1 us a step and 10 us a call."""


def test_an_all_gather_sends_half_an_all_reduce_by_hand(module: Any) -> None:
    """At microbatch 2 the concatenation's gather moves 2 x 8,192 B and each device sends the half it
    does not hold, 8,192 B: 8.192 us at 1 GB/s + 1 step of 1 us + 10 us; the output's gather 2 x 4,096 B,
    4,096 B sent (15.096 us), half of what the all-reduce of a tensor as large sends (2 x (2 - 1) / 2 x
    8,192 = 8,192 B in 2 steps: 20.192 us). Backward the reduce-scatters send as much as the gathers."""
    for graph, backward in ((module.graph, False), (module.backward, True)):
        table = op_table(graph, Split(2, backward, sequence_parallel=2))
        gathers = np.flatnonzero(table.kind == CostKind.ALL_GATHER)
        assert sorted(table.collective_bytes[gathers].tolist()) == [8192.0, 16384.0]
        assert sorted(sent_bytes(table, PAIR)[gathers].tolist()) == [4096.0, 8192.0]
        latency_s = sorted(network_latency_s(table, PAIR)[gathers].tolist())
        assert latency_s == pytest.approx([4.096e-6 + 11e-6, 8.192e-6 + 11e-6], rel=1e-12)
    reduces = np.flatnonzero(op_table(module.graph, Split(2)).kind == CostKind.ALL_REDUCE)
    reduced_s = network_latency_s(op_table(module.graph, Split(2)), PAIR)[reduces]
    assert reduced_s.tolist() == pytest.approx([8.192e-6 + 12e-6] * 3, rel=1e-12)


MODULE_PARAMETERS = 46_960
"""The module's weights on one device at t = 2, ep 2: the embedding's copy 128 x 64 (half the
vocabulary), the norms enorm, hnorm and the final one 3 x 64, eh_proj 128 x 32 (half its columns): 8,192
+ 192 + 4,096; the block's, as the MoE block's in tests/passes/test_moe_tensor_parallel.py: its norms
64 + 64 + 32 + 16, the down-projections 32 x 64 + 24 x 64 whole, the up-projections 32 x 32 + 32 x 16
and the output projection 64 x 16 (half each), the router 8 x 64, 4 of the 8 experts 4 x (64 x 64 +
64 x 32) and the shared expert's half 3 x 16 x 64: 176 + 3,584 + 2,560 + 512 + 24,576 + 3,072 =
34,480."""


def test_its_weights_per_device_by_hand(module: Any) -> None:
    """`MODULE_PARAMETERS` in bf16: 93,920 B, 49,152 B of them the experts'; Adam's state 6 B a weight
    byte."""
    block = 176 + 3_584 + 2_560 + 512 + 24_576 + 3_072
    assert block == 34_480 and 8_192 + 192 + 4_096 + block == MODULE_PARAMETERS
    memory = module.memory
    assert memory.parameter_count == MODULE_PARAMETERS
    assert (memory.parameter_bytes, memory.expert_parameter_bytes) == (93_920, 49_152)
    assert memory.optimizer_state_bytes == 6 * 93_920


PLAN = (
    "model=deepseek_v3", *(f"model.hf_config.{k}={v}" for k, v in TINY_MLA.hf_config.items()),
    f"model.seq_len={S}", "model.baseline={pp: 2, dp: 4, tp: 2}", "model.tp_widths=[2]", "hw=tpuv4",
    "system=dgx_a100", "system.devices=16", "system.global_batch=32", "train.optimizer=adam",
    "tracking=none", "plan.tp=2", "plan.pp=2", "plan.dp=4", "plan.ep=2", "plan.microbatch=2",
    "plan.recompute=full", "plan.sequence_parallel=true", "train.sequence_parallel=[true]",
)  # fmt: skip
"""The tiny DeepSeek-V3 on 16 devices: tp 2 x pp 2 x dp 4 with sequence parallelism, ep 2."""


def test_phazec_plan_puts_it_on_the_last_stage_at_tp_2(cache_dir: Path) -> None:
    """The last stage holds the MoE block, the module and the head; its weights grow by the module's
    `MODULE_PARAMETERS`, 2 bytes each, and its iteration takes longer."""
    cache = f"cache_dir={cache_dir}"
    plain, mtp = (
        predict_plan(settings_from_config(compose_config(*PLAN, f"model.mtp_layers={n}", cache)))
        for n in (0, 1)
    )
    assert (plain.layers_per_stage, mtp.layers_per_stage) == ((2, 2), (2, 3))
    assert plain.memory.stage == mtp.memory.stage == 1
    assert mtp.memory.weights_bytes - plain.memory.weights_bytes == 2 * MODULE_PARAMETERS
    assert mtp.fits and mtp.time_per_batch_s > plain.time_per_batch_s
    assert mtp.breakdown.total_s == pytest.approx(mtp.time_per_batch_s, rel=1e-12)


@pytest.mark.slow  # a search on the TPUv4 design
def test_phazec_plan_and_phazec_give_the_module_at_tp_2_the_same_time(
    cache_dir: Path, tmp_path: Path
) -> None:
    """`PLAN` with the module: the same time to the bit from `phazec-plan` and from the search's fixed
    plan (the C++ DP's model)."""
    from phazec.commands.search import run_search
    from phazec.config.settings import tpuv4_space

    plan = (*PLAN, "model.mtp_layers=1", f"cache_dir={cache_dir}")
    report = predict_plan(settings_from_config(compose_config(*plan)))
    search = compose_config(
        *plan, "train.ep=2", "train.microbatch=[2]", "train.recompute=[full]",
        "train.last_stage_recomputes=true", "train.optimizer_step=true", "system.hbm_gb=[80]",
        "search.workers=1",
    )  # fmt: skip
    result = run_search(settings_from_config(search), tmp_path / "search", tpuv4_space())
    assert result["baselines"]["found_design_megatron_plan"]["time_per_batch_s"] == report.time_per_batch_s
    assert result["plan"]["tp"] == 2
