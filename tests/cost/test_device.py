"""The device model (hw.device, system tiers): hand-computed kernels, monotonicity in every resource,
never above the peak, shared cores in the scheduling problem, and cost=phaze refused on GPU presets."""

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from phazec.cli import conf_dir
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config, typed
from phazec.cost.model import MODELS, OpCosts, op_costs
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel
from phazec.hw.schema import HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, System, system_from_config
from phazec.ir.core import Graph, Op, Tensor
from phazec.ir.core import OpKind as IrKind
from phazec.predict.schedule_problem import schedule_problem
from phazec.solvers.schedule.problem import OpKind as ScheduleKind
from phazec.solvers.schedule.solve import ScheduleCache, schedule
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config
from tests.cost.test_tiled import design_strategy, growth, op_strategy
from tests.examples import examples

SYSTEM = System("one", 1, 1, (32e9,), (NetworkTier(1, 1e9, 0.0),))
TILED = MODELS["tiled"]


def _preset(name: str) -> Designs:
    return enumerate_designs(
        hw_space_from_config(typed(HwConfig, OmegaConf.load(Path(conf_dir()) / "hw" / f"{name}.yaml"), "hw"))
    )


def _designs(device: DeviceModel, *rows: dict[str, float]) -> Designs:
    columns: dict[str, Any] = {key: [row[key] for row in rows] for key in rows[0]}
    return Designs.of(**columns, device=device)


def _costs(op: OpWork, designs: Designs) -> OpCosts:
    return op_costs(OpTable.from_rows([op]), designs, SYSTEM, TILED)


def _gemm(m: int, k: int, n: int, batch: int = 1) -> OpWork:
    return OpWork(
        OpKind.GEMM,
        batch=batch,
        m=m,
        k=k,
        n=n,
        bytes_read=2 * batch * (m * k + k * n),
        bytes_written=2 * batch * m * n,
    )


GPU_ROW = {"num_tc": 108, "tc_width": 32, "tc_depth": 32, "num_vc": 108, "vc_width": 64,
           "glb_bytes": 32 << 20, "clock_hz": 1.41e9, "hbm_bytes_per_s": 1e15}  # fmt: skip
"""An A100-like chip with a very fast HBM, so the GEMMs below are compute bound."""


def test_square_gemm_in_waves_by_hand() -> None:
    # 8192^3 with 256x128 tiles: 32 * 64 = 2048 tiles in ceil(2048 / 108) = 19 waves, each tile
    # 256 * 128 * 8192 MACs at 1024 * 0.8 per cycle plus 500 cycles. Splitting k in two would double the
    # waves (38) and the overheads for the same MACs, so no split is taken.
    device = DeviceModel(True, ((256, 128),), 0.8, 500.0, 1.0, 0.0)
    expected = 19 * (256 * 128 * 8192 / (1024 * 0.8) + 500) / 1.41e9
    latency_s = _costs(_gemm(8192, 8192, 8192), _designs(device, GPU_ROW)).all_cores_s[0, 0]
    assert latency_s == pytest.approx(expected, rel=1e-12)
    # The ragged last wave (2048 tiles on 19 * 108 = 2052 slots) and the overhead keep it below 80 %.
    assert 8192**3 / (108 * 1024 * 1.41e9) / latency_s < 0.8


def test_few_tiles_split_the_reduction() -> None:
    # One 256x128 output tile with k = 4096 on 108 cores: a 108-way split fills every core in one wave,
    # 256 * 128 * ceil(4096 / 108) = 256 * 128 * 38 MACs at 1024 * 0.5 per cycle + 8 = 2440 cycles (a
    # power-of-two split would stop at 64 ways, 4104 cycles on 64 cores; 109 ways would take two waves).
    # Three tiles split 36 ways: 256 * 128 * ceil(4096 / 36) / 512 + 8 = 7304 cycles.
    # On one core no split helps: 256 * 128 * 4096 / 512 + 8 cycles.
    device = DeviceModel(True, ((256, 128),), 0.5, 8.0, 1.0, 0.0)
    costs = _costs(_gemm(256, 4096, 128), _designs(device, GPU_ROW))
    assert costs.all_cores_s[0, 0] == 2440 / 1.41e9
    three = _costs(_gemm(256, 4096, 384), _designs(device, GPU_ROW))
    assert three.all_cores_s[0, 0] == 7304 / 1.41e9
    assert costs.single_core_s[0, 0] == (256 * 128 * 4096 / 512 + 8) / 1.41e9


