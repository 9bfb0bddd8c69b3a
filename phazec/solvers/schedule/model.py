"""Build the scheduling ILP of a problem (phaze-facts section 5, compact) and extract its schedule.

Time is measured in model units of `unit_s` seconds, chosen so the horizon (the makespan of a known
feasible schedule) is 1000 units: solver tolerances are absolute, and layer latencies in seconds
would sit below them.

Variables (names carry indices): `makespan`; `t_i`, op i's start; `y_i` = 1 if op i is spread over
all cores of its type(s), only where both modes are worth considering; `x_i_j` = 1 if op i finishes
before op j starts, only for pairs that share a resource, are not ordered by the dependencies, and
could conflict (a single-core resource, a spreadable op, or a resource with modelled capacity);
`z_r_i_c` = 1 if op i runs on core c of resource r (see below).

Rows: `prec_i_j` (dependency), `end_i` (makespan, sinks only), `heads_r_k` and `tails_r_k`
(head-body-tail lower bounds per resource), `ord_i_j` (at most one order, exactly one when the pair
must not overlap), `seq_i_j` (big-M ordering), `alone_k_i_j` (a spread op k is ordered against
every op it shares a resource with).

Core capacity is modelled only for the resources the caller names (those a solve without it
over-subscribed). `cap_r_k`: for every set of cores + 1 ops that may hold a single core of r and
none of which depends on another, some pair is ordered; intervals that pairwise overlap share a
point (Helly), so this is exactly "at most `cores` at once". Past CLIQUE_LIMIT such sets, core
assignment is used instead: `assign_r_i` (one core unless spread) and `core_r_c_i_j` (two ops on
one core are ordered).

Tightening: only schedules no longer than a known feasible one (the incumbent, from list
scheduling) are modelled. That gives every start a window [head, horizon - tail - latency], per-pair
big-M constants from the windows, orders the windows rule out fixed to 0, and modes too slow for
the window dropped. Heads and tails count the core-time of ancestors and descendants per resource.

No transitivity rows: with positive durations the `seq` rows already make a cyclic order infeasible,
and an op of zero duration holds nothing, so its order is irrelevant.
"""

import heapq
import math
from dataclasses import dataclass

from phazec.errors import PhazecError
from phazec.ir.graph import topological_order
from phazec.solvers.schedule.backends import Mip
from phazec.solvers.schedule.problem import (
    HBM,
    NET,
    TC,
    VC,
    OpKind,
    ScheduleProblem,
    descendants,
    independent_pairs,
)

HORIZON_UNITS = 1000.0
"""The upper bound on the makespan, in model units."""


@dataclass(frozen=True)
class Bounds:
    """Valid bounds on every schedule no longer than the incumbent."""

    lower_s: float
    """The longest head + latency + tail, or per resource and threshold h: h + the least core-time
    over its cores of the ops whose head (likewise tail) is >= h."""
    head_s: tuple[float, ...]
    """Earliest possible start of each op."""
    tail_s: tuple[float, ...]
    """Least time from each op's end to the end of the schedule."""


@dataclass(frozen=True)
class Incumbent:
    """A feasible schedule: its makespan is the horizon, and it warm-starts the solver."""

    start_s: tuple[float, ...]
    spread: tuple[bool, ...]
    cores: tuple[tuple[tuple[str, int], ...], ...]
    """Per op, the (resource, core) it holds, as a replay hands them out."""
    makespan_s: float


@dataclass(frozen=True)
class Formulation:
    """The ILP, a feasible start for it, and how to read a schedule back from its variables."""

    mip: Mip
    start: tuple[float, ...]
    """The incumbent as column values."""
    unit_s: float
    horizon_s: float
    modes: tuple[tuple[bool, ...], ...]
    """Per op, the spread settings modelled (see ScheduleProblem.modes; too slow ones dropped)."""
    spread_cols: tuple[int | None, ...]
    """Column of y_i, or None when op i has a single mode modelled."""
    order_cols: tuple[tuple[int, int, int], ...]
    """(i, j, column of x_i_j)."""
    start_cols: tuple[int, ...]
    """Column of t_i."""
    core_resources: frozenset[str]


