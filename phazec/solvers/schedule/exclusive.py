"""A lower bound that counts the ops holding every core of a resource whole (issue 45).

While an op holds every core of a resource r (spread over all of them, or on r's single core), no
other op needing r runs. So when a set S of ops must hold every core of r in each mode they may run
in, the schedule's time splits into their intervals, which no two of them share, and the moments
some other op on r runs. Cutting S's intervals out of any schedule (and dropping the ops not on r)
leaves a schedule of the other ops on r, R, with every order between them kept (an order through
a dropped op still holds: cutting time out moves nothing earlier than what it waits for). So

    makespan >= sum over S of its fastest latency + the least makespan of R alone,

and R's makespan is bounded the same way in turn (within what the incumbent leaves it, more of its
ops must hold every core, or only fit spread). Where no op must hold every core, the least makespan
of what is left is bounded by `bounds` and, below the first level, by the exact search, on the
ops that take longer than a tiny fraction of the horizon (a shorter op counted as taking no time
only weakens the bound).

The first layer of a causal decoder (its mask and rotary tables: four long vector ops that must be
spread over every vector core beside dozens of short ones) is where this matters: the core-time
bound counts the short ops at 1/cores of their time, this one counts the long ones whole and what
runs between them as a schedule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from phazec.solvers.schedule.exact import search
from phazec.solvers.schedule.model import bounds
from phazec.solvers.schedule.problem import NET, TC, VC, ScheduleProblem, descendants

FIT_RTOL = 1e-9
"""A mode is dropped only when it misses the horizon by more than this fraction of it (float sums)."""

TINY_GAP_SHARE = 0.125
"""An op whose fastest latency is at most this share of the gap (times the horizon) takes no time in
the exact search of what is left: many such ops multiply the search's nodes, not its bound."""


COARSER = (0.05, 0.01)
"""What is left is searched first with the ops up to each of these shares of its horizon taking no
time, so a search that does not finish in its nodes still leaves a bound."""


@dataclass
class _Budget:
    """The exact-search nodes left to the whole bound."""

    nodes: int


def exclusive_bound_s(
    problem: ScheduleProblem,
    modes: list[tuple[bool, ...]],
    upper_s: float,
    *,
    rel_gap: float,
    node_limit: int,
) -> float:
    """A lower bound on the makespan of every schedule of `problem` (op i in one of `modes[i]`) no
    longer than `upper_s`, at most `upper_s` (module docstring); `node_limit` exact-search nodes in
    all, and ops shorter than `TINY_GAP_SHARE * rel_gap * upper_s` count as taking no time there."""
    budget = _Budget(node_limit)
    tiny_s = TINY_GAP_SHARE * rel_gap * upper_s
    return _bound(problem, modes, upper_s, tiny_s, budget, top=True)


def _bound(
    problem: ScheduleProblem,
    modes: list[tuple[bool, ...]],
    horizon_s: float,
    tiny_s: float,
    budget: _Budget,
    *,
    top: bool,
) -> float:
    fitted = fit(problem, modes, horizon_s)
    if fitted is None:
        return horizon_s  # nothing fits: no schedule of this part is shorter than the horizon
    best = bounds(problem, fitted).lower_s
    reach = descendants(problem)
    split = False
    for r in (TC, VC, NET):
        on_r = [i for i in range(len(problem.ops)) if r in problem.resources(i)]
        whole = [i for i in on_r if all(holds_all(problem, i, m, r) for m in fitted[i])]
        rest = [i for i in on_r if i not in whole]
        if not whole or not rest:
            continue
        split = True
        whole_s = sum(min(problem.duration_s(i, m) for m in fitted[i]) for i in whole)
        part = _part(problem, rest, reach)
        best = max(best, whole_s + _bound(part, [fitted[i] for i in rest], horizon_s - whole_s, tiny_s,
                                           budget, top=False))  # fmt: skip
    if not split and not top and best < horizon_s and budget.nodes > 0:
        best = max(best, _searched(problem, fitted, horizon_s, best, tiny_s=tiny_s, budget=budget))
    return min(best, horizon_s)


def fit(
    problem: ScheduleProblem, modes: list[tuple[bool, ...]], horizon_s: float
) -> list[tuple[bool, ...]] | None:
    """The modes whose head + latency + tail fits in the horizon, until none drops; None when an op
    has no mode left."""
    while True:
        bnd = bounds(problem, modes)
        limit_s = horizon_s * (1 + FIT_RTOL)
        kept = [
            tuple(m for m in modes[i] if bnd.head_s[i] + problem.duration_s(i, m) + bnd.tail_s[i] <= limit_s)
            for i in range(len(problem.ops))
        ]
        if not all(kept):
            return None
        if kept == modes:
            return modes
        modes = kept


def holds_all(problem: ScheduleProblem, i: int, spread: bool, resource: str) -> bool:
    """Whether op i in this mode holds every core of `resource` (an op that takes no time holds none)."""
    return problem.duration_s(i, spread) > 0 and (spread or problem.capacity(resource) == 1)


def _part(problem: ScheduleProblem, kept: list[int], reach: tuple[int, ...]) -> ScheduleProblem:
    """The ops `kept` alone, each order between two of them kept, through dropped ops too."""
    index = {op: k for k, op in enumerate(kept)}
    deps = tuple((index[a], index[c]) for a in kept for c in kept if (reach[a] >> c) & 1)
    return ScheduleProblem(
        ops=tuple(problem.ops[i] for i in kept),
        deps=deps,
        num_tc=problem.num_tc,
        num_vc=problem.num_vc,
        collectives_as_vector=problem.collectives_as_vector,
        collectives_hold_cores=problem.collectives_hold_cores,
    )


def _searched(
    problem: ScheduleProblem,
    modes: list[tuple[bool, ...]],
    horizon_s: float,
    lower_s: float,
    *,
    tiny_s: float,
    budget: _Budget,
) -> float:
    """The exact search's bound on `problem` within the horizon, its tiny ops taking no time: first
    with the ops up to each of the `COARSER` shares of the horizon taking none (a smaller search, a
    weaker bound, usually in few nodes), each search with its share of the nodes left."""
    fastest = [min(problem.duration_s(i, m) for m in modes[i]) for i in range(len(problem.ops))]
    reach = descendants(problem)
    thresholds_s = (*(share * horizon_s for share in COARSER), tiny_s)
    for k, below_s in enumerate(thresholds_s):
        kept = [i for i in range(len(problem.ops)) if fastest[i] > below_s]
        if not kept or budget.nodes <= 0:
            continue
        part = _part(problem, kept, reach)
        part_modes = [modes[i] for i in kept]
        out = search(part, part_modes, bounds(part, part_modes), horizon_s, lower_s, rel_gap=0.0,
                     node_limit=budget.nodes // (len(thresholds_s) - k))  # fmt: skip
        budget.nodes -= out.nodes
        if out.complete:
            lower_s = max(lower_s, out.bound_s)
    return lower_s
