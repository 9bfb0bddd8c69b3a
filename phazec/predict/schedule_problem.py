"""The scheduling pass: a layer's forward or backward graph on one design, scheduled optimally by ILP.

It turns an operator graph and its per-operator costs on one design into a `ScheduleProblem`
(dependencies from the dataflow, zero-cost operators contracted away), which
`phazec.solvers.schedule.solve.schedule` solves; its cache makes identical blocks and designs solve once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phazec.ir.core import Graph, OpKind
from phazec.ir.graph import dataflow_deps
from phazec.solvers.schedule.problem import OpKind as ScheduleKind
from phazec.solvers.schedule.problem import ScheduleOp, ScheduleProblem, contract_free_ops
from phazec.solvers.schema import SolverConfig

SCHEDULE_KIND: dict[OpKind, ScheduleKind] = {
    OpKind.GEMM: ScheduleKind.TC,
    OpKind.VECTOR: ScheduleKind.VC,
    OpKind.FUSED: ScheduleKind.FUSED,
    OpKind.COLLECTIVE: ScheduleKind.COLLECTIVE,
    OpKind.DATA: ScheduleKind.VC,  # costs nothing, so contracted away before the solve
}
"""What each kind of IR operator holds while it runs."""

SHARED_KIND: dict[OpKind, ScheduleKind] = {
    **SCHEDULE_KIND,
    OpKind.VECTOR: ScheduleKind.TC,
    OpKind.FUSED: ScheduleKind.TC,
    OpKind.DATA: ScheduleKind.TC,
}
"""The same when tensor and vector work share the cores: every on-chip op holds one of them."""


def schedule_problem(
    graph: Graph,
    single_core_s: NDArray[np.float64],
    all_cores_s: NDArray[np.float64],
    hbm_s: NDArray[np.float64],
    *,
    num_tc: int,
    num_vc: int,
    config: SolverConfig,
    shared_cores: bool = False,
    collectives_hold_cores: bool = False,
) -> ScheduleProblem:
    """The scheduling problem of a graph whose ops cost `single_core_s` / `all_cores_s` and keep HBM
    busy `hbm_s` on one design.

    With `shared_cores` (a GPU: the same SMs run tensor and vector work), every on-chip op holds a core
    of one common kind, the tensor cores: vector and fused ops become TC ops, so a vector op and a GEMM
    never run side by side on cores that do not exist. With `collectives_hold_cores` a collective holds
    every tensor core while it runs (`ScheduleProblem.collectives_hold_cores`).
    """
    kinds = SHARED_KIND if shared_cores else SCHEDULE_KIND
    ops = tuple(
        ScheduleOp(op.name, kinds[op.kind], float(single), float(spread), float(hbm))
        for op, single, spread, hbm in zip(graph.ops, single_core_s, all_cores_s, hbm_s, strict=True)
    )
    problem = ScheduleProblem(
        ops, dataflow_deps(graph), num_tc, num_vc, config.collectives_as_vector, collectives_hold_cores
    )
    return contract_free_ops(problem)
