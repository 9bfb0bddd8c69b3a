"""Config schemas of the `hw`, `system` and `cost` groups (filled by the hardware issue)."""

from dataclasses import dataclass


@dataclass
class HwConfig:
    """A hardware search space (a single design is a space with every knob fixed)."""

    name: str = ""


@dataclass
class SystemConfig:
    """The training system: devices, global batch and network tiers."""

    name: str = ""


@dataclass
class CostConfig:
    """The per-operator latency model."""

    name: str = "tiled"
