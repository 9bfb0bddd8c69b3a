"""Replay a schedule as events: makespan, precedence, core usage and a concrete core per op.

The replay trusts nothing from the solver: it takes start times and spread flags, sweeps the
start and end events in time order (ends first at equal times, since intervals are half-open) and
counts how many cores of each resource, and how much of the HBM bandwidth, are held at once. Where
no core resource is over-subscribed it also hands out concrete cores (lowest free first), which
always succeeds for interval schedules.
"""

import heapq
from dataclasses import dataclass

from phazec.solvers.schedule.problem import HBM, HBM_UNITS, ScheduleProblem


@dataclass(frozen=True)
class Replay:
    """What the event simulation of a schedule found."""

    makespan_s: float
    late_deps: tuple[tuple[int, int], ...]
    """Dependencies (i, j) where op j starts before op i ends."""
    oversubscribed: frozenset[str]
    """Resources that more ops held at some instant than it has cores; `hbm` when the ops running at
    some instant held more than the whole HBM bandwidth."""
    cores: tuple[tuple[tuple[str, int], ...], ...]
    """Per op, the (resource, core) it holds; empty for spread or zero-duration ops, which hold
    all cores or none. Meaningful only when nothing is over-subscribed."""


def replay(problem: ScheduleProblem, start_s: tuple[float, ...], spread: tuple[bool, ...]) -> Replay:
    """Simulate the schedule given by per-op start times and spread flags."""
    n = len(problem.ops)
    duration = [problem.duration_s(i, spread[i]) for i in range(n)]
    end = [start_s[i] + duration[i] for i in range(n)]
    late = tuple(sorted((a, b) for a, b in set(problem.deps) if start_s[b] < end[a]))
    resources = ("tc", "vc", "net")
    held = dict.fromkeys(resources, 0)
    free: dict[str, list[int]] = {r: list(range(problem.capacity(r))) for r in resources}
    cores: list[tuple[tuple[str, int], ...]] = [()] * n
    over: set[str] = set()
    hbm_held = 0
    events = sorted(
        [(end[i], 0, i) for i in range(n) if duration[i] > 0]
        + [(start_s[i], 1, i) for i in range(n) if duration[i] > 0]
    )
    for _, is_start, i in events:
        hbm_held += (1 if is_start else -1) * problem.hbm_units(i, spread[i])
        if hbm_held > HBM_UNITS:
            over.add(HBM)
        for r in problem.resources(i):
            cap = problem.capacity(r)
            held[r] += (1 if is_start else -1) * (cap if spread[i] else 1)
            if held[r] > cap:
                over.add(r)
            if r in over:
                continue  # cores are meaningless from here on
            if is_start and spread[i]:
                free[r] = []
            elif is_start:
                cores[i] = (*cores[i], (r, heapq.heappop(free[r])))
            elif spread[i]:
                free[r] = list(range(cap))
            else:
                heapq.heappush(free[r], dict(cores[i])[r])
    return Replay(
        makespan_s=max(end, default=0.0),
        late_deps=late,
        oversubscribed=frozenset(over),
        cores=tuple(cores),
    )
