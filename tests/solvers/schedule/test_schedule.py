"""Hand-built scheduling instances with known optima, on both backends, and the error paths."""

import json
import logging
from pathlib import Path

import pytest

from phazec.errors import PhazecError
from phazec.report.gantt import plot_schedule
from phazec.solvers.schedule import model as schedule_model
from phazec.solvers.schedule.model import CLIQUE_LIMIT, Incumbent, build, extract
from phazec.solvers.schedule.problem import (
    OpKind,
    ScheduleOp,
    ScheduleProblem,
    canonical_key,
    contract_free_ops,
)
from phazec.solvers.schedule.replay import replay
from phazec.solvers.schedule.solve import ScheduleCache, optimize, schedule, search_nodes
from phazec.solvers.schema import SolverConfig

TC, VC, FUSED, COLL = OpKind.TC, OpKind.VC, OpKind.FUSED, OpKind.COLLECTIVE
BACKENDS = ["highs", "gurobi"]


def op(
    name: str, kind: OpKind, latency_s: float, latency_io_s: float | None = None, hbm_s: float = 0.0
) -> ScheduleOp:
    return ScheduleOp(name, kind, latency_s, latency_s if latency_io_s is None else latency_io_s, hbm_s)


def solve(problem: ScheduleProblem, backend: str = "highs") -> tuple[float, tuple[bool, ...]]:
    found = optimize(problem, SolverConfig(backend=backend, search_node_limit=0))
    assert found.optimal
    assert found.solves[-1].backend == backend
    return found.makespan_s, found.spread


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_gemms_on_two_tensor_cores(backend: str) -> None:
    # Three independent GEMMs, 2 s on one TC, 1.5 s spread over both TCs.
    # Two side by side then the third spread: 2 + 1.5 = 3.5.   (All on one core each: 2 + 2 = 4;
    # all spread: 3 * 1.5 = 4.5; one spread first, then two side by side: 1.5 + 2 = 3.5.)
    problem = ScheduleProblem(tuple(op(f"g{i}", TC, 2.0, 1.5) for i in range(3)), (), num_tc=2, num_vc=1)
    makespan_s, spread = solve(problem, backend)
    assert makespan_s == 3.5
    assert sorted(spread) == [False, False, True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_gemms_without_intra_op_parallelism(backend: str) -> None:
    # Spreading is no faster (L_io = L): two side by side, then the third: 2 + 2 = 4.
    problem = ScheduleProblem(tuple(op(f"g{i}", TC, 2.0) for i in range(3)), (), num_tc=2, num_vc=1)
    assert solve(problem, backend) == (4.0, (False, False, False))


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_takes_the_faster_mode_of_each_op(backend: str) -> None:
    # a -> b -> c: a TC op (4 s, 1 s spread), a VC op (3 s, 5 s spread), a TC op (2 s, 0.5 s spread).
    # A chain never overlaps, so each op takes its faster mode: 1 + 3 + 0.5 = 4.5.
    problem = ScheduleProblem(
        (op("a", TC, 4.0, 1.0), op("b", VC, 3.0, 5.0), op("c", TC, 2.0, 0.5)),
        ((0, 1), (1, 2)),
        num_tc=4,
        num_vc=4,
    )
    assert solve(problem, backend) == (4.5, (True, False, True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_op_holds_a_tensor_and_a_vector_core(backend: str) -> None:
    # 2 TCs, 1 VC; independent: f fused (3 s), v vector (2 s), t tensor (2 s).
    # f and v both need the only VC, so they run one after the other: 3 + 2 = 5; t runs beside them
    # on the second TC. Were f on a TC alone, the makespan would be 3.
    problem = ScheduleProblem(
        (op("f", FUSED, 3.0), op("v", VC, 2.0), op("t", TC, 2.0)), (), num_tc=2, num_vc=1
    )
    assert solve(problem, backend)[0] == 5.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_intra_op_parallelism_wins(backend: str) -> None:
    # Two independent GEMMs on 4 TCs: 8 s on one core, 2.5 s spread over all four.
    # Side by side: 8. Spread, one after the other: 2.5 + 2.5 = 5. Optimum 5.
    problem = ScheduleProblem((op("a", TC, 8.0, 2.5), op("b", TC, 8.0, 2.5)), (), num_tc=4, num_vc=1)
    assert solve(problem, backend) == (5.0, (True, True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_intra_op_parallelism_loses(backend: str) -> None:
    # Same, but 4 s on one core: side by side 4 beats spread 2.5 + 2.5 = 5 (and one spread 2.5 + 4).
    problem = ScheduleProblem((op("a", TC, 4.0, 2.5), op("b", TC, 4.0, 2.5)), (), num_tc=4, num_vc=1)
    assert solve(problem, backend) == (4.0, (False, False))


@pytest.mark.parametrize("backend", BACKENDS)
def test_collectives_overlap_compute_but_not_each_other(backend: str) -> None:
    # v vector (2 s), c1 and c2 collectives (3 s each), all independent, 1 VC.
    # On the network the collectives run one after the other beside v: 3 + 3 = 6.
    # As vector work (the reference) all three share the VC: 2 + 3 + 3 = 8.
    ops = (op("v", VC, 2.0), op("c1", COLL, 3.0), op("c2", COLL, 3.0))
    assert solve(ScheduleProblem(ops, (), num_tc=1, num_vc=1), backend)[0] == 6.0
    as_vector = ScheduleProblem(ops, (), num_tc=1, num_vc=1, collectives_as_vector=True)
    assert solve(as_vector, backend)[0] == 8.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_collectives_that_hold_the_cores(backend: str) -> None:
    # GEMMs g1, g2 (8 s on one of 4 cores, 2 s spread) and a collective c (3 s), all independent.
    # On the network c runs beside the GEMMs, spread one after the other: max(2 + 2, 3) = 4.
    # Holding every core (a GPU's NCCL kernels, called synchronously), c runs alone: 2 + 2 + 3 = 7,
    # for the ILP and for the exact search alike.
    ops = (op("g1", TC, 8.0, 2.0), op("g2", TC, 8.0, 2.0), op("c", COLL, 3.0))
    assert solve(ScheduleProblem(ops, (), num_tc=4, num_vc=1), backend)[0] == 4.0
    held = ScheduleProblem(ops, (), num_tc=4, num_vc=1, collectives_hold_cores=True)
    assert held.resources(2) == ("tc",) and held.modes(2) == (True,)
    assert solve(held, backend) == (7.0, (True, True, True))
    searched = optimize(held, SolverConfig(backend=backend, search_node_limit=10_000))
    assert (searched.makespan_s, searched.optimal) == (7.0, True)


@pytest.mark.parametrize("clique_limit", [CLIQUE_LIMIT, 0])
def test_diamond_needs_core_capacity(clique_limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # s -> {a, b, c} -> e on 2 TCs, all 1 s, no spreading: the three branches need two rounds:
    # 1 + 2 + 1 = 4. A solve without core capacity runs all three at once (makespan 3), the replay
    # finds 3 TCs busy, and the second solve with capacity for TCs gives 4: with the row
    # cap_tc_0 (one of a, b, c ordered against another), or with core variables (limit 0).
    monkeypatch.setattr(schedule_model, "CLIQUE_LIMIT", clique_limit)
    ops = (op("s", TC, 1.0), op("a", TC, 1.0), op("b", TC, 1.0), op("c", TC, 1.0), op("e", TC, 1.0))
    deps = ((0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4))
    problem = ScheduleProblem(ops, deps, num_tc=2, num_vc=1)
    found = optimize(problem, SolverConfig(backend="highs", search_node_limit=0))
    assert found.makespan_s == 4.0
    assert [s.core_resources for s in found.solves] == [(), ("tc",)]
    assert {c for held in found.cores for _, c in held} == {0, 1}


def test_list_schedule_meeting_the_relaxed_bound_ends_the_search() -> None:
    # Independent TC ops of 2, 1 and 1 s on 2 TCs, no spreading. Without core capacity all three
    # run at once (bound 2 s); the list schedule (2 | 1 + 1) also takes 2 s, so it is optimal and
    # no solve with core capacity is needed.
    ops = (op("a", TC, 2.0), op("b", TC, 1.0), op("c", TC, 1.0))
    problem = ScheduleProblem(ops, (), num_tc=2, num_vc=1)
    found = optimize(problem, SolverConfig(backend="highs", search_node_limit=0))
    assert (found.makespan_s, found.bound_s, found.status) == (2.0, 2.0, "optimal")
    assert [s.core_resources for s in found.solves] == [()]
    # schedule() needs no solve at all: the longest op (2 s) bounds the makespan from below.
    assert schedule(problem, SolverConfig(backend="highs")).solves == ()


def test_exact_search_proves_what_the_core_time_bound_cannot() -> None:
    # Five independent 1 s VC ops and one of 2 s (1 s spread) on 2 VCs: 7 core-seconds, so the
    # relaxation's bound is 3.5 s. Spread, the long op holds both cores for 1 s and the unit ops then
    # need ceil(5 / 2) = 3 s; on one core it leaves 2 + k and 5 - k seconds for k unit ops beside
    # it, at best 4 s (k = 1). The optimum is 4 s, which the exact search proves.
    ops = (*(op(f"u{k}", VC, 1.0) for k in range(5)), op("long", VC, 2.0, 1.0))
    found = schedule(ScheduleProblem(ops, (), num_tc=1, num_vc=2), SolverConfig(backend="highs"))
    assert found.optimal and found.makespan_s == 4.0
    assert found.solves[-1].backend == "search"


@pytest.mark.parametrize("backend", BACKENDS)
def test_node_limit_stops_repeatably_and_is_cached(backend: str, tmp_path: Path) -> None:
    # Independent TC ops of 5, 7, 9, 11, 13 and 17 s on 3 TCs, each 2.5 times faster spread: 62 s of
    # core-time, so every schedule takes at least 62/3 s. One node of the ILP and of the exact search
    # does not prove any schedule optimal, so both stop at their node limits with a feasible
    # schedule, a valid bound, and the same answer every time; being repeatable, it is stored on
    # disk. With the default limits the exact search proves the optimum.
    ops = tuple(op(f"g{k}", TC, float(k), k / 2.5) for k in (5, 7, 9, 11, 13, 17))
    problem = ScheduleProblem(ops, (), num_tc=3, num_vc=1)
    config = SolverConfig(backend=backend, node_limit=1, search_node_limit=1)
    first = schedule(problem, config, ScheduleCache(tmp_path))
    second = schedule(problem, config)
    assert first.status == "node_limit"
    assert 62 / 3 <= first.bound_s < first.makespan_s
    assert (first.makespan_s, first.start_s, first.bound_s) == (
        second.makespan_s,
        second.start_s,
        second.bound_s,
    )
    assert ScheduleCache(tmp_path).get(canonical_key(problem, config)) == first
    assert [r.backend for r in first.solves][:2] == [backend, "search"]
    proven = schedule(problem, SolverConfig(backend=backend, node_limit=1))
    assert proven.optimal and proven.solves[-1].backend == "search"
    assert first.bound_s <= proven.makespan_s <= first.makespan_s


def test_solve_record_and_determinism() -> None:
    problem = ScheduleProblem(tuple(op(f"g{i}", TC, 2.0, 1.5) for i in range(3)), (), num_tc=2, num_vc=1)
    first = optimize(problem, SolverConfig(backend="highs", search_node_limit=0))
    second = optimize(problem, SolverConfig(backend="highs", search_node_limit=0))
    assert (first.start_s, first.spread, first.cores) == (second.start_s, second.spread, second.cores)
    record = first.solves[-1]
    assert record.status == "optimal"
    assert record.gap <= 1e-6
    assert record.objective_s == pytest.approx(3.5, rel=1e-9)
    assert record.num_vars > 0
    assert record.num_constraints > 0
    assert record.runtime_s >= 0


def test_empty_problem() -> None:
    found = schedule(ScheduleProblem((), (), num_tc=1, num_vc=1), SolverConfig(backend="highs"))
    assert found.makespan_s == 0.0


def test_zero_tensor_cores_is_a_clear_error() -> None:
    with pytest.raises(PhazecError, match=r"type tc .*num_tc=0"):
        ScheduleProblem((op("gemm", TC, 1.0),), (), num_tc=0, num_vc=4)
    with pytest.raises(PhazecError, match=r"type fused .*num_vc=0"):
        ScheduleProblem((op("gemm_gelu", FUSED, 1.0),), (), num_tc=4, num_vc=0)
    with pytest.raises(PhazecError, match=r"type collective \(treated as vector work\)"):
        ScheduleProblem((op("ar", COLL, 1.0),), (), num_tc=4, num_vc=0, collectives_as_vector=True)
    with pytest.raises(PhazecError, match=r"type collective \(holding every tensor core\) .*num_tc=0"):
        ScheduleProblem((op("ar", COLL, 1.0),), (), num_tc=0, num_vc=4, collectives_hold_cores=True)
    # A collective on the network needs no core.
    ScheduleProblem((op("ar", COLL, 1.0),), (), num_tc=4, num_vc=0)


def test_bad_problems_are_clear_errors() -> None:
    with pytest.raises(PhazecError, match="cycle"):
        ScheduleProblem((op("a", TC, 1.0), op("b", TC, 1.0)), ((0, 1), (1, 0)), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match=r"latency_s=-1\.0"):
        ScheduleProblem((op("a", TC, -1.0),), (), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match="'a' appears more than once"):
        ScheduleProblem((op("a", TC, 1.0), op("a", VC, 1.0)), (), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match=r"\(0, 5\)"):
        ScheduleProblem((op("a", TC, 1.0),), ((0, 5),), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match=r"hbm_s=1\.5 s of HBM traffic with latencies 2\.0 / 1\.0 s"):
        ScheduleProblem((op("a", TC, 2.0, 1.0, 1.5),), (), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match="0 for a collective"):
        ScheduleProblem((op("ar", COLL, 2.0, 2.0, 1.0),), (), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match=r"hbm_s=nan"):
        ScheduleProblem((op("a", TC, 2.0, 2.0, float("nan")),), (), num_tc=1, num_vc=1)


def test_bad_config_is_a_clear_error() -> None:
    problem = ScheduleProblem((op("a", TC, 1.0),), (), num_tc=1, num_vc=1)
    with pytest.raises(PhazecError, match=r"solver\.backend='cplex'.*auto, gurobi, highs"):
        schedule(problem, SolverConfig(backend="cplex"))
    with pytest.raises(PhazecError, match=r"solver\.time_limit_s=0"):
        schedule(problem, SolverConfig(time_limit_s=0))
    with pytest.raises(PhazecError, match=r"solver\.node_limit=0.*whole number"):
        schedule(problem, SolverConfig(node_limit=0))
    with pytest.raises(PhazecError, match=r"solver.search_node_limit=-1; it must be a whole number"):
        schedule(problem, SolverConfig(search_node_limit=-1))
    with pytest.raises(PhazecError, match=r"solver\.ilp_max_ops=0; it must be a whole number of ops >= 1"):
        schedule(problem, SolverConfig(ilp_max_ops=0))
    with pytest.raises(PhazecError, match=r"solver\.write_lp=true needs a directory for the model files"):
        schedule(problem, SolverConfig(write_lp=True))


def test_a_graph_above_ilp_max_ops_goes_to_the_exact_search_alone() -> None:
    # The diamond of test_diamond_needs_core_capacity: s -> {a, b, c} -> e on 2 TCs, all 1 s; the
    # bounds say 1 + 3/2 + 1 = 3.5 (a, b and c share 2 cores), the optimum is 1 + 2 + 1 = 4. Its 5
    # ops are above ilp_max_ops=4, so no ILP runs: one record, of the search, with
    # 500,000 * 4^2 // 5^2 = 320,000 nodes, which proves the 4.
    ops = (op("s", TC, 1.0), op("a", TC, 1.0), op("b", TC, 1.0), op("c", TC, 1.0), op("e", TC, 1.0))
    deps = ((0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4))
    problem = ScheduleProblem(ops, deps, num_tc=2, num_vc=1)
    config = SolverConfig(ilp_max_ops=4)
    assert search_nodes(5, config) == 320_000
    assert search_nodes(99, SolverConfig()) == 500_000 * 64**2 // 99**2 == 208_958
    assert search_nodes(1000, SolverConfig(search_node_limit=10)) == 1
    found = schedule(problem, config)
    assert (found.makespan_s, found.optimal) == (4.0, True)
    assert [record.backend for record in found.solves] == ["search"]
    assert schedule(problem, SolverConfig(ilp_max_ops=5)).solves[0].backend in ("gurobi", "highs")  # ILP
    # Without the search the list schedule stands, unproven.
    alone = schedule(problem, SolverConfig(ilp_max_ops=4, search_node_limit=0))
    assert (alone.makespan_s, alone.bound_s, alone.status, alone.solves) == (4.0, 3.5, "node_limit", ())


def test_contract_free_ops_links_around_views() -> None:
    # a -> view1 -> view2 -> {b, c}; view2 -> b directly too.
    ops = (op("a", TC, 1.0), op("view1", VC, 0.0), op("view2", VC, 0.0), op("b", VC, 2.0), op("c", TC, 3.0))
    problem = ScheduleProblem(ops, ((0, 1), (1, 2), (2, 3), (2, 4)), num_tc=1, num_vc=1)
    contracted = contract_free_ops(problem)
    assert [o.name for o in contracted.ops] == ["a", "b", "c"]
    assert contracted.deps == ((0, 1), (0, 2))


def test_canonical_key_ignores_names_only() -> None:
    a = ScheduleProblem((op("x", TC, 1.0), op("y", VC, 2.0)), ((0, 1),), num_tc=2, num_vc=1)
    b = ScheduleProblem((op("p", TC, 1.0), op("q", VC, 2.0)), ((0, 1),), num_tc=2, num_vc=1)
    c = ScheduleProblem((op("x", TC, 1.0), op("y", VC, 2.5)), ((0, 1),), num_tc=2, num_vc=1)
    d = ScheduleProblem((op("x", TC, 1.0), op("y", VC, 2.0)), ((0, 1),), num_tc=4, num_vc=1)
    e = ScheduleProblem((op("x", TC, 1.0), op("y", VC, 2.0, 2.0, 1.0)), ((0, 1),), num_tc=2, num_vc=1)
    config = SolverConfig()
    assert canonical_key(a, config) == canonical_key(b, config)
    keys = {canonical_key(x, config) for x in (a, c, d, e)}
    assert len(keys) == 4
    # A schedule stopped by the node limit depends on the limit, so the key does too.
    assert canonical_key(a, SolverConfig(node_limit=1)) != canonical_key(a, config)


def test_cache_in_memory_and_on_disk(tmp_path: Path) -> None:
    problem = ScheduleProblem(tuple(op(f"g{i}", TC, 2.0, 1.5) for i in range(3)), (), num_tc=2, num_vc=1)
    config = SolverConfig(backend="highs")
    cache = ScheduleCache(tmp_path)
    first = schedule(problem, config, cache)
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == [f"{canonical_key(problem, config)}.json"]
    assert json.loads(files[0].read_text().split("\n")[1])["makespan_s"] == 3.5  # the sealed payload
    assert schedule(problem, config, cache) is first  # memory hit
    # A fresh cache on the same directory reads the file back exactly.
    assert schedule(problem, config, ScheduleCache(tmp_path)) == first


def test_write_lp_names_variables_by_index(tmp_path: Path) -> None:
    problem = ScheduleProblem((op("a", TC, 2.0, 1.5), op("b", TC, 2.0, 1.5)), (), num_tc=2, num_vc=1)
    optimize(problem, SolverConfig(backend="highs", write_lp=True, search_node_limit=0), model_dir=tmp_path)
    (model,) = tmp_path.glob("*.lp")
    text = model.read_text()
    for name in ("makespan", "t_0", "y_1", "x_0_1", "x_1_0", "seq_0_1", "alone_0_0_1"):
        assert name in text


def test_auto_falls_back_to_highs_when_the_model_is_too_large(caplog: pytest.LogCaptureFixture) -> None:
    # 46 independent collectives share the network: 46 * 45 = 2070 order variables, more than the
    # 2000 of gurobipy's size-limited licence. Every order is optimal: 46 * 1 s.
    problem = ScheduleProblem(tuple(op(f"c{i}", COLL, 1.0) for i in range(46)), (), num_tc=1, num_vc=1)
    with caplog.at_level(logging.INFO, logger="phazec.solvers.schedule.backends"):
        found = optimize(problem, SolverConfig(backend="auto", search_node_limit=0))
    assert found.makespan_s == 46.0
    assert found.solves[-1].backend == "highs"
    assert found.solves[-1].num_vars > 2000
    assert "too large for its size-limited licence" in caplog.text
    with pytest.raises(PhazecError, match=r"solver\.backend=gurobi cannot solve this model"):
        optimize(problem, SolverConfig(backend="gurobi", search_node_limit=0))


def test_auto_falls_back_to_highs_on_a_bad_licence_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GRB_LICENSE_FILE", str(tmp_path / "missing.lic"))
    problem = ScheduleProblem((op("a", TC, 2.0, 1.5), op("b", TC, 2.0, 1.5)), (), num_tc=2, num_vc=1)
    with caplog.at_level(logging.INFO, logger="phazec.solvers.schedule.backends"):
        found = optimize(problem, SolverConfig(backend="auto", search_node_limit=0))
    assert found.solves[-1].backend == "highs"
    assert "licence file is missing or invalid" in caplog.text


@pytest.mark.parametrize(
    ("hbm_s", "makespan_s"),
    [
        (0.0, 2.0),  # no traffic: two at once, then the third
        (0.5, 2.0),  # half the bandwidth each: still two at once
        (0.75, 3.0),  # three quarters each: one at a time
        (1.0, 3.0),
    ],
)
def test_operators_side_by_side_share_the_hbm(hbm_s: float, makespan_s: float) -> None:
    # Three independent adds of 1 s on two vector cores (spreading is no faster); each keeps HBM busy
    # hbm_s of its second. Two run at once only when their shares add up to at most the bandwidth.
    problem = ScheduleProblem(
        tuple(op(f"add{i}", VC, 1.0, 1.0, hbm_s) for i in range(3)), (), num_tc=1, num_vc=2
    )
    found = schedule(problem, SolverConfig(backend="highs"))
    assert (found.makespan_s, found.status) == (makespan_s, "optimal")
    assert not replay(problem, found.start_s, found.spread).oversubscribed


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_ilp_ignores_the_hbm_its_schedule_is_repaired_and_the_search_proves_it(backend: str) -> None:
    # A GEMM of 2 s holding half the bandwidth (1 s of traffic) beside a chain of two adds of 1 s holding
    # three quarters each. With the cores alone the adds run beside the GEMM: 2 s, over the bandwidth
    # (1/2 + 3/4). Neither add fits beside the GEMM, so a real schedule is serial: 2 + 1 + 1 = 4 s.
    problem = ScheduleProblem(
        (op("g", TC, 2.0, 2.0, 1.0), op("a", VC, 1.0, 1.0, 0.75), op("b", VC, 1.0, 1.0, 0.75)),
        ((1, 2),),
        num_tc=1,
        num_vc=1,
    )
    assert replay(problem, (0.0, 0.0, 1.0), (False, False, False)).oversubscribed == {"hbm"}
    ilp = optimize(problem, SolverConfig(backend=backend, search_node_limit=0))
    # The ILP's optimum is repaired; its traffic bound (1 + 0.75 + 0.75 s) cannot prove it.
    assert (ilp.makespan_s, ilp.bound_s, ilp.status) == (4.0, 2.5, "hbm_repaired")
    assert not replay(problem, ilp.start_s, ilp.spread).oversubscribed
    found = schedule(problem, SolverConfig(backend=backend))
    assert (found.makespan_s, found.status) == (4.0, "optimal")
    assert found.solves[-1].backend == "search"


def test_orders_that_come_back_in_a_cycle_follow_the_solvers_start_times() -> None:
    # Three 1 ns adds on one vector core: every pair is ordered. A solver may return the orders
    # 0 -> 1 -> 2 -> 0, each within its tolerance of a horizon far longer (here all starts 0). The
    # schedule keeps every pair ordered, in start-time then index order: 0, 1, 2 back to back.
    problem = ScheduleProblem(
        (op("a", VC, 1e-9), op("b", VC, 1e-9), op("c", VC, 1e-9), op("g", TC, 1e-3)), (), num_tc=1, num_vc=1
    )
    incumbent = Incumbent((0.0, 1e-9, 2e-9, 0.0), (False,) * 4, ((), (), (), ()), 1e-3)
    formulation = build(problem, incumbent)
    values = list(formulation.start)
    cyclic = {(0, 1), (1, 2), (2, 0)}
    for i, j, col in formulation.order_cols:
        values[col] = float((i, j) in cyclic)
    for col in formulation.start_cols:
        values[col] = 0.0
    start_s, _ = extract(problem, formulation, tuple(values))
    assert start_s == (0.0, 1e-9, 2e-9, 0.0)


def test_replay_finds_late_starts_and_oversubscription() -> None:
    problem = ScheduleProblem(
        (op("a", TC, 2.0), op("b", TC, 2.0), op("c", TC, 1.0)), ((0, 2),), num_tc=1, num_vc=1
    )
    # a and b overlap on the only TC; c starts at 1 before a ends at 2.
    found = replay(problem, (0.0, 1.0, 1.0), (False, False, False))
    assert found.late_deps == ((0, 2),)
    assert found.oversubscribed == {"tc"}
    # Back to back, half-open intervals: no conflict; cores handed out.
    fine = replay(problem, (0.0, 2.0, 4.0), (False, False, False))
    assert (fine.late_deps, fine.oversubscribed, fine.makespan_s) == ((), frozenset(), 5.0)
    assert fine.cores == ((("tc", 0),), (("tc", 0),), (("tc", 0),))


def test_gantt_chart_is_a_png(tmp_path: Path) -> None:
    ops = (op("f", FUSED, 3.0), op("v", VC, 2.0), op("t", TC, 2.0, 1.0), op("ar", COLL, 1.0))
    problem = ScheduleProblem(ops, ((0, 3),), num_tc=2, num_vc=1)
    found = schedule(problem, SolverConfig(backend="highs"))
    path = plot_schedule(problem, found, tmp_path / "gantt.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_highs_answers_with_its_optimum_not_the_start_it_was_offered() -> None:
    # A BERT-large block's forward graph on a 1-TC, 64-VC design (latencies in ms, from the bench):
    # HiGHS 1.16 proves the optimum here but hands back the list schedule it was started from; the
    # schedule must be the optimum all the same (it is solved again without the start).
    rows = [
        ("fused", 32.0, 32.0), ("fused", 32.0, 32.0), ("fused", 32.0, 32.0), ("vc", 1.429e-05, 1.429e-05),
        ("vc", 0.1248, 0.00195), ("vc", 1.429e-05, 1.429e-05), ("vc", 0.1248, 0.00195),
        ("vc", 0.06242, 0.0009752), ("fused", 15.98, 15.98), ("vc", 9.986, 0.156), ("vc", 0.9986, 0.0156),
        ("vc", 0.9986, 0.01748), ("vc", 1.997, 0.03121), ("tc", 15.98, 15.98), ("fused", 32.0, 32.0),
        ("vc", 0.2497, 0.003901), ("vc", 0.1248, 0.002621), ("vc", 0.1248, 0.00195), ("tc", 128.0, 128.0),
        ("vc", 0.4993, 0.007802), ("vc", 0.4993, 0.007802), ("fused", 128.1, 128.1),
        ("vc", 0.2497, 0.003901), ("vc", 0.1248, 0.002621), ("vc", 0.1248, 0.00195),
    ]  # fmt: skip
    deps = (
        (0, 3), (0, 4), (0, 5), (1, 6), (2, 13), (3, 4), (4, 8), (5, 6), (6, 8), (7, 8), (8, 9), (9, 10),
        (9, 11), (10, 11), (11, 12), (12, 13), (13, 14), (14, 15), (15, 16), (16, 17), (17, 18), (17, 23),
        (18, 19), (19, 20), (20, 21), (21, 22), (22, 23), (23, 24),
    )  # fmt: skip
    ops = tuple(op(f"op{i}", OpKind(kind), a * 1e-3, b * 1e-3) for i, (kind, a, b) in enumerate(rows))
    problem = ScheduleProblem(ops, deps, num_tc=1, num_vc=64)
    highs = schedule(problem, SolverConfig(backend="highs", search_node_limit=0, mip_gap=1e-9))
    gurobi = schedule(problem, SolverConfig(backend="gurobi", search_node_limit=0, mip_gap=1e-9))
    assert highs.optimal and gurobi.optimal
    assert highs.makespan_s == pytest.approx(gurobi.makespan_s, rel=1e-9)
    assert highs.makespan_s < 0.41614  # the list schedule it was started from
