"""A fast feasible schedule (list scheduling) that bounds the ILP's horizon and warm-starts it.

Serial schedule generation: ops are taken one at a time in priority order and placed at the
earliest time its predecessors have finished and its resources are free for its whole duration,
in whichever mode finishes first. The result is feasible by construction; its makespan is the
ILP's horizon, so big-M constants and time windows are tight.
"""

import random

from phazec.solvers.schedule_problem import ScheduleProblem, topological_order

RANDOM_RUNS = 8
"""Extra runs with randomly perturbed priorities (fixed seeds) while the best is above the bound."""


def list_schedule(problem: ScheduleProblem, lower_s: float) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """Start times (s) and spread flags of a feasible schedule: the shortest of several greedy runs.

    Each run takes the ready ops one at a time: either the op with the highest priority, or the op
    that can start first (priority breaking ties), which fills idle cores with side branches such
    as weight gradients. The priority is the longest remaining path, then the same scaled by random
    factors in [0.8, 1.2] from fixed seeds; runs stop once one reaches `lower_s`, a lower bound.
    """
    n = len(problem.ops)
    succs: list[set[int]] = [set() for _ in range(n)]
    for a, b in problem.deps:
        succs[a].add(b)
    fastest = [min(problem.duration_s(i, m) for m in problem.modes(i)) for i in range(n)]
    remaining = [0.0] * n  # longest path from the op's start to the end, fastest modes
    for i in reversed(topological_order(n, problem.deps)):
        remaining[i] = fastest[i] + max((remaining[k] for k in succs[i]), default=0.0)
    best: tuple[float, tuple[tuple[float, ...], tuple[bool, ...]]] | None = None
    for run in range(RANDOM_RUNS + 1):
        rng = random.Random(run)
        priority = remaining if run == 0 else [r * rng.uniform(0.8, 1.2) for r in remaining]
        for first_start in (False, True):
            start, spread = _greedy(problem, priority, first_start)
            makespan = _makespan_s(problem, start, spread)
            if best is None or makespan < best[0]:
                best = (makespan, (start, spread))
        if best is not None and best[0] <= lower_s:
            break
    assert best is not None
    return best[1]


def list_schedule_in_order(
    problem: ScheduleProblem, start_s: tuple[float, ...]
) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """A feasible schedule that follows another one, e.g. a relaxed schedule that over-subscribes
    cores: ready ops are taken earliest `start_s` first (either greedy rule, the shorter wins)."""
    priority = [-s for s in start_s]
    runs = [_greedy(problem, priority, first_start) for first_start in (False, True)]
    return min(runs, key=lambda run: _makespan_s(problem, *run))


def _makespan_s(problem: ScheduleProblem, start: tuple[float, ...], spread: tuple[bool, ...]) -> float:
    return max((s + problem.duration_s(i, spread[i]) for i, s in enumerate(start)), default=0.0)


def _greedy(
    problem: ScheduleProblem, remaining: list[float], first_start: bool
) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """One serial schedule-generation run; each op in the mode that finishes first."""
    n = len(problem.ops)
    preds: list[set[int]] = [set() for _ in range(n)]
    for a, b in problem.deps:
        preds[b].add(a)
    start = [0.0] * n
    end = [0.0] * n
    spread = [False] * n
    held: dict[str, list[tuple[float, float, int]]] = {"tc": [], "vc": [], "net": []}
    placed: set[int] = set()

    def placement(i: int) -> tuple[float, float, bool]:
        ready = max((end[k] for k in preds[i]), default=0.0)
        options = []
        for mode in problem.modes(i):
            duration = problem.duration_s(i, mode)
            demand = {r: problem.capacity(r) if mode else 1 for r in problem.resources(i)}
            t = _earliest(problem, held, ready, duration, demand)
            options.append((t + duration, t, mode))
        best = min(options)
        return best[1], best[0], best[2]

    while len(placed) < n:
        ready_ops = [k for k in range(n) if k not in placed and preds[k] <= placed]
        if first_start:
            where = {k: placement(k) for k in ready_ops}
            i = min(ready_ops, key=lambda k: (where[k][0], -remaining[k], k))
        else:
            i = min(ready_ops, key=lambda k: (-remaining[k], k))
        start[i], end[i], spread[i] = placement(i)
        if end[i] > start[i]:
            for r in problem.resources(i):
                held[r].append((start[i], end[i], problem.capacity(r) if spread[i] else 1))
        placed.add(i)
    return tuple(start), tuple(spread)


def _earliest(
    problem: ScheduleProblem,
    held: dict[str, list[tuple[float, float, int]]],
    ready: float,
    duration: float,
    demand: dict[str, int],
) -> float:
    """The earliest t >= ready with `demand` free over [t, t + duration): it is `ready` or the end
    of a placed interval, since usage only changes at starts and ends."""
    ends = sorted({ready} | {e for r in demand for _, e, _ in held[r] if e > ready})
    for t in ends:
        if duration == 0 or all(
            _fits(held[r], t, t + duration, need, problem.capacity(r)) for r, need in demand.items()
        ):
            return t
    raise AssertionError("the last end always fits")


def _fits(intervals: list[tuple[float, float, int]], lo: float, hi: float, need: int, cap: int) -> bool:
    """Whether `need` more cores fit under `cap` everywhere in [lo, hi); usage peaks at lo or a start."""
    points = [lo] + [s for s, _, _ in intervals if lo < s < hi]
    return all(sum(d for s, e, d in intervals if s <= x < e) + need <= cap for x in points)
