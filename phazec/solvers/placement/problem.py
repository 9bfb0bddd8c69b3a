"""The placement problem: a layer graph's per-layer figures at each tensor-parallel width and the
system, checked on construction; a variant to solve it under (a width, an HBM size and the settings of
a plan, by name); and the results (a plan, or how much memory the least plan needs)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.hw.system import NetworkTier
from phazec.solvers import core
from phazec.util.checks import integer_at_least

MAX_BYTES = 2**40
"""The largest byte count of one layer the model takes: memory sums of such counts stay far inside
the C++ DP's 64-bit integers."""

RECOMPUTE_MODES = ("none", "selective", "full", "op", "block")
"""Activation recomputation: none, the attention core only (selective: Megatron's), every layer (full),
the ops torchtitan's op-level selective activation checkpointing leaves unsaved (op:
`phazec.passes.memory.op_checkpoint`), or the first `recompute_layers` transformer blocks of each model
chunk (block: Megatron-Core's `recompute_method=block`); the compiled model's `recompute` setting is an
index into this."""

PIPELINE_SCHEDULES = ("1f1b", "zb_h1")
"""Pipeline schedules: 1F1B (interleaved when a stage holds several model chunks), or ZB-H1 (Qi et al.,
"Zero Bubble Pipeline Parallelism", ICLR 2024: 1F1B's microbatches in flight, each backward pass split
into its input gradients, run in place, and its weight gradients, deferred into the bubble); the
compiled model's `pipeline_schedule` setting is an index into this."""

Recompute = Literal["none", "selective", "full", "op", "block"]

Stages = tuple[tuple[int, ...], ...]
"""Layer ids of each stage, first stage first."""

