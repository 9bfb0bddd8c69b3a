"""Physical ranges of the hardware and system values: outside one, a value is an error; outside what
today's chips and systems reach, yet physical, a warning naming the value and the range (a user
exploring a future chip may mean it). `docs/devices.md#physical-ranges` lists them.

A value past its range made a search report nonsense as a finding: `hbm_bytes_per_s: 1.0e300` ran to
the end and reported a peak power of 3.1e289 W.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from phazec.errors import PhazecError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Range:
    """Where a value is physical, and where today's hardware lies."""

    lo: float
    """Smallest physical value (an error below)."""
    hi: float
    """Largest physical value (an error above)."""
    usual_lo: float
    """Smallest value today's hardware has (a warning below)."""
    usual_hi: float
    """Largest value today's hardware has (a warning above)."""
    unit: str
    source: str
    """Where the bounds come from."""


RANGES: dict[str, Range] = {
    "hw.clock_hz": Range(
        1e6,
        1e11,
        1e8,
        5e9,
        "Hz",
        "TPUv4 1.05 GHz, A100 1.41 GHz, H100 SXM 1.98 GHz boost (vendor data sheets)",
    ),
    "hw.hbm_bytes_per_s": Range(
        1e8,
        1e15,
        1e10,
        2e13,
        "bytes/s",
        "V100 0.9 TB/s, H100 SXM 3.35 TB/s, B200 8 TB/s (vendor data sheets)",
    ),
    "hw.power_budget_w": Range(
        1e-3,
        1e5,
        1.0,
        3e4,
        "W",
        "H100 SXM 700 W, B200 1000 W, a Cerebras CS-3 system 23 kW (vendor data sheets)",
    ),
    "hw.area_budget_mm2": Range(
        1e-3,
        70686.0,
        1.0,
        858.0,
        "mm^2",
        "a 300 mm wafer is 70,686 mm^2; a die is at most the 26 x 33 mm reticle",
    ),
    "hw.num_tc": Range(1, 1e6, 1, 1e5, "cores", "Cerebras WSE-3 has 900,000 cores; H100 SXM 132 SMs"),
    "hw.num_vc": Range(1, 1e6, 1, 1e5, "cores", "Cerebras WSE-3 has 900,000 cores; H100 SXM 132 SMs"),
    "hw.device.kernel_latency_s": Range(
        0.0, 1e-2, 0.0, 1e-4, "s", "the GPU presets fit 18 us per kernel (bench_fidelity.py --fit)"
    ),
    "hw.device.collective_sms": Range(
        0, 1e6, 0, 256, "SMs", "NCCL's 16 ring channels on DGX H100 nodes, one SM each (NVIDIA/nccl#1453)"
    ),
    "hw.device.gemm_tile_overhead_cycles": Range(
        0.0, 1e7, 0.0, 1e5, "cycles", "a GPU thread block's prologue and epilogue: hundreds of cycles"
    ),
    "system.devices": Range(
        1, 1e7, 1, 1e6, "devices", "the largest training clusters have about 100,000 GPUs (2024)"
    ),
    "system.global_batch": Range(
        1, 1e9, 1, 1e7, "samples", "GPT-3 175B trained on 1,536 sequences per step (Megatron-LM, 2021)"
    ),
    "system.hbm_gb": Range(
        1e-6, 1e5, 1.0, 1024.0, "GB", "H100 80 GB, H200 141 GB, MI325X 256 GB (data sheets)"
    ),
    "system.tiers.bandwidth_bytes_per_s": Range(
        1e6, 1e15, 1e8, 1e13, "bytes/s", "NVLink 5 900 GB/s per direction, 400 Gb/s InfiniBand 50 GB/s"
    ),
    "system.tiers.latency_s": Range(0.0, 1.0, 0.0, 1e-3, "s", "NVLink about 1 us, InfiniBand a few us"),
    "system.tiers.call_latency_s": Range(0.0, 1.0, 0.0, 1e-3, "s", "an NCCL call's launch, tens of us"),
    "system.host_link_bytes_per_s": Range(
        0.0, 1e15, 0.0, 1e12, "bytes/s", "PCIe Gen5 x16 64 GB/s, GB200's NVLink-C2C 450 GB/s per direction"
    ),
}
"""Each ranged value by its config key (a tier's without its index)."""


def physical(key: str, value: float, name: str | None = None) -> float:
    """`value` of config key `key` (`RANGES`), named `name` in messages (default `key`; a tier's value
    with its index), if within its physical range; a warning if outside what hardware has today.

    Raises:
        PhazecError: the value is outside its physical range.
    """
    bounds = RANGES[key]
    shown = name or key
    if not bounds.lo <= value <= bounds.hi:
        raise PhazecError(
            f"{shown}={value:g} {bounds.unit} is outside the physical range {bounds.lo:g} to {bounds.hi:g} "
            f"{bounds.unit} ({bounds.source}); give a value within it."
        )
    if not bounds.usual_lo <= value <= bounds.usual_hi:
        logger.warning(
            "%s=%g %s is outside what hardware has today, %g to %g %s (%s); using it as given",
            shown, value, bounds.unit, bounds.usual_lo, bounds.usual_hi, bounds.unit, bounds.source,
        )  # fmt: skip
    return value
