"""Exact phases: the schedule of a graph whose every op needs one resource, with the ops that must hold
all of it as barriers (issue 45).

When every op that takes time needs resource r, an op that holds every core of r runs alone. A
schedule is then a sequence of those ops' intervals (W, the whole ops) and, between them, phases in
which the other ops run, none of them spanning a whole op. Cutting the whole ops' intervals out
leaves a schedule of the other ops in which each whole op is an instant that no op spans (a barrier:
an op of no duration that holds every core of r), with its orders kept; and inserting the whole
ops' intervals at those instants turns any such schedule back into a schedule of the graph. So

    least makespan = sum over W of its fastest latency + least makespan of the barrier problem,

exactly, where the bound of `exclusive` drops the barriers (a relaxation). Within the incumbent's
makespan fewer modes fit what is left, so more ops must hold every core: they join W until none
does. The barrier problem is searched (`exact.search`, whose serial generation starts a barrier at
the first instant no placed op spans) with the ops of least latency, up to a share of the gap
tolerance in all, taking no time (a relaxation: its bound stays a bound); a schedule it finds is
expanded, the whole ops at their instants and the dropped ops in its order, by list scheduling in that
order, replayed, and kept where it is shorter than `best`. List scheduling is not monotone, so an
expansion can come out longer than the searched schedule plus the whole and dropped latencies; the
bound holds all the same, and the schedule is then not proven here (the ILP runs as before).

Where no op must hold all of the resource there are no barriers, but the dropped ops still count:
the search of the graph without them (a relaxation too) proves what the plain search does not where
nanosecond ops multiply its orders (the same graph on 2 vector cores, issue 45).

The first layer of a causal decoder (its mask and rotary tables, on one core type: long ops that
must be spread over every vector core beside dozens of nanosecond ones) is where this matters.
"""

from __future__ import annotations

import dataclasses

from phazec.ir.graph import topological_order
from phazec.solvers import core
from phazec.solvers.schedule.exact import RESOURCES, capacities, extension_modes, predecessors
from phazec.solvers.schedule.exclusive import fit, holds_all
from phazec.solvers.schedule.heuristic import greedy_run
from phazec.solvers.schedule.model import Incumbent, bounds
from phazec.solvers.schedule.problem import NET, TC, VC, ScheduleProblem
from phazec.solvers.schedule.replay import replay

DROPPED_GAP_SHARE = 0.7
"""The ops of least latency take no time in the searched barrier problem while their latencies sum to
at most this share of the gap tolerance (times the best lower bound); the rest of it is the search's."""


@dataclasses.dataclass(frozen=True)
class Phased:
    """What the barrier problem gave: a schedule no longer than the one it started from, and a bound."""

    best: Incumbent
    lower_s: float
    nodes: int
    complete: bool


