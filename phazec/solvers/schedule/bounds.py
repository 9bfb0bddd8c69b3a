"""The schedule lower bound of `schedule_model.bounds` for one operator graph on many designs at once.

A layer's scheduling problems on the designs of a batch share their structure (operators, kinds,
dependencies); only latencies, HBM traffic and core counts differ. `lower_bounds_s` computes, as
arrays over the designs, exactly the bound `bounds(problem, [problem.modes(i) ...]).lower_s` gives on
each design (the same floating-point operations in the same order, so the same bits): each op's
fastest duration and its least core-time per core on each resource under the modes
`ScheduleProblem.modes` allows (its HBM traffic time on the HBM), then heads (release times) in
topological order, tails in reverse (each also at least a predecessor's head or a successor's tail
plus its fastest duration), and the largest head + duration + tail or resource-energy bound.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phazec.ir.graph import topological_order
from phazec.solvers.schedule.problem import HBM, NET, TC, VC, OpKind, ScheduleProblem, descendants

F64 = NDArray[np.float64]


def lower_bounds_s(
    structure: ScheduleProblem,
    single_s: F64,
    spread_s: F64,
    hbm_s: F64,
    *,
    num_tc: NDArray[np.int64],
    num_vc: NDArray[np.int64],
) -> F64:
    """Per design, the lower bound on every schedule of `structure`'s graph when its ops take
    `single_s` / `spread_s` and keep HBM busy `hbm_s` ([ops, designs], in `structure`'s op order) on a
    design with `num_tc` tensor and `num_vc` vector cores ([designs])."""
    n, count = single_s.shape
    capacity = {TC: num_tc.astype(np.float64), VC: num_vc.astype(np.float64), NET: np.ones(count)}
    fastest, work = _durations(structure, single_s, spread_s, hbm_s, capacity)
    on_chip = [op.kind is not OpKind.COLLECTIVE for op in structure.ops]
    work[HBM] = np.where(np.array(on_chip)[:, None], hbm_s, np.nan)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, c in sorted(set(structure.deps)):
        preds[c].append(a)
        succs[a].append(c)
    order = topological_order(n, structure.deps)
    reach = descendants(structure)
    head = np.zeros((n, count))
    tail = np.zeros((n, count))
    for j in order:
        ancestors = [i for i in range(n) if (reach[i] >> j) & 1]
        head[j] = _energy(ancestors, head, work)
        for a in preds[j]:
            head[j] = np.maximum(head[j], head[a] + fastest[a])
    for j in reversed(order):
        tail[j] = _energy([i for i in range(n) if (reach[j] >> i) & 1], tail, work)
        for c in succs[j]:
            tail[j] = np.maximum(tail[j], tail[c] + fastest[c])
    lower = np.max(head + fastest + tail, axis=0, initial=0.0)
    everything = list(range(n))
    out: F64 = np.maximum(np.maximum(lower, _energy(everything, head, work)), _energy(everything, tail, work))
    return out


def _durations(
    structure: ScheduleProblem, single_s: F64, spread_s: F64, hbm_s: F64, capacity: dict[str, F64]
) -> tuple[F64, dict[str, F64]]:
    """Each op's fastest duration over its allowed modes (`ScheduleProblem.modes`), and per resource
    its least core-time per core (NaN where the op does not hold that resource); both [ops, designs]."""
    fastest = single_s.copy()
    work = {r: np.full(single_s.shape, np.nan) for r in capacity}
    for i in range(len(structure.ops)):
        resources = structure.resources(i)
        single, spread, hbm = single_s[i], spread_s[i], hbm_s[i]
        lighter = (hbm > 0) & (spread > single)
        may_spread = (
            (spread < single) | lighter if resources != (NET,) else np.zeros(len(single), dtype=np.bool_)
        )
        one_core = np.all([capacity[r] == 1 for r in resources], axis=0)
        forced = may_spread & ((spread == 0) | (one_core & (spread < single) & (hbm == 0)))
        fastest[i] = np.where(forced, spread, np.where(may_spread, np.minimum(spread, single), single))
        for r in resources:
            alone, shared = single / capacity[r], capacity[r] * spread / capacity[r]
            work[r][i] = np.where(forced, shared, np.where(may_spread, np.minimum(alone, shared), alone))
    return fastest, work


def _energy(ops: list[int], release: F64, work: dict[str, F64]) -> F64:
    """Per design, max over resources r and thresholds h of h + the core-time per core of the ops in
    `ops` on r released at h or later (`schedule_model._energy` on every design)."""
    best = np.zeros(release.shape[1])
    for r in (TC, VC, NET, HBM):
        on_r = [i for i in ops if not np.isnan(work[r][i, 0])]
        if not on_r:
            continue
        released = release[on_r]
        order = np.argsort(-released, axis=0, kind="stable")
        total = np.cumsum(np.take_along_axis(work[r][on_r], order, axis=0), axis=0)
        best = np.maximum(best, np.max(np.take_along_axis(released, order, axis=0) + total, axis=0))
    return best
