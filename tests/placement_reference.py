"""Brute force over every plan of a small placement problem: the check on the C++ DP.

Every split of the layers into stages in pipeline order, and every data-parallel width, is timed
with the model of one plan (`plan_figures`: the C++ `evaluate_plan`, which shares its functions with
the DP); nothing is pruned. It checks the DP's search, not the model. Exponential in the layer count:
meant for about 8 layers.
"""

from collections.abc import Iterator

from phazec.solvers.placement.model import PlacementProblem, Stages, Variant, chunks_fit, plan_figures


def all_plans(problem: PlacementProblem) -> Iterator[Stages]:
    """Every sequence of non-empty stages that holds each layer once with no edge running backward
    and that the problem's interleave can cut into model chunks (`chunks_fit`)."""
    n = problem.layer_count
    preds = [0] * n
    for u, v in problem.edges.tolist():
        preds[v] |= 1 << u

    def extend(placed: int, stages: Stages) -> Iterator[Stages]:
        if placed == (1 << n) - 1:
            if chunks_fit(stages, problem.interleave):
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
    """The least time per batch over all plans that fit, or None when none fits."""
    problem = variant.applied(problem)
    best: float | None = None
    for stages in all_plans(problem):
        one = plan_figures(problem, variant.t, stages, 1)
        k = sum(stage.devices for stage in one.placement.stages)
        for d in range(1, min(problem.microbatch_count, problem.device_count // k) + 1):
            placement = (one if d == 1 else plan_figures(problem, variant.t, stages, d)).placement
            if placement.fits_hbm and (best is None or placement.time_per_batch_s < best):
                best = placement.time_per_batch_s
    return best


def min_memory_bytes(problem: PlacementProblem, variant: Variant) -> int:
    """The least, over plans that fit on the devices, of the peak memory of a device at d = 1."""
    problem = variant.applied(problem)
    peaks = []
    for stages in all_plans(problem):
        placement = plan_figures(problem, variant.t, stages, 1).placement
        if sum(stage.devices for stage in placement.stages) <= problem.device_count:
            peaks.append(max(stage.memory_bytes for stage in placement.stages))
    return min(peaks)
