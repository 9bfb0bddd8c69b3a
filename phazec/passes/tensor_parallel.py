"""Tensor parallelism: Megatron's layout of a transformer block over `width` devices.

The layout is recognised from the graph's structure, not from names. A block has two weight-free
products (attention scores, then context); the weight GEMMs feeding them are column-parallel (QKV),
the first weight GEMM after the context product is row-parallel (attention output), the last weight
GEMM is row-parallel (MLP down) and the weight GEMMs between the two are column-parallel (MLP up, and
gate for SwiGLU). The split axis is propagated from each column-parallel output through the ops between
them (heads split `width` ways) until the row-parallel GEMM, whose reduction axis it must reach. An
`AllReduce` follows each row-parallel output. Layer norms and the biases of row-parallel GEMMs stay
replicated.

With `vocab_parallel`, the embedding's word lookup (the Gather from the weight with the most rows) keeps
1/t of the rows and is followed by an all-reduce, and the head's vocabulary GEMM (the weight GEMM with
the widest output) is column-parallel up to the loss, as in Megatron; the vocabulary is padded up to a
multiple of t. The three per-token fp32 all-reduces of Megatron's parallel cross-entropy are not modelled
(each is 2/h of a block all-reduce).

A Mixture-of-Experts block is split as Megatron-Core runs it with expert tensor parallelism 1, which
needs sequence parallelism (`phazec.frontend.moe.check_moe_tensor_parallel` refuses it without): its
attention as a dense block's; its routed experts not at all. Each tensor-parallel rank routes its own
sequence-parallel shard of the tokens: every per-sample tensor of the MoE layer whose batch axis
counts tokens (the flattened tokens [s, h], the router's logits, the permuted tokens [E, C, h] and the
expert activations, `token_region`) keeps 1/t of them (rounded up: C/t of the C tokens per expert);
the router's and the experts' weights stay whole (the expert-parallel pass then spreads the experts
over the ep group, whose ranks include the tensor-parallel ones). Shared experts (the other weight
GEMMs after the attention output) are a dense block's MLP: column- then row-parallel, an all-reduce
after; shared experts on the flattened tokens the router reads (Llama 4's, Qwen2-MoE's) are refused.

Multi-head latent attention (DeepSeek's) is split as Megatron-Core splits it: the down-projections (a
weight GEMM feeding another before the attention scores) and their layer norms stay whole, the
up-projections are column-parallel (heads split t ways; the rotary key, one for every head, is
broadcast to each rank's heads), the output projection row-parallel.

A multi-token-prediction module (`LayerKind.MTP`) is split as Megatron-Core's `MultiTokenPredictionLayer`
runs it under sequence parallelism (`mtp_layout`): the lookup of its shifted tokens as the embedding's
(1/t of the vocabulary, an all-reduce after), its norms on each rank's s/t tokens, its block as the
model's blocks, and its projection `eh_proj` (2h -> h) a column-parallel linear layer without a gathered
output: its input, the concatenation of the ranks' s/t tokens, is all-gathered before it (as a
sequence-parallel column-parallel layer gathers its input), and its output [s, h/t] all-gathered along
the hidden width after it (`gather_from_tensor_model_parallel_region`), then scattered along the
sequence for the block, which moves nothing. phazec's IR writes the two gathers (`AllGather`, gradient a
`ReduceScatter`), which no other layer has: a block's gathers and reduce-scatters are its all-reduces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.errors import PhazecError
from phazec.ir.core import (
    FLOAT_DTYPES,
    AttrValue,
    Graph,
    LayerClass,
    LayerKind,
    Model,
    Op,
    OpKind,
    Routing,
    Tensor,
)
from phazec.ir.ops import VIEW_TYPES, gemm_dims
from phazec.passes.base import PassResult

AxisRule = Callable[[int, Tensor, Tensor, dict[str, AttrValue]], int]
"""(split axis of the input, input, output, op attrs) -> split axis of the output."""


@dataclass(frozen=True, slots=True)
class Roles:
    """The tensor-parallel roles of a layer's ops, by op name."""

    column: tuple[str, ...] = ()
    """GEMMs whose weight columns (output features) are split; their outputs are split."""
    row: tuple[str, ...] = ()
    """GEMMs whose weight rows (reduction) are split; an all-reduce follows each."""
    gather: tuple[str, ...] = ()
    """Embedding lookups whose weight rows (vocabulary) are split; an all-reduce follows each."""
    gathered: tuple[str, ...] = ()
    """Column-parallel GEMMs between two all-gathers: their input gathered from the ranks' shares of
    the sequence, their output along its columns (a multi-token-prediction module's projection)."""


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """The Megatron roles of a block's GEMMs and the sizes the width must divide."""

    roles: Roles
    heads: int
    ffn: int
    """The MLP's (a MoE block's shared experts') width; 0 for a MoE block without shared experts."""
    tokens: frozenset[str] = frozenset()
    """A MoE block's tensors split along their batch axis, the tokens (`token_region`)."""


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """Split every transformer block over `width` devices (Megatron layout, all-reduces inserted)."""

    name: ClassVar[str] = "tensor-parallel"
    width: int
    """Tensor-parallel width t (1 leaves the model unchanged)."""
    vocab_parallel: bool = False
    """Also split the embedding's word lookup and the head's vocabulary GEMM."""

    def __call__(self, model: Model) -> PassResult:
        """Shard every block class; raises PhazecError for an impossible width or an unknown block."""
        if self.width < 1:
            raise PhazecError(
                f"tensor-parallel width {self.width} for model {model.name!r} must be a positive number "
                "of devices, e.g. 1, 2, 4 or 8."
            )
        if self.width == 1:
            return PassResult(model, False)
        classes = [self._shard_class(model, c, cls) for c, cls in enumerate(model.classes)]
        return PassResult(replace(model, classes=classes, tp_width=self.width), True)

    def _shard_class(self, model: Model, index: int, cls: LayerClass) -> LayerClass:
        layer = model.layers[cls.members[0]]
        where = f"model {model.name!r}, layer {layer.name} (class {index})"
        if layer.kind in (LayerKind.BLOCK, LayerKind.MTP):
            layout = block_layout(cls.graph, where, model.routing)
            if layer.kind is LayerKind.MTP:
                layout = mtp_layout(cls.graph, layout, where, self.vocab_parallel)
            check_width(model.name, layout, self.width)
            graph = shard_graph(cls.graph, layout.roles, self.width, where, pad=False, tokens=layout.tokens)
            return replace(cls, graph=graph, tp_width=self.width)
        roles = VOCAB_ROLES[layer.kind](cls.graph) if self.vocab_parallel else Roles()
        if roles == Roles():
            return cls
        graph = shard_graph(cls.graph, roles, self.width, where, pad=True)
        return replace(cls, graph=graph, tp_width=self.width)


