"""The `wham` strategy: WHAM's critical-path search (Adnan et al., arXiv 2404.14632) on phazec's own
schedules and placement.

As implemented:

1. Start from the space's smallest design (the last in design order: designs are sorted by area,
   largest first), as WHAM starts from a minimal core configuration, and evaluate it with the full
   placement (every microbatch, recompute, HBM and tensor-parallel width).
2. Local search, per pipeline stage of the best plan found so far (stages whose layers have the same
   classes are searched once). A stage's cost on a design is its compute time per microbatch, the
   sum over its layers of the exact forward and backward schedules' makespans (the forward twice
   under full recompute, the attention cores once more under selective recompute and the unsaved ops
   under op recompute, except in the last stage, as the placement model counts it) at the plan's
   microbatch and tensor-parallel width, times the objective's weight (`phazec.search.objective`).
   The search keeps the `search.top_k` designs of least cost seen, and expands the best of them not
   yet expanded until all k are expanded. Expanding a design:
   - finds the critical operators of each of the stage's layer schedules: zero mobility between
     their ASAP and ALAP times on the scheduled graph (dataflow edges plus, for operators holding the
     same core, or any core of a type one of them is spread over, the order the schedule gave them);
   - takes as neighbours the designs of the space one step away: one knob (tensor-core count, width
     or depth, vector-core count or width, global buffer) at its next larger value, alone or with one
     other knob at its next smaller value (a trade that keeps the area budget), the rest equal;
   - keeps the neighbours whose growth shortens the critical operators (the cost model's latency of
     each critical op in the mode its schedule ran it, weighted by how often the stage runs it, plus
     the attention cores a selective stage repeats): these grow the resources the critical
     operators are bound by, tensor cores for critical GEMMs, vector lanes for critical vector ops,
     the buffer where traffic binds;
   - schedules the stage on each kept neighbour (cached exact schedules) and adds it to the pool.
3. Global search: the union of every stage's top-k designs not evaluated yet is evaluated with the
   full placement DP (batches of `search.batch_designs`, saved and resumed like the other
   strategies' batches, under `<state>/round_<r>/`); the best candidate over everything evaluated
   so far wins (the objective's cost, ties to the first design in design order). If that gives a new
   best plan, its stages are searched again (step 2); the search ends when a round adds no design.

`designs_evaluated` counts the designs evaluated with the placement, as for `bo` (whose trials are not
counted either); the designs the local search scheduled are logged. Every step is deterministic (ties
go to the lower design index), so the answer is the same bit for bit, and it can never beat an
exhaustive search over the same space, since it picks among evaluated designs with the same rule.

Departures from the paper, and why:
- The space is phazec's enumerated space (area and power budgets already applied) rather than an open
  grid: a grown design outside the budgets does not exist, so the trade moves (grow one knob, shrink
  another) let the search walk along the budget's edge, where WHAM would stop growing.
- The resource an operator is bound by is found by asking the latency model which one-step growth
  shortens it, instead of a rule per operator kind, so it holds for either latency model (`cost=tiled`
  or `cost=phaze`) and sees when a GEMM is bound by buffer or HBM traffic rather than by its array.
- Every device is the same design (phazec's template), so the per-stage top-k sets are candidates for
  the one design of the whole pipeline, and the placement DP re-places the layers on each, where WHAM
  can keep a different design per stage in its heterogeneous setting.
- The local search's stage cost leaves out the stage's pipeline transfers and the data-parallel
  all-reduce: they do not depend on the accelerator's cores or buffer; the global pick counts them.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from phazec.cost.model import OpCosts
from phazec.hw.designs import KNOBS, Designs
from phazec.ir.core import Graph
from phazec.ir.graph import topological_order
from phazec.predict import usage
from phazec.predict.evaluator import Candidate, Evaluator, attention_core_s, best, op_recompute_s
from phazec.predict.layer_costs import ClassCosts
from phazec.search.executors.base import Executor
from phazec.search.loop import Found, chunks, explore
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState
from phazec.search.strategies.exhaustive import Exhaustive
from phazec.solvers.placement.problem import Placement
from phazec.solvers.schedule.problem import NET, ScheduleProblem
from phazec.solvers.schedule.solve import Schedule, schedule
from phazec.util.progress import progress

log = logging.getLogger(__name__)

F64 = NDArray[np.float64]

MOBILITY_TOLERANCE = 1e-9
"""Relative slack (of the makespan) below which an operator counts as critical (rounding)."""


def critical_ops(problem: ScheduleProblem, found: Schedule) -> list[int]:
    """The operators of a schedule with zero mobility: their ASAP and ALAP start times on the
    scheduled graph (dependencies, plus the schedule's order between operators sharing a core) agree."""
    n = len(problem.ops)
    start = np.array(found.start_s)
    duration = np.array(found.duration_s)
    end = start + duration
    edges = np.zeros((n, n), dtype=bool)
    for a, b in problem.deps:
        edges[a, b] = True
    holds = [
        {(r, None if found.spread[i] or r == NET else core) for r, core in _cores(problem, found, i)}
        if duration[i] > 0
        else set()
        for i in range(n)
    ]
    for i in range(n):
        for j in range(n):
            if i != j and end[i] <= start[j] and _conflict(holds[i], holds[j]):
                edges[i, j] = True
    position = {op: p for p, op in enumerate(topological_order(n, problem.deps))}
    order = sorted(range(n), key=lambda i: (start[i], end[i], position[i]))
    earliest = np.zeros(n)
    for j in order:
        preds = np.flatnonzero(edges[:, j])
        earliest[j] = max((earliest[i] + duration[i] for i in preds), default=0.0)
    makespan_s = float((earliest + duration).max(initial=0.0))
    latest_end = np.full(n, makespan_s)
    for i in reversed(order):
        succs = np.flatnonzero(edges[i])
        latest_end[i] = min((latest_end[j] - duration[j] for j in succs), default=makespan_s)
    mobility = latest_end - duration - earliest
    return [i for i in range(n) if mobility[i] <= MOBILITY_TOLERANCE * makespan_s]


def _cores(problem: ScheduleProblem, found: Schedule, i: int) -> list[tuple[str, int | None]]:
    """(resource, core index) pairs op i holds; index None for every core of a type it is spread over."""
    if found.spread[i] or not found.cores[i]:
        return [(r, None) for r in problem.resources(i)]
    return list(found.cores[i])


def _conflict(a: set[tuple[str, int | None]], b: set[tuple[str, int | None]]) -> bool:
    """Whether two operators holding these cores cannot overlap."""
    return any(ra == rb and (ca is None or cb is None or ca == cb) for ra, ca in a for rb, cb in b)


def neighbours(designs: Designs, j: int) -> list[int]:
    """Designs one step from design j: one knob at its next larger value, alone or with one other knob
    at its next smaller value, the rest equal (a tied vector width follows the tensor-core width)."""
    tied = bool(np.array_equal(designs.vc_width, designs.tc_width))
    free = [k for k in KNOBS if not (tied and k == "vc_width")]
    values = {k: sorted({int(v) for v in getattr(designs, k)}) for k in free}
    index = {tuple(int(getattr(designs, k)[i]) for k in free): i for i in range(len(designs) - 1, -1, -1)}
    here = {k: int(getattr(designs, k)[j]) for k in free}

    def step(knob: str, by: int) -> int | None:
        p = values[knob].index(here[knob]) + by
        return values[knob][p] if 0 <= p < len(values[knob]) else None

    found: set[int] = set()
    for grow in free:
        up = step(grow, 1)
        if up is None:
            continue
        moves = [{grow: up}] + [
            {grow: up, shrink: down} for shrink in free if shrink != grow and (down := step(shrink, -1))
        ]
        for move in moves:
            i = index.get(tuple({**here, **move}[k] for k in free))
            if i is not None:
                found.add(i)
    return sorted(found)


@dataclass(frozen=True)
class StageWork:
    """One pipeline stage to tune: how often it runs each layer class's forward and backward graph."""

    runs: tuple[tuple[int, float, float], ...]
    """(class, forward runs, backward runs) per microbatch, by class index."""
    core_runs: tuple[tuple[int, float], ...]
    """(class, attention-core repeats) per microbatch, by class index: selective recompute's."""
    op_runs: tuple[tuple[int, float], ...] = ()
    """(class, repeats of the ops op recompute runs again) per microbatch, by class index."""


def stage_works(evaluator: Evaluator, designs: Designs, candidate: Candidate) -> list[StageWork]:
    """The distinct stages of a candidate's plan, as runs of layer classes."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    model = evaluator.graphs[placement.t]
    out: list[StageWork] = []
    figures = usage.plan_sizes(evaluator, designs.take(np.array([candidate.design])), candidate)
    runs, core, again = figures.forward_runs(), figures.runs_of("selective"), figures.runs_of("op")
    for i, stage in enumerate(placement.stages):
        counts = sorted(Counter(model.layers[layer].cls for layer in stage.layers).items())
        work = StageWork(
            tuple((c, n * runs[i], float(n)) for c, n in counts),
            tuple((c, n * core[i]) for c, n in counts if core[i]),
            tuple((c, n * again[i]) for c, n in counts if again[i]),
        )
        if work not in out:
            out.append(work)
    return out


@dataclass
class LocalSearch:
    """The per-stage local search on one (microbatch, t) of a plan."""

    evaluator: Evaluator
    designs: Designs
    microbatch: int
    t: int
    top_k: int
    weight: F64 | None
    scheduled: set[int] = field(default_factory=set)
    """Designs the local searches scheduled."""

    def run(self, stage: StageWork, start: int) -> list[int]:
        """The top-k designs for one stage, growing the resources its critical operators are bound by."""
        pool: dict[int, float] = {}
        self._price(stage, np.array([start]), pool)
        expanded: set[int] = set()
        while True:
            top = sorted(pool, key=lambda d: (pool[d], d))[: self.top_k]
            todo = [d for d in top if d not in expanded]
            if not todo:
                return sorted(top)
            expanded.add(todo[0])
            self._expand(stage, todo[0], pool)

    def _expand(self, stage: StageWork, j: int, pool: dict[int, float]) -> None:
        """Price the neighbours of design j that shorten its critical operators."""
        near = [n for n in neighbours(self.designs, j) if n not in pool]
        if not near:
            return
        picked = np.array([j, *near])
        priced = self.stage_costs(stage, picked)
        gain = np.zeros(len(near))
        for cls_index, forward_runs, backward_runs in stage.runs:
            for costs, graph, runs in self._graphs(cls_index, priced[cls_index], forward_runs, backward_runs):
                problem = self.evaluator.schedule_problem(graph, costs, self.designs.take(picked), 0)
                found = schedule(problem, self.evaluator.solver, self.evaluator.cache, self.evaluator.lp_dir)
                names = {op.name: k for k, op in enumerate(graph.ops)}
                for i in critical_ops(problem, found):
                    k = names[problem.ops[i].name]
                    latency = costs.all_cores_s[k] if found.spread[i] else costs.single_core_s[k]
                    gain += runs * (latency[0] - latency[1:])
        core_s = self.core_s(stage, priced, len(picked))
        gain += core_s[0] - core_s[1:]
        grown = [n for n, g in zip(near, gain, strict=True) if g > 0]
        if grown:
            self._price(stage, np.array(grown), pool)

    def stage_costs(self, stage: StageWork, picked: NDArray[np.int64]) -> dict[int, ClassCosts]:
        """Each layer class the stage runs, priced on the picked designs, by class index."""
        ev = self.evaluator
        on = self.designs.take(picked)
        used = sorted(
            {c for c, _, _ in stage.runs} | {c for c, _ in stage.core_runs} | {c for c, _ in stage.op_runs}
        )
        training = replace(ev.knobs.fixed, microbatch=self.microbatch)
        return {c: ev.class_costs(ev.graphs[self.t], c, on, training) for c in used}

    def _graphs(
        self, cls_index: int, costs: ClassCosts, forward_runs: float, backward_runs: float
    ) -> list[tuple[OpCosts, Graph, float]]:
        """(costs, graph, runs) of a class's forward and backward graphs."""
        cls = self.evaluator.graphs[self.t].classes[cls_index]
        out: list[tuple[OpCosts, Graph, float]] = [(costs.forward, cls.graph, forward_runs)]
        if cls.backward is not None and costs.backward is not None:
            out.append((costs.backward, cls.backward, backward_runs))
        return out

    def core_s(self, stage: StageWork, priced: dict[int, ClassCosts], designs: int) -> NDArray[np.float64]:
        """Per priced design: the time of the attention cores the stage repeats under selective
        recompute, or of the ops it runs again under op recompute, per microbatch."""
        total = np.zeros(designs)
        model = self.evaluator.graphs[self.t]
        modules = self.evaluator.knobs.fixed.selective_modules
        for cls_index, repeats in stage.core_runs:
            forward = model.classes[cls_index].graph
            again_s = attention_core_s(forward, priced[cls_index].forward, model.seq_len, modules)
            total += repeats * again_s
        for cls_index, repeats in stage.op_runs:
            cls = model.classes[cls_index]
            assert cls.backward is not None  # a stage that recomputes has a backward pass
            total += repeats * op_recompute_s(cls.graph, cls.backward, priced[cls_index].forward)
        return total

    def _price(self, stage: StageWork, picked: NDArray[np.int64], pool: dict[int, float]) -> None:
        """Add each picked design's stage cost to the pool."""
        cost = np.zeros(len(picked))
        priced = self.stage_costs(stage, picked)
        on = self.designs.take(picked)
        for cls_index, forward_runs, backward_runs in stage.runs:
            for costs, graph, runs in self._graphs(cls_index, priced[cls_index], forward_runs, backward_runs):
                for p in range(len(picked)):
                    problem = self.evaluator.schedule_problem(graph, costs, on, p)
                    cost[p] += runs * self.evaluator.schedule_s(problem)
        cost += self.core_s(stage, priced, len(picked))
        for p, d in enumerate(picked.tolist()):
            pool[d] = float(cost[p]) * (1.0 if self.weight is None else float(self.weight[d]))
            self.scheduled.add(d)


def batch_count(designs: Designs, config: SearchConfig) -> int:
    """At most batches of `search.batch_designs` over the whole space."""
    return math.ceil(len(designs) / config.batch_designs)


def run(
    designs: Designs, config: SearchConfig, workers: Executor, state: SearchState, weight: F64 | None
) -> Found:
    """The wham strategy (module docstring) with `workers` evaluating the placement rounds; the designs
    never placed are pruned as `not_chosen`."""
    evaluated: list[int] = []
    candidates: list[Candidate] = []
    scheduled: set[int] = set()
    fresh = [len(designs) - 1]
    current: Candidate | None = None
    round_index = 0
    while fresh:
        round_state = SearchState(state.directory / f"round_{round_index}", state.resume)
        found = explore(
            Exhaustive(chunks(np.array(fresh, dtype=np.int64), config.batch_designs)),
            designs,
            workers,
            round_state,
            f"wham round {round_index}",
            weight=weight,
        )
        evaluated += found.evaluated
        candidates = sorted(candidates + found.candidates, key=lambda c: c.design)
        top = best(candidates, weight)
        if top is None or top == current:
            break
        current = top
        union = _local_search(
            evaluator=workers.evaluator,
            designs=designs,
            top_k=config.top_k,
            weight=weight,
            current=current,
            scheduled=scheduled,
        )
        fresh = [d for d in union if d not in evaluated]
        round_index += 1
    log.info(
        "wham: %d rounds, %d designs scheduled by the local search, %d evaluated with the placement",
        round_index + 1,
        len(scheduled),
        len(evaluated),
    )
    found = Found(designs, best(candidates, weight), evaluated, candidates)
    return replace(found, pruned_by={"not_chosen": found.pruned} if found.pruned else {})


def _local_search(
    *,
    evaluator: Evaluator,
    designs: Designs,
    top_k: int,
    weight: F64 | None,
    current: Candidate,
    scheduled: set[int],
) -> list[int]:
    """The union of the top-k designs of each stage of the current best plan."""
    placement = current.result
    assert isinstance(placement, Placement)
    search = LocalSearch(evaluator, designs, current.microbatch, placement.t, top_k, weight)
    stages = stage_works(evaluator, designs, current)
    union: set[int] = set()
    with progress("wham local search", len(stages), "stage") as bar:
        for stage in stages:
            union |= set(search.run(stage, current.design))
            bar.update()
    scheduled |= search.scheduled
    return sorted(union)
