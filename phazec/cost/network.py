"""Network latency of collectives and point-to-point transfers over the system's tiers."""

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from phazec.cost.ops import OpKind, OpTable
from phazec.hw.system import System

Figures = tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]
"""Per operator: its tier's reached bandwidth (bytes/s), its latency per step and its call latency (s)."""


def _tier_figures(group_size: NDArray[np.int64], used: NDArray[np.bool_], system: System) -> Figures:
    """The figures of the first tier covering each `used` operator's group (the first tier's for the
    others); PhazecError when a group exceeds every tier."""
    sizes = np.array([tier.group_size for tier in system.tiers], dtype=np.int64)
    groups = np.where(used, group_size, 1)
    index = np.searchsorted(sizes, groups, side="left")
    if (index >= sizes.size).any():
        system.tier_for(int(groups[index >= sizes.size][0]))  # raises with the message
    return (
        np.array([tier.bandwidth_bytes_per_s for tier in system.tiers])[index],
        np.array([tier.latency_s for tier in system.tiers])[index],
        np.array([tier.call_latency_s for tier in system.tiers])[index],
    )


COMMUNICATING = (OpKind.ALL_REDUCE, OpKind.ALL_TO_ALL, OpKind.P2P, OpKind.ALL_GATHER)
"""Operator kinds that use the network."""