def check_width(model_name: str, layout: BlockLayout, width: int) -> None:
    """Reject a width that does not divide the attention heads and the FFN size."""
    if layout.heads % width == 0 and layout.ffn % width == 0:
        return
    common = math.gcd(layout.heads, layout.ffn)
    valid = [d for d in range(1, common + 1) if common % d == 0]
    raise PhazecError(
        f"tensor-parallel width {width} does not divide the {layout.heads} attention heads and FFN size "
        f"{layout.ffn} of model {model_name!r}; valid widths: {', '.join(map(str, valid))}."
    )


def weight_of(graph: Graph, tensor: str) -> str | None:
    """The weight a tensor views (through transposes and reshapes), or None."""
    producers = graph.producers()
    while tensor not in graph.weights:
        op = producers.get(tensor)
        if op is None or op.op_type not in VIEW_TYPES:
            return None
        tensor = op.inputs[0]
    return tensor


def descendants(graph: Graph, op: Op) -> set[str]:
    """Names of the ops reachable from an op's outputs."""
    reached = set(op.outputs)
    found: set[str] = set()
    for other in graph.ops:
        if other is not op and reached.intersection(other.inputs):
            reached.update(other.outputs)
            found.add(other.name)
    return found


def block_layout(graph: Graph, where: str, routing: Routing | None = None) -> BlockLayout:
    """Find the column- and row-parallel GEMMs of a block (and, in a MoE block of `routing`, the tensors
    split along their tokens, `moe_layout`); raises PhazecError naming the missing op."""
    gemms = [op for op in graph.ops if op.kind is OpKind.GEMM]
    weighted = [op for op in gemms if weight_of(graph, op.inputs[1]) is not None]
    # Products of two activations (a router reading a cast of its weight, DeepSeek's, is neither).
    free = [op for op in gemms if graph.tensors[op.inputs[1]].batch_axis is not None]
    if len(free) != 2 or free[1].name not in descendants(graph, free[0]):
        raise PhazecError(
            f"{where}: the tensor-parallel pass expected a block with two weight-free MatMuls (attention "
            f"scores, then context), found {len(free)} ({[op.name for op in free]}); it cannot split "
            "this block."
        )
    scores, context = free
    below = {op.name: descendants(graph, op) for op in weighted}
    qkv = [op for op in weighted if scores.name in below[op.name] or context.name in below[op.name]]
    after = [op for op in weighted if op.name in descendants(graph, context)]
    if not qkv or len(after) < 3:
        expected = (
            "a weight GEMM feeding the attention scores (QKV)"
            if not qkv
            else (
                "three weight GEMMs after the attention context product (output projection, MLP up, MLP down)"
            )
        )
        raise PhazecError(
            f"{where}: the tensor-parallel pass expected {expected}; it cannot split this block."
        )
    if len(qkv) + len(after) != len(weighted):
        stray = [op.name for op in weighted if op not in qkv and op not in after]
        raise PhazecError(
            f"{where}: the tensor-parallel pass found weight GEMMs {stray} outside attention "
            "and MLP; it cannot split this block."
        )
    # Multi-head latent attention's down-projections feed the up-projections: they stay whole.
    qkv = [op for op in qkv if not any(other.name in below[op.name] for other in qkv)]
    heads = gemm_dims(scores, graph).batch
    experts = routing.expert_parameters if routing is not None else ()
    if routing is not None and any(weight_of(graph, op.inputs[1]) in experts for op in after):
        return moe_layout(graph, qkv, after, routing, heads=heads, where=where)
    attn_out, mlp_up, mlp_down = after[0], after[1:-1], after[-1]
    return BlockLayout(
        roles=Roles(column=tuple(op.name for op in [*qkv, *mlp_up]), row=(attn_out.name, mlp_down.name)),
        heads=heads,
        ffn=gemm_dims(mlp_up[0], graph).n,
    )


