"""Optimal pipeline, tensor- and data-parallel placement of a layer graph (the C++ DP, typed).

The model, in seconds and bytes, shared by the C++ DP (`phazec._core`) and `evaluate_plan`:

* Plan. The layers are split into `s` stages in pipeline order; a stage is the difference of two
  downsets of the layer DAG, so no edge runs from a later stage to an earlier one. Stages are
  counted from the end for memory: under 1F1B the stage at position `p` from the end (the last
  stage has p = 1) keeps `p` microbatches in flight (at most the m there are). A stage runs on `t`
  devices when it holds a tensor-parallel layer, else on one device; a pipeline uses `k` devices
  in all, and `d` replicas of it run data-parallel, each on `m = ceil(microbatches / d)`
  microbatches. A plan needs `d * k <= devices` and `d <= microbatches`.
* Device numbering. Device ids run 0..devices-1; tier `i` links aligned groups of
  `group_size_i` consecutive ids (ids a and b share a group iff a // g == b // g). Replica r
  holds ids r*k .. r*k + k - 1, its stages in pipeline order. A set of devices talks over the first
  tier whose aligned group holds all of them.
* Execution settings (Megatron-LM's): recompute mode r in {none, selective, full} (the last stage
  recomputes too unless `last_stage_recomputes` is false: PHAZE's rule), interleave v (virtual
  stages per device, interleaved 1F1B; with more than one stage each holds at least v layers),
  distributed optimizer (optimizer state sharded over the d replicas, ZeRO-1), DP-gradient overlap,
  and the HBM bandwidth that times the optimizer step.
  A stage's own mode is r, or none for the last stage under PHAZE's rule.
* Stage load per microbatch. compute = forward critical path F + backward critical path B of the
  stage's layers (longest path of latencies through the stage's own edges), plus the recompute time
  R: F under full recompute, the sum of the layers' attention-core forward latencies under
  selective, 0 under none. The tensors crossing the cut after a stage are sent forward by it and
  their gradients received back by it; tensors of earlier stages needed further down are relayed
  across the cut too, and a layer sends each tensor once per cut (its largest edge into the later
  stages counts). load = compute + 2 v transfer(cut bytes) (each of the v model chunks of a stage
  sends and receives), transfer(b) = b / bandwidth + latency (0 when b = 0). Every pipeline
  transfer uses the tier of a whole replica's devices, the slowest over the d replicas (1F1B runs
  them in lockstep). This is conservative for two neighbouring stages inside one node of a larger
  pipeline: a downset DP knows where a stage sits but not which layers the next stage holds.
* Time per batch = max stage load * (m + (s - 1) / v) + the largest, over stages, of the stage's
  exposed DP sync + its optimizer step (each stage syncs and steps its own weights on its own
  devices after the flush; the last to finish ends the iteration), where the bubble (s - 1) / v of
  a stage's work is interleaved 1F1B's (1F1B's for v = 1). A stage's DP sync is the ring all-reduce
  of its gradients over its d replicas: 2 (d-1)/d * param bytes / bandwidth + 2 (d-1) latency. Every
  stage's DP group is taken to sit as the first stage's does: on the tier holding ids 0 .. (d-1) k +
  width - 1, the first stage's width for it and t (at most k) for the later stages (conservative
  for a later stage without tensor-parallel layers). When that group spans several groups of the tier below
  (nodes), each node holds some members of each of the width DP groups (device j of every replica's
  first stage, ids r k + j), each member with a link of its own (a DGX has a NIC per GPU), and the
  hierarchical all-reduce drives them all: the bandwidth is the fewest members a node holds of any
  DP group that spans several nodes (rails; lower group size / k when k divides it, d mod that in a
  last, partial node; 1 when k is at least the lower group size; counted exactly otherwise) times
  the tier's per device, at most the tier below's. Each sync starts after the flush (conservative
  for a later stage, whose own flush ends earlier, by the drain behind it) and is exposed whole,
  as PHAZE's formula has it, except that with `overlap_grad_reduce` the first stage's reduction
  hides behind its last backward pass B (exposed = max(0, sync - W), W = B) and a later stage's
  behind W = B / v, the first stage's last backward pass of one model chunk, which it runs after
  the later stage's flush ends (the later stage's own last backward pass, which Megatron also hides
  it behind, is not counted: conservative). A distributed optimizer's reduce-scatter plus
  all-gather moves the same bytes as the all-reduce, half each: the reduce-scatter hides as the
  reduction above (max(0, sync/2 - W)), the all-gather behind the first stage's forward pass F with
  `overlap_param_gather` (max(0, sync/2 - F)), else it is exposed. Without these switches the time
  only grows with every layer latency (the `bounded` search's dominance rests on it). With them a
  longer pass hides more, so the time can fall as a latency grows; `bound_sync_windows` (the
  `bounded` search's lower bound) instead opens each window that can open as long as the bottleneck
  load X allows (B / v, B and B + F are at most X): W = X, or X / 2 for each of a distributed
  optimizer's two when both open. That time is never above the real one, and never falls as X
  grows (X times the slots, at least 1, grows as fast as any window). A stage's exposed sync + step
  grows with its weights, so the DP keeps, per set of stages, the plans no other beats on both the
  largest load and the largest weights.
  A stage's optimizer step zeroes every gradient for the next iteration, reads its shard
  of the gradients and reads and writes its shard of the weights and its optimizer state: (P' + 3
  shard + 2 state) bytes / HBM bandwidth, P' = the stage's weight (= gradient) bytes, shard =
  ceil(P' / d) with a distributed optimizer (each replica updates only its 1/d), P' otherwise, where
  it is twice the parameter memory (0 when the bandwidth is given as 0: the step is not timed, as in
  PHAZE).
* Memory per device of the stage at position q from the end (of s stages) = weights 2P +
  gradients 2P + optimizer state (0 for SGD, 6 * 2P for mixed-precision Adam: 12 bytes per
  parameter, divided over the d replicas rounding up with a distributed optimizer; P = the stage's
  bytes of 2-byte weights / 2) + ceil(kept * u / v) + working, where u is the number of model-chunk
  microbatches in flight on it (q for v = 1; 2 (q - 1) + (v - 1) s + 1 for v > 1, Megatron's
  interleaved warm-up plus one; never more than the m v model-chunk microbatches of a replica, as
  Megatron's warm-up stops at the microbatches there are) and, summing/maximising over the stage's layers:
  none: kept = stash bytes, working = 0; selective: kept = selective stash bytes (the attention core
  dropped), working = max(stash - selective stash) (one layer's attention core rebuilt);
  full: kept = input bytes (each layer's input), working = max activation bytes (one layer's full
  activations rebuilt). A plan fits when every stage fits in HBM.

The model is implemented once, in C++ (`ext/src/placement.cpp`; the settings it reads are declared
in `ext/include/phazec/placement.hpp`): the DP searches it and `evaluate_plan` times one plan with
the same functions, so the DP's optimum and `evaluate_plan` of its plan agree bit for bit.
"""

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.hw.system import NetworkTier
from phazec.solvers import core

