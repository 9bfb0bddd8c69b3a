"""The exact schedule search (C++ branch and bound, `ext/src/schedule_search.cpp`): it closes the gaps
the ILP leaves open once core capacity binds.

The search builds schedules op by op in order of start time, each op at the earliest time its
inputs are done and its cores and HBM share free, and prunes with heads, tails and per-resource
core-time (HBM-time for the bandwidth); it
proves optimality where the ILP's big-M relaxation stays weak. It looks only for schedules shorter
than a known feasible one, over the modes that can fit in it (`modelled_modes`).
"""

from dataclasses import dataclass

from phazec.solvers import core
from phazec.solvers.schedule.model import Bounds
from phazec.solvers.schedule.problem import HBM, HBM_UNITS, NET, TC, VC, ScheduleProblem

RESOURCES = (TC, VC, NET, HBM)
"""The order of resources the extension expects."""


@dataclass(frozen=True)
class SearchOutcome:
    """What the search proved, and the shorter schedule it found, if any."""

    complete: bool
    """The search finished within its node limit: the best schedule is optimal within the gap."""
    bound_s: float
    """A proven lower bound on every schedule's makespan."""
    found: tuple[tuple[float, ...], tuple[bool, ...]] | None
    """Start times and spread flags of a schedule shorter than the upper bound; None if none."""
    nodes: int


def search(
    problem: ScheduleProblem,
    modes: list[tuple[bool, ...]],
    bnd: Bounds,
    upper_s: float,
    lower_s: float,
    *,
    rel_gap: float,
    node_limit: int,
) -> SearchOutcome:
    """Search the schedules of `problem` shorter than `upper_s` (op i in one of `modes[i]`, tails
    from `bnd`), stopping at one within `rel_gap` of `lower_s` or after `node_limit` nodes."""
    result = core.search_schedule(
        modes=extension_modes(problem, modes),
        preds=predecessors(problem),
        capacity=capacities(problem),
        tail_s=list(bnd.tail_s),
        upper_s=upper_s,
        lower_s=lower_s,
        rel_gap=rel_gap,
        node_limit=node_limit,
    )
    found = None
    if result.improved:
        found = tuple(result.start_s), tuple(modes[i][m] for i, m in enumerate(result.mode))
    return SearchOutcome(result.complete, result.bound_s, found, result.nodes)


def extension_modes(
    problem: ScheduleProblem, modes: list[tuple[bool, ...]]
) -> list[list[tuple[float, tuple[int, int, int, int]]]]:
    """Per op, (duration, units of each resource held) of each mode in `modes[i]`: the extension's form."""
    return [[(problem.duration_s(i, m), _units(problem, i, m)) for m in modes[i]] for i in range(len(modes))]


def predecessors(problem: ScheduleProblem) -> list[list[int]]:
    """Per op, the ops that must finish before it starts, ascending."""
    preds: list[list[int]] = [[] for _ in problem.ops]
    for a, c in sorted(set(problem.deps)):
        preds[c].append(a)
    return preds


def capacities(problem: ScheduleProblem) -> tuple[int, int, int, int]:
    """Cores (or network slots) of each resource and the HBM's units, in the extension's order."""
    tc, vc, net = (problem.capacity(r) for r in (TC, VC, NET))
    return tc, vc, net, HBM_UNITS


def _units(problem: ScheduleProblem, i: int, spread: bool) -> tuple[int, int, int, int]:
    """Units of each resource op i holds in a mode: one core, all cores when spread, none when it
    takes no time; and its share of the HBM (`ScheduleProblem.hbm_units`)."""
    held = problem.resources(i) if problem.duration_s(i, spread) > 0 else ()
    tc, vc, net = ((problem.capacity(r) if spread else 1) if r in held else 0 for r in (TC, VC, NET))
    return tc, vc, net, problem.hbm_units(i, spread)