def moe_layout(
    graph: Graph, qkv: list[Op], after: list[Op], routing: Routing, *, heads: int, where: str
) -> BlockLayout:
    """A MoE block's layout (module docstring): the attention's GEMMs as a dense block's, the routed
    region's tensors split along their tokens, and the shared experts' GEMMs (every weight GEMM after the
    attention output that is neither an expert's nor a router's, whose output is one logit per expert) a
    column- then row-parallel MLP; raises PhazecError for shared experts that read the routed tokens."""
    attn_out = after[0]
    tokens = token_region(graph, attn_out, routing)
    rest = [op for op in after[1:] if weight_of(graph, op.inputs[1]) not in routing.expert_parameters]
    shared = [op for op in rest if gemm_dims(op, graph).n != routing.experts]
    flat = [op.name for op in shared if op.inputs[0] in tokens]
    if flat:
        raise PhazecError(
            f"{where}: the shared-expert GEMMs {flat} read the routed tokens (flattened, as Llama 4's and "
            "Qwen2-MoE's shared experts do); tensor parallelism of such a block is not modelled yet: use "
            "tp 1 (plan.tp=1, model.tp_widths=[1])."
        )
    return BlockLayout(
        roles=Roles(
            column=tuple(op.name for op in [*qkv, *shared[:-1]]),
            row=(attn_out.name, *(op.name for op in shared[-1:])),
        ),
        heads=heads,
        ffn=gemm_dims(shared[0], graph).n if shared else 0,
        tokens=frozenset(tokens),
    )


def mtp_layout(graph: Graph, block: BlockLayout, where: str, vocab_parallel: bool) -> BlockLayout:
    """A multi-token-prediction module's layout, as Megatron-Core's `MultiTokenPredictionLayer` runs it
    under sequence parallelism: its block's (`block`, from `block_layout`, which leaves the projection
    whole); the projection `eh_proj` (the weight GEMM every other weight GEMM descends from) a
    column-parallel linear layer whose input, the ranks' s/t tokens, is all-gathered before it and whose
    output is all-gathered along its columns after it (then scattered along the sequence again, which
    moves nothing: `Roles.gathered`); the lookup of the shifted tokens as the embedding's
    (`embedding_roles`) when the vocabulary is parallel. Raises PhazecError without such a projection."""
    weighted = [op for op in graph.ops if op.kind is OpKind.GEMM and weight_of(graph, op.inputs[1])]
    below = descendants(graph, weighted[0])
    if any(op.name not in below for op in weighted[1:]):
        raise PhazecError(
            f"{where}: the tensor-parallel pass expected a multi-token-prediction module's projection (a "
            f"weight GEMM feeding every other), found {weighted[0].name!r} feeding only some; it cannot "
            "split this layer."
        )
    lookup = embedding_roles(graph).gather if vocab_parallel else ()
    return replace(block, roles=replace(block.roles, gathered=(weighted[0].name,), gather=lookup))


