"""The ILP's and the exact search's makespans equal a brute-force optimum on random small DAGs and
core counts (and, with HBM traffic, the shared bandwidth); the C++ list-schedule run equals its Python
statement."""

import math
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from phazec.solvers.schedule import model as schedule_model
from phazec.solvers.schedule.exact import search
from phazec.solvers.schedule.heuristic import greedy_run
from phazec.solvers.schedule.model import bounds
from phazec.solvers.schedule.problem import OpKind, ScheduleOp, ScheduleProblem
from phazec.solvers.schedule.solve import Schedule, optimize, schedule
from phazec.solvers.schema import SolverConfig
from tests.examples import examples
from tests.solvers.schedule.list_schedule_reference import greedy

KIND_RESOURCES = {"tc": ("tc",), "vc": ("vc",), "fused": ("tc", "vc"), "collective": ("net",)}
HBM_SHARES = 1 << 20
"""The bandwidth in shares; an op holds ceil(traffic / duration * shares) (schedule_problem)."""


def hbm_shares(op: ScheduleOp, duration_s: float) -> int:
    """The HBM shares an op holds for `duration_s`, restated from the problem's definition."""
    return 0 if op.hbm_s == 0 else min(HBM_SHARES, math.ceil(op.hbm_s / duration_s * HBM_SHARES))


def resources_of(problem: ScheduleProblem, i: int) -> tuple[str, ...]:
    """The resources op i holds, restated from the problem's definition (not the product's code)."""
    kind = problem.ops[i].kind.value
    if kind == "collective" and problem.collectives_as_vector:
        return ("vc",)
    return KIND_RESOURCES[kind]


def brute_force_makespan(problem: ScheduleProblem) -> float:
    """The least makespan over all schedules, by enumerating serial schedule-generation runs.

    Latencies must be positive. A run takes a precedence-feasible order of the ops and a spread
    choice per op, and places the ops in that order, each at the earliest time when its
    predecessors have finished and its resources are free over its whole duration, given the ops
    already placed (the serial SGS). Runs are enumerated depth first, keeping only those whose
    placements come out sorted by (start, index). The least makespan found is the optimum:

    1. SGS never loses. Let S be any feasible schedule, list its ops by (start, index) (positive
       durations make this precedence-feasible) and keep S's spread choices. By induction each op k
       gets a start <= S_k: the ops placed before it start no later than in S and, being earlier in
       the list, no later than S_k; so from S_k on, each occupies a subset of what it occupies in
       S, the interval [S_k, S_k + p_k) is free enough because it was in S, and its predecessors
       end no later than in S. So S_k is feasible when op k is placed and SGS picks a time <= S_k.
    2. Sorted runs suffice. Start from an optimal S and repeat step 1 on its output. Starts never
       grow, and they are sums of integer latencies, so this stops at a schedule S' that SGS
       reproduces from the list sorted by S' itself: a sorted run whose makespan is optimal.
    3. The earliest feasible time is the ready time or the end of a placed op: usage changes only
       at starts and ends, and moving a feasible start left past no end keeps it feasible.
    Branches are cut when a lower bound on every sorted completion reaches the best complete
    makespan: the partial makespan, and per resource the core-time still needed after the last
    start (unplaced ops start no earlier than it in a sorted run) divided by the core count.
    """
    n = len(problem.ops)
    cap = {"tc": problem.num_tc, "vc": problem.num_vc, "net": 1, "hbm": HBM_SHARES}
    preds = [{a for a, b in problem.deps if b == i} for i in range(n)]
    best = math.inf
    # placed: (start, end, {resource: cores held})
    placed: list[tuple[float, float, dict[str, int]]] = [(0.0, 0.0, {})] * n

    def fits(start: float, end: float, demand: dict[str, int], done: list[int]) -> bool:
        checkpoints = {start} | {placed[k][0] for k in done if start < placed[k][0] < end}
        for x in checkpoints:
            for r, need in demand.items():
                used = sum(placed[k][2].get(r, 0) for k in done if placed[k][0] <= x < placed[k][1])
                if used + need > cap[r]:
                    return False
        return True

    def least_work(i: int) -> dict[str, float]:
        """Core-time op i needs per resource in its cheaper mode."""
        op, held = problem.ops[i], resources_of(problem, i)
        if held == ("net",):
            return {"net": op.latency_s}
        hbm = min(
            hbm_shares(op, op.latency_s) * op.latency_s, hbm_shares(op, op.latency_io_s) * op.latency_io_s
        )
        return {r: min(op.latency_s, cap[r] * op.latency_io_s) for r in held} | {"hbm": hbm}

    def lower_bound(done: list[int], makespan: float, last_start: float) -> float:
        """Every unplaced op starts at or after last_start, so the core-time still needed after it
        (theirs, and what placed ops hold after it) must fit in [last_start, makespan)."""
        bound = makespan
        for r, cores in cap.items():
            work = sum(least_work(i).get(r, 0.0) for i in range(n) if i not in done)
            work += sum(placed[k][2].get(r, 0) * max(0.0, placed[k][1] - last_start) for k in done)
            if work:
                bound = max(bound, last_start + work / cores)
        return bound

    def extend(done: list[int], makespan: float, last: tuple[float, int]) -> None:
        nonlocal best
        if lower_bound(done, makespan, max(last[0], 0.0)) >= best:
            return
        if len(done) == n:
            best = makespan
            return
        for i in range(n):
            if i in done or not preds[i] <= set(done):
                continue
            op = problem.ops[i]
            on_network = resources_of(problem, i) == ("net",)
            for spread in (False,) if on_network else (False, True):
                duration = op.latency_io_s if spread else op.latency_s
                demand = {r: cap[r] if spread else 1 for r in resources_of(problem, i)}
                demand["hbm"] = hbm_shares(op, duration)
                ready = max((placed[k][1] for k in preds[i]), default=0.0)
                candidates = sorted({ready} | {placed[k][1] for k in done if placed[k][1] > ready})
                start = next(t for t in candidates if fits(t, t + duration, demand, done))
                if (start, i) < last:
                    continue
                placed[i] = (start, start + duration, demand)
                extend([*done, i], max(makespan, start + duration), (start, i))

    extend([], 0.0, (-1.0, -1))
    return best


