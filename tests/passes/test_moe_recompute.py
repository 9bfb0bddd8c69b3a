"""A MoE block's pre-router norm and routed experts' activation rerun by selective recompute
(`phazec.passes.memory.moe_pre_norm` and `expert_activation`; Megatron-Core's `recompute_modules`
`layernorm` and `moe_act`, `Training.recompute_layernorm` and `recompute_moe_act`): on a tiny
DeepSeek-V3 and through `phazec-plan`."""

from pathlib import Path
from typing import Any

import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.frontend import load_model
from phazec.passes.memory import expert_activation, megatron_bytes, moe_pre_norm, selective_ops
from phazec.passes.pipeline import GraphSettings, training_graphs
from tests.conftest import compose_config, refused_before_export
from tests.passes.test_up_projection import TINY_MLA, two_blocks

H = TINY_MLA.hf_config["hidden_size"]
F = TINY_MLA.hf_config["moe_intermediate_size"]
K = TINY_MLA.hf_config["num_experts_per_tok"]
S = TINY_MLA.seq_len


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lowered = load_model(TINY_MLA, tmp_path_factory.mktemp("moe_recompute"))
    settings = {"attention": "flash", "causal": True, "optimizer": "adam"}
    return {
        fused: training_graphs(lowered, [1], GraphSettings(**settings, fuse_norm_rope=fused))[1]  # type: ignore[arg-type]
        for fused in (False, True)
    }


@pytest.mark.parametrize("fused", [False, True])
def test_the_moe_blocks_norm_and_expert_activation_by_hand(tiny: Any, fused: bool) -> None:
    """The MoE block's experts keep, for the backward pass, their gate's and up's outputs (SiLU's and the
    product's inputs), the product, and the product scaled by the routing weights (down's input), each
    S k f per sample: 4 x 32 x 2 x 32 x 2 bytes; rerunning the activation drops them and keeps the first
    products' output and the routing weights. The norm before the router (one op when fused, as
    Transformer Engine's `TENorm`) writes its output, which the shared expert's products read, and its
    fp32 copy, which Hugging Face's DeepSeek router reads: S h (2 + 4) bytes; written out step by step
    the norm is left alone. In FP8 down's input and the norm's output were one-byte copies: S k f and
    S h bytes less to drop. The dense block and the other layers rerun neither."""
    model = tiny[fused]
    blocks = {layer.name: model.classes[layer.cls] for layer in model.layers}
    moe = blocks["block.1"]
    memory = moe.memory
    act, norm = memory.rerun("moe_act"), memory.rerun("layernorm")
    assert act.per_sample_bytes == 4 * S * K * F * 2 == 16_384
    assert act.fp8_per_sample_bytes == -S * K * F
    assert (norm.per_sample_bytes, norm.fp8_per_sample_bytes) == ((S * H * 6, -S * H) if fused else (0, 0))
    plain, both = (megatron_bytes(memory, 3, 1, modules=m) for m in ((), {"layernorm", "moe_act"}))
    assert plain.selective_bytes - both.selective_bytes == 3 * (act.per_sample_bytes + norm.per_sample_bytes)
    low = [megatron_bytes(memory, 1, 1, low_precision=True, modules=m) for m in ((), {"moe_act"})]
    assert low[0].selective_bytes - low[1].selective_bytes == 4 * S * K * F * 2 - S * K * F
    graph = moe.graph
    again = {graph.ops[i].op_type for i in expert_activation(graph).ops}
    assert {"Sigmoid", "Mul"} <= again and not again & {"MatMul", "Gemm", "AllToAll"}
    assert [
        graph.ops[i].op_type
        for i in moe_pre_norm(graph).ops
        if graph.ops[i].op_type not in ("Reshape", "Cast")
    ] == (["RMSNormalization"] if fused else [])
    rerun = set(expert_activation(graph).ops) | set(moe_pre_norm(graph).ops)
    assert rerun <= set(selective_ops(graph, S, {"layernorm", "moe_act"}))
    assert not rerun & set(selective_ops(graph, S))
    for name in ("embedding", "block.0", "head"):
        assert blocks[name].memory.rerun("moe_act").per_sample_bytes == 0
        assert blocks[name].memory.rerun("layernorm").per_sample_bytes == 0


def test_phazec_plan_keeps_less_and_reruns_the_norm_and_the_experts_activation(cache_dir: Path) -> None:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens on one stage of 8 H100s (ep 8): each
    device's 32 experts hold 256 x 8 token copies (balanced), so rerunning their activation keeps 4 x 2048
    x 2048 x 2 bytes less, and rerunning the norm before the router 256 x 7168 x (2 + 4) less (one
    microbatch in flight); both run again, elementwise work that adds time."""
    plain, both = (
        predict_plan(
            settings_from_config(
                compose_config(
                    *two_blocks(cache_dir), f"plan.recompute_layernorm={on}", f"plan.recompute_moe_act={on}"
                )
            )
        )
        for on in ("false", "true")
    )
    dropped = 4 * 256 * 8 * 2048 * 2 + 256 * 7168 * 6
    assert plain.memory.activation_stash_bytes - both.memory.activation_stash_bytes == dropped
    assert plain.breakdown.recompute_s == 0 < both.breakdown.recompute_s
    assert plain.time_per_batch_s < both.time_per_batch_s


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=llama2_7b", "plan.recompute=selective", "plan.recompute_moe_act=true"),
            r"^plan.recompute_moe_act=true reruns a Mixture-of-Experts block's routed experts' activation, "
            r"but model 'llama2_7b' has no routed experts .*: set plan.recompute_moe_act=false\.$",
        ),
        (
            ("model=qwen3_30b_a3b", "train.recompute=[full]", "train.recompute_layernorm=true"),
            r"^train.recompute_layernorm=true extends selective recompute, but train.recompute is \['full'\]",
        ),
    ],
)
def test_rerunning_moe_modules_where_they_cannot_apply_is_refused(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    refused_before_export(overrides, message, tmp_path)
