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
from phazec.hw.system import System

F64 = NDArray[np.float64]

ENERGY_PARTS = ("compute", "buffers", "hbm", "network")
"""Where energy goes: MACs and vector-lane cycles; per-core and global buffers; HBM; off-chip links."""


def op_energy_parts_j(ops: OpTable, designs: Designs, system: System) -> dict[str, F64]:
    """Energy in joules of each operator of `ops` on each design, [ops, designs], split into
    ENERGY_PARTS (their sum is `op_energy_j`)."""
    shape = (len(ops), len(designs))
    vector_bytes = np.where(ops.kind == OpKind.VECTOR, ops.bytes_read + ops.bytes_written, 0.0)[:, None]
    parts: dict[str, F64] = {
        "compute": np.broadcast_to(
            (ops.vector_elements * ops.cycles_per_element() * VECTOR_OP_J)[:, None], shape
        ).copy(),
        "buffers": np.broadcast_to(vector_bytes * (CORE_BUFFER_BYTE_J + GLB_BYTE_J), shape).copy(),
        "hbm": np.broadcast_to(vector_bytes * HBM_BYTE_J, shape).copy(),
        "network": np.broadcast_to((sent_bytes(ops, system) * LINK_BYTE_J)[:, None], shape).copy(),
    }
    rows = np.flatnonzero(np.isin(ops.kind, (OpKind.GEMM, OpKind.FUSED, OpKind.ATTENTION)))
    if rows.size:
        gemms = ops.take(rows)
        traffic = gemm_traffic(gemms, designs)
        parts["compute"][rows] += (gemms.batch * gemms.m * gemms.k * gemms.n)[:, None] * MAC_J
        parts["buffers"][rows] += (
            traffic.port_words * WORD_BYTES * CORE_BUFFER_BYTE_J + traffic.glb_words * WORD_BYTES * GLB_BYTE_J
        )
        parts["hbm"][rows] += traffic.hbm_bytes * HBM_BYTE_J
    return parts


def op_energy_j(ops: OpTable, designs: Designs, system: System) -> F64:
    """Energy in joules of each operator of `ops` on each design, [ops, designs]."""
    parts = op_energy_parts_j(ops, designs, system)
    total: F64 = sum((parts[name] for name in ENERGY_PARTS), np.zeros((len(ops), len(designs))))
    return total
