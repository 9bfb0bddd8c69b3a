"""The optimal schedule of one layer's operator graph: problem -> build -> solve -> extract, replayed.

`schedule()` starts from a list schedule and returns it at once when it meets the combinatorial lower
bound. Otherwise `optimize()` solves the ILP, first without core capacity (cores of a resource are then
unlimited, except single-core resources and spread ops, which the model always orders). The replay of
that schedule shows which resources it over-subscribes; the model is rebuilt with capacity for
exactly those and solved again, until a replay finds none or the best feasible schedule meets the
relaxation's bound. The ILP never models the shared HBM bandwidth: a schedule of it that
over-subscribes HBM is repaired by list scheduling in its order, its bound stays a lower bound, and no
capacity is added (capacity rows would not keep the next ILP schedule within the bandwidth either);
the list schedules and the exact search respect the bandwidth. When the first solve leaves the
optimum unproven (core capacity binds, or the node limit stops it), the exact schedule search
(`schedule_search`) runs once before capacity is added: it usually proves the optimum, often with a
better schedule, and so saves the slower capacity solve. A graph of more ops than
`solver.ilp_max_ops` (a MoE block) skips the ILP: the exact search runs alone, with its node limit
scaled down by the square of the ratio (`search_nodes`).
Every solve is replayed and checked, and recorded in the result.
"""

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from phazec.errors import PhazecError
from phazec.solvers.schedule.backends import MipResult, check_config, solve
from phazec.solvers.schedule.exact import search
from phazec.solvers.schedule.exclusive import exclusive_bound_s
from phazec.solvers.schedule.heuristic import list_schedule, list_schedule_in_order
from phazec.solvers.schedule.model import Formulation, Incumbent, bounds, build, extract, modelled_modes
from phazec.solvers.schedule.phases import phase_schedule
from phazec.solvers.schedule.problem import HBM, ScheduleProblem, canonical_key
from phazec.solvers.schedule.replay import Replay, replay
from phazec.solvers.schema import SolverConfig
from phazec.util import sealed

logger = logging.getLogger(__name__)

SEARCH = "search"
"""The `backend` of a SolveRecord of the exact schedule search."""
PHASES = "phases"
"""The `backend` of a SolveRecord of the barrier problem's search (`phases`)."""

SCHEDULE_FORMAT = "schedule-1"
"""The layout of a cached schedule; changing it makes older entries count as derived from other inputs."""

EXCLUSIVE_NODE_SHARE = 2
"""The exclusive-op bound searches what is left with 1/EXCLUSIVE_NODE_SHARE of `solver.search_node_limit`."""

PHASES_NODE_FACTOR = 2
"""The barrier problem (`phases`) is searched with PHASES_NODE_FACTOR x `solver.search_node_limit` nodes:
where it applies it usually proves the optimum, and then no ILP runs."""

REPLAY_RTOL = 1e-6
"""Replay tolerance on the makespan, relative to the horizon (solver tolerances are absolute)."""


@dataclass(frozen=True)
class SolveRecord:
    """One solve: of the scheduling ILP, or the exact schedule search."""

    backend: str
    """`gurobi` or `highs` for an ILP solve, `search` for the exact schedule search."""
    status: str
    """`optimal` (within the gap), or `node_limit` or `time_limit` (feasible, gap open)."""
    objective_s: float
    bound_s: float
    gap: float
    """(objective - bound) / objective, 0 for an empty schedule."""
    runtime_s: float
    num_vars: int
    """Of the ILP; 0 for the exact search, which builds no model."""
    num_constraints: int
    core_resources: tuple[str, ...]
    """Resources whose core capacity this solve modelled (capacity rows or core variables)."""


