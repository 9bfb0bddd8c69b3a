"""Network latency of collectives and point-to-point transfers over the system's tiers."""

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


COMMUNICATING = (OpKind.ALL_REDUCE, OpKind.ALL_TO_ALL, OpKind.P2P)
"""Operator kinds that use the network."""


def sent_bytes(ops: OpTable) -> NDArray[np.float64]:
    """Bytes each device sends: 2(g-1)/g * B for a ring all-reduce over g devices, (g-1)/g * B for an
    all-to-all (it keeps its own 1/g), B point to point."""
    g = ops.group_size.astype(np.float64)
    ring = 2.0 * (g - 1.0) / g * ops.collective_bytes
    exchange = (g - 1.0) / g * ops.collective_bytes
    sent: NDArray[np.float64] = np.select(
        [ops.kind == kind for kind in COMMUNICATING], [ring, exchange, ops.collective_bytes], 0.0
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
    plus the tier's call latency. An all-to-all over g devices sends B/g to each of the other g-1 in
    g-1 pairwise exchanges, each tier's links at once: a device's peers first reached at tier j
    (min(g, size_j) - min(g, size_j-1) of them, size_-1 = 1) get theirs at tier j's bandwidth, and the
    slowest tier sets the time: max_j peers_j / g * B / bandwidth_j + (g-1) * latency, plus the call
    latency (inside one tier: (g-1)/g * B / bandwidth). A point-to-point transfer takes B / bandwidth +
    latency + call latency. The bandwidth is the one the tier reaches (nominal times efficiency).
    `group_size` picks the tier of the latencies: for an all-reduce or an all-to-all the group, for a
    transfer the smallest group holding both ends (2 for neighbours).

    Raises:
        PhazecError: a group is larger than every tier.
    """
    communicates = np.isin(ops.kind, COMMUNICATING)
    if not communicates.any():
        return np.zeros(len(ops))
    bandwidth, latency, call_s = _tier_figures(ops.group_size, communicates, system)
    g = ops.group_size - 1.0
    steps = np.select([ops.kind == kind for kind in COMMUNICATING], [2.0 * g, g, 1.0], 0.0)
    wire_s = np.where(ops.kind == OpKind.ALL_TO_ALL, exchange_s(ops, system), sent_bytes(ops) / bandwidth)
    transfer_s: NDArray[np.float64] = wire_s + steps * latency + (steps > 0) * call_s
    return transfer_s


def exchange_s(ops: OpTable, system: System) -> NDArray[np.float64]:
    """Seconds an all-to-all's bytes take on the wires: each tier's share of a device's peers at that
    tier's bandwidth, the tiers at once (`network_latency_s`); 0 for other operators."""
    g = ops.group_size.astype(np.float64)
    reached = np.ones_like(g)
    slowest_s = np.zeros_like(g)
    for tier in system.tiers:
        covered = np.minimum(g, float(tier.group_size))
        share_s = (covered - reached) / g * ops.collective_bytes / tier.bandwidth_bytes_per_s
        slowest_s = np.maximum(slowest_s, share_s)
        reached = np.maximum(reached, covered)
    out: NDArray[np.float64] = np.where(ops.kind == OpKind.ALL_TO_ALL, slowest_s, 0.0)
    return out