def test_the_fastest_tile_is_taken() -> None:
    # m = 64 rows, n = k = 8192, on one core: 64x64 tiles waste nothing, 128 of them of 64 * 64 * 8192 /
    # 1024 = 32768 cycles; 256x128 tiles pad 3/4 of their rows, 64 of 262144 cycles: four times slower.
    device = DeviceModel(True, ((256, 128), (64, 64)), 1.0, 0.0, 1.0, 0.0)
    latency_s = _costs(_gemm(64, 8192, 8192), _designs(device, GPU_ROW)).single_core_s[0, 0]
    assert latency_s == 128 * 32768 / 1.41e9


def test_fp8_gemm_by_hand() -> None:
    # The 8192^3 GEMM above in FP8 on a chip with twice the MACs per cycle in FP8, at 70 % of that peak
    # (0.875 of the 80 % a BF16 GEMM reaches of its own):
    # 19 waves of 256 * 128 * 8192 MACs at 1024 * 2 * 0.7 per cycle plus 500 cycles. Before it, its
    # casts stream 3 * 2 * 8192^2 bytes (`QUANTIZE_BYTES_PER_OPERAND_BYTE` times its bf16 activation)
    # at 87 % of 1 PB/s, plus one 18 us kernel latency, which the GEMM pays too.
    device = DeviceModel(
        True, ((256, 128),), 0.8, 500.0, 0.87, 18e-6, fp8_rate=2.0, fp8_relative_utilisation=0.875
    )
    casts = 3 * 2 * 8192**2
    fp8 = replace(_gemm(8192, 8192, 8192), low_precision=True, quantize_bytes=casts)
    gemm_s = 19 * (256 * 128 * 8192 / (1024 * 2 * 0.7) + 500) / 1.41e9 + 18e-6
    quantize_s = casts / (1e15 * 0.87) + 18e-6
    latency_s = _costs(fp8, _designs(device, GPU_ROW)).all_cores_s[0, 0]
    assert latency_s == pytest.approx(gemm_s + quantize_s, rel=1e-12)
    bf16_s = _costs(_gemm(8192, 8192, 8192), _designs(device, GPU_ROW)).all_cores_s[0, 0]
    assert bf16_s == pytest.approx(19 * (256 * 128 * 8192 / (1024 * 0.8) + 500) / 1.41e9 + 18e-6, rel=1e-12)


def test_fp8_gemm_on_a_chip_without_fp8_is_refused() -> None:
    device = DeviceModel(True, ((256, 128),), 0.8, 500.0, 0.87, 18e-6)
    fp8 = replace(_gemm(8192, 8192, 8192), low_precision=True)
    with pytest.raises(PhazecError, match=r"without FP8 tensor cores \(hw.device.fp8_rate = 0\)"):
        _costs(fp8, _designs(device, GPU_ROW))


def test_memory_bound_vector_op_by_hand() -> None:
    # An add of 2^26 bf16 elements on the h100 preset moves 3 * 2^27 bytes at memory_utilisation * 3.35 TB/s.
    design = _preset("h100")
    elements = 1 << 26
    op = OpWork(OpKind.VECTOR, VectorClass.ARITHMETIC, vector_elements=elements,
                bytes_read=4 * elements, bytes_written=2 * elements)  # fmt: skip
    device = design.device
    expected = 6 * elements / (3.35e12 * device.memory_utilisation) + device.kernel_latency_s
    assert _costs(op, design).all_cores_s[0, 0] == pytest.approx(expected, rel=1e-12)


