"""cost=tiled: exact small cases, monotonicity in every resource (of every model that promises it),
and the compute and HBM bounds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phazec.cost.model import MODELS, LatencyModel, OpCosts, op_costs
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.cost.tiled import gemm_compute_cycles, hbm_traffic_s
from phazec.hw.designs import Designs
from phazec.hw.system import NetworkTier, System
from tests.examples import examples

MIB = 1 << 20
SYSTEM = System("one", 1, 1, (32e9,), (NetworkTier(1, 1e9, 0.0),))
TILED = MODELS["tiled"]


def _designs(*rows: dict[str, float]) -> Designs:
    def column(name: str) -> list[float]:
        return [row[name] for row in rows]

    return Designs.of(
        num_tc=column("num_tc"),
        tc_width=column("tc_width"),
        tc_depth=column("tc_depth"),
        num_vc=column("num_vc"),
        vc_width=column("vc_width"),
        glb_bytes=column("glb_bytes"),
        clock_hz=column("clock_hz"),
        hbm_bytes_per_s=column("hbm_bytes_per_s"),
    )


def _costs(op: OpWork, *rows: dict[str, float], model: LatencyModel = TILED) -> OpCosts:
    return op_costs(OpTable.from_rows([op]), _designs(*rows), SYSTEM, model)


BASE = {
    "num_tc": 4,
    "tc_width": 128,
    "tc_depth": 128,
    "num_vc": 1,
    "vc_width": 128,
    "glb_bytes": 2 * MIB,
    "clock_hz": 1e9,
    "hbm_bytes_per_s": 1e12,
}


def test_square_gemm_by_hand() -> None:
    # 256^3 on 128x128 arrays: 2 x 2 weight tiles of 256 rows each.
    # One core: compute 4 * 256 = 1024 cycles; buffer port (131072 inputs + 196608 partial sums + 65536
    # weights) / 384 = 1024 cycles; GLB: a 256x256 output block fits half of the 128 KiW buffer, so
    # 3 * 65536 words over a 128-word link = 1536 cycles -> 1.536 us. HBM: 393,216 bytes / 1e12 B/s.
    # Four cores: max(256, 256, 384) cycles = 0.384 us < 0.393216 us of HBM traffic.
    op = OpWork(OpKind.GEMM, m=256, k=256, n=256, bytes_read=2 * 2 * 65536, bytes_written=2 * 65536)
    costs = _costs(op, BASE)
    assert costs.single_core_s.tolist() == [[1536 / 1e9]]
    assert costs.all_cores_s.tolist() == [[393216 / 1e12]]
    # which the spread GEMM keeps HBM busy throughout
    assert hbm_traffic_s(OpTable.from_rows([op]), _designs(BASE)).tolist() == [[393216 / 1e12]]


def test_padding_costs_a_whole_tile() -> None:
    # k = 129 on a 128-deep array needs 2 depth tiles: twice the compute cycles of k = 128; n = 129 on a
    # 128-wide array likewise. On 2 cores, one tile's rows are split and 2 or 4 tiles are shared.
    rows = [
        OpWork(OpKind.GEMM, m=1000, k=k, n=n) for k, n in ((128, 128), (129, 128), (128, 129), (129, 129))
    ]
    designs = _designs(BASE, {**BASE, "num_tc": 2})
    cycles = gemm_compute_cycles(OpTable.from_rows(rows), designs, np.array([[1.0, 2.0]]))
    assert cycles.tolist() == [[1000, 500], [2000, 1000], [2000, 1000], [4000, 2000]]


def test_fewer_tiles_than_cores_split_the_rows() -> None:
    # One 128x128 tile of 1000 rows on 3 cores: ceil(1000 / 3) = 334 rows on the busiest core.
    ops = OpTable.from_rows([OpWork(OpKind.GEMM, m=1000, k=128, n=128)])
    assert gemm_compute_cycles(ops, _designs(BASE), np.array([[3.0]])).tolist() == [[334]]


def test_vector_op_by_hand() -> None:
    # 1000 additions on 128 lanes: ceil(1000 / 128) = 8 cycles; port 3000 words / 384 = 7.8 cycles.
    op = OpWork(
        OpKind.VECTOR, VectorClass.ARITHMETIC, vector_elements=1000, bytes_read=4000, bytes_written=2000
    )
    costs = _costs(op, BASE)
    assert costs.single_core_s.tolist() == [[8 / 1e9]]
    # It keeps HBM busy for its 6000 bytes at 1e12 B/s: 6 ns of its 8.
    assert hbm_traffic_s(OpTable.from_rows([op]), _designs(BASE)).tolist() == [[6000 / 1e12]]


def test_free_ops_cost_nothing() -> None:
    costs = _costs(OpWork(OpKind.FREE, bytes_read=1 << 30, bytes_written=1 << 30), BASE)
    assert costs.single_core_s.tolist() == [[0.0]] and costs.all_cores_s.tolist() == [[0.0]]


dims = st.integers(1, 8192)
op_strategy = st.one_of(
    st.builds(
        lambda batch, m, k, n, extra, kind, cls, backward, elements: OpWork(
            kind,
            cls if kind == OpKind.FUSED else VectorClass.NONE,
            backward=backward,
            batch=batch,
            m=m,
            k=k,
            n=n,
            vector_elements=elements if kind == OpKind.FUSED else 0,
            bytes_read=2 * batch * (m * k + k * n) + extra,
            bytes_written=2 * batch * m * n,
        ),
        st.integers(1, 16),
        dims,
        dims,
        dims,
        st.integers(0, 1 << 20),
        st.sampled_from([OpKind.GEMM, OpKind.FUSED, OpKind.ATTENTION]),
        st.sampled_from(list(VectorClass)[1:]),
        st.booleans(),
        st.integers(1, 1 << 24),
    ),
    st.builds(
        lambda cls, backward, elements, operands: OpWork(
            OpKind.VECTOR,
            cls,
            backward=backward,
            vector_elements=elements,
            bytes_read=2 * elements * operands,
            bytes_written=2 * elements,
        ),
        st.sampled_from(list(VectorClass)[1:]),
        st.booleans(),
        st.integers(1, 1 << 26),
        st.integers(1, 3),
    ),
)
design_strategy = st.fixed_dictionaries(
    {
        "num_tc": st.integers(1, 4096),
        "tc_width": st.sampled_from([2**e for e in range(1, 8)]),
        "tc_depth": st.sampled_from([2**e for e in range(1, 8)]),
        "num_vc": st.integers(1, 4096),
        "vc_width": st.sampled_from([2**e for e in range(1, 8)]),
        "glb_bytes": st.sampled_from([2**e for e in range(21, 27)]),
        "clock_hz": st.floats(5e8, 2e9),
        "hbm_bytes_per_s": st.floats(1e11, 4e12),
    }
)
growth = st.one_of(
    st.tuples(st.sampled_from(["num_tc", "num_vc"]), st.integers(2, 4096).map(float)),
    st.tuples(st.sampled_from(["tc_width", "tc_depth", "vc_width", "glb_bytes"]), st.just(2.0)),
    st.tuples(st.sampled_from(["clock_hz", "hbm_bytes_per_s"]), st.floats(1.0, 8.0)),
)


@pytest.mark.parametrize("model", [m for m in MODELS.values() if m.monotone], ids=lambda m: m.name)
@settings(max_examples=examples(300), deadline=None)
@given(op=op_strategy, design=design_strategy, grow=growth)
def test_more_resources_never_make_an_operator_slower(
    model: LatencyModel, op: OpWork, design: dict[str, float], grow: tuple[str, float]
) -> None:
    """The promise of every latency model whose `monotone` flag is set (dominance pruning rests on it)."""
    knob, factor = grow
    bigger = {
        **design,
        knob: design[knob] * factor if "hz" in knob or "per_s" in knob else int(design[knob] * factor),
    }
    costs = _costs(op, design, bigger, model=model)
    assert costs.single_core_s[0, 1] <= costs.single_core_s[0, 0]
    assert costs.all_cores_s[0, 1] <= costs.all_cores_s[0, 0]
    assert costs.all_cores_s[0, 0] <= costs.single_core_s[0, 0]
    traffic_s = hbm_traffic_s(OpTable.from_rows([op]), _designs(design, bigger))
    assert traffic_s[0, 1] <= traffic_s[0, 0]  # nor keep HBM busier


@settings(max_examples=examples(300), deadline=None)
@given(op_strategy, design_strategy)
def test_latency_is_never_below_the_compute_or_hbm_bound(op: OpWork, design: dict[str, float]) -> None:
    costs = _costs(op, design)
    clock = design["clock_hz"]
    cycles_per_element = OpTable.from_rows([op]).cycles_per_element()[0]
    hbm_s = (op.bytes_read + op.bytes_written) / design["hbm_bytes_per_s"]
    macs = op.batch * op.m * op.k * op.n
    pe = design["tc_width"] * design["tc_depth"]
    lanes = design["vc_width"]
    for cores, vector_cores, latency_s in (
        (1, 1, costs.single_core_s[0, 0]),
        (design["num_tc"], design["num_vc"], costs.all_cores_s[0, 0]),
    ):
        compute_s = max(
            macs / (cores * pe * clock),
            op.vector_elements * cycles_per_element / (vector_cores * lanes * clock),
        )
        assert latency_s >= max(compute_s, hbm_s) * (1 - 1e-12)
        assert latency_s > 0
        # Its HBM time is at least its own bytes' and never more than either latency (schedule_problem
        # validates that), so an operator alone always fits in the bandwidth.
        assert (
            hbm_s * (1 - 1e-12) <= hbm_traffic_s(OpTable.from_rows([op]), _designs(design))[0, 0] <= latency_s
        )


@settings(max_examples=examples(50), deadline=None)
@given(op_strategy, design_strategy)
def test_same_input_same_result(op: OpWork, design: dict[str, float]) -> None:
    first, second = _costs(op, design), _costs(op, design)
    assert first.single_core_s.tobytes() == second.single_core_s.tobytes()
    assert first.all_cores_s.tobytes() == second.all_cores_s.tobytes()
    assert first.energy_j.tobytes() == second.energy_j.tobytes()


def test_unit_is_seconds() -> None:
    # m = 4096, k = n = 128 on one 128x128 core: the GLB link binds, (4096 * 128 inputs + 128 * 128
    # weights * 16 row blocks + 4096 * 128 outputs) / 128 words per cycle = 10,240 cycles; doubling the
    # clock halves the seconds.
    ops = OpTable.from_rows([OpWork(OpKind.GEMM, m=4096, k=128, n=128)])
    designs = _designs({**BASE, "hbm_bytes_per_s": 1e15}, {**BASE, "hbm_bytes_per_s": 1e15, "clock_hz": 2e9})
    costs = op_costs(ops, designs, SYSTEM, TILED)
    assert costs.single_core_s.tolist() == [[10240 / 1e9, 10240 / 2e9]]
