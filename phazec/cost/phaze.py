"""The PHAZE reference's latency model (`cost=phaze`, phaze-facts section 4), for reproducing the paper.

Tensor-core GEMM with rows N = m, reduction C = k, columns K = n on c cores of w x d, per product:

    mn = 2^floor(log2(w*d)/2); mx = w*d/mn; MACs = N*K*C
    t_comp  = MACs / (c*w*d)
    ifmap   = MACs / (4*mx); psum_w = max(N*K, MACs/(4*mn)); psum_r = psum_w - N*K
    weights = MACs / min(N, 4*mn)
    t_core  = max(ifmap + weights + psum_r, psum_w) / 64
    t_dram  = (N*C + C*K + N*K) / 128
    cycles  = max(t_comp, t_core, t_dram)

The per-core (64) and DRAM (128) bandwidths in words per cycle are the reference mapper's constants, not
the design's: large GEMMs saturate near 85*sqrt(w*d) MACs per cycle whatever the core count. The
reference's GLB term moves the same compulsory traffic at 256 words per cycle, so it never exceeds the
DRAM term and is left out. A batched GEMM costs `batch` products. A fused op adds its vector op's cycles
per element once (the epilogue's pipeline depth) to the GEMM. Vector ops take ceil(elements / lanes) *
cycles per element with no memory term. The reference mapper's degenerate results for a global buffer
smaller than about 2 * cores * per-core buffer are a defect of its search and are not reproduced.
"""

import numpy as np
from numpy.typing import NDArray

from phazec.cost.ops import OpTable
from phazec.cost.tiled import vector_cycles, vector_lanes
from phazec.hw.designs import Designs

F64 = NDArray[np.float64]

CORE_WORDS_PER_CYCLE = 64.0
"""The reference mapper's per-core buffer bandwidth, words per cycle, for every design."""
DRAM_WORDS_PER_CYCLE = 128.0
"""The reference mapper's DRAM bandwidth, words per cycle, for every design."""


def gemm_cycles(*, batch: F64, m: F64, k: F64, n: F64, cores: F64, width: F64, depth: F64) -> F64:
    """The reference's cycles for `batch` GEMMs of (m x k) by (k x n) on `cores` arrays of width x depth.

    Arguments broadcast together.
    """
    pe = width * depth
    mn = 2.0 ** np.floor((np.frexp(pe)[1] - 1) / 2)  # frexp: exact floor(log2) for integers
    mx = pe / mn
    macs = m * n * k
    ifmap = macs / (4.0 * mx)
    psum_w = np.maximum(m * n, macs / (4.0 * mn))
    psum_r = psum_w - m * n
    weights = macs / np.minimum(m, 4.0 * mn)
    t_core = np.maximum(ifmap + weights + psum_r, psum_w) / CORE_WORDS_PER_CYCLE
    t_dram = (m * k + k * n + m * n) / DRAM_WORDS_PER_CYCLE
    cycles: F64 = batch * np.maximum(np.maximum(macs / (cores * pe), t_core), t_dram)
    return cycles


def gemm_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each GEMM of `ops` on one tensor core or all of them, [ops, designs]."""
    cores = designs.num_tc if all_cores else np.ones(len(designs))
    cycles = gemm_cycles(
        batch=ops.batch[:, None],
        m=ops.m[:, None],
        k=ops.k[:, None],
        n=ops.n[:, None],
        cores=cores[None, :].astype(np.float64),
        width=designs.tc_width[None, :].astype(np.float64),
        depth=designs.tc_depth[None, :].astype(np.float64),
    )
    latency_s: F64 = cycles / designs.clock_hz
    return latency_s


def vector_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each vector op of `ops` on one vector core or all of them, [ops, designs]."""
    lanes = vector_lanes(designs, all_cores)
    cycles = vector_cycles(ops.vector_elements[:, None], ops.cycles_per_element()[:, None], lanes)
    latency_s: F64 = cycles / designs.clock_hz
    return latency_s


def fused_latency_s(ops: OpTable, designs: Designs, all_cores: bool) -> F64:
    """Latency in seconds of each fused op: the GEMM plus its vector op's cycles per element, once."""
    epilogue_s = ops.cycles_per_element()[:, None] / designs.clock_hz
    latency_s: F64 = gemm_latency_s(ops, designs, all_cores) + epilogue_s
    return latency_s