def _four_adds(elements: int) -> Graph:
    """Four independent adds of `elements` bf16 elements each."""
    tensors = {f"x{i}": Tensor(f"x{i}", (elements,), "bfloat16") for i in range(4)}
    tensors |= {f"y{i}": Tensor(f"y{i}", (elements,), "bfloat16") for i in range(4)}
    ops = [Op(f"add{i}", "Add", IrKind.VECTOR, (f"x{i}", f"x{i}"), (f"y{i}",)) for i in range(4)]
    return Graph(tensors, ops, [f"x{i}" for i in range(4)], [], [], [f"y{i}" for i in range(4)])


@pytest.mark.parametrize("shared", [True, False])
def test_independent_memory_bound_adds_share_the_hbm(shared: bool) -> None:
    # Four adds of an fp32 and a bf16 tensor into bf16 (10 bytes per element) on the h100 preset: on
    # all SMs each takes its HBM traffic time (58 us) plus the kernel latency (20 us); on one SM, whose
    # ports move about the HBM's rate, 80 us. Priced at the whole bandwidth, four side by side on four
    # SMs take 80 us, streaming at 3x the HBM peak. An add on one SM holds 58 / 80 of the bandwidth,
    # so no two fit at once: they take turns, each spread, 4 x 78 us.
    design = _preset("h100")
    design = replace(design, device=replace(design.device, hbm_shared=shared))
    elements = 1 << 24
    op = OpWork(OpKind.VECTOR, VectorClass.ARITHMETIC, vector_elements=elements,
                bytes_read=8 * elements, bytes_written=2 * elements)  # fmt: skip
    costs = op_costs(OpTable.from_rows([op] * 4), design, SYSTEM, TILED)
    traffic_s = 10 * elements / (3.35e12 * design.device.memory_utilisation)
    assert costs.hbm_s[:, 0].tolist() == pytest.approx([traffic_s if shared else 0.0] * 4, rel=1e-12)
    single_s, spread_s = costs.single_core_s[0, 0], costs.all_cores_s[0, 0]
    assert spread_s == pytest.approx(traffic_s + design.device.kernel_latency_s, rel=1e-12)
    assert spread_s < single_s < 2 * spread_s
    assert 0.5 < traffic_s / single_s < 1.0
    problem = schedule_problem(_four_adds(elements), costs.single_core_s[:, 0], costs.all_cores_s[:, 0],
                               costs.hbm_s[:, 0], num_tc=132, num_vc=132, config=SolverConfig(),
                               shared_cores=True)  # fmt: skip
    found = schedule(problem, SolverConfig(), ScheduleCache())
    assert found.optimal
    assert found.makespan_s == pytest.approx(4 * spread_s if shared else single_s, rel=1e-9)


def test_network_efficiency_and_call_latency_by_hand() -> None:
    # A ring all-reduce of 1 GB over 8 devices on a 300 GB/s tier at 75 % with 2 us steps and a 20 us call:
    # 2 * 7 / 8 * 1e9 / 225e9 + 14 * 2e-6 + 20e-6.
    system = system_from_config(typed(SystemConfig, {"name": "s", "devices": 8, "global_batch": 8, "tiers": [
        {"group_size": 8, "bandwidth_bytes_per_s": 300e9, "latency_s": 2e-6, "efficiency": 0.75,
         "call_latency_s": 20e-6}]}, "system"))  # fmt: skip
    op = OpWork(OpKind.ALL_REDUCE, collective_bytes=10**9, group_size=8)
    costs = op_costs(OpTable.from_rows([op]), _preset("a100"), system, TILED)
    assert costs.all_cores_s[0, 0] == pytest.approx(2 * 7 / 8 * 1e9 / 225e9 + 14 * 2e-6 + 20e-6, rel=1e-12)


