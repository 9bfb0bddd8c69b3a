"""One training plan's predicted iteration (`phazec-plan`'s report): `time_plan -> PlanReport`.

The plan (`plan.*`: tp, pp, dp, microbatch, recompute, sequence_parallel, interleave, ...) is timed
on the one design of the `hw` preset with the same model of time and memory the search uses
(`phazec.solvers.placement`: `explain_plan` is `evaluate_plan` with its parts), so `phazec` prints
the same time for the same fixed plan. Layers are split as Megatron does: the transformer blocks
evenly over the stages (or `plan.layers` blocks per stage), the embedding on the first stage, the
multi-token-prediction modules and the head on the last. A plan that does not fit in HBM is still
timed, with a warning (an error with `plan.require_fit=true`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.validation import NO_VALIDATION, Band, band_record
from phazec.ir.core import LayerClass, LayerKind, Model, OpKind
from phazec.ir.ops import flops
from phazec.passes.memory import op_checkpoint, selective_ops
from phazec.predict.evaluator import Candidate, Evaluator, held_share, moe_parts, overlapped
from phazec.predict.layer_costs import ClassCosts
from phazec.predict.training import RECORDED, Training, core_settings
from phazec.solvers.placement.evaluate import PlanFigures, StageMemory, chunks_fit, explain_plan
from phazec.solvers.placement.problem import Placement, Stages, Variant

log = logging.getLogger(__name__)

AUTO_DP = "auto"
"""`plan.dp=auto`, the default: as many pipeline replicas as fill the devices, system.devices / (tp x
pp), so that plans of different widths are compared on the same devices."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One training plan to time (`phazec-plan`'s `plan.*`), as Megatron-LM runs it: its widths, one
    setting of every training knob, and the split of the blocks over the stages."""

    tp: int = 1
    """Tensor-parallel width (one of `model.tp_widths` is not required)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = field(default=1, metadata={"config": (Any, AUTO_DP)})
    """Data-parallel width (pipeline replicas). In the config (`plan.dp`), `auto` (the default) fills
    the devices: system.devices / (tp x pp), refused when it is not a whole number; a number sets it."""
    training: Training = field(default_factory=Training)
    """The training knobs (`plan.<knob>`; the optimizer is `train.optimizer`)."""
    layers: tuple[int, ...] | None = None
    """Transformer blocks of each stage, first stage first; None splits them evenly (Megatron)."""
    require_fit: bool = False
    """Make a plan that does not fit in HBM an error instead of a warning."""
    trace: bool = False
    """Also write `trace.json`, the predicted iteration as a timeline (Chrome trace event format, for
    Perfetto and chrome://tracing): each stage's microbatches, bubble, DP sync and optimizer step, its
    memory over time, and the operator schedule of the bottleneck stage's slowest layer."""


