"""The compiled core, `phazec._core` (built from ext/ with nanobind): this module is the only one that
imports it, and every other module reaches the C++ code through the names re-exported here.

It holds the layer-graph utilities (cycle, topological order, downsets), the placement DP and the
timing of one plan, the list scheduler and the exact schedule search; `phazec/_core.pyi` types it.
"""

from __future__ import annotations

from pathlib import Path

from phazec import _core
from phazec._core import (
    IterationTime,
    PlanFigures,
    PlanResult,
    PlanStage,
    ScheduleSearchResult,
    StageCost,
    StageMemory,
    StageTime,
    downsets,
    evaluate_plan,
    find_cycle,
    list_schedule,
    search_schedule,
    solve_placements,
    topological_order,
)

__all__ = [
    "IterationTime",
    "PlanFigures",
    "PlanResult",
    "PlanStage",
    "ScheduleSearchResult",
    "StageCost",
    "StageMemory",
    "StageTime",
    "downsets",
    "evaluate_plan",
    "extension_path",
    "find_cycle",
    "list_schedule",
    "search_schedule",
    "solve_placements",
    "topological_order",
]


def extension_path() -> Path:
    """The compiled module's file (its bytes are part of a search state's key)."""
    return Path(_core.__file__)