def bounds(problem: ScheduleProblem, modes: list[tuple[bool, ...]]) -> Bounds:
    """Lower bound and per-op head and tail times when op i runs in one of `modes[i]`.

    An op cannot start before any of its ancestors ends, nor before a set of its ancestors sharing
    a resource has had the core-time it needs: for the ancestors on resource r with head >= h, the
    head is at least h + their least core-time / cores. Every on-chip op is also on the HBM, with its
    traffic time as its HBM-time. Tails mirror this with descendants: the longest tail + fastest
    latency of a successor, and the core-time of the descendants.
    """
    n = len(problem.ops)
    fastest = [min(problem.duration_s(i, m) for m in modes[i]) for i in range(n)]
    work = [
        {
            r: min((problem.capacity(r) if m else 1) * problem.duration_s(i, m) for m in modes[i])
            / problem.capacity(r)
            for r in problem.resources(i)
        }
        | ({} if problem.ops[i].kind is OpKind.COLLECTIVE else {HBM: problem.ops[i].hbm_s})
        for i in range(n)
    ]
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, c in sorted(set(problem.deps)):
        preds[c].append(a)
        succs[a].append(c)
    order = topological_order(n, problem.deps)
    reach = descendants(problem)
    head = [0.0] * n
    tail = [0.0] * n
    for j in order:
        ancestors = [i for i in range(n) if (reach[i] >> j) & 1]
        head[j] = max([head[a] + fastest[a] for a in preds[j]] + [_energy(ancestors, head, work)])
    for j in reversed(order):
        below = [i for i in range(n) if (reach[j] >> i) & 1]
        tail[j] = max([tail[s] + fastest[s] for s in succs[j]] + [_energy(below, tail, work)])
    lower = max((head[i] + fastest[i] + tail[i] for i in range(n)), default=0.0)
    lower = max(lower, _energy(list(range(n)), head, work), _energy(list(range(n)), tail, work))
    return Bounds(lower_s=lower, head_s=tuple(head), tail_s=tuple(tail))


def _energy(ops: list[int], release: list[float], work: list[dict[str, float]]) -> float:
    """max over resources r and thresholds h of h + the core-time / cores of the ops in `ops` on r
    whose release is >= h: a time all of them need after h."""
    best = 0.0
    for r in (TC, VC, NET, HBM):
        total = 0.0
        for i in sorted((i for i in ops if r in work[i]), key=lambda i: -release[i]):
            total += work[i][r]
            best = max(best, release[i] + total)
    return best


class _Builder:
    """Collects columns (with start values) and rows; `mip()` freezes them."""

    def __init__(self) -> None:
        self.cols: list[tuple[str, float, float, float, bool]] = []
        self.start: list[float] = []
        self.rows: list[tuple[str, float, float, tuple[tuple[int, float], ...]]] = []

    def col(
        self, name: str, lower: float, upper: float, *, start: float, cost: float = 0.0, integer: bool = False
    ) -> int:
        self.cols.append((name, lower, upper, cost, integer))
        self.start.append(start)
        return len(self.cols) - 1

    def row(self, name: str, entries: list[tuple[int, float]], lower: float, upper: float) -> None:
        self.rows.append((name, lower, upper, tuple((c, v) for c, v in entries if v != 0)))

    def mip(self) -> Mip:
        cols, rows = list(zip(*self.cols, strict=True)), self.rows
        return Mip(
            col_names=cols[0],
            col_lower=cols[1],
            col_upper=cols[2],
            col_cost=cols[3],
            col_integer=cols[4],
            row_names=tuple(r[0] for r in rows),
            row_lower=tuple(r[1] for r in rows),
            row_upper=tuple(r[2] for r in rows),
            row_entries=tuple(r[3] for r in rows),
        )


def modelled_modes(problem: ScheduleProblem, incumbent: Incumbent) -> tuple[list[tuple[bool, ...]], Bounds]:
    """Per op, the modes that fit in a schedule no longer than the incumbent, and the bounds they give.

    A mode is dropped when its latency does not fit between the op's head and tail within the
    incumbent's makespan; fewer modes tighten heads and tails, so this repeats until nothing changes.
    The incumbent's own mode is always kept.
    """
    modes = [problem.modes(i) for i in range(len(problem.ops))]
    while True:
        bnd = bounds(problem, modes)
        kept = [
            tuple(
                m
                for m in modes[i]
                if m == incumbent.spread[i]
                or bnd.head_s[i] + problem.duration_s(i, m) + bnd.tail_s[i] <= incumbent.makespan_s
            )
            for i in range(len(problem.ops))
        ]
        if kept == modes:
            return modes, bnd
        modes = kept