@dataclass(frozen=True)
class Breakdown:
    """One iteration in parts; they add up to `PlanReport.time_per_batch_s` (up to rounding).

    The pipeline's pace is set by its slowest stage (`bottleneck_stage`): its work for the m
    microbatches of a replica, then the bubble, the exposed DP sync and the optimizer step.
    """

    bottleneck_stage: int
    forward_s: float
    """Forward compute of the slowest stage (m microbatches), TP communication excluded."""
    backward_s: float
    """Backward compute of the slowest stage, TP communication excluded."""
    recompute_s: float
    """Recomputation in the backward pass of the slowest stage."""
    tp_communication_s: float
    """Tensor-parallel all-reduces of the forward and backward passes, exposed on the layers'
    critical paths."""
    ep_communication_s: float
    """Expert-parallel all-to-alls (a MoE block's dispatch and combine) of the forward and backward
    passes, exposed on the layers' critical paths."""
    pipeline_p2p_s: float
    """Sending activations forward and receiving gradients back across the stage's cut."""
    weight_gather_s: float
    """ZeRO-3's weight all-gathers and gradient reduce-scatters that the passes do not hide."""
    bubble_s: float
    """Pipeline fill and drain: (stages - 1) / interleave of a microbatch's load of the slowest stage."""
    dp_sync_stage: int
    """The stage whose gradient sync and optimizer step end last: they end the iteration."""
    dp_sync_s: float
    """The exposed part of that stage's data-parallel gradient sync."""
    optimizer_s: float
    """That stage's optimizer step (0 when `plan.optimizer_step=false`)."""

    @property
    def total_s(self) -> float:
        """The sum of the parts."""
        return (
            self.forward_s
            + self.backward_s
            + self.recompute_s
            + self.tp_communication_s
            + self.ep_communication_s
            + self.pipeline_p2p_s
            + self.weight_gather_s
            + self.bubble_s
            + self.dp_sync_s
            + self.optimizer_s
        )


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device of the fullest stage."""

    stage: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activation_stash_bytes: int
    """Activations kept for the microbatches in flight (`in_flight` of them)."""
    activation_working_bytes: int
    """Activations a recomputation rebuilds at once (one layer's, or its attention core's)."""
    in_flight: int
    """Microbatches in flight (model-chunk microbatches under interleaving)."""
    total_bytes: int
    hbm_bytes: int
    headroom_bytes: int
    """HBM minus the total; negative when the plan does not fit."""

    @property
    def activation_bytes(self) -> int:
        """Stash plus working set."""
        return self.activation_stash_bytes + self.activation_working_bytes


@dataclass(frozen=True)
class PlanReport:
    """One plan's predicted iteration: time, throughput, breakdown and memory."""

    model: str
    plan: Plan
    """The plan timed (sequence parallelism off at tp 1, as Megatron-LM turns it off)."""
    devices: int
    """Devices the plan uses: tp * pp * dp."""
    microbatches_per_pipeline: int
    layers_per_stage: tuple[int, ...]
    """Layers of each stage (blocks, plus the embedding on the first and the head on the last)."""
    time_per_batch_s: float
    """Seconds per iteration (as `time_per_batch_s` in result.json)."""
    samples_per_s: float
    tokens_per_s: float
    model_tflops_per_device: float
    """Model FLOPs (forward and backward, no recomputation) per second per device, in TFLOP/s."""
    mfu: float
    """Model FLOPs utilisation of the chip's tensor-core peak."""
    hfu: float
    """Hardware FLOPs utilisation (recomputation counted) of the same peak."""
    peak_tflops: float
    breakdown: Breakdown
    memory: DeviceMemory
    fits: bool
    warning: str | None
    """Why the plan does not fit (None when it fits)."""
    band: Band | str = NO_VALIDATION
    """Where the real iteration time likely falls, from the chip's held-out validation residuals
    (`phazec.hw.validation.band`, set by `phazec-plan`), or why there is none."""

    def plain(self) -> dict[str, Any]:
        """The report as plain data (plan.json): the model, the plan's widths and its recorded knobs
        (`phazec.predict.training.RECORDED`), then every figure; the band as
        `phazec.hw.validation.band_record` writes it."""
        data = dataclasses.asdict(self)
        plan = data.pop("plan")
        knobs = {name: plan["training"][name] for name in RECORDED}
        data["band"] = band_record(self.band)
        return {"model": data.pop("model"), **{k: plan[k] for k in ("tp", "pp", "dp")}, **knobs, **data}