logger = logging.getLogger(__name__)

MAX_BYTES = 2**40
"""The largest byte count of one layer the model takes: memory sums of such counts stay far inside
the C++ DP's 64-bit integers."""


OPTIMIZER_FACTOR = {"sgd": 2, "adam": 8}
"""Bytes of weights, gradients and optimizer state per byte of 2-byte weights."""

RECOMPUTE_MODES = ("none", "selective", "full")
"""Activation recomputation: none, the attention core only (selective), every layer (full)."""

Recompute = Literal["none", "selective", "full"]

Stages = tuple[tuple[int, ...], ...]
"""Layer ids of each stage, first stage first."""


def recompute_mode(value: object) -> Recompute:
    """A recompute mode from its name; the booleans false/true of older configs mean none/full.

    Raises:
        PhazecError: an unknown mode.
    """
    if isinstance(value, bool | np.bool_):
        return "full" if value else "none"
    modes: dict[object, Recompute] = {"none": "none", "selective": "selective", "full": "full"}
    if isinstance(value, str) and value in modes:
        return modes[value]
    raise PhazecError(
        f"recompute = {value!r} is not valid: use one of {list(RECOMPUTE_MODES)} (false and true mean "
        f"none and full)."
    )


@dataclass(frozen=True, eq=False)
class PlacementProblem:
    """A layer graph with per-layer figures at each allowed tensor-parallel width, and the system.

    Per-layer arrays have axis order [t, layer] (row i belongs to `t_values[i]`) and hold figures
    per device and per microbatch. Construction validates everything and raises PhazecError.
    """

    t_values: NDArray[np.int64]
    """Allowed tensor-parallel widths, distinct, each in 1..device_count."""
    forward_latency_s: NDArray[np.float64]
    """Forward latency of each layer."""
    backward_latency_s: NDArray[np.float64]
    """Backward latency of each layer."""
    param_bytes: NDArray[np.int64]
    """Bytes of 2-byte weights of each layer on one device."""
    activation_bytes: NDArray[np.int64]
    """Bytes of the layer's full activations of one microbatch: what full recompute rebuilds at once."""
    stash_bytes: NDArray[np.int64]
    """Bytes kept for the backward pass of one microbatch without recomputation."""
    input_bytes: NDArray[np.int64]
    """Bytes of the layer's inputs: what full recompute keeps of one microbatch."""
    tensor_parallel: NDArray[np.bool_]
    """Whether the layer is split over the t devices."""
    edges: NDArray[np.int64]
    """Shape [E, 2]: (source layer, target layer); no duplicates, no cycle."""
    edge_bytes: NDArray[np.int64]
    """Bytes each edge carries per microbatch (each device of the receiving stage gets them)."""
    device_count: int
    """Accelerators available."""
    microbatch_count: int
    """Microbatches per batch (global batch / microbatch size)."""
    samples_per_microbatch: int
    """Microbatch size in samples."""
    tiers: tuple[NetworkTier, ...]
    """Network tiers, group sizes strictly ascending; the last holds every device."""
    hbm_bytes: int
    """HBM capacity of one device."""
    recompute: Recompute | bool = "none"
    """Recompute mode (`RECOMPUTE_MODES`; false/true are read as none/full)."""
    optimizer: Literal["sgd", "adam"] = "sgd"
    """SGD (weights and gradients) or mixed-precision Adam (16 bytes per weight)."""
    selective_stash_bytes: NDArray[np.int64] | None = None
    """Bytes kept for the backward pass under selective recompute (None: the stash bytes)."""
    selective_recompute_s: NDArray[np.float64] | None = None
    """Forward latency of the layer's attention core, recomputed under selective (None: 0)."""
    interleave: int = 1
    """Model chunks (virtual stages) per stage: interleaved 1F1B when > 1."""
    distributed_optimizer: bool = False
    """Shard the optimizer state over the d replicas."""
    last_stage_recomputes: bool = False
    """Megatron-LM's rule (true) or PHAZE's (false: the last stage never recomputes)."""
    overlap_grad_reduce: bool = False
    """Overlap the DP gradient all-reduce with the first stage's last backward pass."""
    overlap_param_gather: bool = False
    """With a distributed optimizer, overlap the weights' all-gather with the first stage's forward."""
    hbm_bytes_per_s: float = 0.0
    """HBM bandwidth that times the optimizer step; 0 leaves the step untimed."""
    bound_sync_windows: bool = False
    """Time each stage's DP sync as hidden behind windows as long as the bottleneck load allows, not
    behind the first stage's passes: a time never above the real one that never falls as a layer's
    latency grows (the `bounded` search's lower bound)."""
    sequence_parallel: bool = False
    """Whether the byte arrays hold sequence-parallel figures (recorded in results; the model itself
    only reads the arrays)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "recompute", recompute_mode(self.recompute))
        if self.selective_stash_bytes is None:
            object.__setattr__(self, "selective_stash_bytes", self.stash_bytes)
        if self.selective_recompute_s is None:
            object.__setattr__(self, "selective_recompute_s", np.zeros_like(self.forward_latency_s))
        for name, value in _validated_arrays(self).items():
            object.__setattr__(self, name, value)
        _validate_scalars(self)
        _validate_graph(self)

    @property
    def layer_count(self) -> int:
        """Number of layers."""
        return int(self.forward_latency_s.shape[1])

    @property
    def mode(self) -> Recompute:
        """The recompute mode."""
        return recompute_mode(self.recompute)

    @property
    def selective_stash(self) -> NDArray[np.int64]:
        """The selective stash bytes (set by construction)."""
        assert self.selective_stash_bytes is not None
        return self.selective_stash_bytes

    @property
    def selective_s(self) -> NDArray[np.float64]:
        """The attention-core latencies (set by construction)."""
        assert self.selective_recompute_s is not None
        return self.selective_recompute_s


@dataclass(frozen=True)
class Variant:
    """One setting to solve a problem under: tensor-parallel width, recomputation, HBM, interleave
    and distributed optimizer."""

    t: int
    recompute: Recompute | bool
    hbm_bytes: int
    interleave: int = 1
    distributed_optimizer: bool = False

    def applied(self, problem: PlacementProblem) -> PlacementProblem:
        """The problem under this variant's settings (its t is chosen per plan)."""
        return replace(
            problem,
            recompute=recompute_mode(self.recompute),
            hbm_bytes=self.hbm_bytes,
            interleave=self.interleave,
            distributed_optimizer=self.distributed_optimizer,
        )


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a plan."""

    layers: tuple[int, ...]
    """Layer ids, ascending."""
    devices: int
    """Devices of one replica of the stage (t or 1)."""
    load_s: float
    """Time per microbatch: compute plus sending and receiving across the cut after it."""
    memory_bytes: int
    """Peak bytes on one of its devices."""


@dataclass(frozen=True)
class Placement:
    """A plan and its figures."""

    stages: tuple[Stage, ...]
    """Stages, first stage first."""
    t: int
    """Tensor-parallel width."""
    d: int
    """Data-parallel width (pipeline replicas)."""
    recompute: Recompute
    hbm_bytes: int
    microbatches_per_pipeline: int
    time_per_batch_s: float
    throughput_samples_per_s: float
    fits_hbm: bool
    """Every stage fits in HBM (always true for a plan returned by a solve)."""
    interleave: int = 1
    distributed_optimizer: bool = False
    sequence_parallel: bool = False

    @property
    def stage_count(self) -> int:
        """Number of pipeline stages."""
        return len(self.stages)


@dataclass(frozen=True)
class NoFeasiblePlacement:
    """No plan fits in HBM: the least peak per-device memory any plan needs, and its parts.

    The parts belong to the peak stage of one plan that attains the least peak.
    """

    t: int
    recompute: Recompute
    hbm_bytes: int
    min_memory_bytes: int
    parameter_bytes: int
    """Weights, gradients and optimizer state."""
    activation_bytes: int
    """The working set: activations a recomputation rebuilds at once (0 without recompute)."""
    stash_bytes: int
    """Activations kept for the microbatches in flight."""
    interleave: int = 1
    distributed_optimizer: bool = False
    sequence_parallel: bool = False

    @property
    def dominant(self) -> Literal["parameters", "activations", "stash"]:
        """The largest of the three parts (the first one on a tie)."""
        parts: dict[Literal["parameters", "activations", "stash"], int] = {
            "parameters": self.parameter_bytes,
            "activations": self.activation_bytes,
            "stash": self.stash_bytes,
        }
        return max(parts, key=lambda name: parts[name])


PlacementResult = Placement | NoFeasiblePlacement


def solve_placements(problem: PlacementProblem, variants: Sequence[Variant]) -> tuple[PlacementResult, ...]:
    """The optimal plan of each variant, solved in one C++ call that shares work between them.

    The downsets and stage pairs are built once; the per-stage figures once per t; the other
    settings only change the DP. The GIL is released while solving. An infeasible variant reports
    the least memory with the optimizer state unsharded (d = 1).

    Raises:
        PhazecError: a variant names a t the problem has no figures for, a bad HBM size or interleave.
    """
    for variant in variants:
        _t_index(problem, variant.t)
        _check_positive_int("hbm_bytes", variant.hbm_bytes)
        _check_positive_int("interleave", variant.interleave)
    start_s = time.perf_counter()
    results = core.solve_placements(
        **_problem_arguments(problem), variants=[_variant_argument(problem, v) for v in variants]
    )
    logger.debug("placement: %d variants in %.3f s", len(variants), time.perf_counter() - start_s)
    return tuple(_result(problem, v, r) for v, r in zip(variants, results, strict=True))


def solve_placement(problem: PlacementProblem) -> PlacementResult:
    """The fastest plan over the problem's t values at its HBM size and other settings.

    When nothing fits, the infeasibility report with the least memory over the t values.
    """
    results = solve_placements(
        problem,
        [_own_variant(problem, int(t)) for t in problem.t_values],
    )
    feasible = [r for r in results if isinstance(r, Placement)]
    if feasible:
        return min(feasible, key=lambda r: r.time_per_batch_s)
    infeasible = [r for r in results if isinstance(r, NoFeasiblePlacement)]
    return min(infeasible, key=lambda r: r.min_memory_bytes)


def _own_variant(problem: PlacementProblem, t: int) -> Variant:
    """The variant at width t whose other settings are the problem's (`Variant.applied` undone)."""
    return Variant(t, problem.mode, problem.hbm_bytes, problem.interleave, problem.distributed_optimizer)