def token_region(graph: Graph, attn_out: Op, routing: Routing) -> set[str]:
    """The per-sample tensors of a MoE layer whose batch axis counts tokens: below the attention output
    (`attn_out`), every tensor laid out [tokens, ...] (its batch axis longer than one sample's 1) or
    [experts, tokens, ...] (`per_expert_tokens`); the block's [samples, s, h] tensors are not."""
    below = descendants(graph, attn_out)
    return {
        name
        for op in graph.ops
        if op.name in below
        for name in op.outputs
        if name and token_layout(graph.tensors[name], routing.experts)
    }


def token_layout(t: Tensor, experts: int) -> bool:
    """Whether a per-sample tensor's batch axis counts tokens, not samples."""
    if t.batch_axis is None:
        return False
    return t.shape[t.batch_axis] > 1 or per_expert_tokens(t, experts)


def per_expert_tokens(t: Tensor, experts: int) -> bool:
    """Whether a tensor is laid out [experts, tokens, ...], the tokens on its batch axis."""
    return len(t.shape) >= 3 and t.shape[0] == experts and t.batch_axis == 1


def embedding_roles(graph: Graph) -> Roles:
    """The word lookup: the Gather from the weight with the most rows (none if there is no lookup)."""
    lookups = [op for op in graph.ops if op.op_type == "Gather" and op.inputs[0] in graph.weights]
    if not lookups:
        return Roles()
    words = max(lookups, key=lambda op: graph.tensors[op.inputs[0]].shape[0])
    return Roles(gather=(words.name,))


def head_roles(graph: Graph) -> Roles:
    """The vocabulary GEMM: the weight GEMM with the widest output (none if there is no GEMM)."""
    gemms = [op for op in graph.ops if op.kind is OpKind.GEMM and weight_of(graph, op.inputs[1]) is not None]
    if not gemms:
        return Roles()
    return Roles(column=(max(gemms, key=lambda op: gemm_dims(op, graph).n).name,))


VOCAB_ROLES: dict[LayerKind, Callable[[Graph], Roles]] = {
    LayerKind.EMBEDDING: embedding_roles,
    LayerKind.HEAD: head_roles,
}
"""How each non-block layer kind is split when the vocabulary is parallel."""


def _aligned(axis: int, source: Tensor, target: Tensor, _attrs: dict[str, AttrValue]) -> int:
    """Broadcasting alignment: the same axis counted from the right."""
    return axis - len(source.shape) + len(target.shape)


def _transposed(axis: int, _source: Tensor, _target: Tensor, attrs: dict[str, AttrValue]) -> int:
    perm = attrs["perm"]
    assert isinstance(perm, tuple)
    return list(perm).index(axis)


def _reshaped(axis: int, source: Tensor, target: Tensor, _attrs: dict[str, AttrValue]) -> int:
    """The target axis whose outer product matches the source axis's (splits the outermost part)."""
    outer = math.prod(source.shape[:axis])
    for j in range(len(target.shape)):
        if math.prod(target.shape[:j]) == outer and target.shape[j] != 1:
            return j
    return -1


AXIS_RULES: dict[str, AxisRule] = {
    "Transpose": _transposed,
    **dict.fromkeys(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), _reshaped),
}
"""How a split axis passes through an op type; every other type keeps it aligned (elementwise, slices)."""

INVERSE_AXIS_RULES: dict[str, AxisRule] = {
    "Transpose": lambda axis, _s, _t, attrs: int(attrs["perm"][axis]),  # type: ignore[index]
    **dict.fromkeys(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), _reshaped),
}
"""How a split axis passes back from a data op's output to its input (weights viewed by data ops)."""


SHAPE_TYPES = frozenset({"Shape", "Size"})
"""Op types whose output describes their input's shape: it is not split with the input."""


