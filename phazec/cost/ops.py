"""Operator descriptors the cost models consume: plain numbers per operator, no IR objects.

`OpWork` is one operator; `OpTable` is many as a struct of equal-length numpy arrays. GEMMs are
`batch` independent products of an (m x k) and a (k x n) matrix; vector work is `vector_elements`
elements at the cycles per element of its `VectorClass`.
"""

from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError


class OpKind(IntEnum):
    """Where an operator runs."""

    FREE = 0
    """A view, transpose, gather or concat: no cost."""
    GEMM = 1
    """Matrix multiply on the tensor cores."""
    VECTOR = 2
    """Elementwise or reduction work on the vector cores."""
    FUSED = 3
    """A GEMM with its following vector op on a paired tensor core and vector core."""
    ALL_REDUCE = 4
    """Ring all-reduce of `collective_bytes` among `group_size` devices."""
    P2P = 5
    """Point-to-point transfer of `collective_bytes` to one other device."""
    ATTENTION = 6
    """A fused attention kernel (flash attention) on the tensor cores: `batch` products of m x k by k x n
    whose operands and results never leave the chip; it moves only `bytes_read` and `bytes_written`."""
    ALL_TO_ALL = 7
    """All-to-all of `collective_bytes` among `group_size` devices: each keeps 1/g of its bytes and sends
    1/g to each other device (a MoE layer's token dispatch and combine under expert parallelism)."""
    ALL_GATHER = 8
    """Ring all-gather among `group_size` devices of a tensor of `collective_bytes`, each device holding
    1/g of it, or a reduce-scatter of one (the same bytes on the wires: half a ring all-reduce)."""


class VectorClass(IntEnum):
    """Vector-op classes: an index into `CYCLES_PER_ELEMENT`."""

    NONE = 0
    LAYERNORM = 1
    ACTIVATION = 2
    ARITHMETIC = 3
    DIVIDE = 4
    SOFTMAX = 5
    LOG_SOFTMAX = 6
    TANH = 7
    SIGMOID = 8
    TRANSCENDENTAL = 9
    MEAN = 10
    DROPOUT = 11
    TRIGONOMETRIC = 12
    ERF = 13


CYCLES_PER_ELEMENT = np.array(
    [
        (0, 0),  # NONE
        (1, 1),  # LAYERNORM
        (1, 1),  # ACTIVATION: ReLU, GELU
        (1, 1),  # ARITHMETIC: Add, Sub, Mul
        (10, 10),  # DIVIDE
        (10, 2),  # SOFTMAX: PHAZE's "about 10 + row terms / 2"; row terms not counted
        (13, 2),  # LOG_SOFTMAX
        (27, 2),  # TANH
        (12, 22),  # SIGMOID, SiLU
        (15, 16),  # TRANSCENDENTAL: Pow, Sqrt, Exp
        (10, 10),  # MEAN
        (2, 1),  # DROPOUT
        (13, 2),  # TRIGONOMETRIC: Sin, Cos
        (15, 15),  # ERF
    ],
    dtype=np.float64,
)
"""Vector-core cycles per element and lane, [class, 0 forward / 1 backward] (phaze-facts section 4)."""