def sent_bytes(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Bytes each device sends: 2(g-1)/g * B for a ring all-reduce over g devices, an all-to-all's bytes
    on every tier (`tier_bytes`; (g-1)/g * B when every token copy is sent: it keeps its own 1/g), B
    point to point, (g-1)/g * B for a ring all-gather or reduce-scatter (half an all-reduce)."""
    return _sent_bytes(ops, tier_bytes(ops, system))


def _sent_bytes(ops: OpTable, tiers: NDArray[np.float64]) -> NDArray[np.float64]:
    """`sent_bytes`, given the all-to-alls' bytes on each tier (`tier_bytes`)."""
    g = ops.group_size.astype(np.float64)
    ring = 2.0 * (g - 1.0) / g * ops.collective_bytes
    exchange = tiers.sum(axis=0)
    sent: NDArray[np.float64] = np.select(
        [ops.kind == kind for kind in COMMUNICATING], [ring, exchange, ops.collective_bytes, ring / 2.0], 0.0
    )
    return sent


def ring_latency_s(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Seconds of each operator's context-parallel ring (0 without one): `ring_steps` transfers of
    `ring_bytes` to the next device, each at the tier's reached bandwidth plus its latency, and one
    call latency, on the tier of the ring's `group_size` devices.

    Raises:
        PhazecError: a ring's group is larger than every tier.
    """
    rings = ops.ring_steps > 0
    if not rings.any():
        return np.zeros(len(ops))
    bandwidth, latency, call_s = _tier_figures(ops.group_size, rings, system)
    ring_s: NDArray[np.float64] = ops.ring_steps * (ops.ring_bytes / bandwidth + latency) + rings * call_s
    return ring_s


def network_latency_s(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Latency in seconds of each operator's communication (0 for operators that do not communicate).

    A ring all-reduce over g devices takes 2(g-1) steps: 2(g-1)/g * B / bandwidth + 2(g-1) * latency,
    plus the tier's call latency; a ring all-gather or reduce-scatter half of them, (g-1)/g * B /
    bandwidth + (g-1) * latency, plus the call latency. An all-to-all over g devices runs g-1 pairwise
    exchanges, each tier's links at once: each tier's bytes (`tier_bytes`; with every token copy sent,
    a device's peers first reached at tier j, min(g, size_j) - min(g, size_j-1) of them, size_-1 = 1,
    get B/g each) go at that tier's bandwidth and the slowest tier sets the time: max_j bytes_j /
    bandwidth_j + (g-1) * latency, plus the call latency (inside one tier: (g-1)/g * B / bandwidth). A
    point-to-point transfer takes B / bandwidth + latency + call latency. The bandwidth is the one the
    tier reaches (nominal times efficiency).
    `group_size` picks the tier of the latencies: for a collective the group, for a transfer the
    smallest group holding both ends (2 for neighbours).

    Raises:
        PhazecError: a group is larger than every tier.
    """
    communicates = np.isin(ops.kind, COMMUNICATING)
    if not communicates.any():
        return np.zeros(len(ops))
    bandwidth, latency, call_s = _tier_figures(ops.group_size, communicates, system)
    g = ops.group_size - 1.0
    steps = np.select([ops.kind == kind for kind in COMMUNICATING], [2.0 * g, g, 1.0, g], 0.0)
    tiers = tier_bytes(ops, system)
    wire_s = np.where(
        ops.kind == OpKind.ALL_TO_ALL, _slowest_s(tiers, system), _sent_bytes(ops, tiers) / bandwidth
    )
    transfer_s: NDArray[np.float64] = wire_s + steps * latency + (steps > 0) * call_s
    return transfer_s


def exchange_s(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Seconds an all-to-all's bytes take on the wires: each tier's bytes (`tier_bytes`) at that tier's
    bandwidth, the tiers at once, so the slowest sets the time (`network_latency_s`); 0 for other
    operators."""
    return _slowest_s(tier_bytes(ops, system), system)


def _slowest_s(tiers: NDArray[np.float64], system: System) -> NDArray[np.float64]:
    """`exchange_s`, given the all-to-alls' bytes on each tier (`tier_bytes`)."""
    bandwidth = np.array([tier.bandwidth_bytes_per_s for tier in system.tiers])
    slowest_s: NDArray[np.float64] = (tiers / bandwidth[:, None]).max(axis=0)
    return slowest_s


def tier_bytes(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Bytes a device sends on each tier in each all-to-all, [tiers, ops] (0 for other operators).

    Every token copy sent (Megatron-Core's all-to-all dispatcher): B/g to each other device of the
    group, so the tier that first reaches c_j - c_j-1 of them carries (c_j - c_j-1) / g * B, where
    c_j = min(g, size_j) and c_-1 = 1.

    Deduplicated (`routed_experts` > 0: DeepEP's and HybridEP's hierarchical dispatch): a token crosses
    a tier once per unit of the tier below that holds one of its experts, never once per expert, to the
    device of its own index there, which forwards it on the tier below (DeepSeek-V3's report, section
    3.2.2: over InfiniBand once to each node, then over NVLink to the GPUs). The token reaches every
    unit of c_j devices holding one of its experts (its own, and those a higher tier brought it to),
    and from there each of the (c_j - c_j-1) / c_j-1 other units of c_j-1 devices in it that holds one;
    over the g / c_j units of tier j that is, with the tokens' bytes B / k (B holds their k copies),

        B / k x g / c_j x (c_j - c_j-1) / c_j-1 x P(a unit of c_j-1 devices holds one of its experts)

    per device on tier j (for the lowest tier the units are devices), P from `hit_probability` for the
    unit's c_j-1 E / g consecutive experts (Megatron-Core places experts on the expert-parallel ranks in
    order). The combine sends the same bytes back the same way."""
    g = ops.group_size.astype(np.float64)
    exchanges = ops.kind == OpKind.ALL_TO_ALL
    out = np.zeros((len(system.tiers), len(ops)))
    reached = np.ones_like(g)
    for j, tier in enumerate(system.tiers):
        covered = np.minimum(g, float(tier.group_size))
        out[j] = np.where(exchanges, (covered - reached) / g * ops.collective_bytes, 0.0)
        reached = np.maximum(reached, covered)
    for i in np.flatnonzero(exchanges & (ops.routed_experts > 0)):
        experts, k = int(ops.routed_experts[i]), int(ops.top_k[i])
        routed = Routed(experts, k, int(ops.expert_groups[i]), int(ops.group_top_k[i]))
        out[:, i] = _deduplicated_bytes(
            float(ops.collective_bytes[i]), int(ops.group_size[i]), routed, system
        )
    return out


@dataclass(frozen=True)
class Routed:
    """How a deduplicated all-to-all's tokens pick their experts (`OpWork.routed_experts` and after)."""

    experts: int
    top_k: int
    groups: int
    chosen: int


def _deduplicated_bytes(
    collective_bytes: float, g: int, routed: Routed, system: System
) -> NDArray[np.float64]:
    """Per tier, the bytes one device sends in a deduplicated all-to-all (`tier_bytes`)."""
    token_bytes = collective_bytes / routed.top_k
    out = np.zeros(len(system.tiers))
    reached = 1
    for j, tier in enumerate(system.tiers):
        covered = min(g, tier.group_size)
        if covered > reached:
            unit_experts = reached * routed.experts // g
            out[j] = (
                token_bytes
                * g
                / covered
                * (covered - reached)
                / reached
                * hit_probability(routed, unit_experts)
            )
        reached = max(reached, covered)
    return out


@functools.cache
def hit_probability(routed: Routed, unit_experts: int) -> float:
    """The probability that a token sends one of its experts' copies into a unit of `unit_experts`
    consecutive experts, averaged over the units that tile the experts (cyclically where they do not
    divide them).

    The token's top-k are taken uniformly among the experts of its `chosen` groups, and those uniformly
    among the `groups` groups of consecutive experts: the routing of Megatron-Core's forced load
    balancing (`moe_router_force_load_balancing`, random logits, as NVIDIA's benchmarks run), where every
    expert is equally likely. For a unit meeting the groups in counts c_i, over the chosen sets Q:
    P(miss) = mean_Q C(n - sum_Q c_i, k) / C(n, k), n = chosen x experts / groups; exact, in integers."""
    experts, k, groups, chosen = routed.experts, routed.top_k, routed.groups, routed.chosen
    size = experts // groups
    n = chosen * size
    starts = range(0, experts, unit_experts)
    total = Fraction(0)
    for start in starts:
        counts = [0] * groups
        for e in range(start, start + unit_experts):
            counts[(e % experts) // size] += 1
        # ways[s][o]: sets of s groups meeting the unit in o experts.
        ways = [[0] * (unit_experts + 1) for _ in range(chosen + 1)]
        ways[0][0] = 1
        for c in counts:
            for s in range(chosen, 0, -1):
                for o in range(unit_experts, c - 1, -1):
                    ways[s][o] += ways[s - 1][o - c]
        missed = sum(w * math.comb(n - o, k) for o, w in enumerate(ways[chosen]) if w)
        total += 1 - Fraction(missed, math.comb(groups, chosen) * math.comb(n, k))
    return float(total / len(starts))
