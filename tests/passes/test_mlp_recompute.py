"""A dense MLP rerun by selective recompute (`phazec.passes.memory.dense_mlp`, `Training.recompute_mlp`,
Megatron-Core's `recompute_modules` `mlp`): on the GPT toy block and a tiny DeepSeek-V3."""

from pathlib import Path
from typing import Any

import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.frontend import load_model
from phazec.ir.core import OpKind
from phazec.ir.ops import gemm_dims
from phazec.passes.memory import dense_mlp, megatron_bytes, selective_ops
from phazec.passes.pipeline import GraphSettings, training_graphs
from tests.conftest import compose_config, refused_before_export
from tests.passes.test_block import F, H, S, trained
from tests.passes.test_up_projection import TINY_MLA, two_blocks

FFN = TINY_MLA.hf_config["intermediate_size"]
TINY_S = TINY_MLA.seq_len


@pytest.mark.parametrize("width", [1, 2])
def test_the_gpt_mlp_drops_its_two_wide_activations(width: int) -> None:
    """Korthikanti's MLP keeps 2sh (fc's input), 8sh/t (fc's output, the GELU's input), 8sh/t (the GELU's
    output, fc2's input) and sh (fc2's dropout mask) a sample. Rerunning the MLP keeps fc's input and the
    mask, which follows fc2 outside the MLP: 16sh/t bytes less; in FP8 fc2's input was a one-byte copy,
    so 12sh/t less there. It runs fc, the GELU chain and fc2 again: 2 x 2 s h F / t FLOPs of products."""
    cls = trained(width).classes[0]
    memory = cls.memory
    assert memory is not None
    assert memory.mlp_per_sample_bytes == 16 * S * H // width == {1: 768, 2: 384}[width]
    assert memory.mlp_fp8_per_sample_bytes == -4 * S * H // width
    plain, mlp = (megatron_bytes(memory, 3, 1, modules=m) for m in ((), {"mlp"}))
    assert plain.selective_bytes - mlp.selective_bytes == 3 * 16 * S * H // width
    assert (plain.stash_bytes, plain.checkpoint_bytes) == (mlp.stash_bytes, mlp.checkpoint_bytes)
    low = [megatron_bytes(memory, 1, 1, low_precision=True, modules=m) for m in ((), {"mlp"})]
    assert low[0].selective_bytes - low[1].selective_bytes == 12 * S * H // width
    graph = cls.graph
    again = dense_mlp(graph).ops
    products = [graph.ops[i] for i in again if graph.ops[i].kind in (OpKind.GEMM, OpKind.FUSED)]
    assert sum(gemm_dims(op, graph).flops for op in products) == 2 * 2 * S * H * F // width
    assert {graph.ops[i].op_type for i in again} >= {"Erf"}
    assert set(again) <= set(selective_ops(graph, S, {"mlp"}))
    assert not set(again) & set(selective_ops(graph, S))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lowered = load_model(TINY_MLA, tmp_path_factory.mktemp("mlp"))
    return training_graphs(lowered, [1], GraphSettings(attention="flash", causal=True, optimizer="adam"))[1]


def test_a_deepseek_dense_block_reruns_its_swiglu_and_a_moe_block_nothing(tiny: Any) -> None:
    """The dense block's SwiGLU keeps its gate's and up's outputs and their product (fp down's input) for
    the backward pass, 3 x 32 tokens x 128 x 2 bytes a sample; rerun, only its input is kept. Megatron-
    Core's `mlp` module leaves MoE layers alone, and the head's output layer is no MLP."""
    names = [layer.name for layer in tiny.layers]
    assert names == ["embedding", "block.0", "block.1", "head"]
    figures = {name: tiny.classes[tiny.layers[i].cls] for i, name in enumerate(names)}
    dense = figures["block.0"]
    assert dense.memory.mlp_per_sample_bytes == 3 * TINY_S * FFN * 2 == 24_576
    assert dense.memory.mlp_fp8_per_sample_bytes == -TINY_S * FFN  # down's input, as its FP8 copy
    again = [dense.graph.ops[i] for i in dense_mlp(dense.graph).ops]
    gemms = [op for op in again if op.kind in (OpKind.GEMM, OpKind.FUSED)]
    assert sum(gemm_dims(op, dense.graph).flops for op in gemms) == 3 * 2 * TINY_S * 64 * FFN
    for name in ("embedding", "block.1", "head"):
        assert dense_mlp(figures[name].graph).ops == ()
        assert figures[name].memory.mlp_per_sample_bytes == 0


def test_phazec_plan_keeps_less_and_reruns_the_dense_mlp(cache_dir: Path) -> None:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens on one stage of 8 H100s (ep 8), flash
    attention: with the dense block's MLP rerun the stage keeps its gate's, up's and their product's
    outputs less, 3 x 256 x 18,432 x 2 bytes (one microbatch in flight), and reruns it (time, HFU)."""
    plain, mlp = (
        predict_plan(settings_from_config(compose_config(*two_blocks(cache_dir), f"plan.recompute_mlp={on}")))
        for on in ("false", "true")
    )
    assert plain.memory.activation_stash_bytes - mlp.memory.activation_stash_bytes == 3 * 256 * 18_432 * 2
    assert plain.breakdown.recompute_s == 0 < mlp.breakdown.recompute_s
    assert plain.hfu == plain.mfu < mlp.hfu


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=deepseek_v3", "plan.recompute_mlp=true"),
            r"^plan.recompute_mlp=true extends selective recompute, but plan.recompute is 'none': set "
            r"plan.recompute=selective, or plan.recompute_mlp=false\.$",
        ),
        (
            ("model=llama2_7b", "train.recompute=[full]", "train.recompute_mlp=true"),
            r"^train.recompute_mlp=true extends selective recompute, but train.recompute is \['full'\]: set "
            r"train.recompute=\[selective\]",
        ),
    ],
)
def test_rerunning_the_mlp_without_selective_recompute_is_refused(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    refused_before_export(overrides, message, tmp_path)
