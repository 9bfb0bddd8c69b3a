"""Area model of the PHAZE template (phaze-facts section 3): 45 nm tables, in mm^2.

    area_um2 = num_tc * (TC_UM2_PER_PE * w * d + SRAM(max(1 KiB, 16 * w * d)))
             + num_vc * (VC_UM2_PER_LANE * v   + SRAM(max(1 KiB, 16 * v)))
             + GLB_SRAM(glb_bytes)

Not included: HBM PHY, network on chip, interconnect, control. SRAM sizes must be on the tables unless
interpolation is asked for, in which case sizes between two entries are priced linearly between them
and a log line says so.
"""

import logging

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError

logger = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * 1024
UM2_PER_MM2 = 1e6

TC_UM2_PER_PE = 760.041386
"""Area of one systolic-array processing element (a bf16 MAC), um^2."""
VC_UM2_PER_LANE = 759.823853
"""Area of one vector lane, um^2."""
BUFFER_BYTES_PER_PE = 16
"""Per-core buffer bytes per processing element (per lane for a vector core)."""
MIN_BUFFER_BYTES = 1 * KIB
"""Smallest per-core buffer."""

CORE_SRAM_UM2: dict[int, float] = {
    1 * KIB: 6133.98,
    2 * KIB: 8248.43,
    4 * KIB: 12610.5,
    8 * KIB: 22139.9,
    16 * KIB: 38583.0,
    32 * KIB: 63338.4,
    64 * KIB: 115579.0,
    128 * KIB: 204764.0,
    256 * KIB: 446565.0,
    512 * KIB: 897890.0,
    1 * MIB: 1634130.0,
}
"""Per-core buffer SRAM area (um^2) by size in bytes."""

GLB_SRAM_UM2: dict[int, float] = {
    2 * MIB: 3338220.0,
    4 * MIB: 6078640.0,
    8 * MIB: 11952400.0,
    16 * MIB: 23745200.0,
    32 * MIB: 46750900.0,
    64 * MIB: 88605700.0,
    128 * MIB: 175423000.0,
}
"""Global-buffer SRAM area (um^2) by size in bytes."""

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def tc_buffer_bytes(tc_width: IntArray, tc_depth: IntArray) -> IntArray:
    """Per-tensor-core buffer bytes: max(1 KiB, 16 * width * depth)."""
    buffer_bytes: IntArray = np.maximum(MIN_BUFFER_BYTES, BUFFER_BYTES_PER_PE * tc_width * tc_depth)
    return buffer_bytes


def vc_buffer_bytes(vc_width: IntArray) -> IntArray:
    """Per-vector-core buffer bytes: max(1 KiB, 16 * width)."""
    buffer_bytes: IntArray = np.maximum(MIN_BUFFER_BYTES, BUFFER_BYTES_PER_PE * vc_width)
    return buffer_bytes


def between_entries(size_bytes: IntArray, table: dict[int, float], what: str, interpolate: bool) -> list[int]:
    """The sizes strictly between two entries of `table` (priced by interpolation), sorted and distinct.

    Raises:
        PhazecError: a size is off the table (outside its range, or between entries without `interpolate`).
    """
    sizes = np.asarray(size_bytes, dtype=np.int64)
    keys = np.array(sorted(table), dtype=np.int64)
    on_table = np.isin(sizes, keys)
    in_range = (sizes >= keys[0]) & (sizes <= keys[-1])
    bad = ~on_table & (~in_range | (not interpolate))
    if bad.any():
        hint = "" if interpolate else ", or set hw.sram_interpolation=true for sizes between entries"
        raise PhazecError(
            f"The {what} size {int(sizes[bad][0])} bytes is not in the SRAM area table; "
            f"valid sizes are {', '.join(str(int(k)) for k in keys)} bytes{hint}."
        )
    return sorted({int(s) for s in sizes[~on_table]})


def sram_um2(
    size_bytes: IntArray, table: dict[int, float], what: str, interpolate: bool = False
) -> FloatArray:
    """Area of SRAMs of the given sizes from `table`.

    Args:
        size_bytes: SRAM sizes in bytes.
        table: size in bytes -> area in um^2.
        what: what the SRAM is, for messages (e.g. "global buffer").
        interpolate: price sizes strictly between two table entries linearly between them.

    Raises:
        PhazecError: a size is off the table (see `between_entries`).
    """
    between_entries(size_bytes, table, what, interpolate)
    sizes = np.asarray(size_bytes, dtype=np.float64)
    keys = np.array(sorted(table), dtype=np.float64)
    areas = np.array([table[int(k)] for k in keys], dtype=np.float64)
    return np.interp(sizes, keys, areas)


def area_mm2(
    *,
    num_tc: IntArray,
    tc_width: IntArray,
    tc_depth: IntArray,
    num_vc: IntArray,
    vc_width: IntArray,
    glb_bytes: IntArray,
    interpolate: bool = False,
) -> FloatArray:
    """Chip area in mm^2 of each design (arguments broadcast together).

    Raises:
        PhazecError: a buffer size is off the SRAM tables (see `sram_um2`).
    """
    tc_um2 = TC_UM2_PER_PE * tc_width * tc_depth + sram_um2(
        tc_buffer_bytes(tc_width, tc_depth), CORE_SRAM_UM2, "tensor-core buffer", interpolate
    )
    vc_um2 = VC_UM2_PER_LANE * vc_width + sram_um2(
        vc_buffer_bytes(vc_width), CORE_SRAM_UM2, "vector-core buffer", interpolate
    )
    glb_um2 = sram_um2(glb_bytes, GLB_SRAM_UM2, "global buffer", interpolate)
    total_um2: FloatArray = num_tc * tc_um2 + num_vc * vc_um2 + glb_um2
    return total_um2 / UM2_PER_MM2


TPUV4 = {"num_tc": 8, "tc_width": 128, "tc_depth": 128, "num_vc": 2, "vc_width": 128, "glb_bytes": 128 * MIB}
"""The TPUv4-like design in this template (phaze-facts section 8): 2 TensorCores x 4 MXUs of 128x128,
two 128-lane vector units, 128 MiB CMEM as the global buffer."""


def tpuv4_area_mm2() -> float:
    """Area of the TPUv4-like design, 278.8267 mm^2: PHAZE's area budget."""
    knob = {key: np.array([value], dtype=np.int64) for key, value in TPUV4.items()}
    area = area_mm2(
        num_tc=knob["num_tc"],
        tc_width=knob["tc_width"],
        tc_depth=knob["tc_depth"],
        num_vc=knob["num_vc"],
        vc_width=knob["vc_width"],
        glb_bytes=knob["glb_bytes"],
    )
    return float(area[0])