def build(
    problem: ScheduleProblem, incumbent: Incumbent, core_resources: frozenset[str] = frozenset()
) -> Formulation:
    """The compact ILP of `problem`, with core capacity modelled for `core_resources` only.

    Only schedules no longer than the incumbent are modelled: its makespan is the horizon, every
    start gets the window [head, horizon - tail - fastest latency], and an order x_i_j whose
    window makes it impossible is fixed to 0.
    """
    n = len(problem.ops)
    modes, bnd = modelled_modes(problem, incumbent)
    unit_s = incumbent.makespan_s / HORIZON_UNITS if incumbent.makespan_s > 0 else 1.0
    upper = incumbent.makespan_s / unit_s
    head = [h / unit_s for h in bnd.head_s]
    tail = [t / unit_s for t in bnd.tail_s]
    b = _Builder()
    makespan = b.col("makespan", min(bnd.lower_s / unit_s, upper), upper, start=upper, cost=1.0)

    # p_i = base[i] + delta[i] * y_i (y_i absent: p_i = base[i] in the only mode).
    base = [problem.duration_s(i, modes[i][0]) / unit_s for i in range(n)]
    delta = [(problem.ops[i].latency_io_s - problem.ops[i].latency_s) / unit_s for i in range(n)]
    fastest = [min(problem.duration_s(i, m) for m in modes[i]) / unit_s for i in range(n)]
    latest = [max(head[i], upper - tail[i] - fastest[i]) for i in range(n)]
    t0 = [min(max(s / unit_s, head[i]), latest[i]) for i, s in enumerate(incumbent.start_s)]
    start = [b.col(f"t_{i}", head[i], latest[i], start=t0[i]) for i in range(n)]
    spread: list[int | None] = [
        b.col(f"y_{i}", 0.0, 1.0, start=float(incumbent.spread[i]), integer=True)
        if len(modes[i]) == 2
        else None
        for i in range(n)
    ]

    def end(i: int) -> list[tuple[int, float]]:
        """Entries of t_i + p_i - base[i]."""
        y = spread[i]
        return [(start[i], 1.0)] + ([(y, delta[i])] if y is not None else [])

    for a, c in sorted(set(problem.deps)):
        b.row(f"prec_{a}_{c}", [*end(a), (start[c], -1.0)], -math.inf, -base[a])
    for i in sorted(set(range(n)) - {a for a, _ in problem.deps}):
        b.row(f"end_{i}", [*end(i), (makespan, -1.0)], -math.inf, -base[i])
    _energy_rows(
        b, problem, modes=modes, makespan=makespan, spread=spread, head=head, tail=tail, unit_s=unit_s
    )

    slack = 1e-9 * upper
    cliques = {
        r: _antichains(
            problem,
            [i for i in range(n) if r in problem.resources(i) and False in modes[i] and fastest[i] > 0],
            problem.capacity(r) + 1,
        )
        for r in sorted(core_resources)
    }
    cores = {
        r: _core_cols(b, problem, r, modes=modes, spread=spread, incumbent=incumbent)
        for r, sets in cliques.items()
        if sets is None
    }
    orders: list[tuple[int, int, int]] = []
    for i, j in independent_pairs(problem):
        if fastest[i] == 0 or fastest[j] == 0:
            continue  # an op that takes no time holds nothing
        shared = sorted(set(problem.resources(i)) & set(problem.resources(j)))
        # Must not overlap: a single-core resource, or an op that can only run spread.
        forced = any(problem.capacity(r) == 1 for r in shared) or (True,) in (modes[i], modes[j])
        spreadable = [k for k in (i, j) if True in modes[k]]
        in_cores = [r for r in shared if r in cores]
        if not (forced or spreadable or set(shared) & core_resources):
            continue
        before_ij = incumbent.start_s[i] + problem.duration_s(i, incumbent.spread[i]) <= incumbent.start_s[j]
        after_ij = incumbent.start_s[j] + problem.duration_s(j, incumbent.spread[j]) <= incumbent.start_s[i]
        x_ij = b.col(
            f"x_{i}_{j}",
            0.0,
            _possible(head[i] + fastest[i], latest[j], slack),
            start=float(before_ij),
            integer=True,
        )
        x_ji = b.col(
            f"x_{j}_{i}",
            0.0,
            _possible(head[j] + fastest[j], latest[i], slack),
            start=float(after_ij and not before_ij),
            integer=True,
        )
        orders += [(i, j, x_ij), (j, i, x_ji)]
        either = [(x_ij, 1.0), (x_ji, 1.0)]
        b.row(f"ord_{i}_{j}", either, 1.0 if forced else -math.inf, 1.0)
        for first, second, x in ((i, j, x_ij), (j, i, x_ji)):
            big_m = upper - tail[first] - head[second]
            b.row(
                f"seq_{first}_{second}",
                [*end(first), (start[second], -1.0), (x, big_m)],
                -math.inf,
                big_m - base[first],
            )
        for k in spreadable:
            y = spread[k]
            if y is not None and not forced:
                b.row(f"alone_{k}_{i}_{j}", [*either, (y, -1.0)], 0.0, math.inf)
        for r in in_cores:
            for c in sorted(set(cores[r].get(i, {})) & set(cores[r].get(j, {}))):
                z = [(cores[r][i][c], -1.0), (cores[r][j][c], -1.0)]
                b.row(f"core_{r}_{c}_{i}_{j}", [*either, *z], -1.0, math.inf)
    order_col = {(i, j): col for i, j, col in orders}
    for r, sets in cliques.items():
        for k, group in enumerate(sets or ()):
            b.row(
                f"cap_{r}_{k}",
                [(order_col[i, j], 1.0) for i in group for j in group if i != j],
                1.0,
                math.inf,
            )
    return Formulation(
        mip=b.mip(),
        start=tuple(b.start),
        unit_s=unit_s,
        horizon_s=incumbent.makespan_s,
        modes=tuple(modes),
        spread_cols=tuple(spread),
        order_cols=tuple(orders),
        start_cols=tuple(start),
        core_resources=core_resources,
    )


