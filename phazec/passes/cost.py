"""The cost pass: every forward and backward operator of a layer class, priced on many designs at once.

It reads the training graph (after the tensor-parallel, autodiff and fusion passes), turns each
operator into an `OpWork` row for the cost models, and returns single-core and all-cores latency (s)
and energy (J) per operator and design. Costs are an analysis keyed by hardware: they are returned as
frozen records, never written into the IR, so one training graph serves every design.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from phazec.cost.model import LatencyModel, OpCosts, op_costs
from phazec.cost.ops import OpKind as CostKind
from phazec.cost.ops import OpTable, OpWork, vector_class
from phazec.hw.designs import Designs
from phazec.hw.system import System
from phazec.ir.core import Graph, LayerClass, Op, OpKind
from phazec.ir.ops import FLASH_PRODUCTS, collective_bytes, elements, fused_vector_elements, gemm_dims


def _gemm_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    dims = gemm_dims(op, graph, microbatch)
    kind = CostKind.ATTENTION if op.op_type in FLASH_PRODUCTS else CostKind.GEMM
    return OpWork(kind, backward=backward, batch=dims.batch, m=dims.m, k=dims.k, n=dims.n)


def _vector_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    return OpWork(
        CostKind.VECTOR,
        vector_class=vector_class(op.op_type),
        backward=backward,
        vector_elements=elements(op, graph, microbatch),
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


def _collective_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    group = op.attrs["group"]
    assert isinstance(group, int)
    return OpWork(
        CostKind.ALL_REDUCE,
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


def op_work(op: Op, graph: Graph, microbatch: int, backward: bool) -> OpWork:
    """The cost-model row of one operator at a microbatch size, with the bytes it reads and writes."""
    work = WORK_RULES[op.kind](op, graph, microbatch, backward)
    read = sum(graph.tensors[t].nbytes(microbatch) for t in op.inputs if t)
    written = sum(graph.tensors[t].nbytes(microbatch) for t in op.outputs if t)
    return OpWork(**{**work.__dict__, "bytes_read": read, "bytes_written": written})


def op_table(graph: Graph, microbatch: int, backward: bool) -> OpTable:
    """The cost-model table of a graph's operators, in graph order."""
    return OpTable.from_rows([op_work(op, graph, microbatch, backward) for op in graph.ops])


@dataclass(frozen=True, slots=True)
class ClassCosts:
    """Costs of one layer class's operators, arrays [ops, designs] in graph order."""

    forward: OpCosts
    backward: OpCosts | None
    """None when the class has no backward graph (the autodiff pass did not run)."""


def class_costs(
    cls: LayerClass, designs: Designs, system: System, model: LatencyModel, microbatch: int
) -> ClassCosts:
    """Price the forward and backward operators of one class on every design (vectorised)."""
    forward = op_costs(op_table(cls.graph, microbatch, False), designs, system, model)
    if cls.backward is None:
        return ClassCosts(forward, None)
    backward = op_costs(op_table(cls.backward, microbatch, True), designs, system, model)
    return ClassCosts(forward, backward)
