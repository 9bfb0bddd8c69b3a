"""Hardware search spaces: validation of the `hw` config and vectorised enumeration of its designs."""

import itertools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from phazec.errors import PhazecError
from phazec.hw.area import (
    CORE_SRAM_UM2,
    GLB_SRAM_UM2,
    area_mm2,
    between_entries,
    tc_buffer_bytes,
    tpuv4_area_mm2,
    vc_buffer_bytes,
)
from phazec.hw.designs import KNOBS, Designs
from phazec.hw.device import DeviceModel, device_from_config
from phazec.hw.energy import peak_power_w
from phazec.hw.ranges import physical
from phazec.hw.schema import HwConfig
from phazec.util.checks import positive

logger = logging.getLogger(__name__)

TIED = "tied"
"""`vc_width` value meaning: the vector width equals the tensor-core width."""


@dataclass(frozen=True)
class HwSpace:
    """A validated hardware search space; every knob holds its candidate values in ascending order."""

    name: str
    num_tc: tuple[int, ...]
    tc_width: tuple[int, ...]
    tc_depth: tuple[int, ...]
    num_vc: tuple[int, ...]
    vc_width: tuple[int, ...] | None
    """Vector widths, or None when tied to the tensor-core width."""
    glb_bytes: tuple[int, ...]
    area_budget_mm2: float | None
    """Largest area kept; None keeps every area."""
    area_floor: float
    """Smallest area kept as a fraction of the budget (only with a budget)."""
    floor_exempt_single_core: bool
    power_budget_w: float | None
    hbm_bytes_per_s: float
    clock_hz: float
    sram_interpolation: bool
    device: DeviceModel
    """How well the chip's kernels use its cores and memory."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def validate_knob(name: str, raw: Any) -> tuple[int, ...]:
    """The candidate values of knob `name`: a list of positive integers or `{pow2: [lo, hi]}`.

    Returns:
        The distinct values, ascending.

    Raises:
        PhazecError: the knob is empty, holds a non-integer or non-positive value, or the range is malformed.
    """
    if isinstance(raw, Mapping):
        bounds = raw.get("pow2")
        if (
            set(raw) != {"pow2"}
            or not isinstance(bounds, list | tuple)
            or len(bounds) != 2
            or not all(_is_int(b) and _is_pow2(b) for b in bounds)
            or bounds[0] > bounds[1]
        ):
            raise PhazecError(
                f"hw.{name} = {dict(raw)} is not a valid range: write {{pow2: [lo, hi]}} with lo <= hi, "
                f"both powers of two (e.g. {{pow2: [2, 256]}}), or a list of positive integers."
            )
        lo, hi = bounds
        return tuple(2**e for e in range(lo.bit_length() - 1, hi.bit_length()))
    values = raw if isinstance(raw, list | tuple) else [raw]
    if not values or not all(_is_int(v) and v > 0 for v in values):
        raise PhazecError(
            f"hw.{name} = {raw!r} is not valid: give a non-empty list of positive integers (e.g. [8]) "
            f"or a range of powers of two such as {{pow2: [1, 4096]}}."
        )
    return tuple(sorted(set(values)))


def validate_area_budget(raw: Any) -> float | None:
    """The area budget in mm^2: a positive number, `tpuv4` (278.8267 mm^2) or None (no budget).

    Raises:
        PhazecError: any other value.
    """
    if raw is None:
        return None
    if raw == "tpuv4":
        return tpuv4_area_mm2()
    if isinstance(raw, str):
        raise PhazecError(
            f"hw.area_budget_mm2 = {raw!r} is not valid: give an area in mm^2 (a number > 0), "
            f"'tpuv4' for the TPUv4-like design's area, or null for no budget."
        )
    return positive("hw.area_budget_mm2", raw)


def validate_fraction(name: str, value: Any) -> float:
    """`value` as a float if it is a number in [0, 1).

    Raises:
        PhazecError: any other value.
    """
    if not _is_number(value) or not 0 <= value < 1:
        raise PhazecError(f"{name} = {value!r} is not valid: it must be a number from 0 up to (not incl.) 1.")
    return float(value)


def interpolated_sizes(space: HwSpace) -> dict[str, list[int]]:
    """Per buffer kind, the sizes the space can produce that lie between two entries of the area
    tables (priced by interpolation).

    Raises:
        PhazecError: a size is off the tables (and interpolation was not asked for).
    """
    pairs = np.array(list(itertools.product(space.tc_width, space.tc_depth)), dtype=np.int64)
    vc_widths = np.array(space.vc_width or space.tc_width, dtype=np.int64)
    return {
        what: between_entries(sizes, table, what, space.sram_interpolation)
        for sizes, table, what in (
            (tc_buffer_bytes(pairs[:, 0], pairs[:, 1]), CORE_SRAM_UM2, "tensor-core buffer"),
            (vc_buffer_bytes(vc_widths), CORE_SRAM_UM2, "vector-core buffer"),
            (np.array(space.glb_bytes, dtype=np.int64), GLB_SRAM_UM2, "global buffer"),
        )
    }


def hw_space_from_config(config: HwConfig) -> HwSpace:
    """The validated search space of an `hw` preset (its physical ranges: `phazec.hw.ranges`).

    Raises:
        PhazecError: a value is out of range.
    """
    power = config.power_budget_w
    area = validate_area_budget(config.area_budget_mm2)
    space = HwSpace(
        name=config.name,
        num_tc=validate_knob("num_tc", config.num_tc),
        tc_width=validate_knob("tc_width", config.tc_width),
        tc_depth=validate_knob("tc_depth", config.tc_depth),
        num_vc=validate_knob("num_vc", config.num_vc),
        vc_width=None if config.vc_width == TIED else validate_knob("vc_width", config.vc_width),
        glb_bytes=validate_knob("glb_bytes", config.glb_bytes),
        area_budget_mm2=None if area is None else physical("hw.area_budget_mm2", area),
        area_floor=validate_fraction("hw.area_floor", config.area_floor),
        floor_exempt_single_core=config.floor_exempt_single_core,
        power_budget_w=None
        if power is None
        else physical("hw.power_budget_w", positive("hw.power_budget_w", power)),
        hbm_bytes_per_s=physical(
            "hw.hbm_bytes_per_s", positive("hw.hbm_bytes_per_s", config.hbm_bytes_per_s)
        ),
        clock_hz=physical("hw.clock_hz", positive("hw.clock_hz", config.clock_hz)),
        sram_interpolation=config.sram_interpolation,
        device=device_from_config(config.device),
    )
    for knob in ("num_tc", "num_vc"):
        physical(f"hw.{knob}", max(getattr(space, knob)), f"hw.{knob} (largest)")
    interpolated_sizes(space)  # raises for a buffer size off the area tables
    return space


CHUNK = 1 << 20
"""Grid points enumerated at once: enumeration holds one chunk of the grid (about 100 MB of arrays) and the
designs kept, never the whole grid."""


def knob_values(space: HwSpace) -> dict[str, tuple[int, ...]]:
    """The candidate values of each knob that varies on its own (vc_width is left out when tied)."""
    return {name: getattr(space, name) for name in KNOBS if getattr(space, name) is not None}


def design_count(space: HwSpace) -> int:
    """The number of candidate designs, before the area and power budgets: the product of the knobs'
    value counts, computed, not enumerated."""
    return math.prod(len(values) for values in knob_values(space).values())


def size_statement(space: HwSpace) -> str:
    """The space's size, stated before any work: `hw space 'x' has N candidate designs (hw.num_tc 13 x
    ... values)`, the knobs with more than one value, most values first."""
    factors = sorted(
        ((name, len(v)) for name, v in knob_values(space).items() if len(v) > 1), key=lambda f: -f[1]
    )
    product = " x ".join(f"hw.{name} {n}" for name, n in factors)
    return f"hw space {space.name!r} has {design_count(space):,} candidate designs " + (
        f"({product} values)" if factors else "(every knob fixed)"
    )


def check_size(space: HwSpace, max_designs: int) -> None:
    """The space has at most `max_designs` candidate designs (`search.max_designs`).

    Raises:
        PhazecError: it has more; the message names the knobs that multiply the count.
    """
    count = design_count(space)
    if count <= max_designs:
        return
    raise PhazecError(
        f"{size_statement(space)}, more than search.max_designs={max_designs:,}: enumerating and searching "
        "it would take hours and many GB. Give the knobs with the most values fewer (a shorter list, or a "
        f"narrower {{pow2: [lo, hi]}}), or raise search.max_designs to at least {count} to search it anyway "
        "(enumeration then keeps only the designs within the budgets in memory)."
    )


def _grid(space: HwSpace, start: int, stop: int) -> dict[str, np.ndarray]:
    """Grid points `start` to `stop` (not included) of every combination of the knobs, in row-major
    order (vc_width tied to tc_width when the space says so)."""
    axes = knob_values(space)
    index = np.unravel_index(np.arange(start, stop, dtype=np.int64), tuple(len(v) for v in axes.values()))
    grid = {name: np.array(v, dtype=np.int64)[i] for (name, v), i in zip(axes.items(), index, strict=True)}
    grid.setdefault("vc_width", grid["tc_width"])
    return grid


def enumerate_designs(space: HwSpace) -> Designs:
    """Every design of the space within its area (and power) budget, largest area first.

    A design is kept iff floor * budget <= area <= budget, where the floor is waived for designs with one
    tensor core or one vector core when `floor_exempt_single_core` is set (phaze-facts section 2), and
    its peak power is within the power budget if there is one. Equal areas are ordered by num_tc,
    tc_width, tc_depth, num_vc, vc_width, glb_bytes ascending. The grid is enumerated `CHUNK` points at
    a time, so memory holds the designs kept, never the whole grid (`check_size` bounds the grid first).

    Raises:
        PhazecError: no design is within the budgets.
    """
    for what, sizes in interpolated_sizes(space).items():
        if sizes:
            logger.info(
                "hw space %s: %s sizes %s bytes are between area-table entries: area interpolated linearly",
                space.name, what, sizes,
            )  # fmt: skip
    total = design_count(space)
    kept: list[dict[str, np.ndarray]] = []
    least_area_mm2 = least_power_w = math.inf
    for start in range(0, total, CHUNK):
        grid = _grid(space, start, min(start + CHUNK, total))
        areas = area_mm2(**grid, interpolate=space.sram_interpolation)
        cores = {name: grid[name] for name in KNOBS if name != "glb_bytes"}
        power = peak_power_w(**cores, clock_hz=space.clock_hz, hbm_bytes_per_s=space.hbm_bytes_per_s)
        least_area_mm2 = min(least_area_mm2, float(areas.min()))
        least_power_w = min(least_power_w, float(power.min()))
        keep = np.ones(areas.shape, dtype=bool)
        if space.area_budget_mm2 is not None:
            exempt = ((grid["num_tc"] == 1) | (grid["num_vc"] == 1)) & space.floor_exempt_single_core
            keep &= (areas <= space.area_budget_mm2) & (
                (areas >= space.area_floor * space.area_budget_mm2) | exempt
            )
        if space.power_budget_w is not None:
            keep &= power <= space.power_budget_w
        kept.append({**{name: grid[name][keep] for name in KNOBS}, "area": areas[keep], "power": power[keep]})
    found = {key: np.concatenate([chunk[key] for chunk in kept]) for key in kept[0]}
    if not found["area"].size:
        area = "none" if space.area_budget_mm2 is None else f"{space.area_budget_mm2:.3f} mm^2"
        power_w = "none" if space.power_budget_w is None else f"{space.power_budget_w:g} W"
        raise PhazecError(
            f"No design of hw space {space.name!r} fits its budgets (area {area} with floor "
            f"{space.area_floor:g}, power {power_w}); the smallest design has {least_area_mm2:.3f} mm^2 and "
            f"{least_power_w:.1f} W: raise the budgets or widen the knobs."
        )
    order = np.lexsort((*(found[name] for name in reversed(KNOBS)), -found["area"]))
    count = order.size
    designs = Designs(
        **{name: found[name][order] for name in KNOBS},
        area_mm2=found["area"][order],
        peak_power_w=found["power"][order],
        clock_hz=np.full(count, space.clock_hz),
        hbm_bytes_per_s=np.full(count, space.hbm_bytes_per_s),
        device=space.device,
    )
    logger.info("hw space %s: %d of %d designs within budget", space.name, count, total)
    return designs
