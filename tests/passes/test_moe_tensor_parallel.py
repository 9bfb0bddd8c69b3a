"""Tensor parallelism of a Mixture-of-Experts block with expert tensor parallelism 1, as Megatron-Core
runs it (`phazec.passes.tensor_parallel.moe_layout`): a tiny Qwen3-MoE at t = 2 with ep 2 on 4
devices, by hand; and the refusals."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.cost.network import sent_bytes
from phazec.cost.ops import OpKind as CostKind
from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.hw.system import NetworkTier, System
from phazec.ir.core import OpKind
from phazec.ir.ops import gemm_dims
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.layer_costs import Split, op_table
from tests.conftest import compose_config
from tests.passes.test_up_projection import TINY_MLA

S, H, HEADS, KV_HEADS, HEAD_DIM, E, TOP_K, F, VOCAB = 32, 64, 4, 2, 16, 8, 2, 32, 256
TINY = {
    "hidden_size": H, "intermediate_size": 128, "moe_intermediate_size": F, "num_hidden_layers": 2,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "num_experts": E,
    "num_experts_per_tok": TOP_K, "vocab_size": VOCAB, "max_position_embeddings": S,
    "tie_word_embeddings": False,
}  # fmt: skip
"""Two Qwen3-MoE blocks: 4 query and 2 key-value heads of 16, 8 experts of FFN 32, top-2, s = 32:
C = 32 x 2 / 8 = 8 tokens per expert and sample."""
TINY_QWEN3_MOE = ModelConfig(name="tiny_qwen3_moe", arch="Qwen3MoeForCausalLM", seq_len=S, hf_config=TINY)


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The second block's class of the tiny model at t = 2 with ep 2 (Adam)."""
    lowered = load_model(TINY_QWEN3_MOE, tmp_path_factory.mktemp("moe-tp"))
    model = training_graphs(lowered, [2], GraphSettings(expert_parallel=2, optimizer="adam"))[2]
    return model.classes[model.layers[2].cls]


def gemm_shapes(model_block: Any) -> list[tuple[int, int, int, int, str | None]]:
    """(batch, m, k, n, tp role) of each forward GEMM."""
    graph = model_block.graph
    rows = []
    for op in graph.ops:
        if op.kind is OpKind.GEMM:
            dims = gemm_dims(op, graph)
            rows.append((dims.batch, dims.m, dims.k, dims.n, op.attrs.get("tp")))
    return rows


