"""The cost pass: every forward and backward operator of a layer class, priced on many designs at once.

It reads the training graph (after the tensor-parallel, autodiff and fusion passes), turns each
operator into an `OpWork` row for the cost models, and returns single-core and all-cores latency (s)
and energy (J) per operator and design. Costs are an analysis keyed by hardware: they are returned as
frozen records, never written into the IR, so one training graph serves every design.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from phazec.cost.model import LatencyModel, OpCosts, op_costs
from phazec.cost.ops import CYCLES_PER_ELEMENT, OpTable, OpWork, VectorClass, vector_class
from phazec.cost.ops import OpKind as CostKind
from phazec.hw.designs import Designs
from phazec.hw.system import System
from phazec.ir.core import Graph, LayerClass, LayerKind, Model, Op, OpKind
from phazec.ir.ops import (
    FLASH_PRODUCTS,
    FUSED_ELEMENTWISE,
    collective_bytes,
    elements,
    fused_vector_elements,
    gemm_dims,
    member_elements,
)
from phazec.passes.memory import low_precision_gemm
from phazec.passes.tensor_parallel import weight_of
from phazec.predict.training import Training

QUANTIZE_BYTES_PER_OPERAND_BYTE = 3.0
"""Bytes the FP8 casts of a GEMM's bf16 activation operand move per byte of it: current scaling reads
it once for its amax and once to cast it (2 + 2 bytes per element) and writes the row- and
column-wise FP8 copies the forward and backward GEMMs read (1 + 1 bytes): 6 bytes per 2-byte element.
Transformer Engine's recipes cast a block's activations so (its fused norm-cast kernels save a read)."""


def _gemm_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    dims = gemm_dims(op, graph, microbatch)
    kind = CostKind.ATTENTION if op.op_type in FLASH_PRODUCTS else CostKind.GEMM
    return OpWork(kind, backward=backward, batch=dims.batch, m=dims.m, k=dims.k, n=dims.n)


def _vector_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    if op.op_type == FUSED_ELEMENTWISE:
        return _fused_elementwise_work(op, microbatch, backward)
    return OpWork(
        CostKind.VECTOR,
        vector_class=vector_class(op.op_type),
        backward=backward,
        vector_elements=elements(op, graph, microbatch),
    )


def _fused_elementwise_work(op: Op, microbatch: int, backward: bool) -> OpWork:
    """A fused elementwise op's vector work: its members' elements times their cycles per element,
    counted as arithmetic elements (one cycle each), so it costs the cycles its members cost apart (up
    to rounding each to whole passes over the lanes)."""
    cycles = CYCLES_PER_ELEMENT[:, int(backward)]
    work = sum(n * float(cycles[vector_class(t)]) for t, n in member_elements(op, microbatch))
    return OpWork(
        CostKind.VECTOR, vector_class=VectorClass.ARITHMETIC, backward=backward, vector_elements=work
    )


def _fused_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    dims = gemm_dims(op, graph, microbatch)
    return OpWork(
        CostKind.FUSED,
        vector_class=vector_class(str(op.attrs["vector_type"])),
        backward=backward,
        batch=dims.batch,
        m=dims.m,
        k=dims.k,
        n=dims.n,
        vector_elements=fused_vector_elements(op, graph, microbatch),
    )


COLLECTIVE_KINDS = {
    "AllReduce": CostKind.ALL_REDUCE,
    "AllToAll": CostKind.ALL_TO_ALL,
    "AllGather": CostKind.ALL_GATHER,
    "ReduceScatter": CostKind.ALL_GATHER,
}
"""The cost kind of each IR collective type."""


def _collective_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    group = op.attrs["group"]
    assert isinstance(group, int)
    return OpWork(
        COLLECTIVE_KINDS[op.op_type],
        backward=backward,
        collective_bytes=collective_bytes(op, graph, microbatch),
        group_size=group,
    )


def _free_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    return OpWork(CostKind.FREE, backward=backward)


WORK_RULES: dict[OpKind, Callable[[Op, Graph, int, bool], OpWork]] = {
    OpKind.GEMM: _gemm_work,
    OpKind.VECTOR: _vector_work,
    OpKind.FUSED: _fused_work,
    OpKind.COLLECTIVE: _collective_work,
    OpKind.DATA: _free_work,
}
"""How each kind of IR operator becomes a cost-model row."""


def sequence_split_width(cls: LayerClass, sequence_parallel: bool) -> int:
    """The ways sequence parallelism splits a class's replicated activations and their work: its
    tensor-parallel width when on, else 1."""
    return cls.tp_width if sequence_parallel else 1


def sequence_split(op: Op, graph: Graph) -> bool:
    """Whether sequence parallelism splits an operator's work: a vector operator on per-sample
    tensors that tensor parallelism left whole (layer norms, dropouts, residual adds and their
    gradients), which Megatron's sequence parallelism runs on 1/t of the sequence per device."""
    per_sample = [
        graph.tensors[t] for t in (*op.inputs, *op.outputs) if t and graph.tensors[t].batch_axis is not None
    ]
    return op.kind is OpKind.VECTOR and bool(per_sample) and not any(t.tp_split for t in per_sample)