def _energy_rows(
    b: _Builder,
    problem: ScheduleProblem,
    *,
    modes: list[tuple[bool, ...]],
    makespan: int,
    spread: list[int | None],
    head: list[float],
    tail: list[float],
    unit_s: float,
) -> None:
    """Head-body-tail bounds per resource: for a set S of ops holding it, the makespan is at least
    the least head in S + the core-time of S / cores + the least tail in S. S ranges over the ops
    with head >= h for each h (rows `heads_r_k`) and with tail >= q for each q (rows `tails_r_k`).
    """
    n = len(problem.ops)
    for r in ("tc", "vc", "net"):
        cap = problem.capacity(r)
        ops = [i for i in range(n) if r in problem.resources(i)]
        work: dict[int, tuple[float, float]] = {}  # op -> (core-time / cap at y = 0, its change at y = 1)
        for i in ops:
            per_mode = {m: (cap if m else 1) * problem.duration_s(i, m) / cap / unit_s for m in modes[i]}
            work[i] = (per_mode[modes[i][0]], per_mode[True] - per_mode[False] if len(modes[i]) == 2 else 0.0)
        seen: set[tuple[int, ...]] = set()
        for family, key in (("heads", head), ("tails", tail)):
            for k, threshold in enumerate(sorted({key[i] for i in ops})):
                subset = tuple(i for i in ops if key[i] >= threshold)
                if subset in seen:
                    continue
                seen.add(subset)
                rhs = (
                    min(head[i] for i in subset)
                    + min(tail[i] for i in subset)
                    + sum(work[i][0] for i in subset)
                )
                entries = [(makespan, 1.0)] + [
                    (y, -work[i][1]) for i in subset if (y := spread[i]) is not None
                ]
                b.row(f"{family}_{r}_{k}", entries, rhs, math.inf)


CLIQUE_LIMIT = 500
"""Most capacity rows per resource; beyond it, core-assignment variables are used instead."""


def _antichains(problem: ScheduleProblem, ops: list[int], size: int) -> list[tuple[int, ...]] | None:
    """Every set of `size` ops from `ops` none of which depends on another, or None past CLIQUE_LIMIT."""
    reach = descendants(problem)
    found: list[tuple[int, ...]] = []

    def extend(chosen: tuple[int, ...], rest: list[int]) -> bool:
        if len(chosen) == size:
            found.append(chosen)
            return len(found) <= CLIQUE_LIMIT
        for k, i in enumerate(rest):
            independent = all(not ((reach[i] >> c) & 1 or (reach[c] >> i) & 1) for c in chosen)
            if independent and not extend((*chosen, i), rest[k + 1 :]):
                return False
        return True

    return found if extend((), ops) else None


