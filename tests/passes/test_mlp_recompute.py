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

FFN, H_TINY = TINY_MLA.hf_config["intermediate_size"], TINY_MLA.hf_config["hidden_size"]
TINY_S = TINY_MLA.seq_len


@pytest.mark.parametrize("width", [1, 2])
def test_the_gpt_mlp_drops_its_norms_output_and_its_two_wide_activations(width: int) -> None:
    """Korthikanti's MLP keeps 2sh (the second LayerNorm's output, fc's input, whole at any width), 8sh/t
    (fc's output, the GELU's input), 8sh/t (the GELU's output, fc2's input) and sh (fc2's dropout mask) a
    sample. Rerunning the MLP with its LayerNorm (Transformer Engine's LayerNormLinear) keeps the norm's
    input and the mask, which follows fc2 outside the MLP: 2sh + 16sh/t bytes less, the 2sh split t ways
    under sequence parallelism; in FP8 fc's and fc2's inputs were one-byte copies, so sh + 12sh/t less.
    It runs the norm, fc, the GELU chain and fc2 again: 2 x 2 s h F / t FLOPs of products."""
    cls = trained(width).classes[0]
    memory = cls.memory
    assert memory is not None
    assert memory.rerun("mlp").per_sample_bytes == 2 * S * H + 16 * S * H // width == {1: 864, 2: 480}[width]
    assert memory.rerun("mlp").replicated_per_sample_bytes == {1: 864, 2: 2 * S * H}[width]
    assert memory.rerun("mlp").fp8_per_sample_bytes == -S * H - 4 * S * H // width
    plain, mlp = (megatron_bytes(memory, 3, 1, modules=m) for m in ((), {"mlp"}))
    assert plain.selective_bytes - mlp.selective_bytes == 3 * (2 * S * H + 16 * S * H // width)
    assert (plain.stash_bytes, plain.checkpoint_bytes) == (mlp.stash_bytes, mlp.checkpoint_bytes)
    low = [megatron_bytes(memory, 1, 1, low_precision=True, modules=m) for m in ((), {"mlp"})]
    assert low[0].selective_bytes - low[1].selective_bytes == S * H + 12 * S * H // width
    split = [megatron_bytes(memory, 1, width, modules=m) for m in ((), {"mlp"})]
    assert split[0].selective_bytes - split[1].selective_bytes == 18 * S * H // width
    graph = cls.graph
    again = dense_mlp(graph).ops
    products = [graph.ops[i] for i in again if graph.ops[i].kind in (OpKind.GEMM, OpKind.FUSED)]
    assert sum(gemm_dims(op, graph).flops for op in products) == 2 * 2 * S * H * F // width
    assert {graph.ops[i].op_type for i in again} >= {"LayerNormalization", "Erf"}
    assert set(again) <= set(selective_ops(graph, S, {"mlp"}))
    assert not set(again) & set(selective_ops(graph, S))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lowered = load_model(TINY_MLA, tmp_path_factory.mktemp("mlp"))
    return {
        fused: training_graphs(
            lowered,
            [1],
            GraphSettings(attention="flash", causal=True, optimizer="adam", fuse_norm_rope=fused),
        )[1]
        for fused in (False, True)
    }


@pytest.mark.parametrize("fused", [False, True])
def test_a_deepseek_dense_block_reruns_its_swiglu_and_a_moe_block_nothing(tiny: Any, fused: bool) -> None:
    """The dense block's SwiGLU keeps its gate's and up's outputs and their product (down's input) for
    the backward pass, 3 x 32 tokens x 128 x 2 bytes a sample; rerun, they are dropped, and with the
    RMSNorm before it one op (`fuse_norm_rope`, Transformer Engine's) the norm's output too, 32 x 64 x 2
    (written out step by step, the norm stays and its output is kept). Megatron-Core's `mlp` module
    leaves MoE layers alone, and the head's output layer is no MLP."""
    model = tiny[fused]
    names = [layer.name for layer in model.layers]
    assert names == ["embedding", "block.0", "block.1", "head"]
    figures = {name: model.classes[model.layers[i].cls] for i, name in enumerate(names)}
    dense = figures["block.0"]
    norm = TINY_S * H_TINY * 2 if fused else 0
    assert (
        dense.memory.rerun("mlp").per_sample_bytes
        == 3 * TINY_S * FFN * 2 + norm
        == {False: 24_576, True: 28_672}[fused]
    )
    # down's input, and the norm's output when dropped, were kept as their FP8 copies
    assert dense.memory.rerun("mlp").fp8_per_sample_bytes == -TINY_S * FFN - norm // 2
    again = [dense.graph.ops[i] for i in dense_mlp(dense.graph).ops]
    gemms = [op for op in again if op.kind in (OpKind.GEMM, OpKind.FUSED)]
    assert sum(gemm_dims(op, dense.graph).flops for op in gemms) == 3 * 2 * TINY_S * 64 * FFN
    for name in ("embedding", "block.1", "head"):
        assert dense_mlp(figures[name].graph).ops == ()
        assert figures[name].memory.rerun("mlp").per_sample_bytes == 0


def test_phazec_plan_keeps_less_and_reruns_the_dense_mlp(cache_dir: Path) -> None:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens on one stage of 8 H100s (ep 8), flash
    attention: with the dense block's MLP rerun the stage keeps its gate's, up's and their product's
    outputs less, 3 x 256 x 18,432 x 2 bytes, and its RMSNorm's (one op on the H100 preset), 256 x 7168 x
    2 (one microbatch in flight), and reruns it (time, HFU)."""
    plain, mlp = (
        predict_plan(settings_from_config(compose_config(*two_blocks(cache_dir), f"plan.recompute_mlp={on}")))
        for on in ("false", "true")
    )
    dropped = 3 * 256 * 18_432 * 2 + 256 * 7168 * 2
    assert plain.memory.activation_stash_bytes - mlp.memory.activation_stash_bytes == dropped
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