def low_precision_class(model: Model, cls: int, precision: str) -> bool:
    """Whether class `cls`'s linear layers run in low precision: `precision` fp8 or mxfp8 and a
    transformer block or a multi-token-prediction module (built of Transformer Engine's layers in
    Megatron-Core); the embedding and the output layer stay in bf16, as Transformer Engine and torchao
    leave them."""
    first = model.classes[cls].members[0]
    return precision != "bf16" and model.layers[first].kind in (LayerKind.BLOCK, LayerKind.MTP)


def reads_weight(op: Op, graph: Graph) -> bool:
    """Whether an operator reads a weight or a view of one."""
    return any(t and weight_of(graph, t) is not None for t in op.inputs)


@dataclass(frozen=True, slots=True)
class Split:
    """How a layer's operators are priced: at which microbatch, in which pass, and how each one's work
    is shared out (`op_work`)."""

    microbatch: int
    backward: bool = False
    sequence_parallel: int = 1
    """Width that splits the `sequence_split` operators' per-sample work (1: none)."""
    low_precision: bool = False
    """The layer's linear layers run in FP8 (`low_precision_class`)."""
    context_parallel: int = 1
    ring_group: int = 1
    """Devices of a flash kernel's context-parallel ring: the stage's tensor- and context-parallel ones."""
    cp_all_to_all: bool = False
    """Context parallelism exchanges tokens by all-to-all around the kernel, not round a ring beside it
    (`Training.cp_comm_type` a2a)."""
    deduplicated: bool = False
    """The expert-parallel all-to-alls send each token once per device and node holding one of its
    experts (`Training.moe_token_dispatcher` flex; `phazec.cost.network.tier_bytes`)."""


def class_split(model: Model, c: int, training: Training, backward: bool = False) -> Split:
    """The `Split` of class `c` of `model`'s forward (or `backward`) operators under a plan: its
    microbatch, sequence parallelism, precision (`low_precision_class`), context-parallel width and
    exchange, and token dispatcher, every knob that shares out an operator's work read in one place."""
    cls = model.classes[c]
    return Split(
        training.microbatch,
        backward,
        sequence_split_width(cls, training.sequence_parallel),
        low_precision_class(model, c, training.precision),
        training.cp,
        cls.tp_width * training.cp,
        training.cp_all_to_all,
        training.deduplicates_tokens,
    )


