"""op_costs: dispatch by kind, network tiers, energy, the one-design form and the cost config."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from phazec.config.settings import typed
from phazec.cost.model import MODELS, design_op_costs, latency_model_from_config, op_costs
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.schema import CostConfig, SystemConfig
from phazec.hw.system import System, system_from_config
from tests.conftest import REPO

CONF_DIR = REPO / "conf"
MIB = 1 << 20
PJ = 1e-12


def _system(name: str) -> System:
    return system_from_config(
        typed(SystemConfig, OmegaConf.load(CONF_DIR / "system" / f"{name}.yaml"), "system")
    )


def _designs(num_tc: list[int]) -> Designs:
    return Designs.of(
        num_tc=num_tc,
        tc_width=128,
        tc_depth=128,
        num_vc=1,
        vc_width=128,
        glb_bytes=2 * MIB,
        clock_hz=1e9,
        hbm_bytes_per_s=1e12,
    )


def _comm(kind: OpKind, size: int, group: int) -> OpWork:
    return OpWork(kind, collective_bytes=size, group_size=group)


def test_an_all_to_all_sends_each_peer_its_share_on_each_tier_at_once() -> None:
    # 1 GB over g devices: each device keeps 1/g and sends 1/g to each of the g - 1 others. Inside a
    # DGX A100 (g = 8): 7/8 of it over NVLink (0.77 x 300 GB/s), 7 steps of 2 us and a 15 us call.
    # Over 16 devices (two nodes): 7 peers over NVLink and 8 over InfiniBand (0.9 x 25 GB/s), both at
    # once; InfiniBand's 8/16 GB is the slower; 15 steps of 5 us and a 30 us call. Over 2: 1/2 GB.
    ops = OpTable.from_rows([_comm(OpKind.ALL_TO_ALL, 10**9, g) for g in (8, 16, 2, 1)])
    costs = op_costs(ops, _designs([1]), _system("dgx_a100"), MODELS["tiled"])
    nvlink, infiniband = 0.77 * 300e9, 0.9 * 25e9
    expected = [
        7 / 8 * 1e9 / nvlink + 7 * 2e-6 + 15e-6,
        max(7 / 16 * 1e9 / nvlink, 8 / 16 * 1e9 / infiniband) + 15 * 5e-6 + 30e-6,
        1 / 2 * 1e9 / nvlink + 2e-6 + 15e-6,
        0.0,
    ]
    assert costs.all_cores_s[:, 0].tolist() == pytest.approx(expected, rel=1e-14)
    link_j = np.array([7 / 8 * 1e9, 15 / 16 * 1e9, 1 / 2 * 1e9, 0.0]) * 80 * PJ
    assert costs.energy_j[:, 0].tolist() == pytest.approx(link_j.tolist(), rel=1e-15)


def test_collectives_use_the_tier_that_covers_the_group() -> None:
    ops = OpTable.from_rows(
        [
            _comm(OpKind.ALL_REDUCE, 10**9, 8),
            _comm(OpKind.ALL_REDUCE, 10**9, 16),
            _comm(OpKind.P2P, 10**6, 2),
            _comm(OpKind.P2P, 10**6, 16),
            _comm(OpKind.ALL_REDUCE, 10**9, 1),
        ]
    )
    costs = op_costs(ops, _designs([1, 8]), _system("dgx_a100"), MODELS["tiled"])
    # NVLink reaches 77 % of 300 GB/s with 15 us per call, InfiniBand 90 % of 25 GB/s with 30 us per call.
    nvlink, infiniband = 0.77 * 300e9, 0.9 * 25e9
    expected = [
        2 * 7 / 8 * 1e9 / nvlink + 14 * 2e-6 + 15e-6,
        2 * 15 / 16 * 1e9 / infiniband + 30 * 5e-6 + 30e-6,
        1e6 / nvlink + 2e-6 + 15e-6,
        1e6 / infiniband + 5e-6 + 30e-6,
        0.0,
    ]
    assert costs.single_core_s[:, 0].tolist() == pytest.approx(expected, rel=1e-14)
    assert np.array_equal(costs.all_cores_s, costs.single_core_s)
    assert np.array_equal(costs.single_core_s[:, 0], costs.single_core_s[:, 1])
    link_j = np.array([2 * 7 / 8 * 1e9, 2 * 15 / 16 * 1e9, 1e6, 1e6, 0.0]) * 80 * PJ
    assert costs.energy_j[:, 0].tolist() == pytest.approx(link_j.tolist(), rel=1e-15)


def test_phaze_system_has_one_slow_link_at_its_measured_efficiency() -> None:
    # PHAZE's 4 GiB/s link at NCCL's 77 %, 2 us per ring step and 15 us per call.
    ops = OpTable.from_rows([_comm(OpKind.ALL_REDUCE, 10**9, 8)])
    costs = op_costs(ops, _designs([1]), _system("phaze_1024"), MODELS["phaze"])
    expected = 2 * 7 / 8 * 1e9 / (0.77 * 2**32) + 14 * 2e-6 + 15e-6
    assert costs.single_core_s.tolist() == [[pytest.approx(expected, rel=1e-14)]]


def test_group_larger_than_every_tier_is_a_clear_error() -> None:
    ops = OpTable.from_rows([_comm(OpKind.ALL_REDUCE, 10, 4096)])
    with pytest.raises(PhazecError, match="A collective over 4096 devices is larger than every network tier"):
        op_costs(ops, _designs([1]), _system("dgx_a100"), MODELS["tiled"])


def test_energy_by_hand() -> None:
    gemm = OpWork(OpKind.GEMM, m=256, k=256, n=256, bytes_read=2 * 2 * 65536, bytes_written=2 * 65536)
    vector = OpWork(
        OpKind.VECTOR, VectorClass.DIVIDE, vector_elements=1000, bytes_read=2000, bytes_written=2000
    )
    costs = op_costs(
        OpTable.from_rows([gemm, vector]), _designs([1, 4]), _system("phaze_1024"), MODELS["tiled"]
    )
    # 256^3 MACs; buffer port 393,216 words, GLB 196,608 words (see test_cost_tiled), HBM 393,216 bytes.
    gemm_j = 256**3 * 1.5 * PJ + 393216 * 2 * 1.25 * PJ + 196608 * 2 * 12.5 * PJ + 393216 * 31.2 * PJ
    vector_j = 1000 * 10 * 1.0 * PJ + 4000 * (1.25 + 12.5 + 31.2) * PJ
    assert costs.energy_j[:, 0].tolist() == pytest.approx([gemm_j, vector_j], rel=1e-14)
    assert np.array_equal(costs.energy_j[:, 0], costs.energy_j[:, 1])


def test_mixed_table_dispatches_by_kind() -> None:
    ops = OpTable.from_rows(
        [
            OpWork(OpKind.FREE, bytes_read=100, bytes_written=100),
            OpWork(OpKind.GEMM, m=512, k=64, n=512),
            OpWork(OpKind.VECTOR, VectorClass.DROPOUT, backward=True, vector_elements=4096),
            OpWork(OpKind.FUSED, VectorClass.ACTIVATION, m=512, k=64, n=512, vector_elements=512 * 512),
            _comm(OpKind.ALL_REDUCE, 10**6, 8),
        ]
    )
    designs = _designs([1, 4, 16])
    system = _system("phaze_1024")
    for name, model in MODELS.items():
        costs = op_costs(ops, designs, system, model)
        assert costs.single_core_s.shape == costs.all_cores_s.shape == costs.energy_j.shape == (5, 3)
        assert costs.single_core_s[0].tolist() == [0.0, 0.0, 0.0], name
        for kind in (OpKind.GEMM, OpKind.VECTOR, OpKind.FUSED):
            rows = np.flatnonzero(ops.kind == kind)
            for all_cores, got in ((False, costs.single_core_s), (True, costs.all_cores_s)):
                direct = model.by_kind[kind](ops.take(rows), designs, all_cores)
                assert np.array_equal(got[rows], direct)
        one = design_op_costs(ops, designs.take(2), system, model)
        assert np.array_equal(one.single_core_s, costs.single_core_s[:, 2])
        assert np.array_equal(one.all_cores_s, costs.all_cores_s[:, 2])
        assert np.array_equal(one.energy_j, costs.energy_j[:, 2])


def test_design_op_costs_needs_one_design() -> None:
    ops = OpTable.from_rows([OpWork(OpKind.FREE)])
    with pytest.raises(PhazecError, match="design_op_costs needs exactly one design, got 2"):
        design_op_costs(ops, _designs([1, 2]), _system("phaze_1024"), MODELS["tiled"])


def test_cost_config_picks_the_model() -> None:
    assert (
        latency_model_from_config(
            typed(CostConfig, OmegaConf.load(CONF_DIR / "cost" / "tiled.yaml"), "cost")
        ).name
        == "tiled"
    )
    assert (
        latency_model_from_config(
            typed(CostConfig, OmegaConf.load(CONF_DIR / "cost" / "phaze.yaml"), "cost")
        ).name
        == "phaze"
    )
    with pytest.raises(
        PhazecError, match=r"cost.name = 'roofline' is not a latency model; valid names are tiled"
    ):
        latency_model_from_config(typed(CostConfig, {"name": "roofline"}, "cost"))
