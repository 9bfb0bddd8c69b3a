"""One plan's figures: every part of its time and memory, from the compiled model (`core.evaluate_plan`),
the same functions the DP searches, so the DP's optimum and the evaluation of its plan agree bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypeVar, cast

from phazec.errors import PhazecError
from phazec.solvers import core
from phazec.solvers.placement.problem import (
    RECOMPUTE_MODES,
    Placement,
    PlacementProblem,
    Recompute,
    Stage,
    Stages,
    Variant,
    core_arguments,
    core_variant,
    validated_plan,
)
from phazec.util.checks import integer_at_least

R = TypeVar("R")


@dataclass(frozen=True)
class StageCost:
    """The figures of one stage of a plan that depend on neither d, its position nor the settings."""

    forward_s: float
    """Forward critical path."""
    backward_s: float
    """Backward critical path."""
    weight_grad_s: float
    """Its weight-gradient part: the critical path of the layers' weight-gradient latencies (ZB-H1's W)."""
    selective_s: float
    """Sum of the layers' attention-core forward latencies (selective recompute)."""
    param_bytes: int
    expert_param_bytes: int
    """Of the parameter bytes, the routed experts' (sharded over the expert-data-parallel group)."""
    largest_layer_bytes: int
    """The weights of its largest layer (ZeRO-3 gathers a layer at a time)."""
    stash_bytes: int
    """Kept without recomputation."""
    selective_bytes: int
    """Kept under selective recompute."""
    input_bytes: int
    """Kept under full recompute: the layers' inputs."""
    selective_working_bytes: int
    """The largest attention core of a layer: rebuilt at once under selective recompute."""
    full_working_bytes: int
    """The largest activations of a layer: rebuilt at once under full recompute."""
    op_s: float
    """Sum of the layers' latencies of the ops op recompute runs again."""
    op_bytes: int
    """Kept under op recompute."""
    op_working_bytes: int
    """The largest part of a layer's stash op recompute rebuilds: rebuilt at once under op recompute."""
    block_layers: int
    """The transformer blocks block recompute reruns: the stage's first, `recompute_layers` per model
    chunk (0 in every other mode)."""
    block_s: float
    """Sum of their forward latencies."""
    block_bytes: int
    """Kept under block recompute: their inputs and the other layers' stash."""
    block_working_bytes: int
    """The largest activations of one of them: rebuilt at once under block recompute."""
    cut_bytes: int
    """Bytes crossing the cut after the stage."""
    devices: int


