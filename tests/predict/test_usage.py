"""Utilisation and energy of a plan, and WHAM's critical operators, on hand-made toy problems."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from phazec.config.settings import typed
from phazec.cost.energy import ENERGY_PARTS, op_energy_j, op_energy_parts_j
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.hw.designs import KNOBS, Designs
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, System
from phazec.predict.usage import LayerWork, PlanWork, busy_core_s, plan_usage
from phazec.search.strategies.wham import critical_ops, neighbours
from phazec.solvers.placement.problem import Placement, Stage
from phazec.solvers.schedule.problem import OpKind as Kind
from phazec.solvers.schedule.problem import ScheduleOp, ScheduleProblem
from phazec.solvers.schedule.solve import schedule
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config

PJ = 1e-12


def _design(num_tc: int = 1) -> Designs:
    return Designs.of(
        num_tc=num_tc, tc_width=128, tc_depth=128, num_vc=1, vc_width=128,
        glb_bytes=2 * 2**20, clock_hz=1e9, hbm_bytes_per_s=1e12,
    )  # fmt: skip


QUAD = System("quad", 4, 4, (80e9,), (NetworkTier(4, 1e9, 0.0, 0.0),))
"""Four devices on one tier: what each sends does not depend on its figures."""


def test_energy_parts_by_hand() -> None:
    vector = OpWork(
        OpKind.VECTOR, VectorClass.DIVIDE, vector_elements=1000, bytes_read=2000, bytes_written=2000
    )
    gemm = OpWork(OpKind.GEMM, m=256, k=256, n=256, bytes_read=2 * 2 * 65536, bytes_written=2 * 65536)
    reduce = OpWork(OpKind.ALL_REDUCE, collective_bytes=1000, group_size=4)
    ops = OpTable.from_rows([vector, gemm, reduce])
    parts = op_energy_parts_j(ops, _design(), QUAD)
    expected = {
        # 1000 elements at 10 cycles per element; 4000 bytes through both buffers and HBM.
        "compute": [1000 * 10 * PJ, 256**3 * 1.5 * PJ, 0.0],
        # GEMM: 393,216 port words and 196,608 GLB words of 2 bytes (see test_cost_tiled).
        "buffers": [4000 * (1.25 + 12.5) * PJ, (393216 * 2 * 1.25 + 196608 * 2 * 12.5) * PJ, 0.0],
        "hbm": [4000 * 31.2 * PJ, 393216 * 31.2 * PJ, 0.0],
        # A ring all-reduce over 4 devices sends 2 * 3 / 4 of the bytes.
        "network": [0.0, 0.0, 1500 * 80 * PJ],
    }
    for part in ENERGY_PARTS:
        assert parts[part][:, 0].tolist() == pytest.approx(expected[part], rel=1e-14)
    total = [sum(expected[part][i] for part in ENERGY_PARTS) for i in range(3)]
    assert op_energy_j(ops, _design(), QUAD)[:, 0].tolist() == pytest.approx(total, rel=1e-14)


def _problem(
    ops: list[tuple[str, Kind, float, float]], deps: list[tuple[int, int]], num_tc: int
) -> ScheduleProblem:
    return ScheduleProblem(
        tuple(ScheduleOp(name, kind, single, spread) for name, kind, single, spread in ops),
        tuple(deps),
        num_tc=num_tc,
        num_vc=1,
    )


def test_busy_core_seconds_count_every_core_a_spread_op_holds() -> None:
    # A GEMM (2 s on one of 2 TCs, 1.5 s spread over both) feeding a 1 s vector op: spreading wins
    # (makespan 2.5 s), so the TCs are busy 2 x 1.5 = 3 core-seconds and the VC 1.
    problem = _problem([("gemm", Kind.TC, 2.0, 1.5), ("relu", Kind.VC, 1.0, 1.0)], [(0, 1)], num_tc=2)
    found = schedule(problem, SolverConfig())
    assert found.makespan_s == 2.5
    assert busy_core_s(problem, found) == (3.0, 1.0)


def test_critical_ops_follow_dependencies_and_shared_cores() -> None:
    # a -> b on the one TC (2 s + 1 s); c, 1 s on the VC, has 2 s of slack.
    chain = _problem(
        [("a", Kind.TC, 2.0, 2.0), ("b", Kind.TC, 1.0, 1.0), ("c", Kind.VC, 1.0, 1.0)], [(0, 1)], num_tc=1
    )
    assert critical_ops(chain, schedule(chain, SolverConfig())) == [0, 1]
    # Two independent 1 s GEMMs share the one TC: both are critical through the core, not the VC op.
    shared = _problem(
        [("a", Kind.TC, 1.0, 1.0), ("b", Kind.TC, 1.0, 1.0), ("c", Kind.VC, 1.5, 1.5)], [], num_tc=1
    )
    found = schedule(shared, SolverConfig())
    assert found.makespan_s == 2.0
    assert critical_ops(shared, found) == [0, 1]


def _placement() -> Placement:
    return Placement(
        stages=(Stage((0, 1), 2, 3.0, 0), Stage((2,), 1, 2.0, 0)),
        t=2, d=2, hbm_bytes=10**9, microbatches_per_pipeline=4,
        time_per_batch_s=40.0, throughput_samples_per_s=64 / 40.0, fits_hbm=True,
    )  # fmt: skip


def test_plan_utilisation_and_energy_by_hand() -> None:
    # forward, backward, attention core, op recompute's ops
    per_layer = np.array([[1.0, 1.0, 2.0], [2.0, 2.0, 3.0], [0.5, 0.5, 1.0], [0.25, 0.25, 0.5]])
    work = LayerWork(
        tc_busy_s=per_layer,
        vc_busy_s=per_layer / 2,
        energy_j={part: per_layer * (i + 1) for i, part in enumerate(ENERGY_PARTS)},
    )
    plan = PlanWork(
        num_tc=2,
        num_vc=1,
        cut_bytes=(100, 0),
        param_bytes=(1000, 500),
        expert_param_bytes=(0, 0),
        ep=1,
        tp=1,
        samples_per_batch=64,
        forward_runs=(2.0, 1.0),
        core_runs=(0.0, 0.0),
        op_runs=(0.0, 0.0),
    )
    usage = plan_usage(_placement(), work, plan)
    # Per microbatch, stage 0 (recompute: forward twice) runs 2 * (1 + 1) + (2 + 2) = 8 core-seconds of
    # TC work, the last stage 2 + 3 = 5. Over 4 microbatches in 40 s on 2 TCs: 32/80 and 20/80.
    assert usage["tensor_core_utilisation_bottleneck"] == 0.4  # stage 0 has the largest load
    assert usage["tensor_core_utilisation_mean"] == pytest.approx((0.4 * 2 + 0.25 * 1) / 3, rel=1e-15)
    # Half the work on one VC: 16/40 and 10/40.
    assert usage["vector_core_utilisation_bottleneck"] == 0.4
    assert usage["vector_core_utilisation_mean"] == pytest.approx((0.4 * 2 + 0.25) / 3, rel=1e-15)
    # Energy per iteration: 2 replicas x 4 microbatches x (8 J x 2 devices + 5 J x 1 device) = 168 J
    # times the part's factor; the network adds 2 x 4 x 2 x 100 bytes of pipeline transfers and
    # 2 x (2 - 1) x (2 x 1000 + 500) bytes of gradient all-reduce at 80 pJ a byte.
    iteration = usage["energy_per_iteration_j"]
    assert [iteration[part] for part in ("compute", "buffers", "hbm")] == [168.0, 336.0, 504.0]
    assert iteration["network"] == pytest.approx(672.0 + (1600 + 5000) * 80 * PJ, rel=1e-15)
    # With 400 B of stage 0's 1000 routed experts' at ep 2, the 2 replicas make expert-data-parallel
    # groups of 1: only the dense bytes are reduced, 2 x (2 - 1) x (2 x 600 + 500) = 3400. At ep 1 the
    # experts' group is both replicas, and the bytes are those of the dense model, 5000.
    for ep, synced in ((2, 3400), (1, 5000)):
        moe = plan_usage(_placement(), work, replace(plan, expert_param_bytes=(400, 0), ep=ep))
        assert moe["energy_per_iteration_j"]["network"] == pytest.approx(
            672.0 + (1600 + synced) * 80 * PJ, rel=1e-15
        )
    assert iteration["total"] == pytest.approx(168 * 10 + 6600 * 80 * PJ, rel=1e-15)
    assert usage["energy_per_sample_j"]["total"] == pytest.approx(iteration["total"] / 64, rel=1e-15)
    # Selective recompute in stage 0 instead: it repeats its layers' attention cores, 2 + 4 + 1 = 7
    # core-seconds per microbatch (28/80 of its TCs), and the energy is 2 x 4 x (7 x 2 + 5 x 1) = 152 J.
    selective = plan_usage(_placement(), work, replace(plan, forward_runs=(1.0, 1.0), core_runs=(1.0, 0.0)))
    assert selective["tensor_core_utilisation_bottleneck"] == 0.35
    assert selective["energy_per_iteration_j"]["compute"] == 152.0
    # Op recompute in stage 0: it runs its layers' unsaved ops again, 2 + 4 + 0.5 = 6.5 core-seconds
    # per microbatch (26/80 of its TCs), and the energy is 2 x 4 x (6.5 x 2 + 5 x 1) = 144 J.
    op = plan_usage(_placement(), work, replace(plan, forward_runs=(1.0, 1.0), op_runs=(1.0, 0.0)))
    assert op["tensor_core_utilisation_bottleneck"] == 0.325
    assert op["energy_per_iteration_j"]["compute"] == 144.0


def test_neighbours_are_one_step_away() -> None:
    designs = enumerate_designs(
        hw_space_from_config(typed(HwConfig, compose_config("hw=tpu_small").hw, "hw"))
    )
    free = [k for k in KNOBS if k != "vc_width"]  # tied to tc_width in tpu_small
    values = {k: sorted({int(v) for v in getattr(designs, k)}) for k in free}

    def steps(i: int, j: int) -> list[int]:
        return [values[k].index(int(getattr(designs, k)[j])) - values[k].index(int(getattr(designs, k)[i]))
                for k in free]  # fmt: skip

    for i in range(len(designs)):
        # Brute force: one knob one step up, at most one other one step down, nothing else changed.
        expected = [
            j for j in range(len(designs))
            if sorted(s for s in steps(i, j) if s) in ([1], [-1, 1])
        ]  # fmt: skip
        assert neighbours(designs, i) == expected
    assert any(neighbours(designs, i) for i in range(len(designs)))
