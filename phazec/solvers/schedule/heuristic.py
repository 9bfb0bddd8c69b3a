"""A fast feasible schedule (list scheduling) that bounds the ILP's horizon and warm-starts it.

Serial schedule generation: ops are taken one at a time in priority order and placed at the
earliest time its predecessors have finished and its resources are free for its whole duration,
in whichever mode finishes first. The result is feasible by construction; its makespan is the
ILP's horizon, so big-M constants and time windows are tight. Each run is C++
(`ext/src/list_schedule.cpp`, beside the exact search); this module picks the priorities.
"""

import random

from phazec.ir.graph import topological_order
from phazec.solvers import core
from phazec.solvers.schedule.exact import capacities, extension_modes, predecessors
from phazec.solvers.schedule.problem import ScheduleProblem

RANDOM_RUNS = 32
"""Extra runs with randomly perturbed priorities and pinned modes (fixed seeds) while the best is
above the bound."""


def list_schedule(problem: ScheduleProblem, lower_s: float) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """Start times (s) and spread flags of a feasible schedule: the shortest of several greedy runs.

    Each run takes the ready ops one at a time: either the op with the highest priority, or the op
    that can start first (priority breaking ties), which fills idle cores with side branches such
    as weight gradients. The priority is the longest remaining path, then the same scaled by random
    factors in [0.8, 1.2] from fixed seeds, each with some ops pinned to a random mode (`_pin`); runs
    stop once one reaches `lower_s`, a lower bound.
    """
    n = len(problem.ops)
    succs: list[set[int]] = [set() for _ in range(n)]
    for a, b in problem.deps:
        succs[a].add(b)
    fastest = [min(problem.duration_s(i, m) for m in problem.modes(i)) for i in range(n)]
    remaining = [0.0] * n  # longest path from the op's start to the end, fastest modes
    for i in reversed(topological_order(n, problem.deps)):
        remaining[i] = fastest[i] + max((remaining[k] for k in succs[i]), default=0.0)
    modes = [problem.modes(i) for i in range(n)]
    best: tuple[float, tuple[tuple[float, ...], tuple[bool, ...]]] | None = None
    for run in range(RANDOM_RUNS + 1):
        rng = random.Random(run)
        priority = remaining if run == 0 else [r * rng.uniform(0.8, 1.2) for r in remaining]
        pinned = modes if run == 0 else [_pin(m, rng) for m in modes]
        for first_start in (False, True):
            start, spread = greedy_run(problem, priority, first_start, pinned)
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
    runs = [greedy_run(problem, priority, first_start) for first_start in (False, True)]
    return min(runs, key=lambda run: _makespan_s(problem, *run))


def _makespan_s(problem: ScheduleProblem, start: tuple[float, ...], spread: tuple[bool, ...]) -> float:
    return max((s + problem.duration_s(i, spread[i]) for i, s in enumerate(start)), default=0.0)


def _pin(modes: tuple[bool, ...], rng: random.Random) -> tuple[bool, ...]:
    """An op's modes, or half the time one of them drawn at random: the greedy rule takes the mode
    that finishes first, which on few cores can crowd out better schedules (spreading an op that
    could have run beside another)."""
    return (rng.choice(modes),) if len(modes) > 1 and rng.random() < 0.5 else modes


def greedy_run(
    problem: ScheduleProblem,
    remaining: list[float],
    first_start: bool,
    modes: list[tuple[bool, ...]] | None = None,
) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """One serial schedule-generation run (C++, `ext/src/list_schedule.cpp`): ready ops by priority
    `remaining` (or, with `first_start`, earliest possible start first), each at its earliest
    feasible start in whichever of its `modes` (default: all) finishes first."""
    modes = modes or [problem.modes(i) for i in range(len(problem.ops))]
    start, chosen = core.list_schedule(
        modes=extension_modes(problem, modes),
        preds=predecessors(problem),
        capacity=capacities(problem),
        priority=remaining,
        first_start=first_start,
    )
    return tuple(start), tuple(modes[i][m] for i, m in enumerate(chosen))
