"""Megatron's stages: the blocks split evenly over the pipeline, the embedding first, the head last."""

from __future__ import annotations

from phazec.errors import PhazecError
from phazec.solvers import core
from phazec.solvers.placement.problem import PlacementProblem, Stages, edge_list


def megatron_plan(problem: PlacementProblem, pp: int) -> Stages:
    """Megatron-style stages: the layers between the first and the last (in topological order)
    split into `pp` contiguous runs as evenly as possible, the first layer (the embedding) added
    to the first stage and the last layer (the head) to the last stage.

    Raises:
        PhazecError: pp is not in 1..(layer count - 2).
    """
    order = core.topological_order(problem.layer_count, edge_list(problem))
    blocks = order[1:-1]
    if isinstance(pp, bool) or not isinstance(pp, int) or not 1 <= pp <= max(len(blocks), 1):
        raise PhazecError(
            f"pp = {pp!r} is not valid: the {len(blocks)} layers between the embedding and the head split "
            f"into 1..{max(len(blocks), 1)} pipeline stages."
        )
    runs = [blocks[i * len(blocks) // pp : (i + 1) * len(blocks) // pp] for i in range(pp)]
    runs[0] = order[:1] + runs[0]
    runs[-1] = runs[-1] + order[-1:] if len(order) > 1 else runs[-1]
    return tuple(tuple(run) for run in runs)