def _problem_arguments(problem: PlacementProblem) -> dict[str, Any]:
    """The arguments describing the problem that both C++ calls (`core.solve_placements` and
    `core.evaluate_plan`) take first."""
    return {
        "n": problem.layer_count,
        "edges": _edge_list(problem),
        "edge_bytes": problem.edge_bytes,
        "t_values": problem.t_values,
        "forward_s": problem.forward_latency_s,
        "backward_s": problem.backward_latency_s,
        "selective_s": problem.selective_s,
        "param_bytes": problem.param_bytes,
        "activation_bytes": problem.activation_bytes,
        "stash_bytes": problem.stash_bytes,
        "selective_bytes": problem.selective_stash,
        "input_bytes": problem.input_bytes,
        "tensor_parallel": problem.tensor_parallel,
        "devices": problem.device_count,
        "microbatches": problem.microbatch_count,
        "tier_group_sizes": np.array([tier.group_size for tier in problem.tiers], dtype=np.int64),
        "tier_bandwidth_bytes_per_s": np.array([tier.bandwidth_bytes_per_s for tier in problem.tiers]),
        "tier_latency_s": np.array([tier.latency_s for tier in problem.tiers]),
        "optimizer_factor": OPTIMIZER_FACTOR[problem.optimizer],
        "hbm_bytes_per_s": problem.hbm_bytes_per_s,
        "bound_sync_windows": problem.bound_sync_windows,
    }


