"""Fusion: a GEMM whose single consumer is an elementwise op becomes one fused tensor+vector op.

Views between them (a reshape of the GEMM's rows) are looked through. The fused op reads the GEMM's
inputs first, then the elementwise op's other inputs, and writes the elementwise op's outputs; its attrs
keep the GEMM's attributes plus `gemm_type` and `vector_type`, so `gemm_dims` and the vector element
count (its first output) price both parts. A GEMM output that a backward op reads, or that leaves the
layer, is never fused away. Forward and backward graphs are both fused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.ir.core import AttrValue, Graph, LayerClass, Model, Op, OpKind
from phazec.ir.ops import ELEMENTWISE_TYPES, GEMM_TYPES, VIEW_TYPES
from phazec.passes.base import PassResult

RELABEL_TYPES = VIEW_TYPES - {"Transpose"}
"""Views that keep the element order (a reshape of the GEMM's rows): fusion looks through them."""


@dataclass(frozen=True, slots=True)
class Fuse:
    """Fuse each GEMM with the elementwise op that alone consumes it (switchable)."""

    name: ClassVar[str] = "fuse"
    enabled: bool = True
    """False leaves the model unchanged."""

    def __call__(self, model: Model) -> PassResult:
        """Fuse the forward and backward graph of every class."""
        if not self.enabled:
            return PassResult(model, False)
        classes = [fuse_class(cls) for cls in model.classes]
        modified = any(new != old for new, old in zip(classes, model.classes, strict=True))
        return PassResult(replace(model, classes=classes), modified)


def fuse_class(cls: LayerClass) -> LayerClass:
    """A class with its graphs fused; tensors the backward graph reads stay materialised."""
    stash = set(cls.backward.inputs) if cls.backward is not None else set()
    backward = None if cls.backward is None else fuse_graph(cls.backward, set())
    return replace(cls, graph=fuse_graph(cls.graph, stash), backward=backward)


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
    ops = [replaced.get(op.name, op) for op in graph.ops if op.name not in dropped]
    used = {n for op in ops for n in (*op.inputs, *op.outputs) if n}
    used.update(graph.inputs, graph.weights, graph.constants, graph.outputs)
    return replace(graph, tensors={n: t for n, t in graph.tensors.items() if n in used}, ops=ops)
