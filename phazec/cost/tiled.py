"""phazec's per-operator latency model (`cost=tiled`): compute and tile traffic through each level.

A GEMM (`batch` products of m x k by k x n) on c tensor cores with w x d arrays takes the longest of:

- compute: weight tiles of d x w (padded: ceil(k/d) * ceil(n/w) per product) stream m rows each, one row
  per cycle; tiles are spread over the cores, and when there are fewer tiles than cores the rows of a
  tile are split too;
- per-core buffer -> array: every tile reads its inputs (m x d), its weights once and reads and writes
  partial sums (m x w) at (d + 2w) words per cycle per core: one word per row of the depth edge, one
  partial sum in and one out per column of the width edge;
- global buffer -> cores: output blocks of e x e, e = sqrt(half the per-core buffer), reload inputs once
  per block column and weights once per block row, over links of GLB_LINK_SHARE * (w + d) words per
  cycle per core;
- HBM -> global buffer: the same blocking with half the global buffer, and never less than the
  operator's own operand and result bytes, at the HBM bandwidth.

A vector op on lanes L takes the longer of ceil(elements / L) * cycles per element and its operand and
result words over VC_PORT_WORDS_PER_LANE words per lane per cycle, and at least its bytes over HBM. A
fused op runs its vector epilogue on the paired vector cores alongside the GEMM: the longer of the two.
The design's device model (`phazec.hw.device`) makes this real: with `gemm_tiles` the compute and
on-chip buffer terms are the GPU's instead (output tiles, each on one core over its share of the reduction
plus the tile overhead, in waves over the cores; the fastest tile and split-K; a GPU's shared memory and
L2 feed its tiles, so the port and link terms do not apply), HBM traffic as before; compute runs at
`gemm_utilisation` of the peak, HBM traffic at `memory_utilisation` of the bandwidth, and every on-chip
operator pays `kernel_latency_s` once (a GEMM once per kernel it runs in a row, `kernels`). A
low-precision GEMM (FP8 or MXFP8) computes at `fp8_rate` times the peak and `gemm_utilisation` x
`fp8_relative_utilisation` of it, moves one-byte operands, and first streams its casts' `quantize_bytes`
through HBM in `quantize_kernels` more kernels. Every bandwidth grows with the design, so more cores,
larger arrays, larger buffers or more bandwidth never make an operator slower, and no operator beats its
compute bound or its HBM traffic bound. An operator's latency assumes the whole HBM bandwidth;
`hbm_traffic_s` is how long it keeps HBM busy, which the layer schedule uses, with
`hw.device.hbm_shared`, to share the bandwidth between operators run side by side
(`phazec.solvers.schedule.problem`).
"""

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phazec.cost.ops import OpKind, OpTable
from phazec.errors import PhazecError
from phazec.hw.designs import Designs

F64 = NDArray[np.float64]

WORD_BYTES = 2
"""Bytes per element (bf16)."""
BLOCK_SHARE = 0.5
"""Share of a buffer holding the output block; the rest double-buffers the input and weight panels."""
GLB_LINK_SHARE = 0.5
"""A tensor core's link to the global buffer carries this share of its array's edge lanes (w + d) in
words per cycle: the per-core buffer supplies the reuse, so the link need not match the array."""
VC_PORT_WORDS_PER_LANE = 3.0
"""Words per lane per cycle into and out of a vector core: two operands in and one result out."""


@dataclass(frozen=True)
class GemmTraffic:
    """Data a GEMM moves at each level, [ops, designs]; the same whichever number of cores runs it."""

    port_words: F64
    """Words between the per-core buffers and the arrays."""
    glb_words: F64
    """Words between the global buffer and the cores."""
    hbm_bytes: F64
    """Bytes between HBM and the global buffer."""


def _blocked_words(batch: F64, m: F64, k: F64, n: F64, buffer_words: F64) -> F64:
    """Words a GEMM moves into a buffer of `buffer_words` with square output blocks (at most m x n)."""
    edge = np.maximum(1.0, np.floor(np.sqrt(buffer_words * BLOCK_SHARE)))
    block_rows = np.minimum(m, edge)
    block_cols = np.minimum(n, edge)
    words: F64 = batch * (m * k * np.ceil(n / block_cols) + k * n * np.ceil(m / block_rows) + m * n)
    return words


def operand_bytes(ops: OpTable) -> F64:
    """Bytes per element of each GEMM's operands, [ops, 1]: one for a low-precision GEMM, else two."""
    word: F64 = np.where(ops.low_precision, 1.0, float(WORD_BYTES))[:, None]
    return word


