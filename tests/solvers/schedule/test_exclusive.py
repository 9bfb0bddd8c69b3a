"""The exclusive-op bound (`exclusive_bound_s`): by hand on graphs where ops must be spread, and never
above the brute-force optimum on random small graphs."""

from hypothesis import given, settings
from hypothesis import strategies as st

from phazec.solvers.schedule.exclusive import exclusive_bound_s
from phazec.solvers.schedule.model import bounds
from phazec.solvers.schedule.problem import OpKind, ScheduleOp, ScheduleProblem
from phazec.solvers.schedule.solve import schedule
from phazec.solvers.schema import SolverConfig
from tests.examples import examples
from tests.solvers.schedule.test_property import brute_force_makespan


def vector(name: str, single_s: float, spread_s: float) -> ScheduleOp:
    return ScheduleOp(name, OpKind.VC, single_s, spread_s)


def all_modes(problem: ScheduleProblem) -> list[tuple[bool, ...]]:
    return [problem.modes(i) for i in range(len(problem.ops))]


def test_spread_ops_count_whole_and_the_short_ops_beside_them_as_their_own_schedule() -> None:
    # Four vector cores. a and b take 100 on one core and 10 spread: within 22 they must be spread,
    # so nothing runs beside them (20). c and d take 3 on one core or 1 spread: in the 2 left they
    # must be spread too (2). Optimum 22 (a, b, c, d one after another, all spread).
    problem = ScheduleProblem(
        (vector("a", 100.0, 10.0), vector("b", 100.0, 10.0), vector("c", 3.0, 1.0), vector("d", 3.0, 1.0)),
        (),
        num_tc=1,
        num_vc=4,
    )
    modes = all_modes(problem)
    assert brute_force_makespan(problem) == 22.0
    # The core-time bound counts c and d at a quarter of their 3 (with a and b whole once the
    # horizon drops their single-core mode): 10 + 10 + 0.75 + 0.75.
    assert bounds(problem, [(True,), (True,), modes[2], modes[3]]).lower_s == 21.5
    assert exclusive_bound_s(problem, modes, 22.0, rel_gap=1e-4, node_limit=1000) == 22.0
    # A looser horizon keeps c's and d's single-core mode (3 fits in the 3.5 left): core-time alone
    # gives them 0.75 each, the exact search of c and d alone their least makespan, 2 (3 side by
    # side, or 1 + 1 spread).
    assert exclusive_bound_s(problem, modes, 23.5, rel_gap=1e-4, node_limit=0) == 21.5
    assert exclusive_bound_s(problem, modes, 23.5, rel_gap=1e-4, node_limit=1000) == 22.0
    found = schedule(problem, SolverConfig(backend="highs"))
    assert found.optimal and found.makespan_s == 22.0 == found.bound_s


def test_what_runs_between_spread_ops_is_searched_exactly() -> None:
    # Four vector cores. a (100 on one core, 10 spread) must be spread within 17. Beside it two
    # chains x1 -> x2 and y1 -> y2 (5 or 2, then 4 or 1.5): their least makespan alone is 7 (all
    # spread: 2 + 1.5 + 2 + 1.5; or x1 spread, then y1 on one core beside x2 on another: 2 + 5),
    # where the critical path (2 + 1.5) and core-time (1.25 + 1 + 1.25 + 1) give only 4.5.
    problem = ScheduleProblem(
        (
            vector("a", 100.0, 10.0),
            vector("x1", 5.0, 2.0),
            vector("x2", 4.0, 1.5),
            vector("y1", 5.0, 2.0),
            vector("y2", 4.0, 1.5),
        ),
        ((1, 2), (3, 4)),
        num_tc=1,
        num_vc=4,
    )
    modes = all_modes(problem)
    assert brute_force_makespan(problem) == 17.0
    assert exclusive_bound_s(problem, modes, 17.0, rel_gap=1e-4, node_limit=10_000) == 17.0
    # Without the exact search what is left is bounded by core-time alone: 10 + 4.5.
    assert exclusive_bound_s(problem, modes, 17.0, rel_gap=1e-4, node_limit=0) == 14.5


def test_no_op_that_must_hold_every_core_gives_the_plain_bound() -> None:
    # Two cores, ops short enough on one core that nothing must be spread: the plain bound (the path
    # a -> c spread, 1.5 + 1.5, and core-time, 1 each), no search; the optimum is 3.5 (a and b side
    # by side, then c spread).
    problem = ScheduleProblem(
        (vector("a", 2.0, 1.5), vector("b", 2.0, 1.5), vector("c", 2.0, 1.5)), ((0, 2),), num_tc=1, num_vc=2
    )
    modes = all_modes(problem)
    assert brute_force_makespan(problem) == 3.5
    plain = bounds(problem, modes).lower_s
    assert exclusive_bound_s(problem, modes, 4.0, rel_gap=1e-4, node_limit=10_000) == plain == 3.0


@st.composite
def spread_problems(draw: st.DrawFn) -> ScheduleProblem:
    """Random small graphs of mostly vector ops, some far slower on one core than spread (as the
    mask-building ops of a decoder's first layer), on 2 to 4 vector cores."""
    n = draw(st.integers(1, 7))
    ops = []
    for i in range(n):
        kind = draw(st.sampled_from([OpKind.VC, OpKind.VC, OpKind.VC, OpKind.TC, OpKind.FUSED]))
        single_s = float(draw(st.integers(1, 24)))
        spread_s = float(draw(st.integers(1, 6)))
        ops.append(ScheduleOp(f"op{i}", kind, single_s, spread_s))
    density = draw(st.sampled_from([0.0, 0.2, 0.4]))
    edges = draw(st.lists(st.floats(0, 1), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    deps = tuple(p for p, u in zip(pairs, edges, strict=True) if u < density)
    return ScheduleProblem(tuple(ops), deps, num_tc=draw(st.integers(1, 3)), num_vc=draw(st.integers(2, 4)))


@settings(max_examples=examples(200), deadline=None)
@given(spread_problems(), st.sampled_from([0.0, 1.0, 5.0]), st.sampled_from([1e-4, 0.5]))
def test_never_above_the_optimum(problem: ScheduleProblem, slack_s: float, rel_gap: float) -> None:
    # For every horizon at or above the optimum, with and without tiny ops dropped from the search
    # (a gap of 0.5 counts ops up to 1/16 of the horizon as taking no time).
    optimum = brute_force_makespan(problem)
    modes = all_modes(problem)
    assert bounds(problem, modes).lower_s <= optimum
    got = exclusive_bound_s(problem, modes, optimum + slack_s, rel_gap=rel_gap, node_limit=10_000)
    assert got <= optimum * (1 + 1e-12)
