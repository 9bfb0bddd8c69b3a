"""RMSNorm and rotary-embedding chains as one kernel each (`phazec.passes.norm_rope`): hand-built chains
by hand, the chains the pass must leave alone, and Llama 2's exported norms and rotary embeddings.

The toy chains are written as the exporter writes Hugging Face's, s = 6 tokens of h = 8 in bf16:
RMSNorm y = w * cast(xf * 1 / sqrt(mean(xf^2) + eps)) with xf = cast(x), and the rotary embedding
y = q cos + concat(-q2, q1) sin of a = 2 heads of d = 4, q1 and q2 the halves of each head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from phazec.config.settings import typed
from phazec.cost.ops import VectorClass, vector_class
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.ir.core import Graph, LayerKind, Model
from phazec.ir.ops import flops
from phazec.passes.norm_rope import RMS_NORM, ROTARY, NormRope
from phazec.passes.pipeline import GraphSettings, training_pipeline
from phazec.passes.training import rows_at
from tests.conftest import compose_config
from tests.passes.test_block import BlockBuilder, block_model

S, H, A, D = 6, 8, 2, 4
CHAIN_TYPES = {"Pow", "ReduceMean", "Reciprocal", "Neg"}
"""Op types of the chains' steps that no other op of Llama 2 has (the attention scale's is a Sqrt)."""


def rms_chain(
    cast: bool = True,
    leaving: str = "",
    mean_axis: int = -1,
    residual: bool = False,
    fp32_scale: bool = False,
) -> Graph:
    """The toy chain; `leaving` names a step's result that also leaves the layer, `mean_axis` the axis
    the mean reduces, `residual` adds the norm's input to its result (the input is read outside), and
    `fp32_scale` scales by the weight cast to fp32 and casts the product back (GPT-OSS's RMSNorm)."""
    g = BlockBuilder()
    x = g.tensor("x", (1, S, H))
    g.tensor("w", (H,), None)
    for name in ("two", "eps"):
        g.tensor(name, (), None, "float32")
    xf = g.op("Cast", (x,), "xf", (1, S, H), to=1) if cast else x
    squares = g.op("Pow", (xf, "two"), "squares", (1, S, H))
    mean_shape = (1, S, 1) if mean_axis == -1 else (1, 1, H)
    mean = g.op("ReduceMean", (squares,), "mean", mean_shape, keepdims=1)
    root = g.op("Sqrt", (g.op("Add", (mean, "eps"), "shifted", mean_shape),), "root", mean_shape)
    normed = g.op("Mul", (xf, g.op("Reciprocal", (root,), "inverse", mean_shape)), "normed", (1, S, H))
    if fp32_scale:
        wf = g.op("Cast", ("w",), "wf", (H,), to=1)
        y = g.op("Cast", (g.op("Mul", (wf, normed), "scaled", (1, S, H)),), "y", (1, S, H), to=16)
    else:
        back = g.op("Cast", (normed,), "back", (1, S, H), to=16) if cast else normed
        y = g.op("Mul", ("w", back), "y", (1, S, H))
    if residual:
        y = g.op("Add", (x, y), "sum", (1, S, H))
    outputs = [y, leaving] if leaving else [y]
    fp32 = ("xf", "squares", "mean", "shifted", "root", "inverse", "normed", "wf", "scaled") if cast else ()
    tensors = {n: replace(t, dtype="float32") if n in fp32 else t for n, t in g.tensors.items()}
    return Graph(tensors, g.ops, inputs=[x], weights=["w"], constants=["two", "eps"], outputs=outputs)


def rope_chain(leaving: str = "", swapped: bool = False) -> Graph:
    """The toy rotary embedding of q [1, a, s, d]; `leaving` names a step's result that also leaves the
    layer, and `swapped` concatenates the halves without the swap (-q1, q2), not a rotation."""
    g = BlockBuilder()
    q = g.tensor("q", (1, A, S, D))
    for table in ("cos", "sin"):
        g.tensor(table, (1, 1, S, D), None)
    for bound in ("lo", "mid", "hi", "axis"):
        g.tensor(bound, (1,), None, "int64")
    half = (1, A, S, D // 2)
    first = g.op("Slice", (q, "lo", "mid", "axis"), "q1", half)
    second = g.op("Slice", (q, "mid", "hi", "axis"), "q2", half)
    turned = (
        (g.op("Neg", (first,), "neg", half), second)
        if swapped
        else (g.op("Neg", (second,), "neg", half), first)
    )
    halves = g.op("Concat", turned, "halves", (1, A, S, D), axis=-1)
    direct = g.op("Mul", (q, "cos"), "direct", (1, A, S, D))
    y = g.op("Add", (direct, g.op("Mul", (halves, "sin"), "rotated", (1, A, S, D))), "y", (1, A, S, D))
    outputs = [y, leaving] if leaving else [y]
    constants = ["cos", "sin", "lo", "mid", "hi", "axis"]
    return Graph(g.tensors, g.ops, inputs=[q], weights=[], constants=constants, outputs=outputs)


def fused(graph: Graph) -> Graph:
    return NormRope(fused=True)(block_model(graph)).model.classes[0].graph


@pytest.mark.parametrize("cast", [True, False])
def test_an_exported_rms_norm_becomes_one_kernel(cast: bool) -> None:
    chain = rms_chain(cast)
    (op,) = fused(chain).ops
    assert (op.op_type, op.inputs, op.outputs) == (RMS_NORM, ("x", "w"), ("y",))
    # The input also read by a residual add: the chain from it is fused, the add stays.
    with_residual = fused(rms_chain(cast, residual=True))
    assert [(o.op_type, o.inputs) for o in with_residual.ops] == [(RMS_NORM, ("x", "w")), ("Add", ("x", "y"))]
    assert vector_class(op.op_type) is VectorClass.LAYERNORM
    # Op by op: the casts, square, mean, product and weight product on s h elements, the epsilon, root
    # and reciprocal on s; fused: 5 FLOPs per element (square, mean, rsqrt, normalise, scale).
    before = sum(flops(o, chain) for o in chain.ops)
    assert before == (6 if cast else 4) * S * H + 3 * S
    assert flops(op, fused(chain)) == 5 * S * H == 240


def test_gpt_oss_rms_norm_scaled_in_fp32_becomes_one_kernel() -> None:
    """GPT-OSS scales by its weight cast up to fp32 and casts the product back: the weight's cast and the
    cast back join the chain, and the one op reads the input and the weight itself."""
    (op,) = fused(rms_chain(fp32_scale=True)).ops
    assert (op.op_type, op.inputs, op.outputs) == (RMS_NORM, ("x", "w"), ("y",))


@pytest.mark.parametrize(
    "chain",
    [rms_chain(leaving="mean"), rms_chain(leaving="inverse"), rms_chain(mean_axis=1)],
    ids=["mean leaves the layer", "reciprocal leaves the layer", "mean over the sequence"],
)
def test_a_chain_read_elsewhere_or_reduced_over_another_axis_stays(chain: Graph) -> None:
    assert fused(chain) == chain


def test_unfused_leaves_the_model_as_it_is() -> None:
    model = block_model(rms_chain())
    result = NormRope()(model)
    assert result.model is model and not result.modified


def test_the_fused_norm_backward_reads_its_input_and_weight_alone() -> None:
    model, _ = training_pipeline(1, GraphSettings(fuse_norm_rope=True)).run(block_model(rms_chain()))
    cls = model.classes[0]
    assert cls.backward is not None and cls.memory is not None
    (grad,) = cls.backward.ops
    assert grad.op_type == RMS_NORM and {"x", "w"} <= set(grad.inputs)
    assert [cls.backward.tensors[o].shape for o in grad.outputs] == [(1, S, H), (H,)]
    # The stash is the bf16 input: 2 bytes x s x h per sample; the chain kept the fp32 statistics too.
    assert cls.memory.stash_per_sample_bytes == 2 * S * H == 96
    unfused, _ = training_pipeline(1).run(block_model(rms_chain()))
    assert unfused.classes[0].memory is not None
    assert unfused.classes[0].memory.stash_per_sample_bytes == 96 + 4 * S


def test_an_exported_rotary_embedding_becomes_one_kernel() -> None:
    chain = rope_chain()
    (op,) = fused(chain).ops
    assert (op.op_type, op.inputs, op.outputs) == (ROTARY, ("q", "cos", "sin"), ("y",))
    assert vector_class(op.op_type) is VectorClass.ARITHMETIC
    # Op by op: two products and a sum on a s d elements, the negation on half; fused: 3 per element.
    n = A * S * D
    assert sum(flops(o, chain) for o in chain.ops) == 3 * n + n // 2
    assert flops(op, fused(chain)) == 3 * n == 144
    model, _ = training_pipeline(1, GraphSettings(fuse_norm_rope=True)).run(block_model(chain))
    backward = model.classes[0].backward
    assert backward is not None
    (grad,) = [g for g in backward.ops if g.op_type == ROTARY]
    assert {"cos", "sin"} <= set(grad.inputs)
    assert [backward.tensors[o].shape for o in grad.outputs] == [(1, A, S, D)]


@pytest.mark.parametrize(
    "chain",
    [rope_chain(leaving="neg"), rope_chain(leaving="direct"), rope_chain(swapped=True)],
    ids=["negation leaves the layer", "product leaves the layer", "halves not swapped"],
)
def test_a_rotation_read_elsewhere_or_not_a_rotation_stays(chain: Graph) -> None:
    assert fused(chain) == chain


def test_llama_runs_each_norm_and_rotary_embedding_as_one_kernel(lowered: Callable[[str], Model]) -> None:
    """Llama 2 7B (s = 4096, h = 4096): two norms and two rotary embeddings (Q and K) per block, one
    norm before the head. Each fused norm had 6 s h + 3 s FLOPs against the kernel's 5 s h, and kept
    its fp32 statistics (4 s bytes) besides the bf16 input the kernel's backward reads; each rotary
    embedding had 3.5 s h against 3 s h, and six one-element casts of its slices' bounds."""
    model = lowered("llama2_7b")
    s = h = 4096
    plain, _ = training_pipeline(1, GraphSettings(optimizer="adam")).run(model)
    fused_model, _ = training_pipeline(1, GraphSettings(optimizer="adam", fuse_norm_rope=True)).run(model)
    counts = {
        model.layers[cls.members[0]].kind: (
            sum(op.op_type == RMS_NORM for op in cls.graph.ops),
            sum(op.op_type == ROTARY for op in cls.graph.ops),
        )
        for cls in fused_model.classes
    }
    assert counts == {LayerKind.EMBEDDING: (0, 0), LayerKind.BLOCK: (2, 2), LayerKind.HEAD: (1, 0)}
    assert not any(op.op_type in CHAIN_TYPES for cls in fused_model.classes for op in cls.graph.ops)
    microbatch = 2
    for before, after in zip(rows_at(plain, microbatch), rows_at(fused_model, microbatch), strict=True):
        norms, ropes = counts[LayerKind(after.kind)]
        saved = norms * microbatch * (s * h + 3 * s) + ropes * (microbatch * s * h // 2 + 6)
        assert before.forward.flops - after.forward.flops == saved
        # Kernels: a norm's nine in one; a rotation's four vector ops in one, and its six casts gone.
        assert before.forward.kernels - after.forward.kernels == norms * 8 + ropes * 9
        assert after.forward.gemm_flops == before.forward.gemm_flops
        assert after.backward.gemm_flops == before.backward.gemm_flops
        assert before.memory.stash_per_sample_bytes - after.memory.stash_per_sample_bytes == norms * 4 * s


@pytest.mark.parametrize("arch", ["MistralForCausalLM", "Qwen2ForCausalLM"])
def test_grouped_query_architectures_fuse_alike(arch: str, cache_dir: Path) -> None:
    """Two tiny blocks with 8 query heads and 2 key-value heads (Qwen2 with QKV biases): each block's two
    norms and its Q and K rotations (K with its 2 heads) fuse, as Llama's do."""
    dims = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 256}  # fmt: skip
    overrides = [f"model.hf_config.{key}={value}" for key, value in dims.items()]
    cfg = compose_config(
        "model=llama2_7b", f"model.arch={arch}", f"model.name={arch}", "model.seq_len=256", *overrides
    )
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    model = load_model(model_cfg, cache_dir)
    fused_model = NormRope(fused=True)(model).model
    counts = [
        tuple(sum(op.op_type == t for op in cls.graph.ops) for t in (RMS_NORM, ROTARY))
        for cls in fused_model.classes
    ]
    assert counts == [(0, 0), (2, 2), (1, 0)]
    (block,) = [cls.graph for cls in fused_model.classes if cls.count == 2]
    rotated = [block.tensors[op.outputs[0]].shape for op in block.ops if op.op_type == ROTARY]
    assert rotated == [(1, 8, 256, 32), (1, 2, 256, 32)]


@pytest.mark.parametrize(
    ("hw", "fuses"), [("a100", True), ("h100", True), ("v100", True), ("tpu_area", False)]
)
def test_gpu_presets_fuse_norm_rope_and_the_template_keeps_phazes_steps(hw: str, fuses: bool) -> None:
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config(f"hw={hw}").hw, "hw")))
    assert designs.device.fuse_norm_rope is fuses