def _variant_argument(problem: PlacementProblem, variant: Variant) -> tuple[int, int, dict[str, int | bool]]:
    """(width index, HBM bytes, settings) of a variant for the C++ calls: the one place that names the
    plan settings the C++ model reads (`PHAZEC_PLAN_SETTINGS` in ext/include/phazec/placement.hpp).

    Raises:
        PhazecError: the variant's t has no figures in the problem.
    """
    settings: dict[str, int | bool] = {
        "recompute": RECOMPUTE_MODES.index(recompute_mode(variant.recompute)),
        "interleave": int(variant.interleave),
        "distributed_optimizer": bool(variant.distributed_optimizer),
        "last_stage_recomputes": bool(problem.last_stage_recomputes),
        "overlap_grad_reduce": bool(problem.overlap_grad_reduce),
        "overlap_param_gather": bool(problem.overlap_param_gather),
    }
    return _t_index(problem, variant.t), int(variant.hbm_bytes), settings


@dataclass(frozen=True)
class StageCost:
    """The figures of one stage of a plan that depend on neither d, its position nor the settings."""

    forward_s: float
    """Forward critical path."""
    backward_s: float
    """Backward critical path."""
    selective_s: float
    """Sum of the layers' attention-core forward latencies (selective recompute)."""
    param_bytes: int
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

    @property
    def load_s(self) -> float:
        """compute + p2p, summed in the model's order (the stage's `Stage.load_s`)."""
        return self.forward_s + self.backward_s + self.recompute_s + self.p2p_s


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