def plan_stages(model: Model, plan: Plan) -> Stages:
    """Megatron's stages: the blocks split evenly (or `plan.layers` per stage), the embedding first,
    the multi-token-prediction modules and the head last; under interleaving every stage holds at least
    one layer per model chunk (`chunks_fit`, the placement's rule), and uneven chunks are timed as 1/v
    of their stage's load."""
    blocks = [layer.index for layer in model.layers if layer.kind is LayerKind.BLOCK]
    counts = list(plan.layers) if plan.layers is not None else None
    if counts is None:
        if len(blocks) % plan.pp:
            raise PhazecError(
                f"plan.pp={plan.pp} does not divide the model's {len(blocks)} transformer blocks; choose a "
                f"divisor of {len(blocks)} or give the blocks of each stage in plan.layers."
            )
        counts = [len(blocks) // plan.pp] * plan.pp
    if len(counts) != plan.pp or sum(counts) != len(blocks) or min(counts) < 1:
        raise PhazecError(
            f"plan.layers={counts} is not valid: give {plan.pp} positive block counts (one per stage, "
            f"plan.pp={plan.pp}) adding up to the model's {len(blocks)} blocks."
        )
    stages, first = [], blocks[0]
    for count in counts:
        stages.append(list(range(first, first + count)))
        first += count
    stages[0][:0] = range(blocks[0])
    stages[-1].extend(range(first, len(model.layers)))
    split = tuple(tuple(stage) for stage in stages)
    interleave = plan.training.interleave
    if not chunks_fit(split, interleave):
        raise PhazecError(
            f"plan.interleave={interleave} needs at least {interleave} layers in every pipeline stage (a "
            "model chunk holds at least one; the embedding and the head count as a layer each of the "
            f"first and the last stage), but the stages hold {[len(stage) for stage in split]}: lower "
            "plan.interleave, or give the stages more blocks (plan.pp, plan.layers)."
        )
    return split


def time_plan(plan: Plan, evaluator: Evaluator, designs: Designs) -> PlanReport:
    """The report of `plan` on the first design, with an evaluator built for the plan's knobs
    (`Knobs.single`; `phazec-plan` builds it from the config, benches pass one whose model they built)."""
    stages = plan_stages(evaluator.graphs[plan.tp], plan)
    hbm_bytes = evaluator.knobs.hbm_bytes[0]
    figures = explain(evaluator, designs, plan.training, (plan.tp, plan.dp, hbm_bytes), stages)
    return plan_report(plan, evaluator, designs, stages, figures)


def explain(
    evaluator: Evaluator,
    designs: Designs,
    training: Training,
    widths: tuple[int, int, int],
    stages: Stages,
) -> PlanFigures:
    """Every part of the time and memory of a plan on the first design (`explain_plan`): its `stages`
    under `training`'s settings at `widths` (tp, dp, HBM bytes)."""
    tp, dp, hbm_bytes = widths
    latencies = evaluator.layer_latencies_s(designs, training)
    problem = evaluator.problem(latencies, 0, training, designs)
    return explain_plan(problem, Variant(tp, hbm_bytes, core_settings(training)), stages, dp)


def explain_candidate(
    evaluator: Evaluator, designs: Designs, candidate: Candidate
) -> tuple[Stages, PlanFigures]:
    """The stages and every figure of a search's plan (`candidate.design` indexes `designs`): the
    same figures the placement DP found for it."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    chosen = designs.take(np.array([candidate.design]))
    stages = tuple(stage.layers for stage in placement.stages)
    widths = (placement.t, placement.d, placement.hbm_bytes)
    return stages, explain(evaluator, chosen, candidate.training, widths, stages)


def plan_report(
    plan: Plan, evaluator: Evaluator, designs: Designs, stages: Stages, figures: PlanFigures
) -> PlanReport:
    """The report of an evaluated plan: throughput, FLOPs, breakdown and the fullest stage's memory."""
    placement = figures.placement
    tp, microbatch = plan.tp, plan.training.microbatch
    model = evaluator.graphs[tp]
    samples = evaluator.system.global_batch
    time_s = placement.time_per_batch_s
    devices = tp * plan.pp * plan.dp * plan.training.cp
    layers = layer_figures(evaluator, designs, model, plan.training)
    model_flops = 0.0
    recompute_flops = 0.0
    for stage, mode, cost in zip(stages, figures.modes, figures.costs, strict=True):
        rerun = cost.block_layers  # block recompute reruns the stage's first blocks
        for v in stage:
            width = tp if model.classes[model.layers[v].cls].tp_width > 1 else 1
            model_flops += width * (layers[v].forward_flops + layers[v].backward_flops)
            block = rerun > 0 and model.layers[v].kind is LayerKind.BLOCK
            rerun -= block
            again = {
                "none": 0,
                "selective": layers[v].core_flops,
                "full": layers[v].forward_flops,
                "op": layers[v].op_flops,
                "block": layers[v].forward_flops if block else 0,
            }[mode]
            recompute_flops += width * again
    microbatches = samples // microbatch
    model_flops *= microbatches
    recompute_flops *= microbatches
    macs = int(designs.num_tc[0]) * int(designs.tc_width[0]) * int(designs.tc_depth[0])
    peak = 2.0 * macs * float(designs.clock_hz[0])
    return PlanReport(
        model=model.name,
        plan=plan,
        devices=devices,
        microbatches_per_pipeline=placement.microbatches_per_pipeline,
        layers_per_stage=tuple(len(stage) for stage in stages),
        time_per_batch_s=time_s,
        samples_per_s=placement.throughput_samples_per_s,
        tokens_per_s=placement.throughput_samples_per_s * model.seq_len,
        model_tflops_per_device=model_flops / time_s / devices / 1e12,
        mfu=model_flops / time_s / devices / peak,
        hfu=(model_flops + recompute_flops) / time_s / devices / peak,
        peak_tflops=peak / 1e12,
        breakdown=breakdown(figures, stages, layers),
        memory=fullest(figures),
        fits=placement.fits_hbm,
        warning=None if placement.fits_hbm else not_fit_warning(fullest(figures), plan),
    )


@dataclass(frozen=True)
class LayerFigures:
    """One layer's figures for the report, per device and microbatch."""

    comm_s: float
    """Tensor-parallel collectives of its forward and backward passes (all-reduces; a
    multi-token-prediction module's all-gathers and reduce-scatters)."""
    all_to_all_s: float
    """Expert-parallel all-to-alls of its forward and backward passes."""
    forward_flops: int
    backward_flops: int
    core_flops: int
    """The forward FLOPs selective recompute repeats (`phazec.passes.memory.selective_ops`)."""
    op_flops: int
    """The forward FLOPs of the ops op recompute runs again (`phazec.passes.memory.op_checkpoint`)."""


def layer_figures(
    evaluator: Evaluator, designs: Designs, model: Model, training: Training
) -> list[LayerFigures]:
    """Per layer: TP all-reduce and EP all-to-all latency on the design, FLOPs, attention-core FLOPs and
    op recompute's."""
    microbatch = training.microbatch
    per_class = []
    for c, cls in enumerate(model.classes):
        costs = evaluator.class_costs(model, c, designs, training)
        comm_s = {"AllReduce": 0.0, "AllToAll": 0.0}
        totals = [0, 0]
        for direction, (graph, op_costs) in enumerate(
            ((cls.graph, costs.forward), (cls.backward, costs.backward))
        ):
            if graph is None or op_costs is None:
                continue
            for i, op in enumerate(graph.ops):
                totals[direction] += flops(op, graph, microbatch)
                if op.kind is OpKind.COLLECTIVE:
                    comm_s["AllToAll" if op.op_type == "AllToAll" else "AllReduce"] += float(
                        op_costs.all_cores_s[i, 0]
                    )
        if training.overlap_moe_expert_parallel_comm and comm_s["AllToAll"] > 0:
            comm_s["AllToAll"] = exposed_all_to_all_s(evaluator, designs, cls, costs, training)
        graph = cls.graph
        again_selective = selective_ops(graph, model.seq_len, training.selective_modules)
        core = sum(flops(graph.ops[i], graph, microbatch) for i in again_selective)
        again = op_checkpoint(graph, cls.backward).recomputed if cls.backward is not None else ()
        repeated = sum(flops(graph.ops[i], graph, microbatch) for i in again)
        per_class.append(
            LayerFigures(comm_s["AllReduce"], comm_s["AllToAll"], totals[0], totals[1], core, repeated)
        )
    return [per_class[layer.cls] for layer in model.layers]


def exposed_all_to_all_s(
    evaluator: Evaluator, designs: Designs, cls: LayerClass, costs: ClassCosts, training: Training
) -> float:
    """What a layer's all-to-alls add on the design when another microbatch's computation hides them
    (`overlapped`, with the cores the dispatcher holds, `held_share`)."""
    assert cls.backward is not None and costs.backward is not None  # the layer has all-to-alls
    forward_s = evaluator.schedules_s(cls.graph, costs.forward, designs)
    backward_s = evaluator.schedules_s(cls.backward, costs.backward, designs)
    parts = moe_parts(cls, costs)
    assert parts is not None  # the layer has all-to-alls
    return float(overlapped(forward_s, backward_s, parts, held_share(designs, training))[2][0])


def breakdown(figures: PlanFigures, stages: Stages, layers: list[LayerFigures]) -> Breakdown:
    """The iteration's parts, the TP all-reduces and EP all-to-alls of the slowest stage's layers
    split out of its forward and backward time (at most all of it)."""
    it = figures.iteration
    top = it.bottleneck_stage
    compute_s = figures.times[top].forward_s + figures.times[top].backward_s
    reduce_s = sum(layers[v].comm_s for v in stages[top])
    exchange_s = sum(layers[v].all_to_all_s for v in stages[top])
    comm = min(reduce_s + exchange_s, compute_s)
    share = 0.0 if compute_s == 0 else comm / compute_s
    tp_share = 0.0 if comm == 0 else share * reduce_s / (reduce_s + exchange_s)
    return Breakdown(
        bottleneck_stage=top,
        forward_s=it.forward_s * (1.0 - share),
        backward_s=it.backward_s * (1.0 - share),
        recompute_s=it.recompute_s,
        tp_communication_s=(it.forward_s + it.backward_s) * tp_share,
        ep_communication_s=(it.forward_s + it.backward_s) * (share - tp_share),
        pipeline_p2p_s=it.p2p_s,
        weight_gather_s=it.shard_s,
        bubble_s=it.bubble_s,
        dp_sync_stage=it.dp_sync_stage,
        dp_sync_s=it.dp_sync_s,
        optimizer_s=it.optimizer_s,
    )


def fullest(figures: PlanFigures) -> DeviceMemory:
    """The memory of the stage with the most bytes per device (the first on a tie)."""
    totals = [x.total_bytes for x in figures.memories]
    i = totals.index(max(totals))
    x: StageMemory = figures.memories[i]
    hbm = figures.placement.hbm_bytes
    return DeviceMemory(
        stage=i,
        weights_bytes=x.weights_bytes,
        gradients_bytes=x.gradients_bytes,
        optimizer_state_bytes=x.optimizer_state_bytes,
        activation_stash_bytes=x.stash_bytes,
        activation_working_bytes=x.working_bytes,
        in_flight=x.in_flight,
        total_bytes=x.total_bytes,
        hbm_bytes=hbm,
        headroom_bytes=hbm - x.total_bytes,
    )


def not_fit_warning(memory: DeviceMemory, plan: Plan) -> str:
    """How much the fullest stage is over HBM, what dominates it, and the remedies the plan does not use
    yet."""
    parts = {
        "weights": memory.weights_bytes,
        "gradients": memory.gradients_bytes,
        "optimizer state": memory.optimizer_state_bytes,
        f"activations kept for {memory.in_flight} microbatches in flight": memory.activation_stash_bytes,
        "the recompute working set": memory.activation_working_bytes,
    }
    dominant = max(parts, key=lambda name: parts[name])
    sharded = "" if plan.dp > 1 else " with dp > 1"
    training = plan.training
    offload = training.offload_layers  # recompute does not combine with it
    remedies = [
        remedy
        for remedy, unused in (
            ("full recompute (plan.recompute=full)", training.recompute in ("selective", "op", "block")),
            ("recompute (plan.recompute=op or full)", training.recompute == "none" and not offload),
            (f"more blocks' activations on the host (plan.offload_layers above {offload})", offload > 0),
            (f"a distributed optimizer (plan.zero_stage=1){sharded}", training.zero_stage == 0),
            (f"FSDP (plan.zero_stage=3){sharded}", training.zero_stage < 3),
            (
                "sequence parallelism (plan.sequence_parallel=true)",
                plan.tp > 1 and not training.sequence_parallel,
            ),
        )
        if unused
    ]
    listed = "".join(f"{remedy}, " for remedy in remedies)
    return (
        f"the plan does not fit: stage {memory.stage} needs {memory.total_bytes / 1e9:.2f} GB per device, "
        f"{-memory.headroom_bytes / 1e9:.2f} GB over the {memory.hbm_bytes / 1e9:g} GB of HBM; the largest "
        f"part is {dominant} ({parts[dominant] / 1e9:.2f} GB). Try {listed}{'or ' if remedies else ''}more "
        "tensor or pipeline parallelism."
    )
