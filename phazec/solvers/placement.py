"""Optimal pipeline, tensor- and data-parallel placement of a layer graph (the C++ DP, typed).

The model, in seconds and bytes, shared by the C++ DP (`phazec._placement`) and `evaluate_plan`:

* Plan. The layers are split into `s` stages in pipeline order; a stage is the difference of two
  downsets of the layer DAG, so no edge runs from a later stage to an earlier one. Stages are
  counted from the end for memory: under 1F1B the stage at position `p` from the end (the last
  stage has p = 1) keeps `p` microbatches in flight. A stage runs on `t` devices when it holds a
  tensor-parallel layer, else on one device; a pipeline uses `k` devices in all, and `d` replicas
  of it run data-parallel, each on `m = ceil(microbatches / d)` microbatches. A plan needs
  `d * k <= devices` and `d <= microbatches`.
* Device numbering. Device ids run 0..devices-1; tier `i` links aligned groups of
  `group_size_i` consecutive ids (ids a and b share a group iff a // g == b // g). Replica r
  holds ids r*k .. r*k + k - 1, its stages in pipeline order. A set of devices talks over the first
  tier whose aligned group holds all of them.
* Stage load per microbatch. compute = forward critical path + backward critical path of the
  stage's layers (longest path of latencies through the stage's own edges), plus the forward
  critical path again under recompute unless the stage is the last one. The tensors crossing the
  cut after a stage are sent forward by it and their gradients received back by it; tensors of
  earlier stages needed further down are relayed across the cut too, and a layer sends each
  tensor once per cut (its largest edge into the later stages counts). load = compute
  + 2 * transfer(cut bytes), transfer(b) = b / bandwidth + latency (0 when b = 0). Every pipeline
  transfer uses the tier of a whole replica's devices, the slowest over the d replicas (1F1B runs
  them in lockstep). This is conservative for two neighbouring stages inside one node of a larger
  pipeline: a downset DP knows where a stage sits but not which layers the next stage holds.
* Time per batch = max stage load * (m + s - 1) + the ring all-reduce of the first stage's
  gradients over its d replicas: 2 (d-1)/d * param bytes / bandwidth + 2 (d-1) latency, on the
  tier holding that stage's devices of every replica (ids 0 .. (d-1) k + width - 1). The first
  stage ends the flush last; the other stages' all-reduces overlap its drain.
* Memory per device of the stage at position p = factor * parameter bytes + activation bytes of
  one microbatch + (p - 1) * stash, where factor = 2 for SGD (weights and gradients) or 8 for
  mixed-precision Adam (16 bytes per 2-byte weight), and stash = the layers' stash bytes (no
  recompute) or the stage's input bytes (recompute: the layers' inputs from outside the graph and
  the tensors received from earlier stages). A plan fits when every stage fits in HBM.

Arithmetic is done in the same order in C++ and here (byte counts are integers), so the DP's
optimum and `evaluate_plan` of its plan agree bit for bit.
"""

import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from phazec import _placement
from phazec.errors import PhazecError
from phazec.hw.system import NetworkTier

logger = logging.getLogger(__name__)

OPTIMIZER_FACTOR = {"sgd": 2, "adam": 8}
"""Bytes of weights, gradients and optimizer state per byte of 2-byte weights."""

Stages = tuple[tuple[int, ...], ...]
"""Layer ids of each stage, first stage first."""


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
    """Bytes of all activations of one microbatch (live while a microbatch is processed)."""
    stash_bytes: NDArray[np.int64]
    """Bytes kept for the backward pass of one microbatch without recomputation."""
    input_bytes: NDArray[np.int64]
    """Bytes of the layer's inputs from outside the layer graph (token ids, labels)."""
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
    recompute: bool = False
    """Recompute activations in the backward pass instead of stashing them."""
    optimizer: Literal["sgd", "adam"] = "sgd"
    """SGD (weights and gradients) or mixed-precision Adam (16 bytes per weight)."""

    def __post_init__(self) -> None:
        for name, value in _validated_arrays(self).items():
            object.__setattr__(self, name, value)
        _validate_scalars(self)
        _validate_graph(self)

    @property
    def layer_count(self) -> int:
        """Number of layers."""
        return int(self.forward_latency_s.shape[1])