def op_work(op: Op, graph: Graph, split: Split) -> OpWork:
    """The cost-model row of one operator at `split`'s microbatch size, with the bytes it reads and
    writes; an operator `sequence_split` splits does 1/`sequence_parallel` of its per-sample work.
    Under context parallelism over `context_parallel` devices, an operator on per-sample tensors does
    1/cp of its work on 1/cp of their bytes (`context_split`), and a flash-attention kernel passes its
    key and value blocks round a ring of the cp devices while it computes (its `ring_group` devices
    set the tier: the stage's tensor- and context-parallel devices); under the all-to-all variant
    (`Split.cp_all_to_all`) it exchanges instead, before and after it, its queries, keys, values and
    output (the backward pass: the output's gradient and the query, key and value gradients), each
    device sending 1/cp of them to each of the cp - 1 others (`exchanged`). In a
    low-precision layer, a linear layer's GEMM (`low_precision_gemm`) reads one-byte operands, and
    one that reads a weight (the forward product and the input gradient's) first casts its other
    operand (`QUANTIZE_BYTES_PER_OPERAND_BYTE`; the weight gradient's product reads the copies those
    casts wrote), a batched expert GEMM a kernel per local expert (`expert_gemm`). Under a deduplicating
    dispatcher the regrouping by local expert (`reorder` ops) is free: it runs none."""
    microbatch, backward, cp = split.microbatch, split.backward, split.context_parallel
    if split.deduplicated and op.attrs.get("reorder"):
        return OpWork(CostKind.FREE, backward=backward)  # no regrouping (`phazec.passes.expert_parallel`)
    work = WORK_RULES[op.kind](op, graph, microbatch, backward)
    share = 1.0 / split.sequence_parallel if sequence_split(op, graph) else 1.0

    def nbytes(name: str) -> float:
        tensor = graph.tensors[name]
        return tensor.nbytes(microbatch) * (share / cp if tensor.batch_axis is not None else 1.0)

    read = sum(nbytes(t) for t in op.inputs if t)
    written = sum(nbytes(t) for t in op.outputs if t)
    per_sample = any(t and graph.tensors[t].batch_axis is not None for t in (*op.inputs, *op.outputs))
    elements = work.vector_elements * share / (cp if per_sample else 1)
    if cp > 1 and per_sample:
        work = context_split(op, work, cp)
        if op.op_type in FLASH_KEYS_VALUES and split.cp_all_to_all:
            moved = sum(nbytes(t) for t in exchanged(op)) / cp
            ring = {"ring_bytes": moved, "ring_steps": cp - 1, "ring_exposed": True}
            work = OpWork(**{**work.__dict__, **ring, "group_size": split.ring_group})
        elif op.op_type in FLASH_KEYS_VALUES:
            keys_values = sum(nbytes(t) for t in op.inputs[FLASH_KEYS_VALUES[op.op_type]])
            ring = {"ring_bytes": keys_values * (2 if backward else 1), "ring_steps": cp - 1}
            work = OpWork(**{**work.__dict__, **ring, "group_size": split.ring_group})
    if split.deduplicated and work.kind == CostKind.ALL_TO_ALL:
        routed = {key: op.attrs[key] for key in ("top_k", "expert_groups", "group_top_k")}
        work = OpWork(**{**work.__dict__, **routed, "routed_experts": op.attrs["experts"]})
    low = split.low_precision and low_precision_gemm(op, graph)
    expert = expert_gemm(op, graph)
    quantize, casts = 0.0, 1.0
    if low and reads_weight(op, graph):
        activations = sum(nbytes(t) for t in op.inputs if t and weight_of(graph, t) is None)
        quantize = QUANTIZE_BYTES_PER_OPERAND_BYTE * activations
        casts = float(work.batch if expert else 1)
    kernels = -(-work.batch // GEMM_STREAMS) if expert else 1
    return OpWork(
        **{
            **work.__dict__,
            "vector_elements": elements,
            "bytes_read": read / 2.0 if low else read,
            "bytes_written": written,
            "low_precision": low,
            "quantize_bytes": quantize,
            "kernels": float(kernels),
            "quantize_kernels": casts,
        }
    )


GEMM_STREAMS = 4
"""Streams Transformer Engine's grouped linear layer spreads its per-expert cuBLAS GEMMs over
(`multi_stream_cublas_gemm`, 4 compute streams; Transformer Engine 2.14, its default without
`NVTE_USE_CUTLASS_GROUPED_GEMM`): a batched expert GEMM of E' products runs ceil(E' / 4) kernels in a
row on each stream, the streams side by side."""


def expert_gemm(op: Op, graph: Graph) -> bool:
    """Whether a GEMM is a MoE block's batched expert GEMM, one product per local expert: it reads a view
    of a stacked weight, [products, ...], or makes one's gradient. Transformer Engine's grouped linear
    layer runs each product as a cuBLAS kernel of its own (`GEMM_STREAMS`) and casts each product's
    token operand with kernels of its own (`split_quantize`: per local expert, amax, scale and cast under
    per-tensor current scaling, one cast for MXFP8; phazec counts one kernel a cast)."""
    if op.kind not in (OpKind.GEMM, OpKind.FUSED) or op.op_type in FLASH_PRODUCTS:
        return False
    if op.attrs.get("grad") == "weight":
        return len(graph.tensors[op.outputs[0]].shape) == 3
    weights = [w for t in op.inputs if t and (w := weight_of(graph, t)) is not None]
    return any(len(graph.tensors[w].shape) == 3 for w in weights)


def context_split(op: Op, work: OpWork, cp: int) -> OpWork:
    """An operator's work on 1/cp of each sample's tokens: a flash-attention kernel's tiles (its
    queries' share of the causal work, which the ring balances over the devices), a GEMM's rows
    (its reduction for a weight gradient's product, which sums over the tokens), a collective's
    bytes."""
    if op.op_type in FLASH_PRODUCTS:
        return OpWork(**{**work.__dict__, "batch": work.batch / cp})
    if work.kind in (CostKind.GEMM, CostKind.FUSED):
        dim = "k" if op.attrs.get("grad") == "weight" else "m"
        return OpWork(**{**work.__dict__, dim: getattr(work, dim) / cp})
    if work.kind in (CostKind.ALL_REDUCE, CostKind.ALL_TO_ALL, CostKind.ALL_GATHER):
        return OpWork(**{**work.__dict__, "collective_bytes": work.collective_bytes / cp})
    return work


FLASH_KEYS_VALUES = {"FlashAttention": slice(1, 3), "FlashAttentionGrad": slice(2, 4)}
"""The key and value inputs of each flash-attention kernel (after the query; after the output's
gradient and the query), which context parallelism's ring passes on; the backward pass sends their
gradients along too."""


def exchanged(op: Op) -> tuple[str, ...]:
    """The tensors context parallelism's all-to-all variant trades around a flash-attention kernel:
    the forward kernel's query, key and value, and its output; the backward kernel's output gradient,
    and its query, key and value gradients (Megatron-Core's `a2a` CP, Transformer Engine's
    `AttnFuncWithCPAndQKVOA2A`, keeps the forward tensors it saved in the heads' layout)."""
    taken = op.inputs[:1] if op.op_type == "FlashAttentionGrad" else op.inputs[:3]
    return tuple(t for t in (*taken, *op.outputs) if t)


def op_table(graph: Graph, split: Split, gathered: frozenset[int] | None = None) -> OpTable:
    """The cost-model table of a graph's operators, in graph order (`op_work`); the all-reduces whose
    all-gather half carries one-byte elements (`gathered`, else found: `fp8_gathers`) move
    `FP8_GATHER_SHARE` of their bytes."""
    rows = [op_work(op, graph, split) for op in graph.ops]
    for i in fp8_gathers(graph, split) if gathered is None else gathered:
        rows[i] = OpWork(
            **{**rows[i].__dict__, "collective_bytes": rows[i].collective_bytes * FP8_GATHER_SHARE}
        )
    return OpTable.from_rows(rows)


FP8_GATHER_SHARE = 0.75
"""What a tensor-parallel all-reduce moves when its all-gather half carries one-byte elements: its
reduce-scatter sums bf16 (2 bytes an element), its all-gather moves the FP8 copy (1), (2 + 1) / 4 of
the bf16 all-reduce's bytes (an MXFP8 copy's block scales, 1/32 of a byte an element, left out)."""


def fp8_gathers(graph: Graph, split: Split) -> frozenset[int]:
    """The all-reduces whose all-gather half carries an FP8 copy: in a low-precision layer under
    sequence parallelism, those whose result the next GEMM (`neighbour_gemms`) reads in FP8
    (`low_precision_gemm`). An all-reduce there stands for a reduce-scatter and the next all-gather, and
    Transformer Engine gathers a sequence-parallel linear layer's input (its output gradient in the
    backward pass) as the quantized copy the GEMM reads, as torchao's `Float8ColwiseParallel` does; the
    reduce-scatter sums in bf16. Without sequence parallelism the all-reduce is one bf16 collective."""
    if not split.low_precision or split.sequence_parallel <= 1:
        return frozenset()
    found = []
    for i, op in enumerate(graph.ops):
        if op.op_type != "AllReduce":
            continue
        after = neighbour_gemms(graph, i)[1]
        if after is not None and low_precision_gemm(graph.ops[after], graph):
            found.append(i)
    return frozenset(found)


def _is_gemm(op: Op) -> bool:
    return op.kind in (OpKind.GEMM, OpKind.FUSED)


def neighbour_gemms(graph: Graph, i: int) -> tuple[int | None, int | None]:
    """The GEMM that produces operator i's input (None when another kind of op does), and the first
    GEMM (in graph order) that depends on its result; when none in the graph does, the graph's first
    GEMM, which the next layer of the same class runs first (None when the graph has no GEMM)."""
    producer = next((j for j in range(i) if graph.ops[i].inputs[0] in graph.ops[j].outputs), None)
    before = producer if producer is not None and _is_gemm(graph.ops[producer]) else None
    reached = {t for t in graph.ops[i].outputs if t}
    for j in range(i + 1, len(graph.ops)):
        op = graph.ops[j]
        if reached.intersection(op.inputs):
            if _is_gemm(op):
                return before, j
            reached.update(t for t in op.outputs if t)
    return before, next((j for j, op in enumerate(graph.ops) if _is_gemm(op)), None)


TP_OVERLAP_PARTS = {"AllReduce": (0.5, 0.5), "ReduceScatter": (1.0, 0.0), "AllGather": (0.0, 1.0)}
"""The shares of a tensor-parallel collective's time that hide behind the GEMM producing its input and
behind the first GEMM using its result (`overlap_collectives`): an all-reduce is a reduce-scatter then
an all-gather, half its time each (two thirds and one third when the gather carries FP8, `fp8_gathers`)."""

FP8_GATHER_PARTS = (2.0 / 3.0, 1.0 / 3.0)
"""`TP_OVERLAP_PARTS` of an all-reduce whose all-gather half moves one byte an element (`fp8_gathers`)."""


def overlap_collectives(graph: Graph, costs: OpCosts, fp8_gathered: frozenset[int] = frozenset()) -> OpCosts:
    """Costs with each tensor-parallel collective reduced to the part the GEMMs next to it cannot hide.

    Megatron-Core's `--tp-comm-overlap` splits a tensor-parallel collective into t chunks: a
    reduce-scatter runs while the GEMM producing its input computes, an all-gather while the first GEMM
    using its result does (the next layer's first GEMM for a collective at the end of a layer), and an
    all-reduce is both, half its time c each (`TP_OVERLAP_PARTS`: the multi-token-prediction
    projection's gathers are the all-gathers and reduce-scatters). A part of time h next to a GEMM of
    time g ends max(h - g, 0) + min(h, g) / t after the GEMM would have (its first chunk cannot
    overlap); without a GEMM it is all exposed. `fp8_gathered` are the all-reduces whose gather carries
    FP8 (`fp8_gathers`: `FP8_GATHER_PARTS`).
    """
    single, spread = costs.single_core_s.copy(), costs.all_cores_s.copy()
    for i, op in enumerate(graph.ops):
        if op.op_type not in TP_OVERLAP_PARTS:
            continue
        group = op.attrs["group"]
        assert isinstance(group, int)
        exposed = np.zeros_like(spread[i])
        parts = FP8_GATHER_PARTS if i in fp8_gathered else TP_OVERLAP_PARTS[op.op_type]
        for share, j in zip(parts, neighbour_gemms(graph, i), strict=True):
            part = spread[i] * share
            gemm = costs.all_cores_s[j] if j is not None else np.zeros_like(part)
            exposed += np.maximum(part - gemm, 0.0) + np.minimum(part, gemm) / group
        single[i], spread[i] = exposed, exposed
    return replace(costs, single_core_s=single, all_cores_s=spread)


@dataclass(frozen=True, slots=True)
class ClassCosts:
    """Costs of one layer class's operators, arrays [ops, designs] in graph order."""

    forward: OpCosts
    backward: OpCosts | None
    """None when the class has no backward graph (the autodiff pass did not run)."""


def class_costs(
    cls: LayerClass, designs: Designs, system: System, model: LatencyModel, split: Split
) -> ClassCosts:
    """Price the forward and backward operators of one class on every design (vectorised), its forward
    operators at `split` and its backward ones at `split` in the backward pass (`op_work`: with
    sequence parallelism a tensor-parallel class's `sequence_split` operators do 1/t of their work; in
    low precision its linear layers' GEMMs run in FP8; under context parallelism its per-sample work is
    split cp ways; under a deduplicating token dispatcher its all-to-alls send each token once per
    device and node holding one of its experts)."""
    overlap = designs.device.tp_comm_overlap

    def priced(graph: Graph, how: Split) -> OpCosts:
        gathered = fp8_gathers(graph, how)  # found once, for the bytes and the overlap
        costs = op_costs(op_table(graph, how, gathered), designs, system, model)
        return overlap_collectives(graph, costs, gathered) if overlap else costs

    forward = priced(cls.graph, replace(split, backward=False))
    if cls.backward is None:
        return ClassCosts(forward, None)
    return ClassCosts(forward, priced(cls.backward, replace(split, backward=True)))
