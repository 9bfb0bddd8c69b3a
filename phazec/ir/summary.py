"""Per-layer figures of a lowered model, as plain rows (the data of `phazec-ir`'s table and ir.json)."""

from __future__ import annotations

from dataclasses import dataclass

from phazec.ir.core import Graph, Model, OpKind
from phazec.ir.ops import flops

COMPUTE_KINDS = (OpKind.GEMM, OpKind.VECTOR, OpKind.FUSED)


@dataclass(frozen=True, slots=True)
class LayerRow:
    """One layer's figures, per sample of the microbatch where they scale with it."""

    index: int
    name: str
    kind: str
    cls: int
    class_count: int
    ops: int
    parameters: int
    forward_flops_per_sample: int
    activation_bytes_per_sample: int
    """Bytes of the batch-scaled tensors the layer's compute ops produce (views excluded)."""


def activation_bytes_per_sample(graph: Graph) -> int:
    """Bytes per sample of the batch-scaled outputs of compute ops."""
    return sum(
        graph.tensors[out].nbytes()
        for op in graph.ops
        if op.kind in COMPUTE_KINDS
        for out in op.outputs
        if out and graph.tensors[out].batch_axis is not None
    )


def forward_flops_per_sample(graph: Graph) -> int:
    """FLOPs of one sample: the difference between microbatch 2 and 1 (per-batch work excluded)."""
    return sum(flops(op, graph, 2) - flops(op, graph, 1) for op in graph.ops)


def summarize(model: Model) -> list[LayerRow]:
    """A row per layer, figures taken from its class's representative graph."""
    rows = []
    for layer in model.layers:
        cls = model.classes[layer.cls]
        graph = cls.graph
        rows.append(
            LayerRow(
                index=layer.index,
                name=layer.name,
                kind=layer.kind.value,
                cls=layer.cls,
                class_count=cls.count,
                ops=len(graph.ops),
                parameters=graph.parameter_count(),
                forward_flops_per_sample=forward_flops_per_sample(graph),
                activation_bytes_per_sample=activation_bytes_per_sample(graph),
            )
        )
    return rows