@dataclass(frozen=True)
class Variant:
    """One setting to solve a problem under: tensor-parallel width, recomputation and HBM."""

    t: int
    recompute: bool
    hbm_bytes: int


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
    recompute: bool
    hbm_bytes: int
    microbatches_per_pipeline: int
    time_per_batch_s: float
    throughput_samples_per_s: float
    fits_hbm: bool
    """Every stage fits in HBM (always true for a plan returned by a solve)."""

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
    recompute: bool
    hbm_bytes: int
    min_memory_bytes: int
    parameter_bytes: int
    """Weights, gradients and optimizer state."""
    activation_bytes: int
    """Activations of the microbatch being processed."""
    stash_bytes: int
    """Stash of the other microbatches in flight."""

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

    The downsets and stage pairs are built once; the per-stage figures once per t; HBM and
    recomputation only change the DP. The GIL is released while solving.

    Raises:
        PhazecError: a variant names a t the problem has no figures for, or a bad HBM size.
    """
    for variant in variants:
        _t_index(problem, variant.t)
        _check_positive_int("hbm_bytes", variant.hbm_bytes)
    start_s = time.perf_counter()
    results = _placement.solve_placements(
        n=problem.layer_count,
        edges=_edge_list(problem),
        edge_bytes=problem.edge_bytes,
        t_values=problem.t_values,
        forward_s=problem.forward_latency_s,
        backward_s=problem.backward_latency_s,
        param_bytes=problem.param_bytes,
        activation_bytes=problem.activation_bytes,
        stash_bytes=problem.stash_bytes,
        input_bytes=problem.input_bytes,
        tensor_parallel=problem.tensor_parallel,
        devices=problem.device_count,
        microbatches=problem.microbatch_count,
        tier_group_sizes=np.array([tier.group_size for tier in problem.tiers], dtype=np.int64),
        tier_bandwidth_bytes_per_s=np.array([tier.bandwidth_bytes_per_s for tier in problem.tiers]),
        tier_latency_s=np.array([tier.latency_s for tier in problem.tiers]),
        optimizer_factor=OPTIMIZER_FACTOR[problem.optimizer],
        variants=[(_t_index(problem, v.t), v.recompute, v.hbm_bytes) for v in variants],
    )
    logger.debug("placement: %d variants in %.3f s", len(variants), time.perf_counter() - start_s)
    return tuple(_result(problem, v, r) for v, r in zip(variants, results, strict=True))


def solve_placement(problem: PlacementProblem) -> PlacementResult:
    """The fastest plan over the problem's t values at its HBM size and recompute setting.

    When nothing fits, the infeasibility report with the least memory over the t values.
    """
    results = solve_placements(
        problem, [Variant(int(t), problem.recompute, problem.hbm_bytes) for t in problem.t_values]
    )
    feasible = [r for r in results if isinstance(r, Placement)]
    if feasible:
        return min(feasible, key=lambda r: r.time_per_batch_s)
    infeasible = [r for r in results if isinstance(r, NoFeasiblePlacement)]
    return min(infeasible, key=lambda r: r.min_memory_bytes)


@dataclass(frozen=True)
class StageCost:
    """The figures of one stage of a plan that do not depend on d."""

    forward_s: float
    """Forward critical path."""
    backward_s: float
    """Backward critical path."""
    param_bytes: int
    activation_bytes: int
    stash_bytes: int
    """Stash without recomputation."""
    input_bytes: int
    """Stash with recomputation: inputs from outside the graph and from earlier stages."""
    cut_bytes: int
    """Bytes crossing the cut after the stage."""
    devices: int


def stage_costs(problem: PlacementProblem, t: int, stages: Stages) -> tuple[StageCost, ...]:
    """The d-independent figures of each stage of a valid plan (see the module docstring)."""
    row = _t_index(problem, t)
    n = problem.layer_count
    order = _placement.topological_order(n, _edge_list(problem))
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    out_edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for (u, v), size in zip(problem.edges.tolist(), problem.edge_bytes.tolist(), strict=True):
        preds[v].append(u)
        succs[u].append(v)
        out_edges[u].append((v, size))
    costs = []
    for i, stage in enumerate(stages):
        members = set(stage)
        later = {v for after in stages[i + 1 :] for v in after}
        outside = set(range(n)) - members - later
        tensor_parallel = any(bool(problem.tensor_parallel[row, v]) for v in stage)
        costs.append(
            StageCost(
                forward_s=_critical_path_s(order, preds, members, problem.forward_latency_s[row]),
                backward_s=_critical_path_s(order[::-1], succs, members, problem.backward_latency_s[row]),
                param_bytes=sum(int(problem.param_bytes[row, v]) for v in stage),
                activation_bytes=sum(int(problem.activation_bytes[row, v]) for v in stage),
                stash_bytes=sum(int(problem.stash_bytes[row, v]) for v in stage),
                input_bytes=sum(int(problem.input_bytes[row, v]) for v in stage)
                + _incoming_bytes(out_edges, outside, members),
                cut_bytes=_incoming_bytes(out_edges, outside | members, later),
                devices=t if tensor_parallel else 1,
            )
        )
    return tuple(costs)


def placement_of(
    problem: PlacementProblem, t: int, stages: Stages, costs: Sequence[StageCost], d: int
) -> Placement:
    """The figures of a valid plan with its stage costs at data-parallel width d."""
    s = len(costs)
    k = sum(c.devices for c in costs)
    m = (problem.microbatch_count + d - 1) // d
    pipeline_tier = problem.tiers[max(_span_tier(problem.tiers, r * k, r * k + k - 1) for r in range(d))]
    loads = []
    memories = []
    for i, c in enumerate(costs):
        compute_s = c.forward_s + c.backward_s
        if problem.recompute and i < s - 1:
            compute_s += c.forward_s
        loads.append(compute_s + 2.0 * _transfer_s(c.cut_bytes, pipeline_tier))
        stash = c.input_bytes if problem.recompute else c.stash_bytes
        memories.append(
            OPTIMIZER_FACTOR[problem.optimizer] * c.param_bytes + c.activation_bytes + (s - 1 - i) * stash
        )
    sync_tier = problem.tiers[_span_tier(problem.tiers, 0, (d - 1) * k + costs[0].devices - 1)]
    time_s = max(loads) * (m + s - 1) + _allreduce_s(costs[0].param_bytes, d, sync_tier)
    return Placement(
        stages=tuple(
            Stage(tuple(sorted(layers)), c.devices, load, memory)
            for layers, c, load, memory in zip(stages, costs, loads, memories, strict=True)
        ),
        t=t,
        d=d,
        recompute=problem.recompute,
        hbm_bytes=problem.hbm_bytes,
        microbatches_per_pipeline=m,
        time_per_batch_s=time_s,
        throughput_samples_per_s=problem.samples_per_microbatch * problem.microbatch_count / time_s,
        fits_hbm=max(memories) <= problem.hbm_bytes,
    )


def evaluate_plan(problem: PlacementProblem, stages: Sequence[Sequence[int]], t: int, d: int) -> Placement:
    """The figures of a given plan under the same model as the DP (e.g. a Megatron baseline).

    A plan that does not fit in HBM is still evaluated; `fits_hbm` says so.

    Raises:
        PhazecError: the stages do not split the layers into pipeline order, t has no figures,
            or the plan needs more devices or replicas than there are.
    """
    plan = _validated_plan(problem, stages)
    costs = stage_costs(problem, t, plan)
    k = sum(c.devices for c in costs)
    _check_positive_int("d", d)
    if d * k > problem.device_count or d > problem.microbatch_count:
        raise PhazecError(
            f"d = {d} is not valid for this plan: {d} replicas of a {k}-device pipeline need {d * k} "
            f"devices and {d} microbatches; there are {problem.device_count} devices and "
            f"{problem.microbatch_count} microbatches."
        )
    return placement_of(problem, t, plan, costs, d)


def megatron_plan(problem: PlacementProblem, pp: int) -> Stages:
    """Megatron-style stages: the layers between the first and the last (in topological order)
    split into `pp` contiguous runs as evenly as possible, the first layer (the embedding) added
    to the first stage and the last layer (the head) to the last stage.

    Raises:
        PhazecError: pp is not in 1..(layer count - 2).
    """
    order = _placement.topological_order(problem.layer_count, _edge_list(problem))
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


def _result(problem: PlacementProblem, variant: Variant, r: _placement.PlanResult) -> PlacementResult:
    if not r.feasible:
        return NoFeasiblePlacement(
            t=variant.t,
            recompute=variant.recompute,
            hbm_bytes=variant.hbm_bytes,
            min_memory_bytes=r.min_memory_bytes,
            parameter_bytes=r.parameter_bytes,
            activation_bytes=r.activation_bytes,
            stash_bytes=r.stash_bytes,
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
        recompute=variant.recompute,
        hbm_bytes=variant.hbm_bytes,
        microbatches_per_pipeline=r.microbatches_per_pipeline,
        time_per_batch_s=r.time_per_batch_s,
        throughput_samples_per_s=problem.samples_per_microbatch
        * problem.microbatch_count
        / r.time_per_batch_s,
        fits_hbm=True,
    )


def _critical_path_s(
    order: Sequence[int], before: Sequence[Sequence[int]], members: set[int], latency_s: NDArray[np.float64]
) -> float:
    """Longest path of latencies through `members`, visiting them in `order`; `before[v]` are the
    neighbours that must finish before v."""
    finish: dict[int, float] = {}
    longest = 0.0
    for v in order:
        if v not in members:
            continue
        start = 0.0
        for u in before[v]:
            if u in members:
                start = max(start, finish[u])
        finish[v] = start + float(latency_s[v])
        longest = max(longest, finish[v])
    return longest


def _incoming_bytes(
    out_edges: Sequence[Sequence[tuple[int, int]]], sources: set[int], targets: set[int]
) -> int:
    """Sum over `sources` of each one's largest edge into `targets` (a tensor is sent once)."""
    return sum(max((size for v, size in out_edges[u] if v in targets), default=0) for u in sources)


