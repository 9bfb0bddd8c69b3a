"""Fusion: operators merged into one kernel, so the tensors between them never reach memory.

- A GEMM whose single consumer is an elementwise op becomes one fused tensor+vector op. Views between
  them (a reshape of the GEMM's rows) are looked through. The fused op reads the GEMM's inputs first,
  then the elementwise op's other inputs, and writes the elementwise op's outputs; its attrs keep the
  GEMM's attributes plus `gemm_type` and `vector_type`, so `gemm_dims` and the vector element count
  (its first output) price both parts.
- With `elementwise`, every connected group of elementwise vector ops whose tensors between them are
  read by nothing else becomes one `FusedElementwise` op (a GPU's fused kernels: Megatron-LM's bias-GELU
  and bias-dropout-add, a compiler's pointwise fusion). It reads the group's inputs once, writes the
  tensors that leave it once, and keeps each member's op type and element count in its attrs, so its
  FLOPs and vector work are the members' sum (`phazec.ir.ops.member_elements`). A group that a path
  through another op leaves and re-enters is not fused.

A tensor that a backward op reads, or that leaves the layer, is never fused away. Forward and backward
graphs are both fused; the memory pass reads only what the backward graph reads, so fusion changes no
memory figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.ir.core import AttrValue, Graph, LayerClass, Model, Op, OpKind
from phazec.ir.graph import dataflow_deps, topological_order
from phazec.ir.ops import ELEMENTWISE_TYPES, FUSED_ELEMENTWISE, GEMM_TYPES, VIEW_TYPES
from phazec.passes.base import PassResult

RELABEL_TYPES = VIEW_TYPES - {"Transpose"}
"""Views that keep the element order (a reshape of the GEMM's rows): fusion looks through them."""


@dataclass(frozen=True, slots=True)
class Fuse:
    """Fuse each GEMM with the elementwise op that alone consumes it, and optionally chains of
    elementwise ops (switchable)."""

    name: ClassVar[str] = "fuse"
    enabled: bool = True
    """False leaves GEMMs and their elementwise consumers apart."""
    elementwise: bool = False
    """Fuse groups of elementwise ops into one kernel each."""

    def __call__(self, model: Model) -> PassResult:
        """Fuse the forward and backward graph of every class."""
        if not (self.enabled or self.elementwise):
            return PassResult(model, False)
        classes = [fuse_class(cls, self.enabled, self.elementwise) for cls in model.classes]
        modified = any(new != old for new, old in zip(classes, model.classes, strict=True))
        return PassResult(replace(model, classes=classes), modified)


def fuse_class(cls: LayerClass, gemms: bool, elementwise: bool) -> LayerClass:
    """A class with its graphs fused (GEMMs with their elementwise consumer, then elementwise groups);
    tensors the backward graph reads stay materialised."""
    stash = set(cls.backward.inputs) if cls.backward is not None else set()

    def fuse(graph: Graph, keep: set[str]) -> Graph:
        graph = fuse_graph(graph, keep) if gemms else graph
        return fuse_elementwise(graph, keep) if elementwise else graph

    backward = None if cls.backward is None else fuse(cls.backward, set())
    return replace(cls, graph=fuse(cls.graph, stash), backward=backward)


def fusion_chain(graph: Graph, gemm: Op, keep: set[str], consumers: dict[str, list[Op]]) -> list[Op] | None:
    """The views and the elementwise op that follow a GEMM, or None if it cannot be fused."""
    chain: list[Op] = []
    tensor = gemm.outputs[0]
    while tensor not in keep and tensor not in graph.outputs and len(consumers.get(tensor, [])) == 1:
        op = consumers[tensor][0]
        chain.append(op)
        if op.op_type not in RELABEL_TYPES:
            same_size = graph.tensors[op.outputs[0]].numel() == graph.tensors[gemm.outputs[0]].numel()
            fusable = op.kind is OpKind.VECTOR and op.op_type in ELEMENTWISE_TYPES and same_size
            return chain if fusable and op.inputs.count(tensor) == 1 else None
        tensor = op.outputs[0]
    return None


def fuse_graph(graph: Graph, keep: set[str]) -> Graph:
    """The graph with every fusable GEMM merged into its elementwise consumer."""
    consumers = graph.consumers()
    replaced: dict[str, Op] = {}
    dropped: set[str] = set()
    for op in graph.ops:
        if op.kind is not OpKind.GEMM or op.op_type not in GEMM_TYPES:
            continue
        chain = fusion_chain(graph, op, keep, consumers)
        if chain is None or chain[-1].name in replaced:  # a vector op absorbs one GEMM
            continue
        vector = chain[-1]
        inner = {op.outputs[0], *(o for view in chain[:-1] for o in view.outputs)}
        attrs: dict[str, AttrValue] = {**op.attrs, "gemm_type": op.op_type, "vector_type": vector.op_type}
        extra = tuple(i for i in vector.inputs if i not in inner)
        replaced[vector.name] = Op(
            f"{op.name}+{vector.name}", "Fused", OpKind.FUSED, (*op.inputs, *extra), vector.outputs, attrs
        )
        dropped.update({op.name, *(view.name for view in chain[:-1])})
    if not replaced:
        return graph
    return with_ops(graph, [replaced.get(op.name, op) for op in graph.ops if op.name not in dropped])


def with_ops(graph: Graph, ops: list[Op]) -> Graph:
    """The graph with new ops, keeping only the tensors they (or the graph's interface) use."""
    used = {n for op in ops for n in (*op.inputs, *op.outputs) if n}
    used.update(graph.inputs, graph.weights, graph.constants, graph.outputs)
    return replace(graph, tensors={n: t for n, t in graph.tensors.items() if n in used}, ops=ops)


def _chainable(op: Op) -> bool:
    return op.kind is OpKind.VECTOR and op.op_type in ELEMENTWISE_TYPES


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def internal_tensors(graph: Graph, keep: set[str]) -> set[str]:
    """Tensors an elementwise op writes and only elementwise ops read, that no backward op reads and
    that do not leave the layer: what a fused kernel keeps in registers."""
    producers = graph.producers()
    return {
        t
        for t, readers in graph.consumers().items()
        if t in producers and _chainable(producers[t]) and all(_chainable(op) for op in readers)
        and t not in keep and t not in graph.outputs
    }  # fmt: skip


def elementwise_groups(graph: Graph, internal: set[str]) -> list[list[int]]:
    """The positions of each group of two or more elementwise ops joined by internal tensors, in
    graph order; groups that a path through another op leaves and re-enters are left out."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.outputs if t}
    parent = list(range(len(graph.ops)))
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            if t in internal:
                parent[_find(parent, i)] = _find(parent, producer[t])
    groups: dict[int, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if _chainable(op):
            groups.setdefault(_find(parent, i), []).append(i)
    return [g for g in groups.values() if len(g) > 1 and _convex(graph, g)]


def _convex(graph: Graph, group: list[int]) -> bool:
    """No path leaves the group through another op and comes back (ops are in topological order, so
    such a path runs through ops between the group's first and last)."""
    members = set(group)
    written = {t for i in group for t in graph.ops[i].outputs if t}
    left: set[str] = set()  # tensors that other ops, depending on the group, write
    for i in range(group[0], group[-1] + 1):
        op = graph.ops[i]
        if i in members and left.intersection(op.inputs):
            return False
        if i not in members and (left | written).intersection(op.inputs):
            left.update(t for t in op.outputs if t)
    return True


def fused_elementwise_op(graph: Graph, members: list[Op], internal: set[str]) -> Op:
    """One op for a group of elementwise ops: the group's inputs in, its non-internal outputs out."""
    written = {t for op in members for t in op.outputs if t}
    inputs = dict.fromkeys(t for op in members for t in op.inputs if t and t not in written)
    outputs = tuple(t for op in members for t in op.outputs if t and t not in internal)

    def largest(op: Op, per_sample: bool) -> int:
        tensors = [graph.tensors[t] for t in (*op.inputs, *op.outputs) if t]
        return max((t.numel() for t in tensors if (t.batch_axis is not None) == per_sample), default=0)

    attrs: dict[str, AttrValue] = {
        "member_types": ",".join(op.op_type for op in members),
        "member_fixed_elements": tuple(largest(op, False) for op in members),
        "member_sample_elements": tuple(largest(op, True) for op in members),
    }
    name = f"{members[0].name}..{members[-1].name}"
    return Op(name, FUSED_ELEMENTWISE, OpKind.VECTOR, tuple(inputs), outputs, attrs)


def fuse_elementwise(graph: Graph, keep: set[str]) -> Graph:
    """The graph with every group of elementwise ops (`elementwise_groups`) as one fused op, the ops
    reordered topologically, each as early as its original position allows."""
    internal = internal_tensors(graph, keep)
    groups = elementwise_groups(graph, internal)
    if not groups:
        return graph
    grouped = {i for g in groups for i in g}
    nodes = [(i, op) for i, op in enumerate(graph.ops) if i not in grouped]
    nodes += [(g[0], fused_elementwise_op(graph, [graph.ops[i] for i in g], internal)) for g in groups]
    fused = with_ops(graph, [op for _, op in sorted(nodes, key=lambda n: n[0])])
    order = topological_order(len(fused.ops), dataflow_deps(fused))
    return replace(fused, ops=[fused.ops[i] for i in order])