PlanSettings = Mapping[str, int | bool]
"""The settings of one plan the compiled model reads, by name: those of `PHAZEC_PLAN_SETTINGS` in
ext/include/phazec/placement.hpp (a missing or unknown one is refused by name);
`phazec.predict.training.core_settings` makes them from the training knobs."""


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
    optimizer_factor: int = 2
    """Bytes of weights, bf16 gradients and optimizer state per byte of 2-byte weights (2 for SGD, 8 for
    mixed-precision Adam: `phazec.passes.memory.OPTIMIZER_STATE_BYTES`); the compiled model takes the
    state as this less 2 and counts the gradients apart (twice under `grad_reduce_in_fp32`)."""
    selective_stash_bytes: NDArray[np.int64] | None = None
    """Bytes kept for the backward pass under selective recompute (None: the stash bytes)."""
    selective_recompute_s: NDArray[np.float64] | None = None
    """Forward latency of the layer's attention core, recomputed under selective (None: 0)."""
    op_stash_bytes: NDArray[np.int64] | None = None
    """Bytes kept for the backward pass under op recompute (None: the stash bytes)."""
    op_recompute_s: NDArray[np.float64] | None = None
    """Forward latency of the ops op recompute runs again (None: 0)."""
    weight_grad_latency_s: NDArray[np.float64] | None = None
    """Of each layer's backward latency, its weight-gradient work, which ZB-H1 defers into the bubble
    (None: 0; at most the backward latency)."""
    expert_param_bytes: NDArray[np.int64] | None = None
    """Of `param_bytes`, those of a Mixture-of-Experts block's routed experts (None: 0), which a
    distributed optimizer shards over the expert-data-parallel group (t d cp / ep devices,
    Megatron-Core's with expert tensor parallelism 1: an expert's weights are whole at every t) instead
    of the data-parallel one."""
    gather_bytes: NDArray[np.int64] | None = None
    """Of `param_bytes`, the bytes ZeRO-3's all-gathers move and a gathered layer holds (None: all of
    them): fewer where a layer's linear weights are gathered as one-byte FP8 copies
    (`fp8_param_gather`); its gradients are reduce-scattered whole."""
    expert_gather_bytes: NDArray[np.int64] | None = None
    """Of `gather_bytes`, the routed experts' (None: `expert_param_bytes`), gathered over the
    expert-data-parallel group."""
    dummy_wgrad_bytes: NDArray[np.int64] | None = None
    """Bytes of the dummy weight gradients Transformer Engine keeps for the layer under fused gradient
    accumulation (`LayerMemory.dummy_wgrad_bytes`; None: 0): a stage holds its largest layer's under
    `gradient_accumulation_fusion`, the blocks sharing their shapes."""
    hbm_bytes_per_s: float = 0.0
    """HBM bandwidth that times the optimizer step; 0 leaves the step untimed."""
    collective_share: float = 0.0
    """Of a device's cores, the share an overlapped collective's kernels hold while it runs (0 to 1):
    the computation beside a ZeRO-3 gather or reduce-scatter or an overlapped DP sync of C seconds runs
    on the rest, so a window of W seconds and the collective take max(W + share C, C)
    (`DeviceModel.collective_sms` over the design's tensor cores; 0: the collective takes no cores)."""
    block_layers: NDArray[np.bool_] | None = None
    """Shape [layers]: whether each layer is a transformer block, the layers block recompute counts
    (None: every layer)."""
    bound_sync_windows: bool = False
    """Time each stage's DP sync as hidden behind windows as long as the bottleneck load allows, not
    behind the first stage's passes: a time never above the real one that never falls as a layer's
    latency grows (the `bounded` search's lower bound)."""

    def __post_init__(self) -> None:
        if self.selective_stash_bytes is None:
            object.__setattr__(self, "selective_stash_bytes", self.stash_bytes)
        if self.selective_recompute_s is None:
            object.__setattr__(self, "selective_recompute_s", np.zeros_like(self.forward_latency_s))
        if self.op_stash_bytes is None:
            object.__setattr__(self, "op_stash_bytes", self.stash_bytes)
        if self.op_recompute_s is None:
            object.__setattr__(self, "op_recompute_s", np.zeros_like(self.forward_latency_s))
        if self.expert_param_bytes is None:
            object.__setattr__(self, "expert_param_bytes", np.zeros_like(self.param_bytes))
        if self.gather_bytes is None:
            object.__setattr__(self, "gather_bytes", self.param_bytes)
        if self.expert_gather_bytes is None:
            object.__setattr__(self, "expert_gather_bytes", self.expert_param_bytes)
        if self.dummy_wgrad_bytes is None:
            object.__setattr__(self, "dummy_wgrad_bytes", np.zeros_like(self.param_bytes))
        if self.weight_grad_latency_s is None:
            object.__setattr__(self, "weight_grad_latency_s", np.zeros_like(self.forward_latency_s))
        if self.block_layers is None:
            object.__setattr__(
                self, "block_layers", np.ones(np.shape(self.forward_latency_s)[-1:], dtype=np.bool_)
            )
        for name, value in _validated_arrays(self).items():
            object.__setattr__(self, name, value)
        _validate_scalars(self)
        _validate_graph(self)

    @property
    def layer_count(self) -> int:
        """Number of layers."""
        return int(self.forward_latency_s.shape[1])

    @property
    def selective_stash(self) -> NDArray[np.int64]:
        """The selective stash bytes (set by construction)."""
        assert self.selective_stash_bytes is not None
        return self.selective_stash_bytes

    @property
    def op_stash(self) -> NDArray[np.int64]:
        """The op recompute stash bytes (set by construction)."""
        assert self.op_stash_bytes is not None
        return self.op_stash_bytes

    @property
    def op_s(self) -> NDArray[np.float64]:
        """The latencies of the ops op recompute runs again (set by construction)."""
        assert self.op_recompute_s is not None
        return self.op_recompute_s

    @property
    def expert_bytes(self) -> NDArray[np.int64]:
        """The routed experts' parameter bytes (set by construction)."""
        assert self.expert_param_bytes is not None
        return self.expert_param_bytes

    @property
    def gathered(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(gather bytes, the routed experts' of them), set by construction."""
        assert self.gather_bytes is not None and self.expert_gather_bytes is not None
        return self.gather_bytes, self.expert_gather_bytes

    @property
    def dummy_wgrads(self) -> NDArray[np.int64]:
        """The layers' dummy weight-gradient bytes (set by construction)."""
        assert self.dummy_wgrad_bytes is not None
        return self.dummy_wgrad_bytes

    @property
    def weight_grad_s(self) -> NDArray[np.float64]:
        """The weight-gradient latencies (set by construction)."""
        assert self.weight_grad_latency_s is not None
        return self.weight_grad_latency_s

    @property
    def blocks(self) -> NDArray[np.bool_]:
        """The transformer-block flags (set by construction)."""
        assert self.block_layers is not None
        return self.block_layers

    @property
    def selective_s(self) -> NDArray[np.float64]:
        """The attention-core latencies (set by construction)."""
        assert self.selective_recompute_s is not None
        return self.selective_recompute_s


@dataclass(frozen=True)
class Variant:
    """One setting to solve a problem under: a tensor-parallel width, an HBM size, and the settings of a
    plan the compiled model reads."""

    t: int
    hbm_bytes: int
    settings: PlanSettings
    """Every setting the compiled model reads, by name (`PlanSettings`)."""


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
    hbm_bytes: int
    min_memory_bytes: int
    parameter_bytes: int
    """Weights, gradients and optimizer state."""
    activation_bytes: int
    """The working set: activations a recomputation rebuilds at once (0 without recompute)."""
    stash_bytes: int
    """Activations kept for the microbatches in flight."""

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


def edge_list(problem: PlacementProblem) -> list[tuple[int, int]]:
    return [(int(u), int(v)) for u, v in problem.edges.tolist()]


def t_index(problem: PlacementProblem, t: int) -> int:
    valid = not isinstance(t, bool) and isinstance(t, int | np.integer)
    matches = np.flatnonzero(problem.t_values == t) if valid else np.empty(0, dtype=np.int64)
    if matches.size == 0:
        raise PhazecError(
            f"t = {t!r} is not valid: the problem has figures for tensor-parallel widths "
            f"{problem.t_values.tolist()} only."
        )
    return int(matches[0])


def validated_plan(problem: PlacementProblem, stages: Sequence[Sequence[int]]) -> Stages:
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
    "weight_grad_latency_s": (np.float64, 2),
    "param_bytes": (np.int64, 2),
    "expert_param_bytes": (np.int64, 2),
    "gather_bytes": (np.int64, 2),
    "expert_gather_bytes": (np.int64, 2),
    "dummy_wgrad_bytes": (np.int64, 2),
    "activation_bytes": (np.int64, 2),
    "stash_bytes": (np.int64, 2),
    "input_bytes": (np.int64, 2),
    "selective_stash_bytes": (np.int64, 2),
    "selective_recompute_s": (np.float64, 2),
    "op_stash_bytes": (np.int64, 2),
    "op_recompute_s": (np.float64, 2),
    "tensor_parallel": (np.bool_, 2),
    "block_layers": (np.bool_, 1),
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
    if out["block_layers"].shape != (layers,):
        raise PhazecError(
            f"block_layers has shape {out['block_layers'].shape}, which is not valid: give one flag per "
            f"layer, shape ({layers},)."
        )
    if out["edges"].shape[1] != 2 or out["edge_bytes"].shape != (out["edges"].shape[0],):
        raise PhazecError(
            f"edges has shape {out['edges'].shape} and edge_bytes {out['edge_bytes'].shape}, which is not "
            f"valid: give edges of shape (E, 2) and edge_bytes of shape (E,)."
        )
    for name in (
        "forward_latency_s",
        "backward_latency_s",
        "weight_grad_latency_s",
        "param_bytes",
        "expert_param_bytes",
        "gather_bytes",
        "expert_gather_bytes",
        "dummy_wgrad_bytes",
        "activation_bytes",
        "stash_bytes",
        "input_bytes",
        "selective_stash_bytes",
        "selective_recompute_s",
        "op_stash_bytes",
        "op_recompute_s",
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
    _check_part(out, "expert_param_bytes", "param_bytes", "the routed experts' bytes are part of the layer's")
    _check_part(out, "gather_bytes", "param_bytes", "ZeRO-3 gathers at most the layer's weight bytes")
    experts_gathered = "the routed experts' gathered bytes are part of the gathered bytes"
    _check_part(out, "expert_gather_bytes", "gather_bytes", experts_gathered)
    _check_part(out, "expert_gather_bytes", "expert_param_bytes", "the routed experts' gather at most theirs")
    dummies = "a layer's dummy weight gradients are at most its weights"
    _check_part(out, "dummy_wgrad_bytes", "param_bytes", dummies)
    _check_part(out, "selective_stash_bytes", "stash_bytes", "selective recompute keeps part of the stash")
    _check_part(out, "op_stash_bytes", "stash_bytes", "op recompute keeps part of the stash")
    _check_part(
        out, "weight_grad_latency_s", "backward_latency_s", "the weight gradients are part of the backward"
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


def _check_part(out: dict[str, NDArray[Any]], part: str, whole: str, why: str) -> None:
    """Refuses a per-layer figure `part` above `whole` of the same layer, saying `why`."""
    over = np.argwhere(out[part] > out[whole])
    if over.size:
        i, v = (int(x) for x in over[0])
        raise PhazecError(
            f"{part}[{i}, {v}] = {out[part][i, v]} is not valid: {why}, at most {whole}[{i}, {v}] = "
            f"{out[whole][i, v]}."
        )


def _validate_scalars(problem: PlacementProblem) -> None:
    for name in ("device_count", "microbatch_count", "samples_per_microbatch", "optimizer_factor"):
        integer_at_least(name, getattr(problem, name), 1)
    if not 0.0 <= problem.collective_share <= 1.0:
        raise PhazecError(
            f"collective_share = {problem.collective_share!r} is not valid: give the share of a device's "
            f"cores an overlapped collective holds, between 0 and 1."
        )
    if not (problem.hbm_bytes_per_s >= 0 and np.isfinite(problem.hbm_bytes_per_s)):
        raise PhazecError(
            f"hbm_bytes_per_s = {problem.hbm_bytes_per_s!r} is not valid: give a finite bandwidth >= 0 "
            f"(0 leaves the optimizer step untimed)."
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
    pairs = edge_list(problem)
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


def core_arguments(problem: PlacementProblem) -> dict[str, Any]:
    """The arguments describing the problem that both C++ calls (`core.solve_placements` and
    `core.evaluate_plan`) take first."""
    return {
        "n": problem.layer_count,
        "edges": edge_list(problem),
        "edge_bytes": problem.edge_bytes,
        "t_values": problem.t_values,
        "forward_s": problem.forward_latency_s,
        "backward_s": problem.backward_latency_s,
        "weight_grad_s": problem.weight_grad_s,
        "selective_s": problem.selective_s,
        "param_bytes": problem.param_bytes,
        "expert_param_bytes": problem.expert_bytes,
        "gather_bytes": problem.gathered[0],
        "expert_gather_bytes": problem.gathered[1],
        "dummy_wgrad_bytes": problem.dummy_wgrads,
        "activation_bytes": problem.activation_bytes,
        "stash_bytes": problem.stash_bytes,
        "selective_bytes": problem.selective_stash,
        "input_bytes": problem.input_bytes,
        "op_s": problem.op_s,
        "op_bytes": problem.op_stash,
        "tensor_parallel": problem.tensor_parallel,
        "block": np.ascontiguousarray(np.broadcast_to(problem.blocks, problem.tensor_parallel.shape)),
        "devices": problem.device_count,
        "microbatches": problem.microbatch_count,
        "tier_group_sizes": np.array([tier.group_size for tier in problem.tiers], dtype=np.int64),
        "tier_bandwidth_bytes_per_s": np.array([tier.bandwidth_bytes_per_s for tier in problem.tiers]),
        "tier_latency_s": np.array([tier.latency_s for tier in problem.tiers]),
        "optimizer_factor": problem.optimizer_factor,
        "hbm_bytes_per_s": problem.hbm_bytes_per_s,
        "collective_share": problem.collective_share,
        "bound_sync_windows": problem.bound_sync_windows,
    }


def core_variant(problem: PlacementProblem, variant: Variant) -> tuple[int, int, dict[str, int | bool]]:
    """(width index, HBM bytes, settings) of a variant for the C++ calls.

    Raises:
        PhazecError: the variant's t has no figures in the problem, or its HBM size is not positive.
    """
    integer_at_least("hbm_bytes", variant.hbm_bytes, 1)
    return t_index(problem, variant.t), int(variant.hbm_bytes), dict(variant.settings)