class _Sharder:
    """Split axes of a block's tensors: marked from the GEMM roles, propagated through the ops."""

    def __init__(self, graph: Graph, roles: Roles, where: str) -> None:
        self.graph = graph
        self.where = where
        self.split: dict[str, int] = {}
        self.producers = graph.producers()
        self.roles = roles

    def fail(self, message: str) -> PhazecError:
        return PhazecError(f"{self.where}: the tensor-parallel pass {message}; it cannot split this layer.")

    def mark_operand(self, tensor: str, axis: int) -> None:
        """Split a weight operand (and the data ops viewing it) along an axis; a data op that broadcasts
        its input along that axis (multi-head latent attention's rotary key, one for every head) splits
        its output only."""
        while True:
            self.split[tensor] = axis
            op = self.producers.get(tensor)
            if op is None:
                return
            if op.kind is not OpKind.DATA:
                raise self.fail(f"expected {tensor!r} to be a weight or a view of one, found {op.op_type}")
            source = self.graph.tensors[op.inputs[0]]
            axis = INVERSE_AXIS_RULES.get(op.op_type, _aligned)(
                axis, self.graph.tensors[tensor], source, op.attrs
            )
            if op.op_type == "Expand" and 0 <= axis < len(source.shape) and source.shape[axis] == 1:
                return
            tensor = op.inputs[0]

    def gemm_role(self, op: Op) -> None:
        """Split a column-parallel GEMM's weight and output (a gathered one's weight: `shard_graph` gives
        it a split output), or a row-parallel GEMM's weight."""
        b = self.graph.tensors[op.inputs[1]]
        trans_b = bool(op.attrs.get("transB", 0))
        if op.name in self.roles.column or op.name in self.roles.gathered:
            self.mark_operand(op.inputs[1], len(b.shape) - 2 if trans_b else len(b.shape) - 1)
            if len(op.inputs) > 2 and op.inputs[2]:
                self.mark_operand(op.inputs[2], len(self.graph.tensors[op.inputs[2]].shape) - 1)
            if op.name in self.roles.column:
                self.split[op.outputs[0]] = len(self.graph.tensors[op.outputs[0]].shape) - 1
            return
        a = self.graph.tensors[op.inputs[0]]
        reduction = 0 if op.attrs.get("transA", 0) else len(a.shape) - 1
        if self.split.get(op.inputs[0]) != reduction:
            raise self.fail(
                f"expected the row-parallel GEMM {op.name!r} to read its input split along the "
                f"reduction axis, found axis {self.split.get(op.inputs[0])}"
            )
        self.mark_operand(op.inputs[1], len(b.shape) - 1 if trans_b else len(b.shape) - 2)

    def propagate(self, op: Op) -> None:
        """Carry the split axis of an op's inputs to its outputs and to broadcast operands it meets."""
        source = next((name for name in op.inputs if name in self.split), None)
        if source is None:
            return
        axis, src = self.split[source], self.graph.tensors[source]
        rule = AXIS_RULES.get(op.op_type, _aligned)
        for name in op.inputs:
            other = self.graph.tensors.get(name) if name else None
            if other is None or name in self.split or other.dtype not in FLOAT_DTYPES:
                continue
            aligned = _aligned(axis, src, other, op.attrs)
            if 0 <= aligned < len(other.shape) and other.shape[aligned] == src.shape[axis] > 1:
                self.mark_operand(name, aligned)
        for name in op.outputs:
            target = self.graph.tensors[name] if name else None
            if target is None or not target.shape or op.op_type in SHAPE_TYPES:
                continue
            out_axis = rule(axis, src, target, op.attrs)
            if not 0 <= out_axis < len(target.shape):
                raise self.fail(f"cannot carry the split of {source!r} through {op.op_type} {op.name!r}")
            self.split[name] = out_axis

    def run(self) -> dict[str, int]:
        for op in self.graph.ops:
            if op.name in (*self.roles.column, *self.roles.row, *self.roles.gathered):
                self.gemm_role(op)
            elif op.name in self.roles.gather:
                self.mark_operand(op.inputs[0], 0)
            else:
                self.propagate(op)
        return self.split


def role_of(roles: Roles, op: Op) -> str | None:
    """`column`, `row`, `vocab` (a split lookup), `gathered` or None."""
    named = {"column": roles.column, "row": roles.row, "vocab": roles.gather, "gathered": roles.gathered}
    return next((role for role, names in named.items() if op.name in names), None)