device_strategy = st.builds(
    DeviceModel,
    st.booleans(),
    st.one_of(
        st.none(),
        st.lists(
            st.tuples(st.sampled_from([32, 64, 128, 256]), st.sampled_from([32, 64, 128, 256])),
            min_size=1,
            max_size=3,
        ).map(tuple),
    ),
    st.floats(0.05, 1.0),
    st.floats(0.0, 10000.0),
    st.floats(0.05, 1.0),
    st.floats(0.0, 1e-4),
    attention_utilisation=st.floats(0.05, 1.0),
    fp8_rate=st.sampled_from([1.0, 2.0, 4.0]),
    fp8_relative_utilisation=st.floats(0.05, 1.0),
)
low_precision_strategy = st.tuples(op_strategy, st.booleans(), st.integers(0, 1 << 26)).map(
    lambda drawn: (
        replace(drawn[0], low_precision=True, quantize_bytes=drawn[2])
        if drawn[1] and drawn[0].kind in (OpKind.GEMM, OpKind.FUSED)
        else drawn[0]
    )
)
"""Operators of `op_strategy`, a GEMM sometimes in FP8 with casts before it."""


@settings(max_examples=examples(300), deadline=None)
@given(low_precision_strategy, design_strategy, growth, device_strategy)
def test_more_resources_never_make_an_operator_slower(
    op: OpWork, design: dict[str, float], grow: tuple[str, float], device: DeviceModel
) -> None:
    knob, factor = grow
    bigger = {
        **design,
        knob: design[knob] * factor if "hz" in knob or "per_s" in knob else int(design[knob] * factor),
    }
    costs = _costs(op, _designs(device, design, bigger))
    assert costs.single_core_s[0, 1] <= costs.single_core_s[0, 0]
    assert costs.all_cores_s[0, 1] <= costs.all_cores_s[0, 0]
    assert costs.all_cores_s[0, 0] <= costs.single_core_s[0, 0]


@settings(max_examples=examples(300), deadline=None)
@given(low_precision_strategy, design_strategy, device_strategy)
def test_never_above_the_peak(op: OpWork, design: dict[str, float], device: DeviceModel) -> None:
    # No operator beats its compute bound at 100 % of the peak (an FP8 GEMM: of the FP8 peak), nor its
    # bytes and its casts' at the full HBM bandwidth; a better utilisation never makes it slower.
    designs = _designs(device, design)
    costs = _costs(op, designs)
    perfect = replace(
        device,
        gemm_utilisation=1.0,
        memory_utilisation=1.0,
        attention_utilisation=1.0,
        fp8_relative_utilisation=1.0,
    )
    ideal = _costs(op, replace(designs, device=perfect))
    clock = design["clock_hz"]
    hbm_s = (op.bytes_read + op.bytes_written + op.quantize_bytes) / design["hbm_bytes_per_s"]
    macs = op.batch * op.m * op.k * op.n
    pe = design["tc_width"] * design["tc_depth"] * (device.fp8_rate if op.low_precision else 1.0)
    for cores, latency_s, ideal_s in (
        (1, costs.single_core_s[0, 0], ideal.single_core_s[0, 0]),
        (design["num_tc"], costs.all_cores_s[0, 0], ideal.all_cores_s[0, 0]),
    ):
        assert latency_s >= max(macs / (cores * pe * clock), hbm_s) * (1 - 1e-12)
        assert latency_s >= ideal_s
        assert math.isfinite(latency_s)


def test_cost_phaze_is_refused_on_gpu_presets() -> None:
    ops = OpTable.from_rows([_gemm(128, 128, 128)])
    for name in ("v100", "a100", "h100"):
        with pytest.raises(PhazecError, match=r"cost=phaze .* meant for the TPU-like template only"):
            op_costs(ops, _preset(name), SYSTEM, MODELS["phaze"])
    op_costs(ops, _preset("tpuv4"), SYSTEM, MODELS["phaze"])  # the template keeps the reference's model