@dataclass(frozen=True)
class Schedule:
    """A replay-checked schedule; per-op tuples follow the problem's op order."""

    makespan_s: float
    bound_s: float
    """A proven lower bound on the makespan of every schedule of the problem."""
    status: str
    """`optimal` (makespan within the gap of the bound), or the limit that stopped the search:
    `node_limit` or `time_limit`, or `hbm_repaired` (the ILP's optimum over-subscribed HBM, and
    neither its repair nor the exact search met the bound)."""
    start_s: tuple[float, ...]
    duration_s: tuple[float, ...]
    spread: tuple[bool, ...]
    """True where the op runs on all cores of its type(s)."""
    cores: tuple[tuple[tuple[str, int], ...], ...]
    """Per op, the (resource, core index) it holds; empty for spread or zero-duration ops."""
    solves: tuple[SolveRecord, ...]
    """Every solve that led here (none when the list schedule met the lower bound). The schedule is
    the best feasible one seen: the list schedule, a repaired relaxed schedule, or a solve's."""

    @property
    def optimal(self) -> bool:
        """Whether the makespan is proven optimal within the configured gap."""
        return self.status == "optimal"


class ScheduleCache:
    """Schedules keyed by canonical problem, in memory and, when a directory is given, on disk.

    Disk entries are sealed JSON files (`phazec.util.sealed`: written atomically, checked when read back, a
    bad one deleted and solved again), so concurrent writers and crashes never leave a torn file and
    an edited one is never believed. Floats round-trip exactly through JSON.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._memory: dict[str, Schedule] = {}
        self._directory = directory

    def __len__(self) -> int:
        """Schedules held in memory."""
        return len(self._memory)

    def get(self, key: str) -> Schedule | None:
        """The schedule stored under `key`, or None."""
        if key in self._memory:
            return self._memory[key]
        path = self._path(key)
        data = None if path is None else sealed.read(path, f"{SCHEDULE_FORMAT}:{key}")
        if data is None:
            return None
        solves = tuple(
            SolveRecord(**{**s, "core_resources": tuple(s["core_resources"])}) for s in data["solves"]
        )
        found = Schedule(
            makespan_s=data["makespan_s"],
            bound_s=data["bound_s"],
            status=data["status"],
            start_s=tuple(data["start_s"]),
            duration_s=tuple(data["duration_s"]),
            spread=tuple(data["spread"]),
            cores=tuple(tuple((r, c) for r, c in op) for op in data["cores"]),
            solves=solves,
        )
        self._memory[key] = found
        return found

    def put(self, key: str, found: Schedule) -> None:
        """Store `found` under `key` in memory, and on disk unless the time limit stopped it.

        A time-limited schedule depends on the machine, so it is kept for this process only: within
        one run the same problem always gets the same answer. Optimal and node-limited ones are
        repeatable.
        """
        self._memory[key] = found
        path = self._path(key)
        if path is None or found.status == "time_limit":
            return
        sealed.write(path, f"{SCHEDULE_FORMAT}:{key}", asdict(found))

    def _path(self, key: str) -> Path | None:
        return None if self._directory is None else self._directory / f"{key}.json"


def schedule(
    problem: ScheduleProblem,
    config: SolverConfig,
    cache: ScheduleCache | None = None,
    model_dir: Path | None = None,
) -> Schedule:
    """The minimum-makespan schedule of `problem`, solved once per canonical problem.

    The best feasible schedule known so far (first the list schedule) bounds every solve; when it
    meets the combinatorial lower bound (critical path and core-time), no solve is needed. A solve
    without core capacity is a relaxation: its bound is a lower bound on every real schedule, so the
    loop stops as soon as the best feasible schedule meets the best bound, which often saves the
    slower solve with capacity. A relaxed schedule that over-subscribes cores is also repaired by
    list scheduling in its order, which may improve the best feasible schedule.

    Args:
        problem: the operator graph and core counts.
        config: backend, limits and seed.
        cache: where solved schedules are looked up and stored; one stopped by the time limit stays
            in memory only, since it depends on the machine.
        model_dir: where model files go when `config.write_lp` is set.

    Raises:
        PhazecError: on bad configuration, a failed solve, or a schedule that fails its replay.
    """
    check_config(config)
    if config.write_lp and model_dir is None:
        raise PhazecError(
            "solver.write_lp=true needs a directory for the model files: call schedule() with model_dir."
        )
    key = canonical_key(problem, config)
    if cache is not None and (hit := cache.get(key)) is not None:
        logger.debug("schedule cache hit %s", key[:12])
        return hit
    large = len(problem.ops) > config.ilp_max_ops
    if large:
        config = replace(config, search_node_limit=search_nodes(len(problem.ops), config))
    best = _incumbent(problem)
    lower_s = modelled_modes(problem, best)[1].lower_s
    if not _meets(best, lower_s, config):
        lower_s = max(lower_s, _exclusive_s(problem, config, best))
    proven = _meets(best, lower_s, config)
    phased = None if proven else _phased(problem, config, best, lower_s)
    if proven:
        found = _schedule(problem, best, lower_s, "optimal", ())
    elif phased is not None and _meets(phased.best, phased.lower_s, config):
        found = _schedule(problem, phased.best, phased.lower_s, "optimal", (phased.record,))
    else:
        found = (
            _search_alone(problem, config, best, lower_s)
            if large
            else optimize(problem, config, best, lower_s, model_dir)
        )
        if phased is not None:
            found = _with_phases(problem, config, found, phased)
    if cache is not None:
        cache.put(key, found)
    return found


def search_nodes(ops: int, config: SolverConfig) -> int:
    """The exact search's nodes on a graph of `ops` ops above `solver.ilp_max_ops`:
    `search_node_limit` scaled by (ilp_max_ops / ops)^2, at least 1 where the limit is not 0."""
    limit = config.search_node_limit
    return min(limit, max(1, limit * config.ilp_max_ops**2 // ops**2))


def _search_alone(
    problem: ScheduleProblem, config: SolverConfig, best: Incumbent, lower_s: float
) -> Schedule:
    """The schedule of a graph above `solver.ilp_max_ops`: the exact search from the list schedule
    (none when `search_node_limit` is 0), the exclusive-op bound again on a shorter schedule."""
    if config.search_node_limit == 0:
        return _schedule(problem, best, lower_s, "node_limit", ())
    first_s = best.makespan_s
    best, lower_s, record = _search(problem, config, best, lower_s)
    proven = record.status == "optimal"
    if not proven and best.makespan_s < first_s:
        lower_s = max(lower_s, _exclusive_s(problem, config, best))
        proven = _meets(best, lower_s, config)
    return _schedule(problem, best, lower_s, "optimal" if proven else record.status, (record,))


def optimize(
    problem: ScheduleProblem,
    config: SolverConfig,
    best: Incumbent | None = None,
    lower_s: float = 0.0,
    model_dir: Path | None = None,
) -> Schedule:
    """The ILP loop of `schedule()`, which always solves at least once.

    Args:
        best: a feasible schedule to start from; the list schedule when None.
        lower_s: a known lower bound on the makespan.
    """
    best = best or _incumbent(problem)
    first_s = best.makespan_s
    prefix = f"schedule_{canonical_key(problem, config)[:12]}"
    proven = False
    core_resources: frozenset[str] = frozenset()
    records: list[SolveRecord] = []
    while True:
        formulation = build(problem, best, core_resources)
        path = None
        if config.write_lp and model_dir is not None:
            model_dir.mkdir(parents=True, exist_ok=True)
            path = model_dir / f"{prefix}_{len(records)}.lp"
        result = solve(formulation.mip, config, path, formulation.start)
        records.append(_record(formulation, result))
        start_s, spread = extract(problem, formulation, result.values)
        replayed = replay(problem, start_s, spread)
        _check(replayed, records[-1], formulation)
        lower_s = max(lower_s, records[-1].bound_s)
        if replayed.oversubscribed:
            best = _better(best, _repair(problem, start_s))
        else:
            best = _better(best, _as_incumbent(start_s, spread, replayed))
        proven = (result.status == "optimal" and not replayed.oversubscribed) or _meets(best, lower_s, config)
        if not proven and config.search_node_limit > 0 and not any(r.backend == SEARCH for r in records):
            best, lower_s, record = _search(problem, config, best, lower_s)
            records.append(record)
            proven = record.status == "optimal"
        cores_over = replayed.oversubscribed - {HBM}
        if proven or not cores_over or HBM in replayed.oversubscribed or result.status != "optimal":
            break  # capacity rows would not keep an ILP schedule within the HBM bandwidth either
        if cores_over <= core_resources:
            raise PhazecError(_replay_failure(f"over-subscribes {sorted(cores_over)}", records[-1]))
        core_resources |= cores_over
        logger.debug("schedule over-subscribes %s; adding core capacity", sorted(cores_over))
    if not proven and best.makespan_s < first_s:  # a shorter horizon leaves fewer modes
        lower_s = max(lower_s, _exclusive_s(problem, config, best))
        proven = _meets(best, lower_s, config)
    limits = (r.status for r in reversed(records) if r.status != "optimal")
    status = "optimal" if proven else next(limits, "hbm_repaired")
    return _schedule(problem, best, lower_s, status, tuple(records))


def _search(
    problem: ScheduleProblem, config: SolverConfig, best: Incumbent, lower_s: float
) -> tuple[Incumbent, float, SolveRecord]:
    """The exact search for a schedule shorter than `best`: the better schedule, the new lower
    bound, and its record (`optimal` when the search finished, else `node_limit`)."""
    modes, bnd = modelled_modes(problem, best)
    begin = time.perf_counter()
    out = search(
        problem,
        modes,
        bnd,
        best.makespan_s,
        lower_s,
        rel_gap=config.mip_gap,
        node_limit=config.search_node_limit,
    )
    runtime_s = time.perf_counter() - begin
    if out.found is not None:
        best = _better(best, _feasible(problem, *out.found))
    lower_s = max(lower_s, out.bound_s)
    proven = out.complete or _meets(best, lower_s, config)
    record = _search_record(SEARCH, best, lower_s, proven, runtime_s)
    logger.debug("exact search: %d nodes, %s", out.nodes, record.status)
    return best, lower_s, record


def _search_record(
    backend: str, best: Incumbent, lower_s: float, proven: bool, runtime_s: float
) -> SolveRecord:
    """The record of a search that builds no model (`backend`: the exact search or the barrier
    problem's): its best schedule, its bound, `optimal` when proven, else `node_limit`."""
    bound_s = min(lower_s, best.makespan_s)
    return SolveRecord(
        backend=backend,
        status="optimal" if proven else "node_limit",
        objective_s=best.makespan_s,
        bound_s=bound_s,
        gap=(best.makespan_s - bound_s) / best.makespan_s if best.makespan_s > 0 else 0.0,
        runtime_s=runtime_s,
        num_vars=0,
        num_constraints=0,
        core_resources=(),
    )


@dataclass(frozen=True)
class _Phased:
    """The barrier problem's schedule and bound (`phases.phase_schedule`), and its record."""

    best: Incumbent
    lower_s: float
    record: SolveRecord


def _phased(
    problem: ScheduleProblem, config: SolverConfig, best: Incumbent, lower_s: float
) -> _Phased | None:
    """The barrier problem's schedule, no longer than `best`, and bound, at least `lower_s`, where it
    applies (`phases.phase_schedule`, with PHASES_NODE_FACTOR x `solver.search_node_limit` nodes)."""
    begin = time.perf_counter()
    nodes = config.search_node_limit * PHASES_NODE_FACTOR
    if nodes == 0:
        return None
    modes = modelled_modes(problem, best)[0]
    phased = phase_schedule(problem, modes, best, lower_s, rel_gap=config.mip_gap, node_limit=nodes)
    if phased is None:
        return None
    best, lower_s = phased.best, max(lower_s, phased.lower_s)
    runtime_s = time.perf_counter() - begin
    record = _search_record(PHASES, best, lower_s, _meets(best, lower_s, config), runtime_s)
    logger.debug("barrier problem: %d nodes, %s", phased.nodes, record.status)
    return _Phased(best, lower_s, record)


def _with_phases(
    problem: ScheduleProblem, config: SolverConfig, found: Schedule, phased: _Phased
) -> Schedule:
    """The shorter of `found` and the barrier problem's schedule (`found` on a tie), with the better
    bound; optimal if that meets it."""
    own = Incumbent(
        start_s=found.start_s, spread=found.spread, cores=found.cores, makespan_s=found.makespan_s
    )
    best = _better(own, phased.best)
    lower_s = max(found.bound_s, phased.lower_s)
    status = "optimal" if _meets(best, lower_s, config) else found.status
    return _schedule(problem, best, lower_s, status, (phased.record, *found.solves))


def _exclusive_s(problem: ScheduleProblem, config: SolverConfig, best: Incumbent) -> float:
    """The bound of `exclusive_bound_s` on schedules no longer than `best`, with half the exact
    search's nodes."""
    modes = modelled_modes(problem, best)[0]
    return exclusive_bound_s(
        problem,
        modes,
        best.makespan_s,
        rel_gap=config.mip_gap,
        node_limit=config.search_node_limit // EXCLUSIVE_NODE_SHARE,
    )


def _meets(best: Incumbent, lower_s: float, config: SolverConfig) -> bool:
    """Whether `best` is proven optimal within the gap by the lower bound."""
    return best.makespan_s * (1 - config.mip_gap) <= lower_s


def _schedule(
    problem: ScheduleProblem, best: Incumbent, lower_s: float, status: str, solves: tuple[SolveRecord, ...]
) -> Schedule:
    return Schedule(
        makespan_s=best.makespan_s,
        bound_s=min(lower_s, best.makespan_s),
        status=status,
        start_s=best.start_s,
        duration_s=tuple(problem.duration_s(i, best.spread[i]) for i in range(len(problem.ops))),
        spread=best.spread,
        cores=best.cores,
        solves=solves,
    )


def _incumbent(problem: ScheduleProblem) -> Incumbent:
    """The list schedule, replayed for its makespan and cores."""
    modes = [problem.modes(i) for i in range(len(problem.ops))]
    return _feasible(problem, *list_schedule(problem, bounds(problem, modes).lower_s))


def _repair(problem: ScheduleProblem, start_s: tuple[float, ...]) -> Incumbent:
    """A feasible schedule that takes the ops in the order of `start_s` (a relaxed schedule)."""
    return _feasible(problem, *list_schedule_in_order(problem, start_s))


def _feasible(problem: ScheduleProblem, start_s: tuple[float, ...], spread: tuple[bool, ...]) -> Incumbent:
    replayed = replay(problem, start_s, spread)
    if replayed.late_deps or replayed.oversubscribed:
        raise AssertionError(f"heuristic or searched schedule infeasible: {replayed}")
    return _as_incumbent(start_s, spread, replayed)


def _as_incumbent(start_s: tuple[float, ...], spread: tuple[bool, ...], replayed: Replay) -> Incumbent:
    return Incumbent(start_s=start_s, spread=spread, cores=replayed.cores, makespan_s=replayed.makespan_s)


def _better(a: Incumbent, b: Incumbent) -> Incumbent:
    """The shorter schedule; `a` on ties, so earlier schedules win and results are repeatable."""
    return b if b.makespan_s < a.makespan_s else a


def _record(formulation: Formulation, result: MipResult) -> SolveRecord:
    unit_s = formulation.unit_s
    objective_s, bound_s = result.objective * unit_s, min(result.bound, result.objective) * unit_s
    return SolveRecord(
        backend=result.backend,
        status=result.status,
        objective_s=objective_s,
        bound_s=bound_s,
        gap=(objective_s - bound_s) / objective_s if objective_s > 0 else 0.0,
        runtime_s=result.runtime_s,
        num_vars=formulation.mip.num_vars,
        num_constraints=formulation.mip.num_constraints,
        core_resources=tuple(sorted(formulation.core_resources)),
    )


def _check(replayed: Replay, record: SolveRecord, formulation: Formulation) -> None:
    """Raise unless precedence holds and bound <= replayed makespan <= objective (within tolerance).

    The bound is checked only for a schedule that over-subscribes nothing: otherwise it belongs to the
    relaxation without core capacity, which may beat the lower bounds on real schedules.
    """
    if replayed.late_deps:
        raise PhazecError(
            _replay_failure(f"starts ops before their inputs: {replayed.late_deps[:3]}", record)
        )
    tol_s = REPLAY_RTOL * formulation.horizon_s
    bound_s = -tol_s if replayed.oversubscribed else record.bound_s
    if not bound_s - tol_s <= replayed.makespan_s <= record.objective_s + tol_s:
        raise PhazecError(
            _replay_failure(
                f"has makespan {replayed.makespan_s!r} s outside [bound, objective] = "
                f"[{record.bound_s!r}, {record.objective_s!r}] s",
                record,
            )
        )


def _replay_failure(what: str, record: SolveRecord) -> str:
    return (
        f"The schedule from {record.backend} ({record.num_vars} variables) {what} when replayed; "
        "the solver's answer is numerically wrong or phazec's model has a bug. Try the other "
        "solver.backend, and report it with solver.write_lp=true."
    )