def shard_graph(
    graph: Graph, roles: Roles, width: int, where: str, pad: bool, *, tokens: frozenset[str] = frozenset()
) -> Graph:
    """The per-device graph of a layer: split shapes (rounded up if `pad`), roles in attrs, all-reduces
    after row-parallel GEMMs and split lookups, all-gathers around gathered GEMMs (`gathered_gemm`); the
    `tokens` tensors split along their batch axis (rounded up: a share of tokens per expert that t does
    not divide is the busiest rank's)."""
    split = _Sharder(graph, roles, where).run()
    crossed = sorted(tokens.intersection(split))
    if crossed:
        raise PhazecError(
            f"{where}: the tensor-parallel pass found {crossed} both split by a parallel GEMM and among the "
            "routed tokens; it cannot split this layer."
        )
    tensors = dict(graph.tensors)
    for name in tokens:
        tensor = tensors[name]
        axis = tensor.batch_axis
        assert axis is not None
        shape = tuple(-(-d // width) if i == axis else d for i, d in enumerate(tensor.shape))
        tensors[name] = replace(tensor, shape=shape, tp_split=True)
    for name, axis in split.items():
        tensor = tensors[name]
        if tensor.shape[axis] % width and not pad:
            raise PhazecError(
                f"{where}: tensor {name!r} of shape {list(tensor.shape)} cannot be split "
                f"{width} ways along axis {axis}; the tensor-parallel pass cannot split this layer."
            )
        shape = tuple(-(-d // width) if i == axis else d for i, d in enumerate(tensor.shape))
        tensors[name] = replace(tensor, shape=shape, tp_split=True)
    ops: list[Op] = []
    for op in graph.ops:
        role = role_of(roles, op)
        if role is None:
            ops.append(op)
            continue
        attrs: dict[str, AttrValue] = {**op.attrs, "tp": role}
        if role == "column":
            ops.append(replace(op, attrs=attrs))
            continue
        if role == "gathered":
            ops.extend(gathered_gemm(replace(op, attrs=attrs), tensors, width, where))
            continue
        total = op.outputs[0]
        partial = fresh_name(tensors, f"{total}.partial")
        tensors[partial] = replace(tensors[total], name=partial)
        ops.append(replace(op, outputs=(partial, *op.outputs[1:]), attrs=attrs))
        collective_attrs: dict[str, AttrValue] = {"group": width, "bytes": tensors[total].nbytes()}
        ops.append(
            Op(f"{op.name}.allreduce", "AllReduce", OpKind.COLLECTIVE, (partial,), (total,), collective_attrs)
        )
    return replace(graph, tensors=tensors, ops=ops)


def gathered_gemm(op: Op, tensors: dict[str, Tensor], width: int, where: str) -> list[Op]:
    """A gathered GEMM (`Roles.gathered`, its weight split by columns) between its two all-gathers,
    adding their tensors to `tensors`: its input gathered whole from the ranks' shares of the sequence
    (sequence parallelism leaves each rank 1/t of the tokens; the IR's shapes are the gathered ones, and
    the gather's gradient is a reduce-scatter of as many bytes), its output [..., n/t] gathered along the
    columns to [..., n] (Megatron-Core's `gather_from_tensor_model_parallel_region`; the scatter along
    the sequence after it moves nothing, and the gather's gradient, a reduce-scatter of as many bytes,
    stands for the all-gather along the sequence that the scatter's gradient is). Raises PhazecError for
    an output width t does not divide."""
    source, total = op.inputs[0], op.outputs[0]
    whole = fresh_name(tensors, f"{source}.gathered")
    tensors[whole] = replace(tensors[source], name=whole)
    out = tensors[total]
    if out.shape[-1] % width:
        raise PhazecError(
            f"{where}: the output of {op.name!r}, shape {list(out.shape)}, cannot be split {width} ways "
            "along its last axis; the tensor-parallel pass cannot split this layer."
        )
    partial = fresh_name(tensors, f"{total}.partial")
    shape = (*out.shape[:-1], out.shape[-1] // width)
    tensors[partial] = replace(out, name=partial, shape=shape, tp_split=True)
    return [
        Op(f"{op.name}.gather_input", "AllGather", OpKind.COLLECTIVE, (source,), (whole,),
           {"group": width, "bytes": tensors[whole].nbytes()}),
        replace(op, inputs=(whole, *op.inputs[1:]), outputs=(partial, *op.outputs[1:])),
        Op(f"{op.name}.gather_output", "AllGather", OpKind.COLLECTIVE, (partial,), (total,),
           {"group": width, "bytes": out.nbytes()}),
    ]  # fmt: skip


def fresh_name(taken: dict[str, Tensor], wanted: str) -> str:
    """`wanted`, or `wanted.<n>` with the first n that is not taken."""
    name, n = wanted, 1
    while name in taken:
        name, n = f"{wanted}.{n}", n + 1
    return name
