"""The training-graph passes on one small hand-built GPT-2 block: golden text, exact figures, bad input.

The block is shaped like the exporter's output (pre-LN, fused QKV Gemm split by SequenceAt, heads by
Reshape/Transpose, masked softmax, dropout, an Erf GELU) with s = 6 tokens, h = 8, a = 2 heads of d = 4
and an FFN of f = 32, in bf16 at microbatch 1 (B marks the batch axis).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from phazec.errors import PhazecError
from phazec.ir.core import AttrValue, Graph, Layer, LayerClass, LayerKind, Model, Op, OpKind, Tensor
from phazec.ir.ops import (
    ELEMENTWISE_TYPES,
    FUSED_ELEMENTWISE,
    GEMM_TYPES,
    GemmDims,
    flops,
    gemm_dims,
    kind_of,
    known_op_types,
    member_elements,
)
from phazec.ir.printer import format_graph
from phazec.ir.verify import verify_graph
from phazec.passes.autodiff import GRAD_RULES, Autodiff
from phazec.passes.fuse import Fuse, fuse_elementwise
from phazec.passes.memory import Memory, megatron_bytes, op_checkpoint
from phazec.passes.pipeline import TRAINING_PASSES, GraphSettings, training_pipeline
from phazec.passes.tensor_parallel import TensorParallel
from phazec.passes.training import graph_totals, rows_at, training_rows
from phazec.predict.layer_costs import Split, op_work

GOLDEN = Path(__file__).parent / "golden"
S, H, A, D, F = 6, 8, 2, 4, 32


class BlockBuilder:
    """Collects tensors and ops of one block graph."""

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []

    def tensor(
        self, name: str, shape: tuple[int, ...], batch: int | None = 0, dtype: str = "bfloat16"
    ) -> str:
        self.tensors[name] = Tensor(name, shape, dtype, batch)
        return name

    def op(
        self, op_type: str, inputs: tuple[str, ...], out: str, shape: tuple[int, ...], **attrs: AttrValue
    ) -> str:
        kind = kind_of(op_type)
        assert kind is not None
        self.tensor(out, shape)
        self.ops.append(Op(f"node_{out}", op_type, kind, inputs, (out,), dict(attrs)))
        return out


def gpt2_block(mlp_only: bool = False) -> Graph:
    """The toy block (or, with `mlp_only`, its MLP alone: a block the tensor-parallel pass rejects)."""
    g = BlockBuilder()
    x = g.tensor("x", (1, S, H))
    mask = g.tensor("mask", (1, 1, S, S), dtype="bool")
    weights = {
        "ln1.w": (H,), "ln1.b": (H,), "attn.w": (H, 3 * H), "attn.b": (3 * H,), "proj.w": (H, H),
        "proj.b": (H,), "ln2.w": (H,), "ln2.b": (H,), "fc.w": (H, F), "fc.b": (F,), "fc2.w": (F, H),
        "fc2.b": (H,),
    }  # fmt: skip
    for name, shape in weights.items():
        g.tensor(name, shape, None)
    constants = ["i0", "i1", "i2", "scale", "neg", "ratio", "sqrt2", "one", "half"]
    for name in constants:
        g.tensor(name, (), None, "int64" if name.startswith("i") else "bfloat16")
    res1 = x
    if not mlp_only:
        ln1 = g.op("LayerNormalization", (x, "ln1.w", "ln1.b"), "ln1", (1, S, H), axis=-1)
        ln1_2d = g.op("Reshape", (ln1,), "ln1_2d", (S, H))
        qkv = g.op("Gemm", (ln1_2d, "attn.w", "attn.b"), "qkv", (S, 3 * H))
        qkv_3d = g.op("Reshape", (qkv,), "qkv_3d", (1, S, 3 * H))
        heads = {}
        for i, part in enumerate("qkv"):
            piece = g.op("SequenceAt", (qkv_3d, f"i{i}"), part, (1, S, H))
            split = g.op("Reshape", (piece,), f"{part}4", (1, S, A, D))
            perm, shape = ((0, 2, 3, 1), (1, A, D, S)) if part == "k" else ((0, 2, 1, 3), (1, A, S, D))
            heads[part] = g.op("Transpose", (split,), f"{part}t", shape, perm=perm)
        scores = g.op("MatMul", (heads["q"], heads["k"]), "scores", (1, A, S, S))
        scaled = g.op("Mul", (scores, "scale"), "scaled", (1, A, S, S))
        masked = g.op("Where", (mask, scaled, "neg"), "masked", (1, A, S, S))
        probs = g.op("Softmax", (masked,), "probs", (1, A, S, S), axis=-1)
        drop = g.op("Dropout", (probs, "ratio"), "drop", (1, A, S, S))
        ctx = g.op("MatMul", (drop, heads["v"]), "ctx", (1, A, S, D))
        ctx_t = g.op("Transpose", (ctx,), "ctx_t", (1, S, A, D), perm=(0, 2, 1, 3))
        ctx_2d = g.op("Reshape", (ctx_t,), "ctx_2d", (S, H))
        proj = g.op("Gemm", (ctx_2d, "proj.w", "proj.b"), "proj", (S, H))
        proj_3d = g.op("Reshape", (proj,), "proj_3d", (1, S, H))
        proj_drop = g.op("Dropout", (proj_3d, "ratio"), "proj_drop", (1, S, H))
        res1 = g.op("Add", (proj_drop, x), "res1", (1, S, H))
    ln2 = g.op("LayerNormalization", (res1, "ln2.w", "ln2.b"), "ln2", (1, S, H), axis=-1)
    ln2_2d = g.op("Reshape", (ln2,), "ln2_2d", (S, H))
    fc = g.op("Gemm", (ln2_2d, "fc.w", "fc.b"), "fc", (S, F))
    fc_3d = g.op("Reshape", (fc,), "fc_3d", (1, S, F))
    e1 = g.op("Div", (fc_3d, "sqrt2"), "e1", (1, S, F))
    e2 = g.op("Erf", (e1,), "e2", (1, S, F))
    e3 = g.op("Add", (e2, "one"), "e3", (1, S, F))
    e4 = g.op("Mul", (fc_3d, e3), "e4", (1, S, F))
    gelu = g.op("Mul", (e4, "half"), "gelu", (1, S, F))
    gelu_2d = g.op("Reshape", (gelu,), "gelu_2d", (S, F))
    fc2 = g.op("Gemm", (gelu_2d, "fc2.w", "fc2.b"), "fc2", (S, H))
    fc2_3d = g.op("Reshape", (fc2,), "fc2_3d", (1, S, H))
    fc2_drop = g.op("Dropout", (fc2_3d, "ratio"), "fc2_drop", (1, S, H))
    out = g.op("Add", (res1, fc2_drop), "out", (1, S, H))
    read = {i for op in g.ops for i in op.inputs}
    return Graph(
        tensors={n: t for n, t in g.tensors.items() if n in read or n == out},
        ops=g.ops,
        inputs=[n for n in (x, mask) if n in read],
        weights=[n for n in weights if n in read],
        constants=[n for n in constants if n in read],
        outputs=[out],
    )


def block_model(graph: Graph | None = None) -> Model:
    """A one-layer model holding the block."""
    graph = graph or gpt2_block()
    layer = Layer(0, "block.0", LayerKind.BLOCK, 0)
    return Model("toy_gpt2", [layer], [], [LayerClass(graph, (0,))], graph.parameter_count(), S)


def class_text(model: Model) -> str:
    """Forward graph, backward graph and memory of the block, as golden text."""
    cls = model.classes[0]
    parts = [f"tp_width={cls.tp_width}", "forward:", format_graph(cls.graph)]
    if cls.backward is not None:
        parts += ["backward:", format_graph(cls.backward)]
    if cls.memory is not None:
        parts.append(f"memory: {cls.memory}")
    return "\n".join(parts) + "\n"


def trained(width: int, fuse: bool = True, optimizer: str = "sgd") -> Model:
    model, _ = training_pipeline(width, GraphSettings(fuse=fuse, optimizer=optimizer)).run(block_model())
    return model


STAGES: dict[str, Callable[[], Model]] = {
    "input": block_model,
    "tp2": lambda: TensorParallel(2)(block_model()).model,
    "tp2_autodiff": lambda: Autodiff()(TensorParallel(2)(block_model()).model).model,
    "tp2_fuse": lambda: trained(2),
    "t1_fuse": lambda: Fuse()(Autodiff()(block_model()).model).model,
    "t1_memory_adam": lambda: trained(1, optimizer="adam"),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_printer_golden_before_and_after_each_pass(stage: str) -> None:
    model = STAGES[stage]()
    cls = model.classes[0]
    verify_graph(cls.graph, "forward")
    if cls.backward is not None:
        verify_graph(cls.backward, "backward")
    assert class_text(model) == (GOLDEN / f"block_{stage}.txt").read_text()


def test_passes_do_not_mutate_their_input() -> None:
    model = block_model()
    before = class_text(model)
    trained_model, _ = training_pipeline(2).run(model)
    assert class_text(model) == before
    assert class_text(trained_model) != before


FORWARD_GEMM_FLOPS = 2 * S * (3 * H * H + H * H + 2 * H * F) + 2 * 2 * S * S * H
"""QKV, output projection and two MLP GEMMs, plus the score and context products over all heads."""


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("microbatch", [1, 3])
def test_every_backward_gemm_has_twice_its_forward_flops(width: int, microbatch: int) -> None:
    model = trained(width, fuse=False)
    cls = model.classes[0]
    assert cls.backward is not None
    forward = {op.name: op for op in cls.graph.ops if op.op_type in GEMM_TYPES}
    assert len(forward) == 6
    for name, op in forward.items():
        grads = [g for g in cls.backward.ops if g.name in (f"{name}.grad_a", f"{name}.grad_b")]
        assert len(grads) == 2
        total = sum(gemm_dims(g, cls.backward, microbatch).flops for g in grads)
        assert total == 2 * gemm_dims(op, cls.graph, microbatch).flops
    roles = sorted(str(g.attrs["grad"]) for g in cls.backward.ops if g.op_type in GEMM_TYPES)
    assert roles == ["input"] * 8 + ["weight"] * 4  # weight-free products give two input gradients
    fused = trained(width).classes[0]
    assert fused.backward is not None
    fwd, bwd = graph_totals(fused.graph, microbatch), graph_totals(fused.backward, microbatch)
    assert fwd.gemm_flops == microbatch * FORWARD_GEMM_FLOPS // width
    assert bwd.gemm_flops == 2 * fwd.gemm_flops


def test_fusion_merges_gemm_with_its_single_elementwise_consumer() -> None:
    model = trained(1)
    fused = {op.name: op for op in model.classes[0].graph.ops if op.kind is OpKind.FUSED}
    assert sorted(fused) == ["node_fc2+node_fc2_drop", "node_proj+node_proj_drop", "node_scores+node_scaled"]
    op = fused["node_fc2+node_fc2_drop"]
    graph = model.classes[0].graph
    assert (op.attrs["gemm_type"], op.attrs["vector_type"]) == ("Gemm", "Dropout")
    assert gemm_dims(op, graph, 2) == GemmDims(batch=1, m=2 * S, k=F, n=H)
    assert flops(op, graph, 2) == 2 * (2 * S) * H * F + 2 * (2 * S * H)  # GEMM + Dropout (2 per element)
    unfused = trained(1, fuse=False)
    assert not any(op.kind is OpKind.FUSED for op in unfused.classes[0].graph.ops)
    assert graph_totals(graph, 1).flops == graph_totals(unfused.classes[0].graph, 1).flops


def test_elementwise_fusion_runs_the_gelu_chain_as_one_kernel() -> None:
    model, _ = training_pipeline(1, GraphSettings(fuse_elementwise=True, optimizer="adam")).run(block_model())
    plain, _ = training_pipeline(1, GraphSettings(optimizer="adam")).run(block_model())
    cls, ref = model.classes[0], plain.classes[0]
    chains = [op for op in cls.graph.ops if op.op_type == FUSED_ELEMENTWISE]
    (gelu,) = chains  # Div, Erf, Add, Mul, Mul; the dropouts went into their GEMMs, the adds stand alone
    assert gelu.name == "node_e1..node_gelu" and gelu.kind is OpKind.VECTOR
    assert (gelu.inputs, gelu.outputs) == (("fc_3d", "sqrt2", "one", "half"), ("gelu",))
    assert gelu.attrs["member_types"] == "Div,Erf,Add,Mul,Mul"
    assert member_elements(gelu, 3) == [(t, 3 * S * F) for t in ("Div", "Erf", "Add", "Mul", "Mul")]
    assert flops(gelu, cls.graph, 3) == 5 * 3 * S * F
    work = op_work(gelu, cls.graph, Split(3, backward=False))
    assert work.vector_elements == (10 + 15 + 1 + 1 + 1) * 3 * S * F  # the members' cycles per element
    assert (work.bytes_read, work.bytes_written) == (2 * 3 * S * F + 3 * 2, 2 * 3 * S * F)
    for graph, unfused in ((cls.graph, ref.graph), (cls.backward, ref.backward)):
        assert graph is not None and unfused is not None
        verify_graph(graph, "fused")
        totals, unfused_totals = graph_totals(graph, 2), graph_totals(unfused, 2)
        assert replace(totals, kernels=0) == replace(unfused_totals, kernels=0)
        assert totals.kernels < unfused_totals.kernels
    assert graph_totals(ref.graph, 1).kernels - graph_totals(cls.graph, 1).kernels == 4  # GELU's 5 in 1
    assert cls.memory == ref.memory  # the backward graph reads the same stash


def chain_graph(keep_middle: bool = False, detour: bool = False) -> Graph:
    """x -> Mul -> a -> Add -> b -> Tanh -> y; with `detour`, b goes through a GEMM instead and the
    last op adds its result to a (a path that leaves the group and comes back)."""
    g = BlockBuilder()
    x = g.tensor("x", (1, S, H))
    g.tensor("w", (H, H), None)
    a = g.op("Mul", (x, x), "a", (1, S, H))
    b = g.op("Add", (a, x), "b", (1, S, H))
    if detour:
        y = g.op("Add", (a, g.op("MatMul", (b, "w"), "p", (1, S, H))), "y", (1, S, H))
    else:
        y = g.op("Tanh", (b,), "y", (1, S, H))
    outputs = [y, a] if keep_middle else [y]
    return Graph(tensors=g.tensors, ops=g.ops, inputs=[x], weights=["w"], constants=[], outputs=outputs)


def test_elementwise_fusion_keeps_what_leaves_and_refuses_detours() -> None:
    (op,) = fuse_elementwise(chain_graph(), set()).ops
    assert (op.inputs, op.outputs, op.attrs["member_types"]) == (("x",), ("y",), "Mul,Add,Tanh")
    # A tensor the backward reads, or one that leaves the layer, is written: the group ends there.
    kept = fuse_elementwise(chain_graph(), {"b"})
    assert [(o.op_type, o.inputs, o.outputs) for o in kept.ops] == [
        (FUSED_ELEMENTWISE, ("x",), ("b",)),
        ("Tanh", ("b",), ("y",)),
    ]
    leaving = fuse_elementwise(chain_graph(keep_middle=True), set())
    assert [(o.op_type, o.inputs, o.outputs) for o in leaving.ops] == [
        ("Mul", ("x", "x"), ("a",)),
        (FUSED_ELEMENTWISE, ("a", "x"), ("y",)),
    ]
    detour = chain_graph(detour=True)
    assert fuse_elementwise(detour, set()) == detour  # Add -> MatMul -> Add re-enters {Mul, Add, Add}


TP_WEIGHTS = 3 * H * H + H * H + 2 * H * F  # QKV, output, MLP up and down matrices
COLUMN_BIASES = 3 * H + F
REPLICATED = 2 * 2 * H + 2 * H  # two layer norms, the two row-parallel biases


@pytest.mark.parametrize("width", [1, 2])
def test_memory_per_device(width: int) -> None:
    memory = trained(width, optimizer="adam").classes[0].memory
    assert memory is not None
    params = (TP_WEIGHTS + COLUMN_BIASES) // width + REPLICATED
    assert memory.parameter_count == params == {1: 872, 2: 460}[width]
    assert (memory.parameter_bytes, memory.gradient_bytes, memory.optimizer_state_bytes) == (
        2 * params,
        2 * params,
        12 * params,
    )
    assert memory.state_bytes == 16 * params
    # What FP8 runs (and `fp8_param_gather` gathers at one byte): the four matrices, not the biases a
    # fused GEMM adds or the layer norms.
    assert (memory.fp8_weight_bytes, memory.fp8_expert_weight_bytes) == (2 * TP_WEIGHTS // width, 0)
    # Korthikanti et al. 2022 per sample: s*h*(10 + 24/t + 5*a*s/(h*t)) bytes (fp16, 1-byte dropout
    # masks, a fused GELU), plus the toy's 1-byte attention mask [1, 1, s, s] read by Where's backward.
    formula = S * H * (10 + 24 / width + 5 * A * S / (H * width))
    assert memory.stash_per_sample_bytes == formula + S * S == {1: 2028, 2: 1272}[width]
    assert memory.stash_fixed_bytes == 0
    assert memory.stash_bytes(4) == 4 * memory.stash_per_sample_bytes
    assert memory.input_bytes(3) == 3 * (2 * S * H + S * S)


@pytest.mark.parametrize("width", [1, 2])
def test_fp8_keeps_each_linear_layers_input_as_a_one_byte_copy(width: int) -> None:
    # Transformer Engine keeps a linear layer's input for its weight gradient as the FP8 copy its
    # forward cast wrote: QKV's input (the first layer norm's output, sh bytes less), the projection's
    # (the attention context, sh/t), fc's (sh) and fc2's (the GELU output, 4sh/t), nothing else reading
    # them in the toy's backward: Korthikanti's sh(10 + 24/t + 5as/(ht)) becomes sh(8 + 19/t + 5as/(ht)).
    memory = trained(width).classes[0].memory
    assert memory is not None
    assert memory.fp8_per_sample_bytes == -S * H * (2 + 5 / width) == {1: -336, 2: -216}[width]
    # what tensor parallelism leaves whole: the two layer norms' outputs (at t = 1, every tensor)
    assert memory.fp8_replicated_per_sample_bytes == {1: -336, 2: -2 * S * H}[width]
    formula = S * H * (8 + 19 / width + 5 * A * S / (H * width)) + S * S  # and the 1-byte mask
    fp8 = megatron_bytes(memory, 1, 1, low_precision=True)
    assert fp8.stash_bytes == formula == {1: 1692, 2: 1056}[width]
    assert megatron_bytes(memory, 3, 1, low_precision=True).stash_bytes == 3 * formula
    assert megatron_bytes(memory, 1, 1).stash_bytes == memory.stash_per_sample_bytes  # bf16: unchanged
    # Sequence parallelism splits every linear layer's input t ways: sh/t (27 + 5as/h), the mask split too.
    split = megatron_bytes(memory, 1, width, low_precision=True)
    formula = S * H / width * (27 + 5 * A * S / H) + S * S / width
    assert split.stash_bytes == formula == {1: 1692, 2: 846}[width]


@pytest.mark.parametrize("width", [1, 2])
def test_op_recompute_keeps_the_input_and_every_other_linear_product(width: int) -> None:
    # torchtitan's op-level selective checkpointing saves the linear layers' products but every second
    # one (QKV and fc kept; the projection and fc2 not), the flash kernels and the TP collectives
    # (here, at t = 2, the all-reduces after the projection and fc2), and rebuilds the rest of the
    # stash from them and the block's input x. Kept per sample: at t = 1 x 2sh + QKV 6sh + fc 8sh =
    # 16sh bytes; at t = 2 x and the two all-reduced outputs 2sh each, QKV and fc split: 6sh + 14sh/t,
    # and sequence parallelism splits the replicated 6sh too: 20sh/t. The 1-byte mask comes from the
    # batch, as under full recompute.
    cls = trained(width).classes[0]
    memory, backward = cls.memory, cls.backward
    assert memory is not None and backward is not None
    kept = {1: 16 * S * H, 2: S * H * (6 + 14 // width)}[width]
    assert memory.op_per_sample_bytes == kept == {1: 768, 2: 624}[width]
    assert memory.op_replicated_per_sample_bytes == {1: 768, 2: 6 * S * H}[width]
    assert memory.op_fixed_bytes == 0
    assert megatron_bytes(memory, 3, 1).op_bytes == 3 * kept
    if width == 2:  # sequence parallelism
        assert megatron_bytes(memory, 1, 2).op_bytes == 20 * S * H // 2 == 480
    again = op_checkpoint(cls.graph, backward)
    assert again.kept == {"x", "mask", "qkv", "fc"} | ({"proj", "fc2"} if width == 2 else set())
    # What it runs again: the layer norms, the attention core (QK^T fused with its scale, mask,
    # softmax, dropout, AV), the GELU chain, the residual add, and at t = 1 the projection and fc2
    # (each fused with its dropout), which no all-reduce output saves there: GEMM FLOPs
    # 2 x 2 (a/t) s^2 d for the core, plus 2sh^2 + 2sfh at t = 1.
    ops = [cls.graph.ops[i] for i in again.recomputed]
    products = [op for op in ops if op.kind in (OpKind.GEMM, OpKind.FUSED)]
    unsaved = ["node_proj+node_proj_drop", "node_fc2+node_fc2_drop"] if width == 1 else []
    assert [op.name for op in products] == ["node_scores+node_scaled", "node_ctx", *unsaved]
    core = 2 * 2 * (A // width) * S * S * D
    assert sum(gemm_dims(op, cls.graph, 1).flops for op in products) == core + (
        2 * S * H * H + 2 * S * F * H if width == 1 else 0
    )
    assert {op.op_type for op in ops if op.kind is OpKind.VECTOR} >= {"LayerNormalization", "Erf", "Softmax"}


@pytest.mark.parametrize("width", [1, 2])
def test_all_reduces_per_block(width: int) -> None:
    rows, _ = training_rows(block_model(), width, GraphSettings(), microbatch=3)
    (row,) = rows
    count = 0 if width == 1 else 2
    forward, backward = row.forward.collective("AllReduce"), row.backward.collective("AllReduce")
    assert (forward.count, backward.count) == (count, count)
    assert forward.tensor_bytes == backward.tensor_bytes == count * 3 * S * H * 2
    assert {c.op_type for c in (*row.forward.collectives, *row.backward.collectives)} <= {"AllReduce"}


def test_rows_report_per_device_figures() -> None:
    model = trained(2)
    (row,) = rows_at(model, 2)
    assert (row.name, row.kind, row.tp_width, row.parameters) == ("block.0", "block", 2, 460)
    assert row.forward.gemm_flops == 2 * FORWARD_GEMM_FLOPS // 2
    assert row.stash_bytes == 2 * 1272
    assert row.recompute_input_bytes == 2 * (2 * S * H + S * S)


def test_optimizer_update_is_sized_by_the_parameters() -> None:
    model = Autodiff("adam")(TensorParallel(2)(block_model()).model).model
    update = model.classes[0].update
    assert update is not None
    (op,) = update.ops
    assert (op.op_type, op.kind, flops(op, update)) == ("AdamUpdate", OpKind.VECTOR, 12 * 460)
    assert Autodiff()(block_model()).model.classes[0].update is None


def test_every_differentiable_vector_op_type_has_a_gradient_rule() -> None:
    no_gradient = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "IsNaN",
                   "IsInf", "Sign", "Floor", "Ceil", "Mod", "SGDUpdate", "AdamUpdate"}  # fmt: skip
    vector = {t for t in known_op_types() if kind_of(t) is OpKind.VECTOR}
    assert not vector - no_gradient - GRAD_RULES.keys()
    assert not ELEMENTWISE_TYPES - vector


def test_width_must_divide_heads_and_ffn() -> None:
    with pytest.raises(PhazecError, match=r"width 4 does not divide the 2 attention heads and FFN size 32 of "
                       r"model 'toy_gpt2'; valid widths: 1, 2\."):  # fmt: skip
        TensorParallel(4)(block_model())
    with pytest.raises(PhazecError, match="must be a positive number of devices"):
        TensorParallel(0)(block_model())


def test_unrecognised_block_names_the_expected_op() -> None:
    with pytest.raises(
        PhazecError, match=r"expected a block with two weight-free MatMuls \(attention scores, "
    ):
        TensorParallel(2)(block_model(gpt2_block(mlp_only=True)))
    graph = gpt2_block()
    no_fc2 = [
        replace(op, op_type="Add", kind=OpKind.VECTOR) if op.name == "node_fc2" else op for op in graph.ops
    ]
    with pytest.raises(PhazecError, match=r"expected three weight GEMMs after the attention context product"):
        TensorParallel(2)(block_model(replace(graph, ops=no_fc2)))


def test_bad_optimizer_and_pass_order() -> None:
    with pytest.raises(
        PhazecError, match=r"optimizer 'lamb' has no memory rule; valid optimizers: \['adam', 'sgd'\]"
    ):
        Memory("lamb")(block_model())
    with pytest.raises(PhazecError, match=r"optimizer 'lamb' has no update rule"):
        Autodiff("lamb")(block_model())
    with pytest.raises(PhazecError, match="run the autodiff pass before it"):
        Memory()(block_model())


def test_a_pipeline_error_names_its_pass_and_the_passes_before_it() -> None:
    with pytest.raises(PhazecError, match=r"valid widths: 1, 2\. \(pass tensor-parallel, after norm-rope\)$"):
        training_pipeline(4).run(block_model())
    assert [name for name, _ in TRAINING_PASSES] == [
        "norm-rope", "tensor-parallel", "expert-parallel", "loss", "attention", "autodiff", "fuse", "memory",
    ]  # fmt: skip
    assert [p.name for p in training_pipeline(2).passes] == [name for name, _ in TRAINING_PASSES]
