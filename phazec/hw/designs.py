"""Designs: a batch of accelerator designs as a struct of equal-length numpy arrays."""

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike, NDArray

from phazec.hw.area import area_mm2, tc_buffer_bytes, vc_buffer_bytes
from phazec.hw.device import IDEAL, DeviceModel
from phazec.hw.energy import peak_power_w

KNOBS = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes")
"""The integer knobs of a design, in enumeration order."""


@dataclass(frozen=True)
class Designs:
    """Accelerator designs in the PHAZE template, one per index; every field has the same length.

    Enumeration (`phazec.hw.space.enumerate_designs`) orders them by area, largest first.
    """

    num_tc: NDArray[np.int64]
    """Tensor cores."""
    tc_width: NDArray[np.int64]
    """Systolic-array width: output columns per cycle."""
    tc_depth: NDArray[np.int64]
    """Systolic-array depth: reduction length per cycle."""
    num_vc: NDArray[np.int64]
    """Vector cores."""
    vc_width: NDArray[np.int64]
    """Lanes per vector core."""
    glb_bytes: NDArray[np.int64]
    """Global-buffer bytes."""
    area_mm2: NDArray[np.float64]
    """Chip area (phaze-facts section 3)."""
    peak_power_w: NDArray[np.float64]
    """Peak dynamic power (`phazec.hw.energy.peak_power_w`)."""
    clock_hz: NDArray[np.float64]
    """Core clock."""
    hbm_bytes_per_s: NDArray[np.float64]
    """HBM bandwidth."""
    device: DeviceModel = IDEAL
    """The device model, the same for every design of a batch (not a per-design array)."""

    @staticmethod
    def of(
        *,
        num_tc: ArrayLike,
        tc_width: ArrayLike,
        tc_depth: ArrayLike,
        num_vc: ArrayLike,
        vc_width: ArrayLike,
        glb_bytes: ArrayLike,
        clock_hz: ArrayLike,
        hbm_bytes_per_s: ArrayLike,
        sram_interpolation: bool = False,
        device: DeviceModel = IDEAL,
    ) -> "Designs":
        """Designs with the given knobs (scalars or sequences, broadcast together), in that order.

        Raises:
            PhazecError: a buffer size is off the SRAM area tables (see `phazec.hw.area.sram_um2`).
        """
        given = (num_tc, tc_width, tc_depth, num_vc, vc_width, glb_bytes, clock_hz, hbm_bytes_per_s)
        arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(value)) for value in given))
        knobs = {name: arrays[i].astype(np.int64) for i, name in enumerate(KNOBS)}
        clock, hbm = (array.astype(np.float64) for array in arrays[len(KNOBS) :])
        cores = {name: knobs[name] for name in KNOBS if name != "glb_bytes"}
        return Designs(
            **knobs,
            area_mm2=area_mm2(**knobs, interpolate=sram_interpolation),
            peak_power_w=peak_power_w(**cores, clock_hz=clock, hbm_bytes_per_s=hbm),
            clock_hz=clock,
            hbm_bytes_per_s=hbm,
            device=device,
        )

    def __len__(self) -> int:
        return int(self.num_tc.shape[0])

    @property
    def tc_buffer_bytes(self) -> NDArray[np.int64]:
        """Per-tensor-core buffer bytes: max(1 KiB, 16 * width * depth)."""
        return tc_buffer_bytes(self.tc_width, self.tc_depth)

    @property
    def vc_buffer_bytes(self) -> NDArray[np.int64]:
        """Per-vector-core buffer bytes: max(1 KiB, 16 * width)."""
        return vc_buffer_bytes(self.vc_width)

    def take(self, index: ArrayLike) -> "Designs":
        """The designs at `index` (an integer, a list of integers or a boolean mask), in that order."""
        picked = np.atleast_1d(np.asarray(index))
        return Designs(
            **{f.name: getattr(self, f.name)[picked] for f in fields(self) if f.name != "device"},
            device=self.device,
        )

    def row(self, i: int) -> dict[str, float]:
        """Design `i` as a plain dict of Python numbers (for logs and result tables)."""
        return {f.name: getattr(self, f.name)[i].item() for f in fields(self) if f.name != "device"}
