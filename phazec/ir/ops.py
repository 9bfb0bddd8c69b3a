"""Rule tables for operator types: what executes them and how much work they are.

FLOPs count a multiply-add as 2. A GEMM's FLOPs are its matrix product only (a bias is an epilogue of
the product); a vector op's FLOPs are its elements times a per-element count from `VECTOR_FLOPS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phazec.ir.core import Graph, Op, OpKind

GEMM_TYPES = frozenset({"MatMul", "Gemm"})

_ONE_FLOP = (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Pow", "Sqrt", "Reciprocal", "Exp", "Log",
    "Tanh", "Erf", "Sigmoid", "Relu", "Gelu", "Max", "Min", "Where", "Cast", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "IsNaN", "IsInf", "Sin",
    "Cos", "Clip", "Sign", "Floor", "Ceil", "Mod", "CumSum", "ReduceMean", "ReduceSum",
    "ReduceMax", "ReduceMin",
)  # fmt: skip

VECTOR_FLOPS: dict[str, int] = {
    **dict.fromkeys(_ONE_FLOP, 1),  # elementwise arithmetic, comparisons, reductions
    "Dropout": 2,  # draw the mask, scale
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "LogSoftmax": 5,
    "ScaleMaskSoftmax": 7,  # scale, mask and softmax in one kernel (phazec.passes.attention)
    "LayerNormalization": 8,  # mean, centre, square, mean, rsqrt, normalise, scale, shift
    "RMSNormalization": 5,  # square, mean, rsqrt, normalise, scale (phazec.passes.norm_rope)
    "RotaryEmbedding": 3,  # x cos + rotate_half(x) sin: two products and a sum (phazec.passes.norm_rope)
    "SoftmaxCrossEntropyLoss": 6,  # log-softmax of the logits and the pick of the label
    "NegativeLogLikelihoodLoss": 1,
    "TopK": 1,  # one comparison per element (a router's top-k of a few experts: phazec.frontend.moe)
    "Permute": 0,  # token rows copied into a new order (phazec.passes.expert_parallel): bytes, no arithmetic
    "SGDUpdate": 2,  # w -= lr * g
    "AdamUpdate": 12,  # two moment updates (7), bias-corrected step (4), write back (1)
}
"""FLOPs per element of each vector op type."""

DATA_TYPES = frozenset(
    {
        "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Slice", "Concat",
        "Split", "Gather", "GatherND", "GatherElements", "Shape", "Size", "ConstantOfShape", "Range",
        "Identity", "CastLike", "Pad", "Tile", "Trilu", "ScatterND", "ScatterElements", "OneHot",
        "SequenceAt",
    }
)  # fmt: skip
"""Op types that move, view or index data and cost no compute."""

METADATA_INPUTS: dict[str, tuple[int, ...]] = {"CastLike": (1,), "Shape": (0,), "Size": (0,)}
"""Inputs an op reads for their type or shape alone, never their elements (CastLike's target type)."""


def reads_elements(op: Op, name: str) -> bool:
    """Whether `op` reads the elements of tensor `name` (not only its type or shape)."""
    skipped = METADATA_INPUTS.get(op.op_type, ())
    return any(i == name and k not in skipped for k, i in enumerate(op.inputs))


BROADCAST_TYPES = frozenset({"Expand", "Tile"})
"""Data ops that repeat their input: its gradient sums the output gradient (a ReduceSum)."""

VIEW_TYPES = frozenset({"Reshape", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Flatten"})
"""Data ops that only relabel their input's elements (a new shape or axis order), no selection."""

COLLECTIVE_TYPES = frozenset({"AllReduce", "AllToAll", "AllGather", "ReduceScatter"})
"""Communication among a group of devices, attr `group` (devices): a tensor-parallel all-reduce, an
expert-parallel all-to-all (a MoE layer's token dispatch and combine, `phazec.passes.expert_parallel`),
or a tensor-parallel all-gather and its gradient, a reduce-scatter (around a multi-token-prediction
module's projection, `phazec.passes.tensor_parallel`)."""

ELEMENTWISE_TYPES = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh",
        "Erf", "Sigmoid", "Relu", "Gelu", "Max", "Min", "Where", "Cast", "Sin", "Cos", "Clip", "Sign",
        "Dropout", "IsNaN", "IsInf", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not",
        "And", "Or",
    }
)  # fmt: skip
"""Vector op types that map each output element from the same element of their (broadcast) inputs."""


def kind_of(op_type: str) -> OpKind | None:
    """The kind of an op type, or None if the IR does not know it."""
    if op_type in GEMM_TYPES:
        return OpKind.GEMM
    if op_type in VECTOR_FLOPS:
        return OpKind.VECTOR
    if op_type in DATA_TYPES:
        return OpKind.DATA
    if op_type in COLLECTIVE_TYPES:
        return OpKind.COLLECTIVE
    return None


def known_op_types() -> list[str]:
    """Every op type the IR lowers, sorted."""
    return sorted(GEMM_TYPES | VECTOR_FLOPS.keys() | DATA_TYPES)


@dataclass(frozen=True, slots=True)
class GemmDims:
    """A batched matrix product: `batch` independent (m x k) @ (k x n) products."""

    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        """2 * batch * m * k * n."""
        return 2 * self.batch * self.m * self.k * self.n


FLASH_PRODUCTS: dict[str, int] = {"FlashAttention": 2, "FlashAttentionGrad": 5}
"""Products of s x d by d x s (or s x s by s x d) per head of a flash-attention kernel: QK^T and AV
forward; the backward recomputes QK^T and forms dV, dP, dQ and dK (FlashAttention-2's 2.5x)."""

FLASH_BLOCK = 128
"""Query and key rows per tile of a flash-attention kernel (FlashAttention-2's 128 x 128 blocks)."""


def flash_dims(op: Op, microbatch: int = 1) -> GemmDims:
    """A flash-attention op's work as tiles: per head and product, T x T tiles of b x d by d x b with
    b = min(seq, FLASH_BLOCK) and T = ceil(seq / b); a causal kernel skips those above the diagonal,
    T (T + 1) / 2 are left. Attrs `heads` (per sample), `seq`, `head_dim`, `causal`."""
    heads, seq, head_dim, causal = (op.attrs[k] for k in ("heads", "seq", "head_dim", "causal"))
    assert isinstance(heads, int) and isinstance(seq, int) and isinstance(head_dim, int)
    block = min(seq, FLASH_BLOCK)
    t = -(-seq // block)
    tiles = t * (t + 1) // 2 if causal else t * t
    return GemmDims(FLASH_PRODUCTS[op.op_type] * microbatch * heads * tiles, block, head_dim, block)


def gemm_dims(op: Op, graph: Graph, microbatch: int = 1) -> GemmDims:
    """The product dimensions of a MatMul, Gemm, fused or flash-attention op at a microbatch size."""
    if op.op_type in FLASH_PRODUCTS:
        return flash_dims(op, microbatch)
    a = graph.tensors[op.inputs[0]].shape_at(microbatch)
    b = graph.tensors[op.inputs[1]].shape_at(microbatch)
    if op.attrs.get("gemm_type", op.op_type) == "Gemm":
        m, k = (a[1], a[0]) if op.attrs.get("transA", 0) else (a[0], a[1])
        n = b[0] if op.attrs.get("transB", 0) else b[1]
        return GemmDims(1, m, k, n)
    out = graph.tensors[op.outputs[0]].shape_at(microbatch)
    k = a[-1]
    m = a[-2] if len(a) > 1 else 1
    n = b[-1] if len(b) > 1 else 1
    return GemmDims(math.prod(out) // (m * n), m, k, n)


def elements(op: Op, graph: Graph, microbatch: int = 1) -> int:
    """The largest element count among an op's tensors (the work of a vector op)."""
    names = [t for t in (*op.inputs, *op.outputs) if t]
    return max((graph.tensors[t].numel(microbatch) for t in names), default=0)


FUSED_ELEMENTWISE = "FusedElementwise"
"""A chain of elementwise ops run as one kernel (`phazec.passes.fuse`). Attrs: `member_types` (the
members' op types, comma-separated) and per member the largest per-batch and per-sample element count
of its tensors at microbatch 1 (`member_fixed_elements`, `member_sample_elements`)."""


def member_elements(op: Op, microbatch: int = 1) -> list[tuple[str, int]]:
    """(op type, elements) of each member of a fused elementwise op at a microbatch size: what
    `elements` gave the member before fusion."""
    types = str(op.attrs["member_types"]).split(",")
    fixed, sample = op.attrs["member_fixed_elements"], op.attrs["member_sample_elements"]
    assert isinstance(fixed, tuple) and isinstance(sample, tuple)
    return [(t, max(int(f), int(s) * microbatch)) for t, f, s in zip(types, fixed, sample, strict=True)]


def fused_vector_elements(op: Op, graph: Graph, microbatch: int = 1) -> int:
    """Elements of a fused op's vector part: its first output, the elementwise op's result."""
    return graph.tensors[op.outputs[0]].numel(microbatch)


def collective_bytes(op: Op, graph: Graph, microbatch: int = 1) -> int:
    """Bytes of a collective's whole tensor at a microbatch size: an all-gather's output, every other
    collective's input."""
    whole = op.outputs[0] if op.op_type == "AllGather" else op.inputs[0]
    return graph.tensors[whole].nbytes(microbatch)


def flops(op: Op, graph: Graph, microbatch: int = 1) -> int:
    """FLOPs of one op at a microbatch size (0 for data movement and collectives).

    A fused op counts its GEMM (attrs `gemm_type`, inputs first) and its vector part (`vector_type`); a
    fused elementwise op counts its members.
    """
    if op.kind is OpKind.GEMM:
        return gemm_dims(op, graph, microbatch).flops
    if op.op_type == FUSED_ELEMENTWISE:
        return sum(VECTOR_FLOPS[t] * n for t, n in member_elements(op, microbatch))
    if op.kind is OpKind.VECTOR:
        return VECTOR_FLOPS[op.op_type] * elements(op, graph, microbatch)
    if op.kind is OpKind.FUSED:
        vector_type = str(op.attrs["vector_type"])
        vector = VECTOR_FLOPS[vector_type] * fused_vector_elements(op, graph, microbatch)
        return gemm_dims(op, graph, microbatch).flops + vector
    return 0