@dataclass(frozen=True)
class StageTime:
    """Time per microbatch of one stage of a plan, in parts; `load_s` is their sum."""

    forward_s: float
    backward_s: float
    recompute_s: float
    p2p_s: float
    """Sending the cut forward and receiving its gradient, for each of the v model chunks."""
    shard_s: float
    """ZeRO-3's weight gathers and gradient reduce-scatter that the passes do not hide."""

    @property
    def load_s(self) -> float:
        """compute + p2p + ZeRO-3's exposed gathers, summed in the model's order (the stage's
        `Stage.load_s`)."""
        return self.forward_s + self.backward_s + self.recompute_s + self.p2p_s + self.shard_s


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one device of one stage of a plan, in parts; `total_bytes` is their sum."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    stash_bytes: int
    """Activations kept for the microbatches in flight."""
    working_bytes: int
    """Activations a recomputation rebuilds at once."""
    in_flight: int
    """Model-chunk microbatches in flight (microbatches for v = 1)."""

    @property
    def parameter_bytes(self) -> int:
        """Weights, gradients and optimizer state."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_state_bytes

    @property
    def total_bytes(self) -> int:
        """Peak bytes on one device (the stage's `Stage.memory_bytes`)."""
        return self.parameter_bytes + self.stash_bytes + self.working_bytes


@dataclass(frozen=True)
class StageSync:
    """What one stage of a plan adds after the pipeline's flush."""

    exposed_s: float
    """The part of its DP gradient sync that nothing hides."""
    step_s: float
    """Its optimizer step."""


@dataclass(frozen=True)
class IterationTime:
    """One iteration in parts, adding up to `Placement.time_per_batch_s` (up to rounding)."""

    bottleneck_stage: int
    """The stage with the largest load (the first on a tie), whose work sets the pace."""
    forward_s: float
    backward_s: float
    recompute_s: float
    p2p_s: float
    shard_s: float
    """ZeRO-3's exposed weight gathers and gradient reduce-scatters of the bottleneck stage, times m."""
    bubble_s: float
    """1F1B's bubble, L (s - 1) / v, or ZB-H1's, (s - 1) max(0, L - 2 W): L the bottleneck load, W the
    stages' least weight-gradient time, each capped at (min(F, B_in) + W) / 2."""
    dp_sync_stage: int
    """The stage whose DP sync and optimizer step end last (the first on a tie): they end the iteration."""
    dp_sync_s: float
    """The exposed part of that stage's DP gradient sync."""
    optimizer_s: float


@dataclass(frozen=True)
class PlanFigures:
    """Every part of a plan's time and memory (what `evaluate_plan` sums)."""

    placement: Placement
    iteration: IterationTime
    modes: tuple[Recompute, ...]
    """Each stage's recompute mode."""
    times: tuple[StageTime, ...]
    memories: tuple[StageMemory, ...]
    costs: tuple[StageCost, ...]
    """Each stage's figures that depend on neither d, its position nor the settings."""
    syncs: tuple[StageSync, ...]
    """Each stage's work after the flush; `iteration.dp_sync_stage`'s ends the iteration."""

    def forward_runs(self) -> tuple[float, ...]:
        """Per stage, forward passes of a layer per microbatch: 2 under full recompute; under block
        recompute 1 plus the share of its layers rerun (each layer taken alike); else 1."""
        return tuple(
            1.0 + (mode == "full") + (cost.block_layers / len(stage.layers) if mode == "block" else 0.0)
            for mode, cost, stage in zip(self.modes, self.costs, self.placement.stages, strict=True)
        )

    def runs_of(self, mode: Recompute) -> tuple[float, ...]:
        """Per stage, 1 where it recomputes in `mode` (selective: its attention cores again; op: the ops
        op recompute reruns), else 0."""
        return tuple(float(own == mode) for own in self.modes)


def plan_figures(problem: PlacementProblem, variant: Variant, stages: Stages, d: int) -> PlanFigures:
    """The figures of a plan at the variant's width t and at d, from the C++ model
    (`core.evaluate_plan`), with none of `explain_plan`'s checks on d and interleave: the plan is timed
    even where its d replicas need more devices or microbatches than there are, or interleaving cannot
    cut its stages into model chunks.

    Raises:
        PhazecError: t has no figures in the problem.
        ValueError: the stages do not hold each layer once in pipeline order, or d < 1 (`explain_plan`
            checks both with a message that says why).
    """
    r = core.evaluate_plan(
        **core_arguments(problem),
        variant=core_variant(problem, variant),
        stages=[list(stage) for stage in stages],
        d=d,
    )
    placement = Placement(
        stages=tuple(Stage(tuple(x.layers), x.devices, x.load_s, x.memory_bytes) for x in r.stages),
        t=r.t,
        d=r.d,
        hbm_bytes=variant.hbm_bytes,
        microbatches_per_pipeline=r.microbatches_per_pipeline,
        time_per_batch_s=r.time_per_batch_s,
        throughput_samples_per_s=problem.samples_per_microbatch
        * problem.microbatch_count
        / r.time_per_batch_s,
        fits_hbm=r.fits_hbm,
    )
    return PlanFigures(
        placement,
        _record(IterationTime, r.iteration),
        modes=tuple(_mode(x.recompute) for x in r.stages),
        times=tuple(_record(StageTime, x.time) for x in r.stages),
        memories=tuple(_record(StageMemory, x.memory) for x in r.stages),
        costs=tuple(_record(StageCost, x.cost) for x in r.stages),
        syncs=tuple(_record(StageSync, x.sync) for x in r.stages),
    )


def evaluate_plan(
    problem: PlacementProblem, variant: Variant, stages: Sequence[Sequence[int]], d: int
) -> Placement:
    """The figures of a given plan under the same model as the DP (e.g. a Megatron baseline), at the
    variant's width, HBM size and settings. A plan that does not fit in HBM is still evaluated;
    `fits_hbm` says so.

    Raises:
        PhazecError: the stages do not split the layers into pipeline order, t has no figures,
            or the plan needs more devices or replicas than there are.
    """
    return explain_plan(problem, variant, stages, d).placement


def explain_plan(
    problem: PlacementProblem, variant: Variant, stages: Sequence[Sequence[int]], d: int
) -> PlanFigures:
    """`evaluate_plan` with every part of its time and memory."""
    plan = validated_plan(problem, stages)
    integer_at_least("d", d, 1)
    # Timed at most at the device count: a larger d needs more devices than there are, refused below.
    figures = plan_figures(problem, variant, plan, min(d, problem.device_count))
    k = sum(stage.devices for stage in figures.placement.stages)
    if d * k > problem.device_count or d > problem.microbatch_count:
        raise PhazecError(
            f"d = {d} is not valid for this plan: {d} replicas of a {k}-device pipeline need {d * k} "
            f"devices and {d} microbatches; there are {problem.device_count} devices and "
            f"{problem.microbatch_count} microbatches."
        )
    interleave = int(variant.settings.get("interleave", 1))
    if not chunks_fit(plan, interleave):
        raise PhazecError(
            f"stages = {[list(stage) for stage in plan]} is not valid under interleave {interleave}: "
            f"with more than one stage, each stage needs at least {interleave} layers, one per model chunk."
        )
    return figures


def chunks_fit(stages: Stages, interleave: int) -> bool:
    """Whether interleaving can cut every stage into its model chunks: one stage (no pipeline), or at
    least `interleave` layers in each (a chunk holds at least one)."""
    return len(stages) == 1 or all(len(stage) >= interleave for stage in stages)


def _mode(index: int) -> Recompute:
    """A stage's recompute mode from the compiled model's index."""
    return cast(Recompute, RECOMPUTE_MODES[index])


def _record(kind: type[R], source: object) -> R:
    """A frozen record of `kind` holding the same-named figures of a result of the compiled model."""
    names = [f.name for f in fields(kind)]  # type: ignore[arg-type]  # every kind given is a dataclass
    return kind(**{name: getattr(source, name) for name in names})
