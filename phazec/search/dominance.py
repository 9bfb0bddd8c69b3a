"""Dominance pruning: designs that an earlier design of the space matches or beats in every resource.

Design j *dominates* design i when j comes before i in design order and has at least i's resources in
every knob: tensor cores, array width and depth, vector cores and width, global buffer, clock and HBM
bandwidth. `dominated` marks every dominated design; the `bounded` strategy drops them before it
bounds the rest, and counts them in `designs_pruned` as `dominated`.

Why the answer stays exhaustive's. The cost model promises (its `monotone` flag, checked by a property
test on random designs and operators) that no operator's latency, on one core or on all cores, grows
when any knob grows. Then:

1. An optimal schedule of a layer on j is no longer than on i. Take an optimal schedule on i and keep
   every op's start time and mode on j. Every op ends no later, so each dependency still holds. An op
   on one core still finds a core: no more ops hold a core type at once than on i, and j has at least
   as many cores of each type. A spread op held every core of its types alone on i, so it does on j
   too. The network admits one collective at a time on both. The schedule stays feasible on j with a
   makespan no longer, so j's optimum is no longer. (Modes dropped by `ScheduleProblem.modes` never
   matter: a dropped mode is never faster than the kept one and holds no fewer cores.)
2. The placement DP's time per batch only grows with any layer latency while no DP sync hides
   behind a pass and the schedule is not ZB-H1 (`Knobs.time_can_fall`; else `bounded` keeps every
   design), and which plans fit in
   HBM does not depend on the design, so j's best time per batch at every microbatch and variant is
   at most i's.
3. The answer is the fastest design, the first in design order among equally fast ones. If it were
   dominated by j, j would be at least as fast and earlier: a contradiction. So the answer is never
   dropped, and it is evaluated in full, so its plan and time are exhaustive's too.

Step 1 needs the schedules to be optimal; they are, within the solver's relative gap (`solver.mip_gap`),
except the ones a node limit stops, which result.json lists with their proven bounds. Designs are only
compared with kept ones: if i is dominated by a dropped j, j is dominated by an earlier kept design,
which then dominates i too (the relation is transitive and design order is finite).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phazec.hw.designs import KNOBS, Designs

RESOURCES = (*KNOBS, "clock_hz", "hbm_bytes_per_s")
"""Every knob in which more never makes an operator slower."""
BLOCK = 512
"""Designs compared at once (a block against the designs kept before it, then against itself)."""


def dominated(designs: Designs) -> NDArray[np.bool_]:
    """Per design, whether an earlier design has at least its resources in every knob."""
    values = np.stack([getattr(designs, name).astype(np.float64) for name in RESOURCES], axis=1)
    out = np.zeros(len(designs), dtype=np.bool_)
    kept = values[:0]
    for start in range(0, len(designs), BLOCK):
        block = values[start : start + BLOCK]
        by_kept = _covers(kept, block).any(axis=0)
        by_block = np.triu(_covers(block, block), k=1).any(axis=0)
        out[start : start + len(block)] = by_kept | by_block
        kept = np.concatenate([kept, block[~out[start : start + len(block)]]])
    return out


def _covers(first: NDArray[np.float64], second: NDArray[np.float64]) -> NDArray[np.bool_]:
    """[len(first), len(second)]: whether first[a] has at least second[b]'s every resource."""
    covers = np.ones((len(first), len(second)), dtype=np.bool_)
    for knob in range(first.shape[1]):
        covers &= first[:, knob, None] >= second[None, :, knob]
    return covers