def test_attention_splits_by_heads_and_each_rank_routes_half_the_tokens(block: Any) -> None:
    """Per device at t = 2: the query projection 64 -> 2 heads of 16, the key and value 64 -> 1 head of
    16 each (column-parallel), the context product over 2 heads (the scores' product is fused with
    their softmax by the attention pass), the output projection 32 -> 64
    (row-parallel, an all-reduce of the [32, 64] bf16 output, 4096 B a sample). The MoE layer: the
    router on the rank's s / t = 16 tokens, 16 x 64 by 64 x 8 (its weight whole); each rank permutes
    its 16 x 2 token copies, 8 experts x C / t = 4, and the dispatch over the ep 2 group leaves it
    E / ep = 4 experts of 2 x 4 = 8 tokens: the gate and up product 4 x (8 x 64 by 64 x 64), the down
    product 4 x (8 x 32 by 32 x 64), weights whole (4 experts of 64 x 64 and 64 x 32)."""
    assert gemm_shapes(block) == [
        (1, S, H, HEADS // 2 * HEAD_DIM, "column"),
        (1, S, H, KV_HEADS // 2 * HEAD_DIM, "column"),
        (1, S, H, KV_HEADS // 2 * HEAD_DIM, "column"),
        (HEADS // 2, S, S, HEAD_DIM, None),
        (1, S, HEADS // 2 * HEAD_DIM, H, "row"),
        (1, S // 2, H, E, None),
        (E // 2, 8, H, 2 * F, None),
        (E // 2, 8, F, H, None),
    ]
    graph = block.graph
    reduces = [op for op in graph.ops if op.op_type == "AllReduce"]
    assert [(op.attrs["group"], op.attrs["bytes"]) for op in reduces] == [(2, S * H * 2)]


PAIR = System("pair", 2, 4, (80e9,), (NetworkTier(2, 1e9, 0.0, 0.0),))
"""Two devices on one tier: what each sends does not depend on its figures."""


def test_all_to_alls_carry_the_ranks_own_tokens_by_hand(block: Any) -> None:
    """At microbatch 2 each rank dispatches its own 2 x 16 tokens' 2 copies, 8 experts x 4 x 2 tokens of
    64 bf16 = 8,192 B, and sends (2 - 1) / 2 of them, 4,096 B; the routing weights 8 x 8 x 1 bf16 =
    128 B (64 sent); the combine brings back the 8,192 B. Backward the same three again (at t = 1 each
    would be twice as large: every rank dispatched all s tokens)."""
    for graph, backward in ((block.graph, False), (block.backward, True)):
        table = op_table(graph, Split(2, backward, sequence_parallel=2))
        exchanges = np.flatnonzero(table.kind == CostKind.ALL_TO_ALL)
        assert sorted(table.collective_bytes[exchanges].tolist()) == [128.0, 8192.0, 8192.0]
        assert sorted(sent_bytes(table, PAIR)[exchanges].tolist()) == [64.0, 4096.0, 4096.0]


def test_expert_weights_are_whole_on_each_tensor_parallel_device(block: Any) -> None:
    """A device's weights: the layer norms 64 + 64, the query and key norms 16 + 16 (replicated), the
    query projection 64 x 32, key and value 64 x 16 each, the output projection 32 x 64 (split), the
    router 8 x 64 (replicated): 6,816 dense elements; the experts 4 x (64 x 64 + 64 x 32) = 24,576 (half
    of the 8, whole: not split by t). In bf16: 62,784 B, 49,152 B of them the experts'; Adam's state 6 B
    a weight byte."""
    memory = block.memory
    dense = 64 + 64 + 16 + 16 + 64 * 32 + 2 * 64 * 16 + 32 * 64 + 8 * 64
    experts = 4 * (64 * 64 + 64 * 32)
    assert (dense, experts) == (6_816, 24_576)
    assert memory.parameter_count == dense + experts
    assert (memory.parameter_bytes, memory.expert_parameter_bytes) == (62_784, 49_152)
    assert memory.optimizer_state_bytes == 6 * 62_784
    # In FP8 the linear layers' weights are the projections' and the experts': the norms and the
    # router's 8 x 64 stay two-byte (what `fp8_param_gather` gathers at one byte).
    linear = 64 * 32 + 2 * 64 * 16 + 32 * 64 + experts
    assert (memory.fp8_weight_bytes, memory.fp8_expert_weight_bytes) == (2 * linear, 49_152)


PLAN = (
    "model=qwen3_30b_a3b", *(f"model.hf_config.{k}={str(v).lower()}" for k, v in TINY.items()),
    f"model.seq_len={S}", "hw=h100", "system=dgx_h100", "system.devices=4", "system.global_batch=8",
    "train.optimizer=adam", "plan.tp=2", "plan.dp=2", "plan.ep=2", "plan.zero_stage=1",
    "plan.sequence_parallel=true", "tracking=none",
)  # fmt: skip


def test_phazec_plan_memory_per_device_by_hand(cache_dir: Path) -> None:
    """tp 2 x dp 2 on 4 devices, ep 2, Adam with a distributed optimizer. A device holds half the
    vocabulary of the embedding and of the output layer (vocabulary-parallel: 128 x 64 bf16 each,
    16,384 B), the final norm (128 B) and the two blocks' 62,784 B (previous test): 158,464 B of
    weights, as many of gradients. Its optimizer state (6 B a weight byte) is sharded over d = 2 for
    the 60,160 dense bytes and over the expert-data-parallel group, t d / ep = 2 x 2 / 2 = 2 devices,
    for the 98,304 expert bytes: 6 x 60,160 / 2 + 6 x 98,304 / 2 = 180,480 + 294,912 = 475,392 B (at
    t = 1 that group would be d / ep = 1 device: 589,824 B of expert state)."""
    settings = settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}"))
    report = predict_plan(settings)
    memory = report.memory
    assert (report.plan.tp, report.plan.dp, report.plan.training.ep) == (2, 2, 2)
    assert report.fits and report.breakdown.ep_communication_s > 0
    weights = 2 * 16_384 + 128 + 2 * 62_784
    assert weights == 158_464
    assert (memory.weights_bytes, memory.gradients_bytes) == (weights, weights)
    assert memory.optimizer_state_bytes == 475_392


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=qwen3_30b_a3b", "plan.tp=2"),
            r"^plan.tp=2 on the Mixture-of-Experts model 'qwen3_30b_a3b' needs sequence parallelism, which "
            r"plan.sequence_parallel=false leaves off: .* Set plan.sequence_parallel=true, or use tp 1\.$",
        ),
        (
            ("model=qwen3_30b_a3b", "model.tp_widths=[1,2]"),
            r"^model.tp_widths=\[1, 2\] on the Mixture-of-Experts model 'qwen3_30b_a3b' needs sequence "
            r"parallelism, which train.sequence_parallel=\[false\] leaves off: .* Set "
            r"train.sequence_parallel=\[true\], or use tp 1\.$",
        ),
        (
            ("model=deepseek_v3", "plan.tp=2", "plan.sequence_parallel=false"),
            r"^plan.tp=2 on the Mixture-of-Experts model 'deepseek_v3' needs sequence parallelism",
        ),
        (
            ("model=llama4_scout", "model.tp_widths=[2]", "train.sequence_parallel=[true]"),
            r"^model.tp_widths=\[2\] on model 'llama4_scout': its shared experts run on the flattened "
            r"tokens the router reads, and their split over the tensor-parallel ranks is not modelled yet",
        ),
    ],
)
def test_moe_tensor_parallelism_it_cannot_time_is_one_paragraph_before_any_work(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    base = ("hw=h100", "system=dgx_h100", "system.devices=16", "system.global_batch=64", "tracking=none")
    with pytest.raises(PhazecError, match=message) as err:
        predict_plan(settings_from_config(compose_config(*base, *overrides, f"cache_dir={tmp_path}")))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "onnx").exists()


TINY_QWEN2_MOE = ModelConfig(
    name="tiny_qwen2_moe", arch="Qwen2MoeForCausalLM", seq_len=S,
    hf_config={**{k: v for k, v in TINY.items() if k != "head_dim"}, "shared_expert_intermediate_size": 64},
)  # fmt: skip
"""The tiny blocks with Qwen2-MoE's shared expert (and its gate) on the flattened tokens."""


def test_the_pass_refuses_shared_experts_on_the_routed_tokens(tmp_path: Path) -> None:
    """Without the settings' check (the pass on its own), naming the shared expert's GEMMs."""
    lowered = load_model(TINY_QWEN2_MOE, tmp_path)
    with pytest.raises(PhazecError, match=r"the shared-expert GEMMs \[.*\] read the routed tokens"):
        training_graphs(lowered, [2], GraphSettings())


def test_latent_attention_and_shared_experts_split_as_megatron_core_splits_them(tmp_path: Path) -> None:
    """The tiny DeepSeek-V3 (`TINY_MLA`: 4 heads, query latent 32, key-value latent 16, heads of 8 + 8
    and 8; a dense block of FFN 128, then a MoE block of 8 experts of FFN 32, top-2, one shared expert)
    at t = 2, ep 2, flash attention. Per device, in each block: the query down-projection 64 -> 32 and
    the key-value one 64 -> 16 + 8 whole (duplicated); the query up-projection 32 -> 2 heads x 16, the
    key-value one 16 -> 2 heads x (8 + 8) (column-parallel); the flash kernel over 2 heads (the rotary key
    broadcast to them); the output projection 2 x 8 -> 64 (row-parallel, an all-reduce of 32 x 64 bf16,
    4,096 B a sample). The dense block's MLP 64 -> 64 (gate, up) and 64 -> 64 (down), half of 128. The
    MoE block's router on 16 tokens (its weight cast to fp32 and whole), 4 experts of 2 x 4 tokens, and
    the shared expert 64 -> 16 (gate, up), 16 -> 64 (down) with its all-reduce."""
    lowered = load_model(TINY_MLA, tmp_path)
    settings = GraphSettings(expert_parallel=2, optimizer="adam", attention="flash", causal=True)
    model = training_graphs(lowered, [2], settings)[2]
    attention = [(1, S, H, 32, None), (1, S, 32, 32, "column"), (1, S, H, 24, None), (1, S, 16, 32, "column")]
    out = (1, S, 16, H, "row")
    dense, moe = (model.classes[model.layers[i].cls] for i in (1, 2))
    assert gemm_shapes(dense)[:4] == attention and gemm_shapes(dense)[5:] == [
        out, (1, S, H, H, "column"), (1, S, H, H, "column"), (1, S, H, H, "row"),
    ]  # fmt: skip
    assert gemm_shapes(moe)[:4] == attention and gemm_shapes(moe)[5:] == [
        out, (1, S // 2, H, E, None), (E // 2, 8, H, 2 * F, None), (E // 2, 8, F, H, None),
        (1, S, H, F // 2, "column"), (1, S, H, F // 2, "column"), (1, S, F // 2, H, "row"),
    ]  # fmt: skip
    for cls in (dense, moe):
        flash = next(op for op in cls.graph.ops if op.op_type == "FlashAttention")
        assert flash.attrs["heads"] == 2
        reduces = [op.attrs["bytes"] for op in cls.graph.ops if op.op_type == "AllReduce"]
        assert reduces == [S * H * 2, S * H * 2]