def test_cost_phaze_on_a_gpu_preset_is_refused_before_the_lowering(tmp_path: Path) -> None:
    cfg = compose_config("hw=h100", "cost=phaze", f"cache_dir={tmp_path}", "tracking=none")
    with pytest.raises(PhazecError, match=r"cost=phaze .* meant for the TPU-like template only"):
        setup(settings_from_config(cfg))
    assert not (tmp_path / "onnx").exists()  # Llama 2 7B was never exported


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("gemm_utilisation", 1.5, r"hw.device.gemm_utilisation = 1.5 is not valid: .*\(0, 1\]"),
        ("memory_utilisation", 0, r"hw.device.memory_utilisation = 0.0 is not valid"),
        ("gemm_tiles", [[128]], r"hw.device.gemm_tiles = \[\[128\]\] is not valid: give a non-empty list"),
        ("kernel_latency_s", -1.0, r"hw.device.kernel_latency_s = -1.0 is not valid: .* >= 0"),
        ("attention_utilisation", 0.0, r"hw.device.attention_utilisation = 0.0 is not valid: .*\(0, 1\]"),
        ("collective_sms", -1, r"hw.device.collective_sms = -1 is not valid: it must be an integer >= 0"),
        ("collective_sms", 1.5, r"Value '1.5' of type 'float' could not be converted to Integer .*_sms"),
    ],
)
def test_bad_device_values_are_named(key: str, value: object, message: str) -> None:
    node = OmegaConf.load(Path(conf_dir()) / "hw" / "a100.yaml")
    node.device[key] = value
    with pytest.raises(PhazecError, match=message):
        hw_space_from_config(typed(HwConfig, node, "hw"))


def test_bad_tier_efficiency_is_named() -> None:
    node = {"name": "s", "devices": 8, "global_batch": 8,
            "tiers": [{"group_size": 8, "bandwidth_bytes_per_s": 1e9, "efficiency": 1.2}]}  # fmt: skip
    with pytest.raises(PhazecError, match=r"system.tiers\[0\].efficiency = 1.2 is not valid"):
        system_from_config(typed(SystemConfig, node, "system"))


def _two_independent_ops() -> Graph:
    tensors = {name: Tensor(name, (64, 64), "bfloat16") for name in ("a", "b", "y", "c", "z")}
    ops = [
        Op("gemm", "MatMul", IrKind.GEMM, ("a", "b"), ("y",)),
        Op("add", "Add", IrKind.VECTOR, ("c", "c"), ("z",)),
    ]
    return Graph(tensors, ops, ["a", "b", "c"], [], [], ["y", "z"])


@pytest.mark.parametrize(("shared", "makespan_s"), [(False, 3.0), (True, 5.0)])
def test_shared_cores_serialise_tensor_and_vector_work(shared: bool, makespan_s: float) -> None:
    # A GEMM (3 s) and an independent add (2 s) on one tensor core and one vector core run side by side;
    # when the cores are shared (a GPU's one SM), they take turns.
    solver = SolverConfig()
    seconds = np.array([3.0, 2.0])
    problem = schedule_problem(_two_independent_ops(), seconds, seconds, np.zeros(2),
                               num_tc=1, num_vc=1, config=solver, shared_cores=shared)  # fmt: skip
    kinds = {op.kind for op in problem.ops}
    assert kinds == ({ScheduleKind.TC} if shared else {ScheduleKind.TC, ScheduleKind.VC})
    assert schedule(problem, solver, ScheduleCache()).makespan_s == makespan_s


def test_template_presets_keep_separate_cores_and_systolic_tiles() -> None:
    for name in ("tpuv4", "tpu_small"):
        device = _preset(name).device
        assert not device.shared_cores and device.gemm_tiles is None