OP_RULES: dict[str, tuple[OpKind, VectorClass]] = {
    **dict.fromkeys(("MatMul", "Gemm"), (OpKind.GEMM, VectorClass.NONE)),
    **dict.fromkeys(
        (
            "Reshape",
            "Transpose",
            "Gather",
            "Concat",
            "Slice",
            "Split",
            "Squeeze",
            "Unsqueeze",
            "Flatten",
            "Expand",
            "Identity",
            "Shape",
            "Constant",
            "ConstantOfShape",
            "Range",
        ),
        (OpKind.FREE, VectorClass.NONE),
    ),
    **dict.fromkeys(("LayerNormalization", "RMSNormalization"), (OpKind.VECTOR, VectorClass.LAYERNORM)),
    **dict.fromkeys(("Relu", "Gelu", "FastGelu"), (OpKind.VECTOR, VectorClass.ACTIVATION)),
    **dict.fromkeys(
        (
            *("Add", "Sub", "Mul", "Neg", "Where", "Cast", "Max", "Min", "Abs", "Clip", "Sign", "Mod"),
            *("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN", "IsInf"),
            *("Not", "And", "Or", "Floor", "Ceil", "CumSum", "NegativeLogLikelihoodLoss", "SGDUpdate"),
            *("RotaryEmbedding", "Permute"),
        ),
        (OpKind.VECTOR, VectorClass.ARITHMETIC),
    ),
    **dict.fromkeys(("Div", "Reciprocal", "AdamUpdate"), (OpKind.VECTOR, VectorClass.DIVIDE)),
    **dict.fromkeys(("Softmax", "ScaleMaskSoftmax"), (OpKind.VECTOR, VectorClass.SOFTMAX)),
    **dict.fromkeys(("LogSoftmax", "SoftmaxCrossEntropyLoss"), (OpKind.VECTOR, VectorClass.LOG_SOFTMAX)),
    "Tanh": (OpKind.VECTOR, VectorClass.TANH),
    **dict.fromkeys(("Sigmoid", "Silu", "HardSigmoid"), (OpKind.VECTOR, VectorClass.SIGMOID)),
    **dict.fromkeys(("Pow", "Sqrt", "Exp", "Log"), (OpKind.VECTOR, VectorClass.TRANSCENDENTAL)),
    **dict.fromkeys(
        ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "TopK"), (OpKind.VECTOR, VectorClass.MEAN)
    ),
    "Dropout": (OpKind.VECTOR, VectorClass.DROPOUT),
    **dict.fromkeys(("Sin", "Cos"), (OpKind.VECTOR, VectorClass.TRIGONOMETRIC)),
    "Erf": (OpKind.VECTOR, VectorClass.ERF),
}
"""ONNX op type -> (kind, vector class). Cast, comparisons, masks and the rotary embedding cost as simple
arithmetic, as does a MoE block's token `Permute` (a copy: each element read and written once); sums,
maxima and a router's top-k as means; RMSNorm as LayerNorm."""


def op_rule(op_type: str) -> tuple[OpKind, VectorClass]:
    """The kind and vector class of an ONNX op type.

    Raises:
        PhazecError: the op type has no rule.
    """
    try:
        return OP_RULES[op_type]
    except KeyError:
        raise PhazecError(
            f"ONNX op type {op_type!r} has no cost rule; known op types are {', '.join(sorted(OP_RULES))}."
        ) from None


def vector_class(op_type: str) -> VectorClass:
    """The vector class of an ONNX op type (NONE for GEMMs and free ops).

    Raises:
        PhazecError: the op type has no rule.
    """
    return op_rule(op_type)[1]


@dataclass(frozen=True)
class OpWork:
    """The work of one operator. Counts are per operator on one device; unused fields stay 0."""

    kind: OpKind
    vector_class: VectorClass = VectorClass.NONE
    backward: bool = False
    """A backward-pass operator (vector ops use their backward cycles per element)."""
    batch: int = 1
    """Independent GEMMs (e.g. attention heads times microbatch)."""
    m: int = 0
    """GEMM rows."""
    k: int = 0
    """GEMM reduction length."""
    n: int = 0
    """GEMM columns."""
    vector_elements: float = 0
    """Elements of vector work (for a fused op: of its vector epilogue); a share of a tensor's when
    sequence parallelism splits the op."""
    bytes_read: float = 0
    """Bytes of every operand, weights included."""
    bytes_written: float = 0
    """Bytes of every result."""
    collective_bytes: int = 0
    """Bytes each device contributes to an all-reduce or an all-to-all, or sends point to point."""
    group_size: int = 1
    """Devices taking part in an all-reduce or an all-to-all."""
    routed_experts: int = 0
    """An expert-parallel all-to-all under a deduplicating dispatcher (DeepEP, HybridEP): the routed
    experts its `top_k` token copies go to, which sends each token once to each device, and once to
    each node, holding one of its experts (`phazec.cost.network.tier_bytes`); 0: every copy is sent
    (Megatron-Core's all-to-all dispatcher)."""
    top_k: int = 0
    """Experts each token goes to (with `routed_experts`)."""
    expert_groups: int = 1
    """Groups of consecutive experts the router limits each token to (with `routed_experts`)."""
    group_top_k: int = 1
    """Groups each token's experts are chosen from (with `routed_experts`)."""
    low_precision: bool = False
    """A GEMM in FP8 or MXFP8 (`precision`): at the chip's FP8 rate, its operands one byte each."""
    quantize_bytes: float = 0
    """Bytes the FP8 casts before a low-precision GEMM read and write (amax, scale and cast of its
    activation operand into row- and column-wise copies), streamed at HBM bandwidth before it."""
    kernels: float = 1
    """Kernels an on-chip operator launches one after another, each paying the kernel latency: a batched
    expert GEMM's products are cuBLAS kernels of their own on 4 streams (Transformer Engine's grouped
    linear layer), ceil(products / 4) in a row; 1 for any other operator."""
    quantize_kernels: float = 1
    """Kernels those casts launch, each paying the kernel latency: one per product of a batched expert
    GEMM (Transformer Engine casts each local expert's tokens apart), one for any other GEMM."""
    ring_bytes: float = 0
    """Bytes a context-parallel attention kernel sends to the next device of its ring at each step
    (its key and value blocks; their gradients too in the backward pass), over the tier of
    `group_size` devices, while it computes."""
    ring_steps: int = 0
    """Steps of that ring (cp - 1; 0: no ring)."""
    ring_exposed: bool = False
    """The ring's bytes go before and after the kernel, not beside it: context parallelism's all-to-all
    variant, whose all-to-alls over the cp devices send `ring_bytes` to each of the `ring_steps` others."""