def assert_valid(problem: ScheduleProblem, found: Schedule) -> None:
    """Check a schedule from first principles: durations, precedence, and core and HBM usage at every
    start."""
    n = len(problem.ops)
    for i, op in enumerate(problem.ops):
        assert found.duration_s[i] == (op.latency_io_s if found.spread[i] else op.latency_s)
    end = [found.start_s[i] + found.duration_s[i] for i in range(n)]
    assert all(found.start_s[b] >= end[a] for a, b in problem.deps)
    assert found.makespan_s == max(end, default=0.0)
    cap = {"tc": problem.num_tc, "vc": problem.num_vc, "net": 1}
    for x in found.start_s:
        for r, c in cap.items():
            used = sum(
                (c if found.spread[i] else 1)
                for i in range(n)
                if r in resources_of(problem, i) and found.start_s[i] <= x < end[i]
            )
            assert used <= c
        shares = sum(
            hbm_shares(problem.ops[i], found.duration_s[i])
            for i in range(n)
            if found.start_s[i] <= x < end[i]
        )
        assert shares <= HBM_SHARES


@st.composite
def problems(draw: st.DrawFn, max_ops: int = 7, hbm: bool = False) -> ScheduleProblem:
    """Random problems; with `hbm`, each on-chip op moves 0, 1/4 .. all of its shorter latency's worth
    of HBM traffic."""
    n = draw(st.integers(1, max_ops))
    kinds = draw(st.lists(st.sampled_from(list(OpKind)), min_size=n, max_size=n))
    ops = []
    for i, kind in enumerate(kinds):
        latency_s, latency_io_s = (float(draw(st.integers(1, 6))) for _ in range(2))
        share = (
            draw(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])) if hbm and kind is not OpKind.COLLECTIVE else 0
        )
        ops.append(ScheduleOp(f"op{i}", kind, latency_s, latency_io_s, share * min(latency_s, latency_io_s)))
    density = draw(st.sampled_from([0.0, 0.2, 0.4]))
    edges = draw(st.lists(st.floats(0, 1), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    deps = tuple(p for p, u in zip(pairs, edges, strict=True) if u < density)
    return ScheduleProblem(
        tuple(ops),
        deps,
        num_tc=draw(st.integers(1, 3)),
        num_vc=draw(st.integers(1, 3)),
        collectives_as_vector=draw(st.booleans()),
    )


@settings(max_examples=examples(300), deadline=None)
@given(problems())
def test_ilp_matches_brute_force(problem: ScheduleProblem) -> None:
    found = optimize(problem, SolverConfig(backend="highs", search_node_limit=0, node_limit=10**5))
    assert_valid(problem, found)
    assert found.optimal
    # Integer latencies: the extracted schedule's times are exact sums of integers.
    assert found.makespan_s == brute_force_makespan(problem)


@settings(max_examples=examples(150), deadline=None)
@given(problems())
def test_schedule_matches_brute_force(problem: ScheduleProblem) -> None:
    # The same through schedule(), which skips the ILP when the list schedule meets the lower bound.
    found = schedule(problem, SolverConfig(backend="highs"))
    assert_valid(problem, found)
    assert found.optimal
    assert found.bound_s <= found.makespan_s == brute_force_makespan(problem)


def searched(problem: ScheduleProblem) -> Schedule:
    """The exact search alone, from an upper bound above every schedule: it must find an optimum."""
    modes = [problem.modes(i) for i in range(len(problem.ops))]
    upper_s = 1.0 + sum(max(op.latency_s, op.latency_io_s) for op in problem.ops)
    out = search(problem, modes, bounds(problem, modes), upper_s, 0.0, rel_gap=1e-9, node_limit=10**6)
    assert out.complete and out.found is not None
    start_s, spread = out.found
    duration_s = tuple(problem.duration_s(i, s) for i, s in enumerate(spread))
    found = Schedule(
        makespan_s=max(s + d for s, d in zip(start_s, duration_s, strict=True)),
        bound_s=out.bound_s,
        status="optimal",
        start_s=start_s,
        duration_s=duration_s,
        spread=spread,
        cores=(),
        solves=(),
    )
    assert_valid(problem, found)
    assert found.bound_s <= found.makespan_s
    return found


@settings(max_examples=examples(300), deadline=None)
@given(problems())
def test_exact_search_matches_brute_force(problem: ScheduleProblem) -> None:
    assert searched(problem).makespan_s == brute_force_makespan(problem)


@settings(max_examples=examples(200), deadline=None)
@given(problems(hbm=True))
def test_with_shared_hbm_the_search_and_schedule_match_brute_force(problem: ScheduleProblem) -> None:
    # The ILP does not model the bandwidth: schedule() repairs its schedules and the exact search,
    # which does, proves the optimum.
    optimum = brute_force_makespan(problem)
    assert searched(problem).makespan_s == optimum
    found = schedule(problem, SolverConfig(backend="highs"))
    assert_valid(problem, found)
    assert found.optimal
    assert found.bound_s <= found.makespan_s == optimum
    # The ILP alone: its schedules repaired to the bandwidth, its bound still a bound (up to the
    # rounding of the solver's model units back to seconds).
    repaired = optimize(problem, SolverConfig(backend="highs", search_node_limit=0, node_limit=10**5))
    assert_valid(problem, repaired)
    assert repaired.bound_s <= optimum * (1 + 1e-12) and optimum <= repaired.makespan_s
    assert not repaired.optimal or repaired.makespan_s == optimum


@settings(max_examples=examples(100), deadline=None)
@given(problems(max_ops=12))
def test_exact_search_matches_the_ilp_on_larger_graphs(problem: ScheduleProblem) -> None:
    # Beyond brute force's reach: the search against the ILP alone, where Gurobi proves the optimum
    # within 10^4 nodes (the few instances whose big-M model needs more are not a reference).
    ilp = optimize(problem, SolverConfig(backend="gurobi", search_node_limit=0, node_limit=10**4))
    assume(ilp.optimal)
    assert searched(problem).makespan_s == pytest.approx(ilp.makespan_s, rel=2e-6)


@settings(max_examples=examples(100), deadline=None)
@given(problems())
def test_core_variables_match_brute_force(problem: ScheduleProblem) -> None:
    # The same with core-assignment variables instead of capacity rows for every resource.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedule_model, "CLIQUE_LIMIT", 0)
        found = optimize(problem, SolverConfig(backend="highs", search_node_limit=0, node_limit=10**5))
    assert_valid(problem, found)
    assert found.makespan_s == brute_force_makespan(problem)


@settings(max_examples=examples(100), deadline=None)
@given(problems())
def test_gurobi_and_highs_agree(problem: ScheduleProblem) -> None:
    # Random DAGs of up to 7 ops fit gurobipy's size-limited licence.
    gurobi = optimize(problem, SolverConfig(backend="gurobi", search_node_limit=0, node_limit=10**5))
    highs = optimize(problem, SolverConfig(backend="highs", search_node_limit=0, node_limit=10**5))
    assert gurobi.solves[-1].backend == "gurobi"
    assert gurobi.makespan_s == highs.makespan_s


@settings(max_examples=examples(300), deadline=None)
@given(problems(max_ops=12), st.data())
def test_list_schedule_run_matches_its_python_statement(
    problem: ScheduleProblem, data: st.DataObject
) -> None:
    n = len(problem.ops)
    scale = data.draw(st.sampled_from([1.0, 1e-4 / 3]))  # integer sums, and sums that round
    scaled = ScheduleProblem(
        tuple(
            replace(op, latency_s=op.latency_s * scale, latency_io_s=op.latency_io_s * scale)
            for op in problem.ops
        ),
        problem.deps,
        problem.num_tc,
        problem.num_vc,
        problem.collectives_as_vector,
    )
    priority = data.draw(st.lists(st.integers(0, 3).map(float), min_size=n, max_size=n))  # with ties
    for first_start in (False, True):
        assert greedy_run(scaled, priority, first_start) == greedy(scaled, priority, first_start)
