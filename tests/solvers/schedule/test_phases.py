"""The barrier problem (`phases.phase_schedule`): exact where the exclusive-op bound is not, by hand, and
never above the brute-force optimum nor infeasible on random small single-resource graphs."""

from hypothesis import given, settings
from hypothesis import strategies as st

from phazec.solvers.schedule.exclusive import exclusive_bound_s
from phazec.solvers.schedule.heuristic import list_schedule
from phazec.solvers.schedule.model import Incumbent, bounds
from phazec.solvers.schedule.phases import phase_schedule
from phazec.solvers.schedule.problem import OpKind, ScheduleOp, ScheduleProblem
from phazec.solvers.schedule.replay import replay
from tests.examples import examples
from tests.solvers.schedule.test_exclusive import all_modes, vector
from tests.solvers.schedule.test_property import brute_force_makespan


def incumbent(problem: ScheduleProblem, start_s: tuple[float, ...], spread: tuple[bool, ...]) -> Incumbent:
    replayed = replay(problem, start_s, spread)
    assert not replayed.late_deps and not replayed.oversubscribed
    return Incumbent(start_s=start_s, spread=spread, cores=replayed.cores, makespan_s=replayed.makespan_s)


def test_an_op_beside_a_whole_op_lands_in_a_phase_of_its_own() -> None:
    # Two vector cores. p (1, one core only) -> w (100 on one core, 2 spread) -> q (1); r (3, one core
    # only) is free. Within 7, w must be spread: it holds both cores, so r cannot run beside it and
    # lies wholly before or after it: p and r, then w, then q: 3 + 2 + 1; or p, w, then q and r: 1 +
    # 2 + 3. Optimum 6. The exclusive-op bound drops w and schedules p, r and q as if r could span
    # it (r beside p, then q: 3): 2 + 3 = 5. The barrier problem keeps w as an instant nothing spans:
    # 4, so 2 + 4 = 6, exactly.
    problem = ScheduleProblem(
        (vector("p", 1.0, 1.0), vector("w", 100.0, 2.0), vector("q", 1.0, 1.0), vector("r", 3.0, 3.0)),
        ((0, 1), (1, 2)),
        num_tc=1,
        num_vc=2,
    )
    modes = all_modes(problem)
    assert brute_force_makespan(problem) == 6.0
    assert exclusive_bound_s(problem, modes, 7.0, rel_gap=1e-4, node_limit=10_000) == 5.0
    # A schedule of 7: p, w, r, then q after r.
    worse = incumbent(problem, (0.0, 1.0, 6.0, 3.0), (False, True, False, False))
    assert worse.makespan_s == 7.0
    phased = phase_schedule(problem, modes, worse, 5.0, rel_gap=1e-4, node_limit=10_000)
    assert phased is not None and phased.complete
    assert phased.best.makespan_s == 6.0 == phased.lower_s


def test_a_graph_with_an_op_on_another_resource_is_left_alone() -> None:
    # t runs on the tensor cores, beside the spread w: the phases are not exact, so none are built.
    problem = ScheduleProblem(
        (vector("w", 100.0, 2.0), ScheduleOp("t", OpKind.TC, 1.0, 1.0)), (), num_tc=1, num_vc=2
    )
    best = incumbent(problem, (0.0, 0.0), (True, False))
    assert phase_schedule(problem, all_modes(problem), best, 2.0, rel_gap=1e-4, node_limit=1000) is None


def test_without_whole_ops_the_shortest_ops_are_dropped_from_the_search() -> None:
    # Two vector cores, no op worth spreading: a (2), b (1) -> c (1), and four casts of 1e-5. The
    # cores end evenly only without the casts: optimum 2.00002 (two casts beside a, two after c).
    # Within the gap tolerance of 1e-4 x 2, the barrier problem has no whole op, but it drops the
    # casts (4e-5 <= 0.7 x 2e-4): its search proves 2, and expanding its schedule with the casts
    # gives one within the tolerance.
    cast = 1e-5
    problem = ScheduleProblem(
        (
            vector("a", 2.0, 2.0),
            vector("b", 1.0, 1.0),
            vector("c", 1.0, 1.0),
            *(vector(f"cast{i}", cast, cast) for i in range(4)),
        ),
        ((1, 2),),
        num_tc=1,
        num_vc=2,
    )
    modes = all_modes(problem)
    assert all(m == (False,) for m in modes)
    optimum = brute_force_makespan(problem)
    assert abs(optimum - (2.0 + 2 * cast)) < 1e-12
    # a and the casts on one core, b and c on the other: 2.00004.
    worse = incumbent(problem, (0.0, 0.0, 1.0, 2.0, 2.0 + cast, 2.0 + 2 * cast, 2.0 + 3 * cast), (False,) * 7)
    phased = phase_schedule(problem, modes, worse, 2.0, rel_gap=1e-4, node_limit=10_000)
    assert phased is not None and phased.complete
    assert phased.lower_s == 2.0 <= optimum
    assert optimum <= phased.best.makespan_s <= 2.0 * (1 + 1e-4)


@st.composite
def vector_problems(draw: st.DrawFn) -> ScheduleProblem:
    """Random small graphs of vector ops, some far slower on one core than spread, on 1 to 4 cores."""
    n = draw(st.integers(1, 7))
    ops = tuple(
        vector(f"op{i}", float(draw(st.integers(1, 24))), float(draw(st.integers(1, 6)))) for i in range(n)
    )
    density = draw(st.sampled_from([0.0, 0.2, 0.4]))
    edges = draw(st.lists(st.floats(0, 1), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    deps = tuple(p for p, u in zip(pairs, edges, strict=True) if u < density)
    return ScheduleProblem(ops, deps, num_tc=1, num_vc=draw(st.integers(1, 4)))


@settings(max_examples=examples(200), deadline=None)
@given(vector_problems(), st.sampled_from([1e-4, 0.5]), st.booleans())
def test_never_above_the_optimum_and_always_feasible(
    problem: ScheduleProblem, rel_gap: float, bounded: bool
) -> None:
    # From the list schedule: the bound never passes the optimum, the schedule is a real one (the
    # replay inside checks it), and where the search finishes the schedule meets its bound. With
    # the combinatorial bound given (`bounded`) and the gap at 0.5, ops are dropped from the search.
    optimum = brute_force_makespan(problem)
    modes = all_modes(problem)
    lower_s = bounds(problem, modes).lower_s
    best = incumbent(problem, *list_schedule(problem, lower_s))
    given_s = lower_s if bounded else 0.0
    phased = phase_schedule(problem, modes, best, given_s, rel_gap=rel_gap, node_limit=10_000)
    if phased is None:
        return
    assert phased.lower_s <= optimum * (1 + 1e-12)
    assert optimum <= phased.best.makespan_s <= best.makespan_s
    if phased.complete and rel_gap < 0.5:  # ops dropped from the search can leave a gap of their own
        assert phased.best.makespan_s * (1 - 2 * rel_gap) <= phased.lower_s
