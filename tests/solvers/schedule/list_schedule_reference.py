"""The list scheduler's one greedy run in plain Python: the statement the C++ run
(`ext/src/list_schedule.cpp`) is checked against, start for start and mode for mode."""

from phazec.solvers.schedule.problem import ScheduleProblem


def greedy(
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