def _possible(earliest_end: float, latest_start: float, slack: float) -> float:
    """Upper bound of x_i_j: 0 when op i cannot end before the latest start of op j."""
    return 1.0 if earliest_end <= latest_start + slack else 0.0


def _core_cols(
    b: _Builder,
    problem: ScheduleProblem,
    resource: str,
    *,
    modes: list[tuple[bool, ...]],
    spread: list[int | None],
    incumbent: Incumbent,
) -> dict[int, dict[int, int]]:
    """z columns and `assign` rows of one resource: op -> core -> column.

    Symmetry is broken by numbering cores in order of first use by op index: the k-th op (0-based)
    that may hold a single core of the resource uses one of cores 0..k. The incumbent's cores are
    renumbered the same way for the start.
    """
    renumber: dict[int, int] = {}
    for held in incumbent.cores:
        for r, core in held:
            if r == resource:
                renumber.setdefault(core, len(renumber))
    cols: dict[int, dict[int, int]] = {}
    single = [i for i in range(len(problem.ops)) if resource in problem.resources(i) and False in modes[i]]
    for rank, i in enumerate(single):
        on = {renumber[core] for r, core in incumbent.cores[i] if r == resource}
        count = min(problem.capacity(resource), rank + 1)
        cols[i] = {
            c: b.col(f"z_{resource}_{i}_{c}", 0.0, 1.0, start=float(c in on), integer=True)
            for c in range(count)
        }
        y = spread[i]
        entries = [(col, 1.0) for col in cols[i].values()] + ([(y, 1.0)] if y is not None else [])
        b.row(f"assign_{resource}_{i}", entries, 1.0, 1.0)
    return cols


def extract(
    problem: ScheduleProblem, formulation: Formulation, values: tuple[float, ...]
) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """Start times (s) and spread flags of the solver's schedule, with every op as early as allowed.

    The solver's discrete choices (modes and orders) are kept and the times recomputed exactly in
    seconds: each op starts when its last predecessor, by dependency or chosen order, has finished.
    This is never later than the solver's own times. Orders between ops far shorter than the solver's
    tolerance (nanosecond vector ops in a layer of milliseconds) can come back in a cycle, each
    within tolerance; then every ordered pair is kept ordered but turned to follow the solver's start
    times (`_follow_starts`), which moves the makespan by at most those ops' durations.
    """
    n = len(problem.ops)
    spread = tuple(
        values[col] > 0.5 if col is not None else formulation.modes[i][0]
        for i, col in enumerate(formulation.spread_cols)
    )
    duration = [problem.duration_s(i, spread[i]) for i in range(n)]
    chosen = [
        (i, j) for i, j, col in formulation.order_cols if values[col] > 0.5 and duration[i] and duration[j]
    ]
    edges = tuple(sorted(set(problem.deps) | set(chosen)))
    try:
        order = topological_order(n, edges)
    except PhazecError:
        solver_start = [values[col] for col in formulation.start_cols]
        edges = _follow_starts(n, problem.deps, chosen, solver_start)
        order = topological_order(n, edges)
    start = [0.0] * n
    for i in order:
        for a, c in edges:
            if a == i:
                start[c] = max(start[c], start[i] + duration[i])
    return tuple(start), spread


def _follow_starts(
    n: int, deps: tuple[tuple[int, int], ...], chosen: list[tuple[int, int]], start: list[float]
) -> tuple[tuple[int, int], ...]:
    """The dependencies and each chosen pair, ordered by one order of the ops that respects the
    dependencies and otherwise takes them by the solver's start time, then index: acyclic."""
    succs: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for a, c in set(deps):
        succs[a].append(c)
        indegree[c] += 1
    ready = [(start[i], i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    position = [0] * n
    for k in range(n):
        _, i = heapq.heappop(ready)
        position[i] = k
        for c in succs[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                heapq.heappush(ready, (start[c], c))
    turned = {(i, j) if position[i] < position[j] else (j, i) for i, j in chosen}
    return tuple(sorted(set(deps) | turned))
