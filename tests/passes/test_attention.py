"""Attention kernels (`hw.device.attention`) on the toy GPT-2 block of test_passes_block: the fused
op's FLOPs, bytes and latency by hand, flash attention's memory equal to selective recompute's, and the
presets' kernels.

The toy: s = 6 tokens, a = 2 heads of d = 4, bf16, so Q, K, V and O are 2 * 6 * 4 * 2 = 96 bytes per
sample and the scores 2 * 6 * 6 = 72 elements (144 bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from phazec.api import lower_config
from phazec.cli import conf_dir
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config, typed
from phazec.cost.model import MODELS, op_costs
from phazec.cost.ops import OpKind as CostKind
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, System
from phazec.ir.core import Graph, LayerKind, Model, Op, OpKind
from phazec.ir.ops import GemmDims, flash_dims, flops
from phazec.passes.attention import Attention, core_ops, is_causal
from phazec.passes.memory import megatron_bytes
from phazec.passes.pipeline import GraphSettings, training_pipeline
from phazec.predict.layer_costs import Split, op_table, op_work
from tests.commands.test_plan import TINY
from tests.conftest import compose_config
from tests.passes.test_block import S, block_model, trained

SYSTEM = System("one", 1, 1, (32e9,), (NetworkTier(1, 1e9, 0.0),))


def with_kernel(kernel: str, width: int = 1, causal: bool = True) -> Model:
    model, _ = training_pipeline(width, GraphSettings(attention=kernel, causal=causal)).run(block_model())
    return model


def only(graph: Graph, op_type: str) -> Op:
    (op,) = [op for op in graph.ops if op.op_type == op_type]
    return op


def score_tensors(graph: Graph) -> set[str]:
    """Tensors of score shape [b, a, s, s] an op reads or writes."""
    names = {n for op in graph.ops for n in (*op.inputs, *op.outputs) if n}
    return {n for n in names if len(graph.tensors[n].shape) == 4 and graph.tensors[n].shape[-2:] == (S, S)}


def test_flash_attention_by_hand() -> None:
    cls = with_kernel("flash").classes[0]
    assert cls.backward is not None
    forward, backward = only(cls.graph, "FlashAttention"), only(cls.backward, "FlashAttentionGrad")
    # QK^T and AV: 2 products of 2 * 6 * 4 * 6 MACs per sample; the backward recomputes QK^T: 5.
    assert flops(forward, cls.graph, 3) == 3 * 2 * (2 * 2 * 6 * 4 * 6) == 3456
    assert flops(backward, cls.backward, 3) == 5 * 3456 // 2
    # Forward reads Q, K, V and writes O (in the projection's [s, h] layout); backward reads dO, Q, K, V,
    # O and writes dQ, dK, dV. No s x s tensor is read, written or kept.
    work = op_work(forward, cls.graph, Split(1, False))
    assert (work.kind, work.bytes_read, work.bytes_written) == (CostKind.ATTENTION, 3 * 96, 96)
    grad = op_work(backward, cls.backward, Split(2, True))
    assert (grad.bytes_read, grad.bytes_written) == (2 * 5 * 96, 2 * 3 * 96)
    assert score_tensors(cls.graph) == score_tensors(cls.backward) == set()


def test_flash_tiles_skip_the_masked_half() -> None:
    # seq 300 in 128-row blocks: T = 3, 9 tiles per head and product, 6 when causal (3 * 4 / 2).
    op = Op("f", "FlashAttention", OpKind.GEMM, (), (), {"heads": 3, "seq": 300, "head_dim": 64, "causal": 1})
    assert flash_dims(op, 2) == GemmDims(2 * 2 * 3 * 6, 128, 64, 128)
    full = Op("f", "FlashAttentionGrad", OpKind.GEMM, (), (), {**op.attrs, "causal": 0})
    assert flash_dims(full, 1) == GemmDims(5 * 3 * 9, 128, 64, 128)


def test_flash_latency_by_hand() -> None:
    # 576 MACs at 108 cores * 1024 MACs per cycle * 0.8 attention utilisation (the GEMMs' 0.9 does not
    # apply), or 384 bytes at half the HBM bandwidth, whichever is longer, plus 1 us.
    device = DeviceModel(True, ((128, 128),), 0.9, 500.0, 0.5, 1e-6, "flash", attention_utilisation=0.8)
    designs = Designs.of(
        num_tc=108, tc_width=32, tc_depth=32, num_vc=108, vc_width=64, glb_bytes=32 << 20,
        clock_hz=1.41e9, hbm_bytes_per_s=[1e15, 1e6], device=device,
    )  # fmt: skip
    cls = with_kernel("flash").classes[0]
    ops = op_table(cls.graph, Split(1, False))
    i = next(i for i, op in enumerate(cls.graph.ops) if op.op_type == "FlashAttention")
    costs = op_costs(ops, designs, SYSTEM, MODELS["tiled"])
    compute_s = 576 / (108 * 1024 * 0.8 * 1.41e9)
    assert costs.all_cores_s[i].tolist() == pytest.approx([compute_s + 1e-6, 384 / 0.5e6 + 1e-6], rel=1e-12)
    assert costs.single_core_s[i, 0] == pytest.approx(108 * compute_s + 1e-6, rel=1e-12)


@pytest.mark.parametrize(("width", "microbatch"), [(1, 1), (1, 3), (2, 2)])
def test_flash_keeps_what_selective_recompute_keeps(width: int, microbatch: int) -> None:
    unfused = trained(width).classes[0].memory
    flash = with_kernel("flash", width).classes[0].memory
    assert unfused is not None and flash is not None
    selective = megatron_bytes(unfused, microbatch, 1).selective_bytes
    assert flash.stash_bytes(microbatch) == selective == {1: 1632, 2: 1056}[width] * microbatch
    assert flash.core_per_sample_bytes == 0


@pytest.mark.parametrize(("causal", "mask_bytes"), [(True, 0), (False, S * S)])
def test_fused_softmax_by_hand(causal: bool, mask_bytes: int) -> None:
    cls = with_kernel("fused_softmax", causal=causal).classes[0]
    assert cls.backward is not None
    forward, backward = only(cls.graph, "ScaleMaskSoftmax"), only(cls.backward, "ScaleMaskSoftmax")
    # Scale, mask and softmax in one pass over the 72 scores: 1 + 1 + 5 FLOPs each, one read of the
    # scores (and of the 1-byte mask unless it is causal, applied by position), one write.
    assert flops(forward, cls.graph, 2) == 2 * 7 * 72
    work = op_work(forward, cls.graph, Split(1, False))
    assert (work.kind, work.vector_elements, work.bytes_read, work.bytes_written) == (
        CostKind.VECTOR, 72, 144 + mask_bytes, 144
    )  # fmt: skip
    # Its backward reads the probabilities and their gradient and writes the scores' gradient.
    grad = op_work(backward, cls.backward, Split(1, True))
    assert (grad.bytes_read, grad.bytes_written) == (2 * 144, 144)
    # Scale, mask and their gradients are gone; QK^T, dropout and AV stay.
    types = [op.op_type for op in cls.graph.ops if set(op.outputs) & score_tensors(cls.graph)]
    assert types == ["MatMul", "ScaleMaskSoftmax", "Dropout"]


@pytest.mark.parametrize(
    ("kernel", "op_types"),
    [
        ("unfused", ["Fused", "Where", "Softmax", "Dropout", "MatMul"]),  # QK^T fused with its scale
        ("fused_softmax", ["MatMul", "ScaleMaskSoftmax", "Dropout", "MatMul"]),
        ("flash", []),  # no scores reach HBM: the kernel's backward recomputes them
    ],
)
def test_the_core_ops_are_what_selective_recompute_repeats(kernel: str, op_types: list[str]) -> None:
    graph = with_kernel(kernel).classes[0].graph
    assert [graph.ops[i].op_type for i in core_ops(graph, S)] == op_types


def test_unfused_leaves_the_model_alone_and_bad_kernels_are_named() -> None:
    model = block_model()
    result = Attention("unfused")(model)
    assert result.model is model and not result.modified
    with pytest.raises(PhazecError, match=r"hw.device.attention = 'flash2' .* unfused, fused_softmax, flash"):
        Attention("flash2")(model)


def test_preset_kernels() -> None:
    kernels = {
        name: enumerate_designs(
            hw_space_from_config(
                typed(HwConfig, OmegaConf.load(Path(conf_dir()) / "hw" / f"{name}.yaml"), "hw")
            )
        ).device.attention
        for name in ("tpuv4", "tpu_small", "tpu_area", "v100", "a100", "h100")
    }
    assert kernels == {"tpuv4": "unfused", "tpu_small": "unfused", "tpu_area": "unfused",
                       "v100": "fused_softmax", "a100": "flash", "h100": "flash"}  # fmt: skip
    assert [is_causal(a) for a in ("GPT2LMHeadModel", "LlamaForCausalLM", "BertForPreTraining")] == [
        True, True, False
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("hw", "kernel_op"), [("tpuv4", "Softmax"), ("v100", "ScaleMaskSoftmax"), ("a100", "FlashAttention")]
)
def test_setup_builds_each_presets_kernel(hw: str, kernel_op: str, cache_dir: Path) -> None:
    # The composed config's kernel reaches the training graphs of every block of a (causal) GPT-2.
    job = setup(settings_from_config(compose_config(*TINY, f"hw={hw}", f"cache_dir={cache_dir}")), widths=[1])
    model = job.evaluator.graphs[1]
    blocks = [model.classes[layer.cls].graph for layer in model.layers if layer.kind is LayerKind.BLOCK]
    assert blocks and all(sum(op.op_type == kernel_op for op in graph.ops) == 1 for graph in blocks)


def test_phazec_ir_prices_the_presets_kernel(cache_dir: Path, tmp_path: Path) -> None:
    # phazec-ir's per-device table of a GPT-2 block on a100 (flash) keeps per sample what selective
    # recompute keeps of the same block unfused (tpuv4); the kernel scales the scores itself, so the
    # exporter's 2-byte scale (sqrt of 1/sqrt(d), applied to Q and K) is not kept either.
    blocks = {}
    for hw in ("tpuv4", "a100"):
        report, _ = lower_config(compose_config(*TINY, f"hw={hw}", f"cache_dir={cache_dir}"), tmp_path / hw)
        blocks[hw] = next(row for row in report["training"]["layers"] if row["kind"] == "block")
    unfused, flash = blocks["tpuv4"], blocks["a100"]
    unfused_memory, flash_memory = unfused["memory"], flash["memory"]
    core = unfused_memory["core_per_sample_bytes"]
    assert core > 0 == flash_memory["core_per_sample_bytes"]
    assert flash_memory["stash_per_sample_bytes"] == unfused_memory["stash_per_sample_bytes"] - core
    assert flash_memory["stash_fixed_bytes"] == unfused_memory["stash_fixed_bytes"] - 2


def test_an_attention_core_with_sinks_runs_as_flash(cache_dir: Path) -> None:
    """GPT-OSS's attention (exported eagerly): a sink logit per head concatenated to each row of scores
    ([b, a, s, s + 1]), their row maximum subtracted, the softmax, the sink's column sliced off. Under
    `flash` the whole chain from QK^T to AV is one FlashAttention op: no s x s or s x (s + 1) tensor
    is read or written, and the block keeps its sink parameters."""
    from phazec.frontend import load_model
    from phazec.frontend.schema import ModelConfig

    s = 64
    hf = {"hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 128,
          "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}  # fmt: skip
    model = load_model(
        ModelConfig(name="tiny_oss", arch="GptOssForCausalLM", hf_config=hf, seq_len=s), cache_dir
    )
    block = model.classes[model.layers[1].cls]
    assert any(t.shape[-2:] == (s, s + 1) for t in block.graph.tensors.values())
    flashed = Attention("flash", causal=True)(model).model.classes[model.layers[1].cls]
    graph = flashed.graph
    assert [op.op_type for op in graph.ops].count("FlashAttention") == 1
    touched = [graph.tensors[n].shape for op in graph.ops for n in (*op.inputs, *op.outputs) if n]
    assert not any(len(shape) == 4 and shape[-2] == s and shape[-1] >= s for shape in touched)
    assert any(w.endswith("self_attn.sinks") for w in graph.weights)


def test_a_flash_kernel_reads_grouped_query_keys_and_values_unrepeated(cache_dir: Path) -> None:
    """A tiny Llama block (s = 256, 8 query heads of d = 32) with 2 key-value heads against the same block
    with 8: under flash attention the kernel reads K and V with their own heads (Hugging Face's
    repeat_kv expansion, and its gradient's sum over the repeats, are gone), so the block keeps
    2 tensors x (8 - 2) heads x 256 x 32 x 2 bytes = 196,608 bytes a sample fewer than the block with
    8 key-value heads, whose K and V are 8 heads wide. Unfused, the repeated copies stay, as eager
    PyTorch writes them."""
    from phazec.frontend import load_model
    from phazec.frontend.schema import ModelConfig
    from phazec.passes.training import rows_at

    s, d = 256, 32
    dims = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 8,
            "vocab_size": 1000, "max_position_embeddings": s}  # fmt: skip

    def block(kv_heads: int, kernel: str) -> tuple[Graph, Graph, int]:
        overrides = [f"model.hf_config.{key}={value}" for key, value in dims.items()]
        cfg = compose_config(
            "model=llama2_7b", f"model.name=gqa{kv_heads}", f"model.hf_config.num_key_value_heads={kv_heads}",
            f"model.seq_len={s}", *overrides,
        )  # fmt: skip
        model_cfg = typed(ModelConfig, cfg.model, "model")
        assert isinstance(model_cfg, ModelConfig)
        trained, _ = training_pipeline(1, GraphSettings(attention=kernel, causal=True)).run(
            load_model(model_cfg, cache_dir)
        )
        (cls,) = [c for c in trained.classes if trained.layers[c.members[0]].kind is LayerKind.BLOCK]
        (row,) = [r for r in rows_at(trained, 1) if r.kind == LayerKind.BLOCK]
        assert cls.backward is not None
        return cls.graph, cls.backward, row.memory.stash_per_sample_bytes

    grouped, grouped_backward, grouped_stash = block(2, "flash")
    _, _, full_stash = block(8, "flash")
    flash = only(grouped, "FlashAttention")
    assert [grouped.tensors[name].numel() for name in flash.inputs] == [8 * s * d, 2 * s * d, 2 * s * d]
    assert not any(op.op_type == "Expand" for op in grouped.ops)
    assert not any(op.op_type == "ReduceSum" for op in grouped_backward.ops)
    assert full_stash - grouped_stash == 2 * (8 - 2) * s * d * 2
    unfused, _, _ = block(2, "unfused")
    assert sum(op.op_type == "Expand" for op in unfused.ops) == 2
