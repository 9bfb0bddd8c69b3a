"""The training system: device count, global batch, HBM capacities and network tiers."""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from phazec.errors import PhazecError
from phazec.hw.ranges import physical
from phazec.hw.schema import SystemConfig, TierConfig
from phazec.util.checks import integer_at_least, non_negative, positive

BYTES_PER_GB = 1e9


@dataclass(frozen=True)
class NetworkTier:
    """One level of the network: groups of up to `group_size` devices talk over these links."""

    group_size: int
    """Largest group this tier connects."""
    bandwidth_bytes_per_s: float
    """Bandwidth per device and direction that collectives and transfers reach: the nominal link
    bandwidth times the tier's efficiency."""
    latency_s: float
    """Latency of one message step."""
    call_latency_s: float = 0.0
    """Fixed latency of each collective call inside a layer."""


@dataclass(frozen=True)
class System:
    """A validated training system."""

    name: str
    devices: int
    """Number of accelerators."""
    global_batch: int
    """Samples per training step."""
    hbm_bytes: tuple[float, ...]
    """HBM capacities to search over, ascending."""
    tiers: tuple[NetworkTier, ...]
    """Network tiers, group sizes strictly ascending; the last covers every device."""
    host_link_bytes_per_s: float = 0.0
    """Bandwidth per device and direction to its host's memory (0: none), for activation offloading."""

    def tier_for(self, group_size: int) -> NetworkTier:
        """The first (fastest) tier whose group size covers a group of `group_size` devices.

        Raises:
            PhazecError: the group is larger than every tier.
        """
        for tier in self.tiers:
            if group_size <= tier.group_size:
                return tier
        raise PhazecError(
            f"A collective over {group_size} devices is larger than every network tier of system "
            f"{self.name!r} (largest group {self.tiers[-1].group_size}); valid groups have 1.."
            f"{self.tiers[-1].group_size} devices."
        )


def validate_tiers(raw: Sequence[TierConfig], devices: int) -> tuple[NetworkTier, ...]:
    """The network tiers: group sizes strictly ascending, the last covering `devices`, bandwidths > 0,
    efficiencies in (0, 1] and latencies >= 0. A tier's bandwidth is the nominal one times its efficiency.

    Raises:
        PhazecError: a tier breaks one of these rules, or there is none.
    """
    if not raw:
        raise PhazecError("system.tiers is empty: give at least one tier covering every device.")
    tiers = []
    for i, tier in enumerate(raw):
        efficiency = tier.efficiency
        if isinstance(efficiency, bool) or not 0 < efficiency <= 1:
            raise PhazecError(
                f"system.tiers[{i}].efficiency = {efficiency!r} is not valid: it must be a share of the "
                f"nominal bandwidth in (0, 1]."
            )
        where = f"system.tiers[{i}]"
        nominal = positive(f"{where}.bandwidth_bytes_per_s", tier.bandwidth_bytes_per_s)
        tiers.append(
            NetworkTier(
                group_size=integer_at_least(f"{where}.group_size", tier.group_size, 1),
                bandwidth_bytes_per_s=physical(
                    "system.tiers.bandwidth_bytes_per_s", nominal, f"{where}.bandwidth_bytes_per_s"
                )
                * float(efficiency),
                latency_s=physical(
                    "system.tiers.latency_s",
                    non_negative(f"{where}.latency_s", tier.latency_s),
                    f"{where}.latency_s",
                ),
                call_latency_s=physical(
                    "system.tiers.call_latency_s",
                    non_negative(f"{where}.call_latency_s", tier.call_latency_s),
                    f"{where}.call_latency_s",
                ),
            )
        )
    sizes = [tier.group_size for tier in tiers]
    if any(a >= b for a, b in itertools.pairwise(sizes)) or sizes[-1] < devices:
        raise PhazecError(
            f"system.tiers group sizes {sizes} are not valid: they must be strictly ascending and the last "
            f"must cover all {devices} devices."
        )
    return tuple(tiers)


def system_from_config(config: SystemConfig) -> System:
    """The validated system of a `system` preset (its physical ranges: `phazec.hw.ranges`).

    Raises:
        PhazecError: a value is out of range.
    """
    devices = int(physical("system.devices", integer_at_least("system.devices", config.devices, 1)))
    hbm_gb = config.hbm_gb
    if not hbm_gb:
        raise PhazecError("system.hbm_gb is empty: give at least one HBM capacity in GB, e.g. [32, 64, 80].")
    gbs = [
        physical("system.hbm_gb", positive(f"system.hbm_gb[{i}]", gb), f"system.hbm_gb[{i}]")
        for i, gb in enumerate(hbm_gb)
    ]
    return System(
        name=config.name,
        devices=devices,
        global_batch=int(
            physical("system.global_batch", integer_at_least("system.global_batch", config.global_batch, 1))
        ),
        hbm_bytes=tuple(sorted(gb * BYTES_PER_GB for gb in gbs)),
        tiers=validate_tiers(config.tiers, devices),
        host_link_bytes_per_s=physical(
            "system.host_link_bytes_per_s",
            non_negative("system.host_link_bytes_per_s", config.host_link_bytes_per_s),
        ),
    )
