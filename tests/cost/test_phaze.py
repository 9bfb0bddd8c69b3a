"""cost=phaze: the reference's closed form gives the acceptance cycle counts exactly."""

import numpy as np
import pytest

from phazec.cost.model import MODELS
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.cost.phaze import gemm_cycles
from phazec.hw.designs import Designs

MIB = 1 << 20


@pytest.mark.parametrize(
    ("gemm", "design", "cycles"),
    [
        ((2048, 1024, 1024), (4, 64, 64), 360448),
        ((2048, 1024, 1024), (16, 64, 64), 360448),
        ((2048, 1024, 1024), (4, 256, 16), 360448),
        ((2048, 1024, 1024), (4, 16, 256), 360448),
        ((2048, 1024, 1024), (1, 256, 256), 65536),
        ((2048, 1024, 1024), (1, 256, 64), 163840),
        ((2048, 1024, 1024), (1, 128, 128), 163840),
        ((8192, 1024, 4096), (16, 16, 8), 41418752),
        ((64, 1024, 1024), (1, 128, 64), 21504),
        ((512, 64, 512), (4, 64, 64), 4096),
    ],
)
def test_acceptance_cycle_counts(
    gemm: tuple[int, int, int], design: tuple[int, int, int], cycles: int
) -> None:
    """GEMM (rows N, reduction C, cols K) on cores x width x depth."""
    (n_rows, c_red, k_cols), (cores, width, depth) = gemm, design
    got = gemm_cycles(
        batch=np.ones(1),
        m=np.array([n_rows], dtype=np.float64),
        k=np.array([c_red], dtype=np.float64),
        n=np.array([k_cols], dtype=np.float64),
        cores=np.array([cores], dtype=np.float64),
        width=np.array([width], dtype=np.float64),
        depth=np.array([depth], dtype=np.float64),
    )
    assert got.tolist() == [cycles]


def _design(num_tc: int, width: int, depth: int, num_vc: int, clock_hz: float) -> Designs:
    return Designs.of(
        num_tc=num_tc,
        tc_width=width,
        tc_depth=depth,
        num_vc=num_vc,
        vc_width=width,
        glb_bytes=128 * MIB,
        clock_hz=clock_hz,
        hbm_bytes_per_s=1.2e12,
    )


def test_latencies_are_cycles_over_the_clock() -> None:
    model = MODELS["phaze"]
    design = _design(16, 64, 64, 4, 1.05e9)
    ops = OpTable.from_rows(
        [
            OpWork(OpKind.GEMM, batch=3, m=2048, k=1024, n=1024),
            OpWork(OpKind.VECTOR, VectorClass.DIVIDE, vector_elements=1000),
            OpWork(OpKind.VECTOR, VectorClass.SIGMOID, backward=True, vector_elements=1000),
            OpWork(OpKind.FUSED, VectorClass.ACTIVATION, m=512, k=64, n=512, vector_elements=512 * 512),
        ]
    )
    gemm = model.by_kind[OpKind.GEMM]
    vector = model.by_kind[OpKind.VECTOR]
    fused = model.by_kind[OpKind.FUSED]
    # The batched GEMM costs 3 products: on 16 cores t_core binds (360,448); on one core t_comp binds
    # (2^31 MACs / 4096 = 524,288).
    assert gemm(ops.take(np.array([0])), design, True).tolist() == [[3 * 360448 / 1.05e9]]
    assert gemm(ops.take(np.array([0])), design, False).tolist() == [[3 * 524288 / 1.05e9]]
    # ceil(1000 / 64) * 10 on one core; ceil(1000 / 256) * 10 on all 4; Sigmoid backward 22 per element.
    assert vector(ops.take(np.array([1, 2])), design, False).tolist() == [[160 / 1.05e9], [352 / 1.05e9]]
    assert vector(ops.take(np.array([1, 2])), design, True).tolist() == [[40 / 1.05e9], [88 / 1.05e9]]
    # (512, C=64, K=512) on 16 cores of 64x64: max(t_comp 256, t_core 4096); GELU adds 1 cycle.
    assert fused(ops.take(np.array([3])), design, True).tolist() == [[4096 / 1.05e9 + 1 / 1.05e9]]