def phase_schedule(
    problem: ScheduleProblem,
    modes: list[tuple[bool, ...]],
    best: Incumbent,
    lower_s: float,
    *,
    rel_gap: float,
    node_limit: int,
) -> Phased | None:
    """The barrier problem's schedule and bound for schedules no longer than `best` (op i in one of
    `modes[i]`), or None where no resource is needed by every op that takes time, or where no op must
    hold all of it and none is short enough to drop (module docstring); `node_limit` search nodes."""
    resource = _shared_resource(problem, modes)
    if resource is None:
        return None
    horizon_s = best.makespan_s
    fitted = fit(problem, modes, horizon_s)
    if fitted is None:
        return Phased(best, horizon_s, 0, True)  # nothing shorter fits
    n = len(problem.ops)
    whole_s: dict[int, float] = {}
    while True:
        whole = [
            i
            for i in range(n)
            if i not in whole_s and all(holds_all(problem, i, m, resource) for m in fitted[i])
        ]
        if not whole:
            break
        whole_s |= {i: min(problem.duration_s(i, m) for m in fitted[i]) for i in whole}
        rest = _without(problem, set(whole_s))
        rest_modes = [(True,) if i in whole_s else fitted[i] for i in range(n)]
        refit = fit(rest, rest_modes, horizon_s - sum(whole_s.values()))
        if refit is None:
            return Phased(best, horizon_s, 0, True)
        fitted = [fitted[i] if i in whole_s else refit[i] for i in range(n)]
    barrier_s = sum(whole_s.values())
    fastest = [min(problem.duration_s(i, m) for m in fitted[i]) for i in range(n)]
    dropped = _least(fastest, set(whole_s), DROPPED_GAP_SHARE * rel_gap * lower_s)
    if not whole_s and not dropped:
        return None
    dropped_s = sum(fastest[i] for i in dropped)
    relaxed = _without(problem, set(whole_s) | dropped)
    relaxed_modes = [(True,) if i in whole_s or i in dropped else fitted[i] for i in range(n)]
    units = extension_modes(relaxed, relaxed_modes)
    barrier = [0, 0, 0, 0]
    barrier[RESOURCES.index(resource)] = problem.capacity(resource)
    for i in whole_s:
        units[i] = [(0.0, (barrier[0], barrier[1], barrier[2], barrier[3]))]
    room_s = horizon_s - barrier_s
    out = core.search_schedule(
        modes=units,
        preds=predecessors(problem),
        capacity=capacities(problem),
        tail_s=list(bounds(relaxed, relaxed_modes).tail_s),
        upper_s=room_s,
        lower_s=max(0.0, lower_s - barrier_s),
        rel_gap=max(0.0, rel_gap * lower_s - dropped_s) / room_s if room_s > 0 else 0.0,
        node_limit=node_limit,
    )
    if out.improved:
        chosen = [
            (relaxed_modes[i][out.mode[i]],)
            if i not in whole_s and i not in dropped
            else tuple(m for m in fitted[i] if problem.duration_s(i, m) == fastest[i])[:1]
            for i in range(n)
        ]
        expanded = _expand(problem, list(out.start_s), [units[i][out.mode[i]][0] for i in range(n)], chosen)
        if expanded.makespan_s < best.makespan_s:
            best = expanded
    if out.complete:
        lower_s = max(lower_s, barrier_s + out.bound_s)
    return Phased(best, lower_s, out.nodes, out.complete)


def _shared_resource(problem: ScheduleProblem, modes: list[tuple[bool, ...]]) -> str | None:
    """The resource every op that takes time in some mode needs, if one is."""
    timed = [i for i in range(len(problem.ops)) if any(problem.duration_s(i, m) > 0 for m in modes[i])]
    return next((r for r in (VC, TC, NET) if all(r in problem.resources(i) for i in timed)), None)


def _without(problem: ScheduleProblem, gone: set[int]) -> ScheduleProblem:
    """`problem` with the ops `gone` taking no time (and so holding nothing), every order kept."""
    ops = tuple(
        dataclasses.replace(op, latency_s=0.0, latency_io_s=0.0, hbm_s=0.0) if i in gone else op
        for i, op in enumerate(problem.ops)
    )
    return dataclasses.replace(problem, ops=ops)


def _least(fastest_s: list[float], skip: set[int], budget_s: float) -> set[int]:
    """The ops (not in `skip`) of least positive latency whose latencies sum to at most `budget_s`."""
    chosen: set[int] = set()
    total_s = 0.0
    timed = [i for i in range(len(fastest_s)) if i not in skip and fastest_s[i] > 0]
    for i in sorted(timed, key=lambda i: (fastest_s[i], i)):
        if total_s + fastest_s[i] > budget_s:
            break
        total_s += fastest_s[i]
        chosen.add(i)
    return chosen


def _expand(
    problem: ScheduleProblem, start_s: list[float], duration_s: list[float], modes: list[tuple[bool, ...]]
) -> Incumbent:
    """The graph's schedule that takes the ops in the order of the barrier problem's schedule
    (`start_s`; at one instant, ops of no duration, barriers among them, in topological order before
    ops that take time), each in its mode of `modes`, by list scheduling in that order."""
    n = len(problem.ops)
    topo = {op: k for k, op in enumerate(topological_order(n, problem.deps))}
    order = sorted(range(n), key=lambda i: (start_s[i], duration_s[i] > 0, topo[i]))
    priority = [0.0] * n
    for k, i in enumerate(order):
        priority[i] = float(n - k)
    start, spread = greedy_run(problem, priority, False, modes)
    replayed = replay(problem, start, spread)
    if replayed.late_deps or replayed.oversubscribed:
        raise AssertionError(f"expanded barrier schedule infeasible: {replayed}")
    return Incumbent(start_s=start, spread=spread, cores=replayed.cores, makespan_s=replayed.makespan_s)
