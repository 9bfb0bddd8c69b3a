"""The bottleneck block of a found plan and its schedule (drawn as `bottleneck_gantt.png` by
`phazec.report.gantt.write_bottleneck_gantt`).

The bottleneck stage is the pipeline stage with the largest time per microbatch (`Stage.load_s`, the
first one on a tie). Within it, the bottleneck block is the layer and direction (forward or backward)
with the largest latency on the found design, as the evaluator computed it for the placement (the
first layer in stage order on a tie, forward before backward). Its schedule is looked up through the
evaluator's schedule cache, so no ILP is solved again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from phazec.hw.designs import Designs
from phazec.predict.evaluator import Candidate, Evaluator
from phazec.solvers.placement.problem import Placement
from phazec.solvers.schedule.problem import ScheduleProblem
from phazec.solvers.schedule.solve import Schedule, schedule

log = logging.getLogger(__name__)

DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class BottleneckBlock:
    """The slowest block of the bottleneck stage of a plan, and its schedule on the plan's design."""

    stage: int
    """Index of the bottleneck stage in the plan."""
    layer: int
    """Layer id of the block (the first layer of its class in the stage on a tie)."""
    cls: int
    """Index of the layer's class in the training graph at the plan's tensor-parallel width."""
    direction: str
    """`forward` or `backward`."""
    latency_s: float
    """The block's latency as the evaluator computed it for the placement."""
    problem: ScheduleProblem
    schedule: Schedule
    title: str


def design_summary(designs: Designs, i: int) -> str:
    """One design in a few words: its cores, global buffer and area."""
    return (
        f"{designs.num_tc[i]} TC {designs.tc_width[i]}x{designs.tc_depth[i]}, "
        f"{designs.num_vc[i]} VC x{designs.vc_width[i]}, "
        f"GLB {designs.glb_bytes[i] / 2**20:.4g} MiB, {designs.area_mm2[i]:.4g} mm$^2$"
    )


def bottleneck_block(evaluator: Evaluator, designs: Designs, candidate: Candidate) -> BottleneckBlock:
    """The bottleneck block of `candidate`'s plan (`candidate.design` indexes `designs`)."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    chosen = designs.take(np.array([candidate.design]))
    model = evaluator.graphs[placement.t]
    stage = max(range(placement.stage_count), key=lambda s: placement.stages[s].load_s)
    # [2, layers] on the one design: the same figures (and cache hits) as the placement's.
    latencies = evaluator.layer_latencies_s(chosen, candidate.training)[placement.t][0]
    layer, backward = max(
        ((i, b) for i in placement.stages[stage].layers for b in (0, 1)),
        key=lambda lb: latencies[lb[1], lb[0]],
    )
    cls_index = model.layers[layer].cls
    cls = model.classes[cls_index]
    costs = evaluator.class_costs(model, cls_index, chosen, candidate.training)
    graph, op_costs = (cls.backward, costs.backward) if backward else (cls.graph, costs.forward)
    assert graph is not None and op_costs is not None  # a zero latency would not be the maximum
    problem = evaluator.schedule_problem(graph, op_costs, chosen, 0)
    found = schedule(problem, evaluator.solver, evaluator.cache, evaluator.lp_dir)
    latency_s = float(latencies[backward, layer])
    if found.makespan_s != latency_s:
        log.warning(
            "the bottleneck block's schedule takes %.6g s, the placement used %.6g s",
            found.makespan_s,
            latency_s,
        )
    name = model.layers[layer].name
    title = (
        f"{model.name}: bottleneck block, layer {layer} ({name}, class {cls_index} x{cls.count}), "
        f"{DIRECTIONS[backward]}, stage {stage} of {placement.stage_count}\n"
        f"{design_summary(chosen, 0)}; microbatch {candidate.microbatch}, t={placement.t}; "
        f"makespan {found.makespan_s:.4g} s ({found.status})"
    )
    return BottleneckBlock(stage, layer, cls_index, DIRECTIONS[backward], latency_s, problem, found, title)
