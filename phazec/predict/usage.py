"""Utilisation of the cores and energy of a plan: what every result reports beside its throughput.

For one design, microbatch and tensor-parallel width, each layer's forward and backward schedule
(the same cached exact schedules the search used) gives the core-seconds it keeps the tensor cores
and the vector cores busy: each operator's duration times the cores it holds (every core of its
type when it is spread over them, one otherwise; a fused operator holds one of each). Each layer's
energy comes from `phazec.cost.energy` split into compute (MACs and vector-lane cycles), on-chip
buffers (per-core and global), HBM and network (collectives inside the layer).

A plan then runs, per training iteration, `microbatches_per_pipeline` microbatches through each
stage: forward, backward, and where the stage recomputes (the placement model's mode of the stage,
`PlanFigures.modes`: not the last stage under PHAZE's rule) the forward again under full recompute
(under block recompute, the share of the stage's layers it reruns),
its attention cores' ops under selective recompute, or the ops op recompute runs again, each spread
over every core of its kind, one after another, as the placement model times them
(`phazec.predict.evaluator.attention_core_s`, `op_recompute_s`). Per
device of a stage:

    utilisation = microbatches * busy core-seconds per microbatch / (cores * time per batch)

`bottleneck` is the device of the stage with the largest time per microbatch (the first on a tie),
`mean` the average over every device of the plan (stages weighted by their devices; data-parallel
replicas are identical). Energy per iteration adds every device's layer energy over its microbatches,
plus the network energy of the plan itself: each cut's activations forward and their gradients back
(2 x cut bytes per microbatch and replica) and the data-parallel ring all-reduce of each device's
gradients (2(d-1)/d x its parameter bytes), at `LINK_BYTE_J` a byte. Energy per sample divides by
the global batch. Sources of the per-event energies: `phazec.hw.energy` (Horowitz, ISSCC 2014, at
45 nm; O'Connor et al., MICRO 2017, for HBM2). Leakage and idle power are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from phazec.cost.energy import ENERGY_PARTS, op_energy_parts_j
from phazec.hw.designs import Designs
from phazec.hw.energy import LINK_BYTE_J
from phazec.ir.core import Graph
from phazec.passes.memory import op_checkpoint, selective_ops
from phazec.predict.evaluator import OUTER_KNOBS, Candidate, Evaluator
from phazec.predict.layer_costs import class_split, op_table
from phazec.predict.training import Training, core_settings
from phazec.solvers.placement.evaluate import PlanFigures, plan_figures
from phazec.solvers.placement.problem import Placement, Variant
from phazec.solvers.schedule.problem import TC, VC, ScheduleProblem
from phazec.solvers.schedule.solve import Schedule, schedule

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class LayerWork:
    """What one device does for each layer and one microbatch."""

    tc_busy_s: F64
    """Tensor-core core-seconds; arrays here are [4, layers]: forward, backward, the attention core's
    forward ops (what selective recompute repeats) and the forward ops op recompute runs again."""
    vc_busy_s: F64
    """Vector-core core-seconds."""
    energy_j: dict[str, F64]
    """Energy by part (ENERGY_PARTS)."""


@dataclass(frozen=True)
class PlanWork:
    """The plan-level figures `plan_usage` needs beside the layers' work."""

    num_tc: int
    num_vc: int
    cut_bytes: tuple[int, ...]
    """Per stage, the bytes crossing the cut after it, per microbatch."""
    param_bytes: tuple[int, ...]
    """Per stage, the parameter (and gradient) bytes on one of its devices."""
    expert_param_bytes: tuple[int, ...]
    """Per stage, the routed experts' of them, reduced over the expert-data-parallel group."""
    ep: int
    """The expert-parallel width: the expert-data-parallel group is t d / ep devices of the d replicas'."""
    tp: int
    """The tensor-parallel width t: an expert's weights are whole on each of its t devices."""
    samples_per_batch: int
    forward_runs: tuple[float, ...]
    """Per stage, forward passes per microbatch: 2 where the stage recomputes in full (the placement
    model's mode of the stage), 1 plus the share of its layers rerun under block recompute
    (`PlanFigures.forward_runs`), else 1."""
    core_runs: tuple[float, ...]
    """Per stage, attention-core repeats per microbatch: 1 where the stage recomputes selectively, else 0."""
    op_runs: tuple[float, ...]
    """Per stage, repeats per microbatch of the ops op recompute runs again: 1 where the stage recomputes
    in op mode, else 0."""


def busy_core_s(problem: ScheduleProblem, found: Schedule) -> tuple[float, float]:
    """Core-seconds a schedule keeps the tensor cores and the vector cores busy."""
    return _busy_core_s(problem, found.duration_s, found.spread)