def gemm_traffic(ops: OpTable, designs: Designs) -> GemmTraffic:
    """The data each GEMM of `ops` moves on each design (in operand words, and bytes for HBM)."""
    batch, m, k, n = (col[:, None] for col in (ops.batch, ops.m, ops.k, ops.n))
    w = designs.tc_width[None, :].astype(np.float64)
    d = designs.tc_depth[None, :].astype(np.float64)
    k_tiles = np.ceil(k / d)
    n_tiles = np.ceil(n / w)
    port_words = batch * (m * k * n_tiles + m * n * (2.0 * k_tiles - 1.0) + k * n)
    core_words = designs.tc_buffer_bytes[None, :] / WORD_BYTES
    glb_words = designs.glb_bytes[None, :] / WORD_BYTES
    own_bytes = (ops.bytes_read + ops.bytes_written)[:, None]
    word = operand_bytes(ops)
    hbm_bytes = np.maximum(own_bytes, word * _blocked_words(batch, m, k, n, glb_words))
    # A one-byte operand fits twice the words in a buffer and a link: count its words at half weight.
    share = word / WORD_BYTES
    return GemmTraffic(port_words * share, _blocked_words(batch, m, k, n, core_words) * share, hbm_bytes)


def gemm_peak_share(ops: OpTable, designs: Designs) -> F64:
    """Share of the tensor cores' BF16 MACs per cycle each GEMM's main loop reaches, [ops, 1]:
    `gemm_utilisation`, times `fp8_rate` x `fp8_relative_utilisation` for a low-precision GEMM."""
    device = designs.device
    if device.fp8_rate == 0 and ops.low_precision.any():
        raise PhazecError(
            "a low-precision (FP8) GEMM was priced on a chip without FP8 tensor cores "
            "(hw.device.fp8_rate = 0): use precision=bf16 or a chip with FP8 tensor cores."
        )
    share: F64 = (
        np.where(ops.low_precision, device.fp8_rate * device.fp8_relative_utilisation, 1.0)[:, None]
        * device.gemm_utilisation
    )
    return share


def gemm_compute_cycles(ops: OpTable, designs: Designs, cores: F64) -> F64:
    """Cycles of the busiest of `cores` tensor cores ([1, designs]) computing each GEMM, padding included."""
    batch, m, k, n = (col[:, None] for col in (ops.batch, ops.m, ops.k, ops.n))
    tiles = batch * np.ceil(k / designs.tc_depth[None, :]) * np.ceil(n / designs.tc_width[None, :])
    cores_per_tile = np.maximum(1.0, np.floor(cores / tiles))
    cycles: F64 = np.where(tiles >= cores, np.ceil(tiles / cores) * m, np.ceil(m / cores_per_tile))
    return cycles


def gemm_wave_cycles(ops: OpTable, designs: Designs, cores: F64) -> F64:
    """Cycles of each GEMM as output tiles in waves over `cores` ([1, designs]) under the device model
    (`phazec.hw.device`; needs `gemm_tiles`): the fastest tile of the device's, with split-K.

    A tile of rows x cols with the reduction split s ways takes rows * cols * ceil(k / s) MACs at
    utilisation * w * d per cycle plus the tile overhead; batch * ceil(m / rows) * ceil(n / cols) * s
    tiles run in ceil(tiles / cores) waves. When the tiles fill less than one wave the reduction is split
    as many ways as fit in it, s = floor(cores / tiles) (fewer MACs per tile, the same one wave);
    otherwise s = 1.
    """
    device = designs.device
    assert device.gemm_tiles is not None
    batch, m, k, n = (col[:, None] for col in (ops.batch, ops.m, ops.k, ops.n))
    peak = (designs.tc_width * designs.tc_depth)[None, :] * gemm_peak_share(ops, designs)
    best = np.full(np.broadcast_shapes(m.shape, peak.shape), np.inf)
    for rows, cols in device.gemm_tiles:
        tiles = batch * np.ceil(m / rows) * np.ceil(n / cols)
        split = np.maximum(1.0, np.floor(cores / tiles))
        tile_cycles = rows * cols * np.ceil(k / split) / peak + device.gemm_tile_overhead_cycles
        best = np.minimum(best, np.ceil(tiles * split / cores) * tile_cycles)
    return best


def vector_cycles(elements: F64, cycles_per_element: F64, lanes: F64) -> F64:
    """Cycles of vector work over `lanes`: ceil(elements / lanes) * cycles per element."""
    cycles: F64 = np.ceil(elements / lanes) * cycles_per_element
    return cycles


