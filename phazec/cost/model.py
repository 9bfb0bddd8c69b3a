"""Per-operator costs for many designs at once: single-core and all-cores latency, and energy.

The `cost` config group picks the latency model (`tiled` or `phaze`); communication always uses the
system's network tiers and energy always uses `phazec.cost.energy`.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phazec.cost import phaze, tiled
from phazec.cost.energy import op_energy_j
from phazec.cost.network import network_latency_s, ring_latency_s
from phazec.cost.ops import OpKind, OpTable
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.device import is_template
from phazec.hw.schema import CostConfig
from phazec.hw.system import System

F64 = NDArray[np.float64]
LatencyFn = Callable[[OpTable, Designs, bool], F64]
"""(operators of one kind, designs, all cores?) -> latency in seconds, [ops, designs]."""
TrafficFn = Callable[[OpTable, Designs], F64]
"""(on-chip operators, designs) -> seconds each keeps HBM busy, [ops, designs]."""


@dataclass(frozen=True)
class LatencyModel:
    """A latency model: one function per kind of on-chip operator."""

    name: str
    by_kind: dict[OpKind, LatencyFn]
    hbm_traffic_s: TrafficFn | None
    """Seconds each operator keeps HBM busy, which the layer schedule shares between operators run side
    by side; None: HBM is not a shared resource (PHAZE's model)."""
    monotone: bool
    """Whether no operator's latency (on one core or all cores) ever grows when any design knob grows:
    the promise dominance pruning (`phazec.search.dominance`) rests on, property-tested in
    tests/test_cost_model.py. `tiled` keeps it because every bandwidth grows with the design; `phaze`
    keeps it because its GEMM terms shrink with the array and core count and it leaves out the global
    buffer, whose reference mapper degenerates on small buffers (modelling that would break it)."""


MODELS = {
    model.name: model
    for model in (
        LatencyModel(
            "tiled",
            {
                OpKind.GEMM: tiled.gemm_latency_s,
                OpKind.VECTOR: tiled.vector_latency_s,
                OpKind.FUSED: tiled.fused_latency_s,
                OpKind.ATTENTION: tiled.attention_latency_s,
            },
            hbm_traffic_s=tiled.hbm_traffic_s,
            monotone=True,
        ),
        LatencyModel(
            "phaze",
            {
                OpKind.GEMM: phaze.gemm_latency_s,
                OpKind.VECTOR: phaze.vector_latency_s,
                OpKind.FUSED: phaze.fused_latency_s,
                OpKind.ATTENTION: phaze.gemm_latency_s,
            },
            hbm_traffic_s=None,
            monotone=True,
        ),
    )
}
"""Latency models by `cost.name`."""


def latency_model_from_config(config: CostConfig) -> LatencyModel:
    """The latency model a `cost` preset names.

    Raises:
        PhazecError: the model name is unknown.
    """
    name = config.name
    if name not in MODELS:
        raise PhazecError(
            f"cost.name = {name!r} is not a latency model; valid names are {', '.join(MODELS)}."
        )
    return MODELS[name]


def check_applies(model: LatencyModel, designs: Designs) -> None:
    """Refuse `cost=phaze` on a chip with a device model other than the template's systolic tiling.

    The reference's closed form fixes its per-core and DRAM bandwidths in words per cycle whatever the
    design, which caps a GEMM near 85 * sqrt(w * d) MACs per cycle: right for reproducing the paper on
    TPU-like designs, 10-25x too slow on a GPU.

    Raises:
        PhazecError: `model` is `phaze` and the designs have a GEMM output tile or shared cores.
    """
    device = designs.device
    if model.name == "phaze" and not is_template(device):
        raise PhazecError(
            "cost=phaze (the PHAZE reference's closed form) is meant for the TPU-like template only: its "
            "fixed per-core and DRAM bandwidths cap a GEMM near 85 * sqrt(array size) MACs per cycle, "
            "which makes a GPU 10-25x too slow. This hw preset has a GPU device model (hw.device.gemm_tiles "
            f"= {device.gemm_tiles}, hw.device.shared_cores = {device.shared_cores}): use cost=tiled, or "
            "an hw preset of the template (tpuv4, tpu_small, tpu_area)."
        )


@dataclass(frozen=True)
class OpCosts:
    """Costs of operators on designs; arrays are [ops, designs] (or [ops] for one design)."""

    single_core_s: F64
    """Latency on one core of the operator's type (a core pair for a fused op)."""
    all_cores_s: F64
    """Latency spread over every core of the operator's type (intra-op parallel)."""
    energy_j: F64
    """Energy, the same however many cores run the operator."""
    hbm_s: F64
    """Seconds the operator keeps HBM busy, the same however many cores run it (at most either
    latency; 0 for collectives, free operators, under a model without HBM traffic and with
    `hw.device.hbm_shared=false`)."""


def op_costs(ops: OpTable, designs: Designs, system: System, model: LatencyModel) -> OpCosts:
    """Costs of every operator of `ops` on every design.

    Free operators cost nothing; collectives and transfers cost their network time on any design.

    Raises:
        PhazecError: a collective's group is larger than every network tier, or the latency model does
            not apply to the designs' device model.
    """
    check_applies(model, designs)
    if model.name == "phaze" and ops.low_precision.any():
        raise PhazecError(
            "cost=phaze (the PHAZE reference's closed form) prices bf16 GEMMs only; precision fp8 and "
            "mxfp8 need cost=tiled."
        )
    network_s = np.repeat(network_latency_s(ops, system)[:, None], len(designs), 1)
    single_core_s = network_s.copy()
    all_cores_s = network_s
    hbm_s = np.zeros_like(network_s)
    for kind, latency_s in model.by_kind.items():
        rows = np.flatnonzero(ops.kind == kind)
        if rows.size:
            subset = ops.take(rows)
            single_core_s[rows] = latency_s(subset, designs, False)
            all_cores_s[rows] = latency_s(subset, designs, True)
            if model.hbm_traffic_s is not None and designs.device.hbm_shared:
                hbm_s[rows] = model.hbm_traffic_s(subset, designs)
    ring_s = ring_latency_s(ops, system)[:, None]
    # A context-parallel attention kernel computes while its ring passes the next key and value blocks;
    # under the all-to-all variant its exchanges run before and after it.
    exposed = ops.ring_exposed[:, None]
    single_core_s = np.where(exposed, single_core_s + ring_s, np.maximum(single_core_s, ring_s))
    all_cores_s = np.where(exposed, all_cores_s + ring_s, np.maximum(all_cores_s, ring_s))
    return OpCosts(single_core_s, all_cores_s, op_energy_j(ops, designs, system), hbm_s)


def design_op_costs(ops: OpTable, design: Designs, system: System, model: LatencyModel) -> OpCosts:
    """Costs of every operator of `ops` on one design (`design` holds exactly one); arrays are [ops].

    Raises:
        PhazecError: `design` holds more or fewer than one design, or as `op_costs`.
    """
    if len(design) != 1:
        raise PhazecError(
            f"design_op_costs needs exactly one design, got {len(design)}: use op_costs for many."
        )
    costs = op_costs(ops, design, system, model)
    return OpCosts(
        costs.single_core_s[:, 0], costs.all_cores_s[:, 0], costs.energy_j[:, 0], costs.hbm_s[:, 0]
    )