@dataclass(frozen=True)
class OpTable:
    """Operators as equal-length numpy arrays, one field per `OpWork` field (float64 for counts)."""

    kind: NDArray[np.int64]
    vector_class: NDArray[np.int64]
    backward: NDArray[np.bool_]
    batch: NDArray[np.float64]
    m: NDArray[np.float64]
    k: NDArray[np.float64]
    n: NDArray[np.float64]
    vector_elements: NDArray[np.float64]
    bytes_read: NDArray[np.float64]
    bytes_written: NDArray[np.float64]
    collective_bytes: NDArray[np.float64]
    group_size: NDArray[np.int64]
    routed_experts: NDArray[np.int64]
    top_k: NDArray[np.int64]
    expert_groups: NDArray[np.int64]
    group_top_k: NDArray[np.int64]
    low_precision: NDArray[np.bool_]
    quantize_bytes: NDArray[np.float64]
    kernels: NDArray[np.float64]
    quantize_kernels: NDArray[np.float64]
    ring_bytes: NDArray[np.float64]
    ring_steps: NDArray[np.float64]
    ring_exposed: NDArray[np.bool_]

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @staticmethod
    def from_rows(rows: list[OpWork]) -> "OpTable":
        """The table of `rows`, in order.

        Raises:
            PhazecError: a count is negative, a GEMM has a zero dimension, or a group size is below 1.
        """
        for i, row in enumerate(rows):
            _validate_row(i, row)
        return OpTable(
            **{
                f.name: np.array(
                    [getattr(row, f.name) for row in rows], dtype=_DTYPES.get(f.name, np.float64)
                )
                for f in fields(OpWork)
            }
        )

    def take(self, index: NDArray[np.int64]) -> "OpTable":
        """The operators at `index`, in that order."""
        return OpTable(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def cycles_per_element(self) -> NDArray[np.float64]:
        """Vector cycles per element and lane of each operator (forward or backward as flagged)."""
        per_element: NDArray[np.float64] = CYCLES_PER_ELEMENT[
            self.vector_class, self.backward.astype(np.int64)
        ]
        return per_element


_DTYPES: dict[str, type] = {
    "kind": np.int64,
    "vector_class": np.int64,
    "backward": np.bool_,
    "group_size": np.int64,
    "routed_experts": np.int64,
    "top_k": np.int64,
    "expert_groups": np.int64,
    "group_top_k": np.int64,
    "low_precision": np.bool_,
    "ring_exposed": np.bool_,
}
"""Column types other than float64."""

_COUNTS = (
    *("batch", "m", "k", "n", "vector_elements", "bytes_read", "bytes_written", "collective_bytes"),
    *("kernels", "quantize_bytes", "quantize_kernels", "ring_bytes", "ring_steps"),
)


def _validate_row(i: int, row: OpWork) -> None:
    """Raise PhazecError when operator `i` has a negative count or an impossible shape."""
    for name in _COUNTS:
        if getattr(row, name) < 0:
            raise PhazecError(f"Operator {i} has {name} = {getattr(row, name)}: counts must be >= 0.")
    if row.kind in (OpKind.GEMM, OpKind.FUSED, OpKind.ATTENTION) and min(row.batch, row.m, row.k, row.n) < 1:
        raise PhazecError(
            f"GEMM operator {i} has batch={row.batch}, m={row.m}, k={row.k}, n={row.n}: "
            f"a GEMM needs every dimension >= 1."
        )
    if row.group_size < 1:
        raise PhazecError(f"Operator {i} has group_size = {row.group_size}: it must be at least 1 device.")
