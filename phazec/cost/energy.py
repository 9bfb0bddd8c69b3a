"""Energy of each operator on each design, from the figures in `phazec.hw.energy`.

    GEMM:    MACs * MAC_J + the tiled model's traffic at each level * that level's energy per byte
    vector:  elements * cycles per element * VECTOR_OP_J + operand and result bytes through each level
    fused:   both, with the vector epilogue's data never leaving the core
    network: bytes each device sends * LINK_BYTE_J

The energy does not depend on how many cores run the operator, nor on the latency model chosen.
"""

import numpy as np
from numpy.typing import NDArray

from phazec.cost.network import sent_bytes
from phazec.cost.ops import OpKind, OpTable
from phazec.cost.tiled import WORD_BYTES, gemm_traffic
from phazec.hw.designs import Designs
from phazec.hw.energy import CORE_BUFFER_BYTE_J, GLB_BYTE_J, HBM_BYTE_J, LINK_BYTE_J, MAC_J, VECTOR_OP_J

F64 = NDArray[np.float64]

STREAMED_BYTE_J = CORE_BUFFER_BYTE_J + GLB_BYTE_J + HBM_BYTE_J
"""One byte streamed from HBM through the global buffer and a core's buffer (vector operands)."""


def op_energy_j(ops: OpTable, designs: Designs) -> F64:
    """Energy in joules of each operator of `ops` on each design, [ops, designs]."""
    vector_j = ops.vector_elements * ops.cycles_per_element() * VECTOR_OP_J
    streamed_j = np.where(
        ops.kind == OpKind.VECTOR, (ops.bytes_read + ops.bytes_written) * STREAMED_BYTE_J, 0.0
    )
    energy_j: F64 = np.repeat(
        (vector_j + streamed_j + sent_bytes(ops) * LINK_BYTE_J)[:, None], len(designs), 1
    )
    rows = np.flatnonzero((ops.kind == OpKind.GEMM) | (ops.kind == OpKind.FUSED))
    if rows.size:
        gemms = ops.take(rows)
        traffic = gemm_traffic(gemms, designs)
        macs = (gemms.batch * gemms.m * gemms.k * gemms.n)[:, None]
        energy_j[rows] += (
            macs * MAC_J
            + traffic.port_words * WORD_BYTES * CORE_BUFFER_BYTE_J
            + traffic.glb_words * WORD_BYTES * GLB_BYTE_J
            + traffic.hbm_bytes * HBM_BYTE_J
        )
    return energy_j
