"""Brute force over every plan of a small placement problem: the check on the C++ DP; and the two
helpers the placement tests share (a variant's settings by name, and the best plan over every t).

Every split of the layers into stages in pipeline order, and every data-parallel width, is timed
with the model of one plan (`plan_figures`: the C++ `evaluate_plan`, which shares its functions with
the DP); nothing is pruned. It checks the DP's search, not the model. Exponential in the layer count:
meant for about 8 layers.
"""

from collections.abc import Iterator

from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.evaluate import chunks_fit, plan_figures
from phazec.solvers.placement.problem import (
    RECOMPUTE_MODES,
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    PlacementResult,
    PlanSettings,
    Stages,
    Variant,
)


def plan_settings(recompute: str = "none", **others: int | bool) -> dict[str, int | bool]:
    """Every setting the compiled model reads, by name (`PHAZEC_PLAN_SETTINGS`): the recompute mode (one
    of `RECOMPUTE_MODES`) as its index, `others` as given, the rest at the C++ defaults (one model chunk
    per stage, every switch off: PHAZE's rule, under which the last stage does not recompute)."""
    return {
        "recompute": RECOMPUTE_MODES.index(recompute),
        "interleave": 1,
        "recompute_layers": 1,
        "zero_stage": 0,
        "cp": 1,
        "last_stage_recomputes": False,
        "overlap_grad_reduce": False,
        "overlap_param_gather": False,
        "ep": 1,
        "sequence_parallel": False,
        "pipeline_schedule": 0,
        "overlap_p2p_comm": False,
        "grad_reduce_in_fp32": False,
        "gradient_accumulation_fusion": False,
        **others,
    }


def best_placement(
    problem: PlacementProblem, hbm_bytes: int, settings: PlanSettings | None = None
) -> PlacementResult:
    """The fastest plan over the problem's t values at one HBM size and settings (`plan_settings()`
    when None); when nothing fits, the report of the t that needs the least memory."""
    chosen = plan_settings() if settings is None else settings
    results = solve_placements(problem, [Variant(int(t), hbm_bytes, chosen) for t in problem.t_values])
    feasible = [r for r in results if isinstance(r, Placement)]
    if feasible:
        return min(feasible, key=lambda r: r.time_per_batch_s)
    return min((r for r in results if isinstance(r, NoFeasiblePlacement)), key=lambda r: r.min_memory_bytes)


def all_plans(problem: PlacementProblem, interleave: int = 1) -> Iterator[Stages]:
    """Every sequence of non-empty stages that holds each layer once with no edge running backward
    and that `interleave` model chunks per stage can cut (`chunks_fit`)."""
    n = problem.layer_count
    preds = [0] * n
    for u, v in problem.edges.tolist():
        preds[v] |= 1 << u

    def extend(placed: int, stages: Stages) -> Iterator[Stages]:
        if placed == (1 << n) - 1:
            if chunks_fit(stages, interleave):
                yield stages
            return
        free = [v for v in range(n) if not placed >> v & 1]
        for choice in range(1, 1 << len(free)):
            stage = [v for i, v in enumerate(free) if choice >> i & 1]
            taken = placed | sum(1 << v for v in stage)
            if all(preds[v] & ~taken == 0 for v in stage):
                yield from extend(taken, (*stages, tuple(stage)))

    yield from extend(0, ())


def best_time_s(problem: PlacementProblem, variant: Variant) -> float | None:
    """The least time per batch over all plans that fit and whose t d devices per stage the
    expert-parallel width divides, or None when none does."""
    best: float | None = None
    ep = int(variant.settings.get("ep", 1))
    for stages in all_plans(problem, int(variant.settings.get("interleave", 1))):
        one = plan_figures(problem, variant, stages, 1)
        k = sum(stage.devices for stage in one.placement.stages)
        for d in range(1, min(problem.microbatch_count, problem.device_count // k) + 1):
            if (d * variant.t * int(variant.settings.get("cp", 1))) % ep:
                continue
            placement = (one if d == 1 else plan_figures(problem, variant, stages, d)).placement
            if placement.fits_hbm and (best is None or placement.time_per_batch_s < best):
                best = placement.time_per_batch_s
    return best


def min_memory_bytes(problem: PlacementProblem, variant: Variant) -> int:
    """The least, over plans that fit on the devices, of the peak memory of a device at d = 1."""
    peaks = []
    for stages in all_plans(problem, int(variant.settings.get("interleave", 1))):
        placement = plan_figures(problem, variant, stages, 1).placement
        if sum(stage.devices for stage in placement.stages) <= problem.device_count:
            peaks.append(max(stage.memory_bytes for stage in placement.stages))
    return min(peaks)