def mode_of_stage(mode: Recompute, last_stage_recomputes: bool, i: int, s: int) -> Recompute:
    """`mode` for stage i (from 0) of s, or none for the last stage under PHAZE's rule: the mode the
    model gives a stage (`PlanFigures.modes`), for callers that hold only a `Placement`."""
    return mode if i < s - 1 or last_stage_recomputes else "none"


@dataclass(frozen=True)
class IterationTime:
    """One iteration in parts, adding up to `Placement.time_per_batch_s` (up to rounding)."""

    bottleneck_stage: int
    """The stage with the largest load (the first on a tie), whose work sets the pace."""
    forward_s: float
    backward_s: float
    recompute_s: float
    p2p_s: float
    bubble_s: float
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


def plan_figures(problem: PlacementProblem, t: int, stages: Stages, d: int) -> PlanFigures:
    """The figures of a plan at widths t and d, from the C++ model (`core.evaluate_plan`), under
    the problem's settings, with none of `explain_plan`'s checks on d and interleave: the plan is timed
    even where its d replicas need more devices or microbatches than there are, or interleaving cannot
    cut its stages into model chunks.

    Raises:
        PhazecError: t has no figures in the problem.
        ValueError: the stages do not hold each layer once in pipeline order, or d < 1 (`explain_plan`
            checks both with a message that says why).
    """
    r = core.evaluate_plan(
        **_problem_arguments(problem),
        variant=_variant_argument(problem, _own_variant(problem, t)),
        stages=[list(stage) for stage in stages],
        d=d,
    )
    placement = Placement(
        stages=tuple(Stage(tuple(x.layers), x.devices, x.load_s, x.memory_bytes) for x in r.stages),
        t=r.t,
        d=r.d,
        recompute=problem.mode,
        hbm_bytes=problem.hbm_bytes,
        microbatches_per_pipeline=r.microbatches_per_pipeline,
        time_per_batch_s=r.time_per_batch_s,
        throughput_samples_per_s=problem.samples_per_microbatch
        * problem.microbatch_count
        / r.time_per_batch_s,
        fits_hbm=r.fits_hbm,
        interleave=problem.interleave,
        distributed_optimizer=problem.distributed_optimizer,
        sequence_parallel=problem.sequence_parallel,
    )
    it = r.iteration
    iteration = IterationTime(
        bottleneck_stage=it.bottleneck_stage,
        forward_s=it.forward_s,
        backward_s=it.backward_s,
        recompute_s=it.recompute_s,
        p2p_s=it.p2p_s,
        bubble_s=it.bubble_s,
        dp_sync_stage=it.dp_sync_stage,
        dp_sync_s=it.dp_sync_s,
        optimizer_s=it.optimizer_s,
    )
    return PlanFigures(
        placement,
        iteration,
        modes=tuple(recompute_mode(RECOMPUTE_MODES[x.recompute]) for x in r.stages),
        times=tuple(
            StageTime(x.time.forward_s, x.time.backward_s, x.time.recompute_s, x.time.p2p_s) for x in r.stages
        ),
        memories=tuple(
            StageMemory(
                weights_bytes=x.memory.weights_bytes,
                gradients_bytes=x.memory.gradients_bytes,
                optimizer_state_bytes=x.memory.optimizer_state_bytes,
                stash_bytes=x.memory.stash_bytes,
                working_bytes=x.memory.working_bytes,
                in_flight=x.memory.in_flight,
            )
            for x in r.stages
        ),
        costs=tuple(
            StageCost(
                forward_s=x.cost.forward_s,
                backward_s=x.cost.backward_s,
                selective_s=x.cost.selective_s,
                param_bytes=x.cost.param_bytes,
                stash_bytes=x.cost.stash_bytes,
                selective_bytes=x.cost.selective_bytes,
                input_bytes=x.cost.input_bytes,
                selective_working_bytes=x.cost.selective_working_bytes,
                full_working_bytes=x.cost.full_working_bytes,
                cut_bytes=x.cost.cut_bytes,
                devices=x.cost.devices,
            )
            for x in r.stages
        ),
    )