def _edge_list(problem: PlacementProblem) -> list[tuple[int, int]]:
    return [(int(u), int(v)) for u, v in problem.edges.tolist()]


def _span_tier(tiers: Sequence[NetworkTier], first: int, last: int) -> int:
    """Index of the first tier whose aligned group holds device ids first..last."""
    for i, tier in enumerate(tiers):
        if first // tier.group_size == last // tier.group_size:
            return i
    return len(tiers) - 1


def _transfer_s(size_bytes: int, tier: NetworkTier) -> float:
    return 0.0 if size_bytes == 0 else size_bytes / tier.bandwidth_bytes_per_s + tier.latency_s


def _allreduce_s(size_bytes: int, d: int, tier: NetworkTier) -> float:
    return 2.0 * (d - 1) / d * size_bytes / tier.bandwidth_bytes_per_s + 2.0 * (d - 1) * tier.latency_s


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
        "edge_bytes",
    ):
        bad = np.argwhere(out[name] < 0)
        if bad.size:
            where = ", ".join(str(int(i)) for i in bad[0])
            unit = "seconds" if name.endswith("_s") else "bytes"
            raise PhazecError(
                f"{name}[{where}] = {out[name][tuple(bad[0])]!r} is not valid: it must be >= 0 {unit}."
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
    for name in ("device_count", "microbatch_count", "samples_per_microbatch", "hbm_bytes"):
        _check_positive_int(name, getattr(problem, name))
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
        or sizes[0] < 1
        or sizes[-1] < problem.device_count
        or any(not tier.bandwidth_bytes_per_s > 0 or not tier.latency_s >= 0 for tier in problem.tiers)
    ):
        raise PhazecError(
            f"tiers with group sizes {sizes} are not valid: give at least one tier, group sizes strictly "
            f"ascending with the last >= {problem.device_count} devices, bandwidths > 0 and latencies >= 0."
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
    cycle = _placement.find_cycle(n, pairs)
    if cycle:
        path = " -> ".join(str(v) for v in [*cycle, cycle[0]])
        raise PhazecError(
            f"The layer graph has a cycle {path}: a placement needs an acyclic layer graph in which "
            f"every edge runs from an earlier layer to a later one."
        )