def gemm_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each GEMM of `ops` on one tensor core or on all of them, [ops, designs]."""
    cores = (designs.num_tc if all_cores else np.ones(len(designs)))[None, :].astype(np.float64)
    w = designs.tc_width[None, :]
    d = designs.tc_depth[None, :]
    traffic = gemm_traffic(ops, designs)
    device = designs.device
    if device.gemm_tiles is None:
        cycles = np.maximum(
            np.maximum(
                gemm_compute_cycles(ops, designs, cores) / gemm_peak_share(ops, designs),
                traffic.port_words / (cores * (d + 2.0 * w)),
            ),
            traffic.glb_words / (cores * GLB_LINK_SHARE * (w + d)),
        )
    else:
        cycles = gemm_wave_cycles(ops, designs, cores)
    launches = (ops.kernels[:, None] - 1.0) * designs.device.kernel_latency_s
    seconds: F64 = _with_memory_s(cycles / designs.clock_hz, traffic.hbm_bytes, designs) + launches
    return seconds + quantize_s(ops, designs)


def quantize_s(ops: OpTable, designs: Designs) -> F64:
    """Seconds of each GEMM's FP8 casts before it, [ops, designs]: its `quantize_bytes` through HBM
    plus a kernel latency per cast kernel (`quantize_kernels`; 0 for a GEMM without casts)."""
    casts = ops.quantize_bytes[:, None]
    launches = ops.quantize_kernels[:, None] * designs.device.kernel_latency_s
    seconds: F64 = np.where(casts > 0, _memory_s(casts, designs) + launches, 0.0)
    return seconds


def attention_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each fused attention kernel (flash attention) on one tensor core or all of
    them, [ops, designs]: its MACs at the cores' peak times the device's `attention_utilisation`, or its
    own operand and result bytes over HBM (no s x s tensor leaves the chip), the longer, plus the kernel
    latency."""
    cores = (designs.num_tc if all_cores else np.ones(len(designs)))[None, :].astype(np.float64)
    peak = cores * (designs.tc_width * designs.tc_depth)[None, :] * designs.device.attention_utilisation
    cycles = (ops.batch * ops.m * ops.k * ops.n)[:, None] / peak
    return _with_memory_s(cycles / designs.clock_hz, (ops.bytes_read + ops.bytes_written)[:, None], designs)


def _with_memory_s(compute_s: F64, hbm_bytes: F64, designs: Designs) -> F64:
    """The longer of compute and HBM traffic at the device's memory utilisation, plus the kernel latency."""
    latency_s: F64 = np.maximum(compute_s, _memory_s(hbm_bytes, designs)) + designs.device.kernel_latency_s
    return latency_s


def _memory_s(hbm_bytes: F64, designs: Designs) -> F64:
    """Seconds of HBM traffic at the device's memory utilisation of the bandwidth."""
    memory_s: F64 = hbm_bytes / (designs.hbm_bytes_per_s * designs.device.memory_utilisation)
    return memory_s


def hbm_traffic_s(ops: OpTable, designs: Designs) -> F64:
    """Seconds each on-chip operator of `ops` keeps HBM busy at the device's memory utilisation of the
    bandwidth, [ops, designs]: the traffic its latency above is at least, on one core or all (a GEMM's
    blocked traffic, a fused op's GEMM's, a vector or attention op's own operand and result bytes).
    With `hw.device.hbm_shared` the layer schedule shares the bandwidth between the operators it runs
    side by side (`phazec.cost.model.op_costs`)."""
    own_bytes = (ops.bytes_read + ops.bytes_written)[:, None] + np.zeros(len(designs))[None, :]
    gemms = np.flatnonzero((ops.kind == OpKind.GEMM) | (ops.kind == OpKind.FUSED))
    if gemms.size:
        own_bytes[gemms] = gemm_traffic(ops.take(gemms), designs).hbm_bytes
    return _memory_s(own_bytes + ops.quantize_bytes[:, None], designs)


def vector_lanes(designs: Designs, all_cores: bool) -> F64:
    """Lanes of one vector core or of all of them, [1, designs]."""
    cores = designs.num_vc if all_cores else 1
    return (designs.vc_width * cores)[None, :].astype(np.float64)


def vector_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each vector op of `ops` on one vector core or all of them, [ops, designs]."""
    lanes = vector_lanes(designs, all_cores)
    moved_bytes = (ops.bytes_read + ops.bytes_written)[:, None]
    cycles = np.maximum(
        vector_cycles(ops.vector_elements[:, None], ops.cycles_per_element()[:, None], lanes),
        moved_bytes / WORD_BYTES / (lanes * VC_PORT_WORDS_PER_LANE),
    )
    return _with_memory_s(cycles / designs.clock_hz, moved_bytes, designs)


def fused_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each fused GEMM + vector op: the GEMM and its epilogue run side by side."""
    epilogue = vector_cycles(
        ops.vector_elements[:, None], ops.cycles_per_element()[:, None], vector_lanes(designs, all_cores)
    )
    latency_s: F64 = np.maximum(
        gemm_latency_s(ops, designs, all_cores), epilogue / designs.clock_hz + designs.device.kernel_latency_s
    )
    return latency_s