def stage_costs(problem: PlacementProblem, t: int, stages: Sequence[Sequence[int]]) -> tuple[StageCost, ...]:
    """The figures of each stage of a plan that depend on neither d, its position nor the settings.

    Raises:
        PhazecError: the stages do not split the layers into pipeline order, or t has no figures.
    """
    return plan_figures(problem, t, _validated_plan(problem, stages), 1).costs


def evaluate_plan(problem: PlacementProblem, stages: Sequence[Sequence[int]], t: int, d: int) -> Placement:
    """The figures of a given plan under the same model as the DP (e.g. a Megatron baseline).

    The problem's settings (recompute mode, interleave, ...) are the plan's: use `Variant.applied`
    or `dataclasses.replace` to set them. A plan that does not fit in HBM is still evaluated;
    `fits_hbm` says so.

    Raises:
        PhazecError: the stages do not split the layers into pipeline order, t has no figures,
            or the plan needs more devices or replicas than there are.
    """
    return explain_plan(problem, stages, t, d).placement


def explain_plan(problem: PlacementProblem, stages: Sequence[Sequence[int]], t: int, d: int) -> PlanFigures:
    """`evaluate_plan` with every part of its time and memory."""
    plan = _validated_plan(problem, stages)
    _t_index(problem, t)
    _check_positive_int("d", d)
    # Timed at most at the device count: a larger d needs more devices than there are, refused below.
    figures = plan_figures(problem, t, plan, min(d, problem.device_count))
    k = sum(stage.devices for stage in figures.placement.stages)
    if d * k > problem.device_count or d > problem.microbatch_count:
        raise PhazecError(
            f"d = {d} is not valid for this plan: {d} replicas of a {k}-device pipeline need {d * k} "
            f"devices and {d} microbatches; there are {problem.device_count} devices and "
            f"{problem.microbatch_count} microbatches."
        )
    if not chunks_fit(plan, problem.interleave):
        raise PhazecError(
            f"stages = {[list(stage) for stage in plan]} is not valid under interleave {problem.interleave}: "
            f"with more than one stage, each stage needs at least {problem.interleave} layers, one per "
            "model chunk."
        )
    return figures


def chunks_fit(stages: Stages, interleave: int) -> bool:
    """Whether interleaving can cut every stage into its model chunks: one stage (no pipeline), or at
    least `interleave` layers in each (a chunk holds at least one)."""
    return len(stages) == 1 or all(len(stage) >= interleave for stage in stages)