def _busy_core_s(
    problem: ScheduleProblem, duration_s: Sequence[float], spread: Sequence[bool]
) -> tuple[float, float]:
    """Core-seconds of the problem's ops run for `duration_s`, each over every core of its kind where
    `spread`, else one."""
    busy = {TC: 0.0, VC: 0.0}
    for i in range(len(problem.ops)):
        for resource in problem.resources(i):
            if resource in busy:
                cores = problem.capacity(resource) if spread[i] else 1
                busy[resource] += duration_s[i] * cores
    return busy[TC], busy[VC]


def core_busy_s(problem: ScheduleProblem, graph: Graph, core: Sequence[int]) -> tuple[float, float]:
    """Core-seconds of some of a forward graph's ops (`core`: their indices, the attention core's
    `selective_ops` or op recompute's) on a problem built from it, each spread over every core of its kind
    (`ScheduleOp.latency_io_s`)."""
    names = {graph.ops[i].name for i in core}
    duration_s = [op.latency_io_s if op.name in names else 0.0 for op in problem.ops]
    return _busy_core_s(problem, duration_s, [True] * len(problem.ops))


def layer_work(evaluator: Evaluator, design: Designs, training: Training, t: int) -> LayerWork:
    """Each layer's busy core-seconds and energy on the one design of `design`, at width t, under
    `training`'s microbatch, sequence parallelism, precision and context-parallel width."""
    model = evaluator.graphs[t]
    shape = (4, len(model.classes))
    tc_s, vc_s = np.zeros(shape), np.zeros(shape)
    energy = {part: np.zeros(shape) for part in ENERGY_PARTS}
    for c, cls in enumerate(model.classes):
        costs = evaluator.class_costs(model, c, design, training)
        graphs = [(0, cls.graph, costs.forward)]
        if cls.backward is not None and costs.backward is not None:
            graphs.append((1, cls.backward, costs.backward))
        for direction, graph, op_costs in graphs:
            problem = evaluator.schedule_problem(graph, op_costs, design, 0)
            tc_s[direction, c], vc_s[direction, c] = busy_core_s(
                problem, schedule(problem, evaluator.solver, evaluator.cache, evaluator.lp_dir)
            )
            table = op_table(graph, class_split(model, c, training, direction == 1))
            parts = op_energy_parts_j(table, design, evaluator.system)
            for part in ENERGY_PARTS:
                energy[part][direction, c] = float(parts[part].sum())
            if direction == 0:
                again = [selective_ops(graph, model.seq_len, training.selective_modules)]
                if cls.backward is not None:
                    again.append(list(op_checkpoint(graph, cls.backward).recomputed))
                for row, ops in enumerate(again, start=2):
                    tc_s[row, c], vc_s[row, c] = core_busy_s(problem, graph, ops)
                    for part in ENERGY_PARTS:
                        energy[part][row, c] = float(parts[part][ops].sum())
    layer_class = np.array([layer.cls for layer in model.layers])
    return LayerWork(
        tc_s[:, layer_class], vc_s[:, layer_class], {part: e[:, layer_class] for part, e in energy.items()}
    )


def _per_microbatch(placement: Placement, layers: F64, plan: PlanWork) -> F64:
    """Per stage, the sum over its layers of a [4, layers] array's forward passes, backward pass,
    attention-core repeats and op recompute's (`plan.forward_runs`, one, `plan.core_runs`,
    `plan.op_runs`)."""
    out = np.zeros(placement.stage_count)
    for i, stage in enumerate(placement.stages):
        rows = list(stage.layers)
        out[i] = (
            layers[0, rows].sum() * plan.forward_runs[i]
            + layers[1, rows].sum()
            + layers[2, rows].sum() * plan.core_runs[i]
            + layers[3, rows].sum() * plan.op_runs[i]
        )
    return out


