"""A training graph's per-layer rows: FLOPs, kernels, collectives and memory of each layer, for tables."""

from __future__ import annotations

from dataclasses import dataclass

from phazec.errors import PhazecError
from phazec.ir.core import Graph, LayerMemory, Model, OpKind
from phazec.ir.ops import COLLECTIVE_TYPES, collective_bytes, flops, gemm_dims
from phazec.passes.pipeline import GraphSettings, PassTiming, training_pipeline

ON_CHIP = (OpKind.GEMM, OpKind.VECTOR, OpKind.FUSED)
"""Kinds of operator that run as kernels on the cores."""


@dataclass(frozen=True, slots=True)
class Collectives:
    """The collectives of one type in a graph (`phazec.ir.ops.COLLECTIVE_TYPES`)."""

    op_type: str
    count: int
    tensor_bytes: int
    """Their whole tensors' bytes summed (`phazec.ir.ops.collective_bytes`): what each device contributes
    to an all-reduce or a reduce-scatter, sends (its own share included) in an all-to-all, and holds
    after an all-gather."""


@dataclass(frozen=True, slots=True)
class GraphTotals:
    """FLOPs, kernels and collectives of one operator graph at one microbatch size."""

    flops: int
    gemm_flops: int
    """FLOPs of the matrix products (fused ops' GEMM parts included)."""
    collectives: tuple[Collectives, ...]
    """One entry per collective type the graph has, by type name."""
    kernels: int
    """On-chip operators (GEMMs, vector and fused ops), each a kernel paying `hw.device.kernel_latency_s`;
    collectives pay their tier's call latency instead, views and copies nothing."""

    def collective(self, op_type: str) -> Collectives:
        """The graph's collectives of a type (none: a count of 0)."""
        return next((c for c in self.collectives if c.op_type == op_type), Collectives(op_type, 0, 0))


def graph_totals(graph: Graph, microbatch: int) -> GraphTotals:
    """Sum a graph's FLOPs, GEMM FLOPs, collectives of each type and kernels."""
    gemms = [op for op in graph.ops if op.kind in (OpKind.GEMM, OpKind.FUSED)]
    collectives = []
    for op_type in sorted(COLLECTIVE_TYPES):
        ops = [op for op in graph.ops if op.op_type == op_type]
        if ops:
            collectives.append(
                Collectives(op_type, len(ops), sum(collective_bytes(op, graph, microbatch) for op in ops))
            )
    return GraphTotals(
        flops=sum(flops(op, graph, microbatch) for op in graph.ops),
        gemm_flops=sum(gemm_dims(op, graph, microbatch).flops for op in gemms),
        collectives=tuple(collectives),
        kernels=sum(op.kind in ON_CHIP for op in graph.ops),
    )


@dataclass(frozen=True, slots=True)
class TrainingRow:
    """One layer's per-device figures at one microbatch size: plain values for tables."""

    layer: int
    name: str
    kind: str
    layer_class: int
    tp_width: int
    parameters: int
    """Trainable parameters on one device."""
    forward: GraphTotals
    backward: GraphTotals
    memory: LayerMemory
    microbatch: int
    stash_bytes: int
    """Activations kept for the backward pass of one microbatch (no recompute)."""
    recompute_input_bytes: int
    """Inputs kept for one microbatch when activations are recomputed."""


def rows_at(model: Model, microbatch: int) -> list[TrainingRow]:
    """Per-layer rows of a trained model at a microbatch size; raises PhazecError if it is not trained."""
    rows = []
    for layer in model.layers:
        cls = model.classes[layer.cls]
        if cls.backward is None or cls.memory is None:
            raise PhazecError(
                f"model {model.name!r} has no backward graphs or memory: run the training pipeline "
                "(`phazec.passes.pipeline`)."
            )
        rows.append(
            TrainingRow(
                layer=layer.index,
                name=layer.name,
                kind=layer.kind.value,
                layer_class=layer.cls,
                tp_width=cls.tp_width,
                parameters=cls.memory.parameter_count,
                forward=graph_totals(cls.graph, microbatch),
                backward=graph_totals(cls.backward, microbatch),
                memory=cls.memory,
                microbatch=microbatch,
                stash_bytes=cls.memory.stash_bytes(microbatch),
                recompute_input_bytes=cls.memory.input_bytes(microbatch),
            )
        )
    return rows


def training_rows(
    model: Model, width: int, settings: GraphSettings, *, microbatch: int = 1
) -> tuple[list[TrainingRow], list[PassTiming]]:
    """Run the training pipeline on a lowered model at width t; per-layer rows and pass timings.

    The input model is not changed (it can be shared across widths).
    """
    trained, timings = training_pipeline(width, settings).run(model)
    return rows_at(trained, microbatch), timings