def megatron_plan(problem: PlacementProblem, pp: int) -> Stages:
    """Megatron-style stages: the layers between the first and the last (in topological order)
    split into `pp` contiguous runs as evenly as possible, the first layer (the embedding) added
    to the first stage and the last layer (the head) to the last stage.

    Raises:
        PhazecError: pp is not in 1..(layer count - 2).
    """
    order = core.topological_order(problem.layer_count, _edge_list(problem))
    blocks = order[1:-1]
    if isinstance(pp, bool) or not isinstance(pp, int) or not 1 <= pp <= max(len(blocks), 1):
        raise PhazecError(
            f"pp = {pp!r} is not valid: the {len(blocks)} layers between the embedding and the head split "
            f"into 1..{max(len(blocks), 1)} pipeline stages."
        )
    runs = [blocks[i * len(blocks) // pp : (i + 1) * len(blocks) // pp] for i in range(pp)]
    runs[0] = order[:1] + runs[0]
    runs[-1] = runs[-1] + order[-1:] if len(order) > 1 else runs[-1]
    return tuple(tuple(run) for run in runs)


def _result(problem: PlacementProblem, variant: Variant, r: core.PlanResult) -> PlacementResult:
    if not r.feasible:
        return NoFeasiblePlacement(
            t=variant.t,
            recompute=recompute_mode(variant.recompute),
            hbm_bytes=variant.hbm_bytes,
            min_memory_bytes=r.min_memory_bytes,
            parameter_bytes=r.parameter_bytes,
            activation_bytes=r.activation_bytes,
            stash_bytes=r.stash_bytes,
            interleave=variant.interleave,
            distributed_optimizer=variant.distributed_optimizer,
            sequence_parallel=problem.sequence_parallel,
        )
    return Placement(
        stages=tuple(
            Stage(tuple(layers), devices, load_s, memory)
            for layers, devices, load_s, memory in zip(
                r.stage_layers, r.stage_devices, r.stage_load_s, r.stage_memory_bytes, strict=True
            )
        ),
        t=variant.t,
        d=r.d,
        recompute=recompute_mode(variant.recompute),
        hbm_bytes=variant.hbm_bytes,
        microbatches_per_pipeline=r.microbatches_per_pipeline,
        time_per_batch_s=r.time_per_batch_s,
        throughput_samples_per_s=problem.samples_per_microbatch
        * problem.microbatch_count
        / r.time_per_batch_s,
        fits_hbm=True,
        interleave=variant.interleave,
        distributed_optimizer=variant.distributed_optimizer,
        sequence_parallel=problem.sequence_parallel,
    )


def _edge_list(problem: PlacementProblem) -> list[tuple[int, int]]:
    return [(int(u), int(v)) for u, v in problem.edges.tolist()]


def _t_index(problem: PlacementProblem, t: int) -> int:
    valid = not isinstance(t, bool) and isinstance(t, int | np.integer)
    matches = np.flatnonzero(problem.t_values == t) if valid else np.empty(0, dtype=np.int64)
    if matches.size == 0:
        raise PhazecError(
            f"t = {t!r} is not valid: the problem has figures for tensor-parallel widths "
            f"{problem.t_values.tolist()} only."
        )
    return int(matches[0])


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise PhazecError(f"{name} = {value!r} is not valid: it must be a positive integer.")


def _validated_plan(problem: PlacementProblem, stages: Sequence[Sequence[int]]) -> Stages:
    n = problem.layer_count
    plan = tuple(tuple(int(v) for v in stage) for stage in stages)
    flat = sorted(v for stage in plan for v in stage)
    if not plan or any(not stage for stage in plan) or flat != list(range(n)):
        raise PhazecError(
            f"stages = {[list(stage) for stage in plan]} is not valid: give non-empty stages that together "
            f"hold each layer 0..{n - 1} exactly once."
        )
    stage_of = {v: i for i, stage in enumerate(plan) for v in stage}
    for u, v in problem.edges.tolist():
        if stage_of[u] > stage_of[v]:
            raise PhazecError(
                f"stages = {[list(stage) for stage in plan]} is not valid: edge {u} -> {v} runs from stage "
                f"{stage_of[u]} back to stage {stage_of[v]}; every edge must stay in a stage or go "
                f"to a later one."
            )
    return plan


_ARRAY_KINDS: dict[str, tuple[type[np.generic], int]] = {
    "t_values": (np.int64, 1),
    "forward_latency_s": (np.float64, 2),
    "backward_latency_s": (np.float64, 2),
    "param_bytes": (np.int64, 2),
    "activation_bytes": (np.int64, 2),
    "stash_bytes": (np.int64, 2),
    "input_bytes": (np.int64, 2),
    "selective_stash_bytes": (np.int64, 2),
    "selective_recompute_s": (np.float64, 2),
    "tensor_parallel": (np.bool_, 2),
    "edges": (np.int64, 2),
    "edge_bytes": (np.int64, 1),
}


def _validated_arrays(problem: PlacementProblem) -> dict[str, NDArray[Any]]:
    """Each array as a read-only C-contiguous array of its dtype, with consistent shapes and values
    in range (finite latencies >= 0 s, byte counts >= 0)."""
    out: dict[str, NDArray[Any]] = {}
    for name, (dtype, ndim) in _ARRAY_KINDS.items():
        raw = np.asarray(getattr(problem, name))
        if name == "edges" and raw.size == 0:
            raw = raw.reshape(0, 2)
        if raw.dtype.kind not in "biuf":
            raise PhazecError(f"{name} has dtype {raw.dtype}, which is not valid: give numbers.")
        if raw.ndim != ndim:
            raise PhazecError(f"{name} has {raw.ndim} dimensions, which is not valid: it must have {ndim}.")
        if dtype is np.bool_ and raw.dtype != np.bool_:
            raise PhazecError(f"{name} has dtype {raw.dtype}, which is not valid: give booleans.")
        if dtype is np.int64 and raw.size and not (np.all(np.isfinite(raw)) and np.all(raw == np.round(raw))):
            raise PhazecError(f"{name} = {raw.tolist()} is not valid: it must hold whole numbers.")
        if dtype is np.float64 and not np.all(np.isfinite(raw.astype(np.float64))):
            raise PhazecError(f"{name} = {raw.tolist()} is not valid: latencies must be finite seconds.")
        value = np.ascontiguousarray(raw, dtype=dtype)
        value.setflags(write=False)
        out[name] = value
    widths = out["t_values"].shape[0]
    layers = out["forward_latency_s"].shape[1] if out["forward_latency_s"].ndim == 2 else 0
    if widths < 1 or layers < 1:
        raise PhazecError(
            f"forward_latency_s has shape {out['forward_latency_s'].shape} for t_values "
            f"{out['t_values'].tolist()}: give at least one t and one layer."
        )
    for name, (_, ndim) in _ARRAY_KINDS.items():
        if ndim == 2 and name != "edges" and out[name].shape != (widths, layers):
            raise PhazecError(
                f"{name} has shape {out[name].shape}, which is not valid: per-layer arrays must have shape "
                f"({widths}, {layers}) (one row per t in {out['t_values'].tolist()}, one column per layer)."
            )
    if out["edges"].shape[1] != 2 or out["edge_bytes"].shape != (out["edges"].shape[0],):
        raise PhazecError(
            f"edges has shape {out['edges'].shape} and edge_bytes {out['edge_bytes'].shape}, which is not "
            f"valid: give edges of shape (E, 2) and edge_bytes of shape (E,)."
        )
    for name in (
        "forward_latency_s",
        "backward_latency_s",
        "param_bytes",
        "activation_bytes",
        "stash_bytes",
        "input_bytes",
        "selective_stash_bytes",
        "selective_recompute_s",
        "edge_bytes",
    ):
        seconds = name.endswith("_s")
        bad = np.argwhere(out[name] < 0 if seconds else (out[name] < 0) | (out[name] > MAX_BYTES))
        if bad.size:
            where = ", ".join(str(int(i)) for i in bad[0])
            valid = ">= 0 seconds" if seconds else f"between 0 and {MAX_BYTES} bytes (1 TiB)"
            raise PhazecError(
                f"{name}[{where}] = {out[name][tuple(bad[0])]!r} is not valid: it must be {valid}."
            )
    over = np.argwhere(out["selective_stash_bytes"] > out["stash_bytes"])
    if over.size:
        i, v = (int(x) for x in over[0])
        raise PhazecError(
            f"selective_stash_bytes[{i}, {v}] = {out['selective_stash_bytes'][i, v]} is not valid: selective "
            f"recompute keeps part of the stash, at most stash_bytes[{i}, {v}] = {out['stash_bytes'][i, v]}."
        )
    idle = [
        int(t)
        for t, f, b in zip(out["t_values"], out["forward_latency_s"], out["backward_latency_s"], strict=True)
        if not (f.any() or b.any())
    ]
    if idle:
        raise PhazecError(
            f"Every forward and backward latency at t = {idle[0]} is 0, which is not valid: at least one "
            f"layer must take time, or the time per batch would be 0."
        )
    return out


def _validate_scalars(problem: PlacementProblem) -> None:
    for name in ("device_count", "microbatch_count", "samples_per_microbatch", "hbm_bytes", "interleave"):
        _check_positive_int(name, getattr(problem, name))
    if not (problem.hbm_bytes_per_s >= 0 and np.isfinite(problem.hbm_bytes_per_s)):
        raise PhazecError(
            f"hbm_bytes_per_s = {problem.hbm_bytes_per_s!r} is not valid: give a finite bandwidth >= 0 "
            f"(0 leaves the optimizer step untimed)."
        )
    if problem.optimizer not in OPTIMIZER_FACTOR:
        raise PhazecError(
            f"optimizer = {problem.optimizer!r} is not valid: use one of {sorted(OPTIMIZER_FACTOR)}."
        )
    t_values = problem.t_values.tolist()
    if len(set(t_values)) != len(t_values) or any(not 1 <= t <= problem.device_count for t in t_values):
        raise PhazecError(
            f"t_values = {t_values} is not valid for {problem.device_count} devices: tensor-parallel widths "
            f"must be distinct and between 1 and the device count."
        )
    sizes = [tier.group_size for tier in problem.tiers]
    if (
        not sizes
        or any(a >= b for a, b in itertools.pairwise(sizes))
        or any(isinstance(g, bool) or not isinstance(g, int | np.integer) for g in sizes)
        or sizes[0] < 1
        or sizes[-1] < problem.device_count
        or any(not 0 < tier.bandwidth_bytes_per_s < math.inf for tier in problem.tiers)
        or any(not 0 <= tier.latency_s < math.inf for tier in problem.tiers)
    ):
        raise PhazecError(
            f"tiers with group sizes {sizes} are not valid: give at least one tier, integer group sizes "
            f"strictly ascending with the last >= {problem.device_count} devices, finite bandwidths > 0 "
            "and finite latencies >= 0."
        )


def _validate_graph(problem: PlacementProblem) -> None:
    n = problem.layer_count
    pairs = _edge_list(problem)
    for u, v in pairs:
        if not (0 <= u < n and 0 <= v < n) or u == v:
            raise PhazecError(
                f"edge ({u}, {v}) is not valid: edges join two different layers among 0..{n - 1}."
            )
    if len(set(pairs)) != len(pairs):
        raise PhazecError(
            f"edges {pairs} are not valid: an edge appears twice; give each (source, target) once with "
            f"the total bytes it carries."
        )
    cycle = core.find_cycle(n, pairs)
    if cycle:
        path = " -> ".join(str(v) for v in [*cycle, cycle[0]])
        raise PhazecError(
            f"The layer graph has a cycle {path}: a placement needs an acyclic layer graph in which "
            f"every edge runs from an earlier layer to a later one."
        )