def plan_usage(placement: Placement, work: LayerWork, plan: PlanWork) -> dict[str, Any]:
    """Utilisation of tensor and vector cores (bottleneck device and mean over devices) and energy per
    iteration and per sample, by part, of one plan (see the module docstring)."""
    m, d = placement.microbatches_per_pipeline, placement.d
    devices = np.array([stage.devices for stage in placement.stages], dtype=np.float64)
    bottleneck = int(np.argmax([stage.load_s for stage in placement.stages]))
    usage: dict[str, Any] = {}
    for name, busy_s, cores in (
        ("tensor_core", work.tc_busy_s, plan.num_tc),
        ("vector_core", work.vc_busy_s, plan.num_vc),
    ):
        per_device = m * _per_microbatch(placement, busy_s, plan) / (cores * placement.time_per_batch_s)
        usage[f"{name}_utilisation_bottleneck"] = float(per_device[bottleneck])
        usage[f"{name}_utilisation_mean"] = float((per_device * devices).sum() / devices.sum())
    iteration_j = {
        part: float(d * m * (_per_microbatch(placement, work.energy_j[part], plan) * devices).sum())
        for part in ENERGY_PARTS
    }
    transfers = 2.0 * m * d * sum(plan.cut_bytes)
    experts = np.array(plan.expert_param_bytes, dtype=np.float64)
    dense = np.array(plan.param_bytes, dtype=np.float64) - experts
    # A ring all-reduce over g of the d replicas sends 2 (g - 1) / g of its bytes from each of them; the
    # routed experts' over the expert-data-parallel group, t d / ep devices (whole on each of a stage's t).
    expert_group = max(1.0, plan.tp * d / plan.ep)
    allreduce = 2.0 * (d - 1) * float((devices * dense).sum())
    allreduce += 2.0 * (expert_group - 1.0) * d / expert_group * float((devices * experts).sum())
    iteration_j["network"] += (transfers + allreduce) * LINK_BYTE_J
    iteration_j["total"] = sum(iteration_j[part] for part in ENERGY_PARTS)
    usage["energy_per_iteration_j"] = iteration_j
    usage["energy_per_sample_j"] = {k: v / plan.samples_per_batch for k, v in iteration_j.items()}
    return usage


UTILISATION_KEYS = (
    "tensor_core_utilisation_bottleneck",
    "tensor_core_utilisation_mean",
    "vector_core_utilisation_bottleneck",
    "vector_core_utilisation_mean",
)
"""The utilisation figures of `plan_usage`, fractions in [0, 1]."""
USAGE_KEYS = (
    "peak_power_w",
    "throughput_per_watt",
    *UTILISATION_KEYS,
    "energy_per_iteration_j",
    "energy_per_sample_j",
)
"""The keys a result holds for its plan beside design, plan and throughput."""
USAGE_COLUMNS = USAGE_KEYS
"""explored.csv's columns for them (energies: the total)."""


def usage_cells(figures: dict[str, Any]) -> list[str]:
    """A feasible row's USAGE_COLUMNS cells of `outcome`-style figures (energies: the total)."""
    return [
        repr(figures[key]["total"] if isinstance(figures[key], dict) else figures[key])
        for key in USAGE_COLUMNS
    ]


@dataclass
class Usage:
    """`plan_usage` of feasible candidates on `designs`, sharing the layer work of each design, t and
    setting of the knobs the layers depend on (`OUTER_KNOBS`: the others, such as interleave or the
    ZeRO stage, only change the plan)."""

    evaluator: Evaluator
    designs: Designs
    _work: dict[tuple[int, int, tuple[Any, ...]], LayerWork] = field(default_factory=dict)

    def __call__(self, candidate: Candidate) -> dict[str, Any]:
        """The figures of a feasible candidate, its design being `designs[candidate.design]`."""
        placement = candidate.result
        assert isinstance(placement, Placement)
        design = self.designs.take(np.array([candidate.design]))
        training = candidate.training
        microbatch, t = training.microbatch, placement.t
        key = (candidate.design, t, tuple(getattr(training, name) for name in OUTER_KNOBS))
        if key not in self._work:
            self._work[key] = layer_work(self.evaluator, design, training, t)
        figures = plan_sizes(self.evaluator, design, candidate)
        costs = figures.costs
        plan = PlanWork(
            num_tc=int(design.num_tc[0]),
            num_vc=int(design.num_vc[0]),
            cut_bytes=tuple(c.cut_bytes for c in costs),
            param_bytes=tuple(c.param_bytes for c in costs),
            expert_param_bytes=tuple(c.expert_param_bytes for c in costs),
            ep=training.ep,
            tp=t,
            samples_per_batch=self.evaluator.system.global_batch // microbatch * microbatch,
            forward_runs=figures.forward_runs(),
            core_runs=figures.runs_of("selective"),
            op_runs=figures.runs_of("op"),
        )
        return plan_usage(placement, self._work[key], plan)


def plan_sizes(evaluator: Evaluator, design: Designs, candidate: Candidate) -> PlanFigures:
    """The figures of a feasible candidate's plan (on the one design of `design`) that depend on sizes
    alone: each stage's bytes and cut (`PlanFigures.costs`) and recompute mode (`PlanFigures.modes`),
    from the compiled model, its latencies all taken as one second (its times mean nothing)."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    training, t = candidate.training, placement.t
    layers = len(evaluator.graphs[t].layers)
    no_latency = {width: np.ones((1, 5, layers)) for width in evaluator.graphs}
    problem = evaluator.problem(no_latency, 0, training, design)
    variant = Variant(t, placement.hbm_bytes, core_settings(training))
    return plan_figures(problem, variant, tuple(stage.layers for stage in placement.stages), 1)
