"""Energy figures of the template and the peak power used by a power budget.

The figures are 45 nm numbers (the process of the area tables) from M. Horowitz, "Computing's energy
problem", ISSCC 2014, and HBM2's access energy from O'Connor et al., MICRO 2017. They are coarse:
enough to rank designs and to apply a power budget, not to sign off a chip.
"""

import numpy as np
from numpy.typing import NDArray

J_PER_PJ = 1e-12

MAC_J = 1.5 * J_PER_PJ
"""One bf16 multiply-accumulate (16-bit float multiply 1.1 pJ + add 0.4 pJ)."""
VECTOR_OP_J = 1.0 * J_PER_PJ
"""One vector-lane cycle (a 16-bit float ALU operation with its register traffic)."""
CORE_BUFFER_BYTE_J = 1.25 * J_PER_PJ
"""One byte between a per-core buffer and its array or lanes (8 KiB SRAM: 10 pJ per 64 bits)."""
GLB_BYTE_J = 12.5 * J_PER_PJ
"""One byte between the global buffer and a core (1 MiB SRAM: 100 pJ per 64 bits)."""
HBM_BYTE_J = 31.2 * J_PER_PJ
"""One byte between HBM and the global buffer (HBM2: 3.9 pJ per bit)."""
LINK_BYTE_J = 80.0 * J_PER_PJ
"""One byte sent over an off-chip link (about 10 pJ per bit for a long-reach SerDes)."""


def peak_power_w(
    *,
    num_tc: NDArray[np.int64],
    tc_width: NDArray[np.int64],
    tc_depth: NDArray[np.int64],
    num_vc: NDArray[np.int64],
    vc_width: NDArray[np.int64],
    clock_hz: float | NDArray[np.float64],
    hbm_bytes_per_s: float | NDArray[np.float64],
) -> NDArray[np.float64]:
    """Peak dynamic power in watts: every MAC and lane busy each cycle and HBM at full bandwidth.

    SRAM traffic and leakage are not counted, so this is a lower bound on a real chip's peak.
    """
    per_cycle_j = num_tc * tc_width * tc_depth * MAC_J + num_vc * vc_width * VECTOR_OP_J
    power_w: NDArray[np.float64] = per_cycle_j * clock_hz + hbm_bytes_per_s * HBM_BYTE_J
    return power_w
