"""The placement DP: the optimal plan of each variant of a problem, solved in one C++ call."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from phazec.solvers import core
from phazec.solvers.placement.problem import (
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    PlacementResult,
    Stage,
    Variant,
    core_arguments,
    core_variant,
)

logger = logging.getLogger(__name__)


def solve_placements(problem: PlacementProblem, variants: Sequence[Variant]) -> tuple[PlacementResult, ...]:
    """The optimal plan of each variant, solved in one C++ call that shares work between them.

    The downsets and stage pairs are built once; the per-stage figures once per t; the other
    settings only change the DP. The variants are solved in turn, and each starts its search from
    the fastest plan found for an earlier variant of its t that is a plan of it too (its incumbent),
    so it skips from the start what cannot beat that plan; each result, plan and ties included, is
    the one the variant gets alone (docs/model/placement.md). The GIL is released while solving and
    taken back every 20 ms to run Python's signal handlers: an exception one raises (`Interrupted` on
    Ctrl-C) stops the solve and is raised here. An infeasible variant reports the least memory with
    the optimizer state unsharded (d = 1).

    Raises:
        PhazecError: a variant names a t the problem has no figures for, or a bad HBM size.
        ValueError: a variant's settings miss a setting of the compiled model, name one it does not
            read, or hold a value out of its range.
    """
    arguments = [core_variant(problem, variant) for variant in variants]
    start_s = time.perf_counter()
    results = core.solve_placements(**core_arguments(problem), variants=arguments)
    logger.debug("placement: %d variants in %.3f s", len(variants), time.perf_counter() - start_s)
    return tuple(_result(problem, v, r) for v, r in zip(variants, results, strict=True))


def _result(problem: PlacementProblem, variant: Variant, r: core.PlanResult) -> PlacementResult:
    if not r.feasible:
        return NoFeasiblePlacement(
            t=variant.t,
            hbm_bytes=variant.hbm_bytes,
            min_memory_bytes=r.min_memory_bytes,
            parameter_bytes=r.parameter_bytes,
            activation_bytes=r.activation_bytes,
            stash_bytes=r.stash_bytes,
        )
    return Placement(
        stages=tuple(
            Stage(tuple(layers), devices, load_s, memory)
            for layers, devices, load_s, memory in zip(
                r.stage_layers, r.stage_devices, r.stage_load_s, r.stage_memory_bytes, strict=True
            )
        ),
        t=variant.t,
        d=r.d,
        hbm_bytes=variant.hbm_bytes,
        microbatches_per_pipeline=r.microbatches_per_pipeline,
        time_per_batch_s=r.time_per_batch_s,
        throughput_samples_per_s=problem.samples_per_microbatch
        * problem.microbatch_count
        / r.time_per_batch_s,
        fits_hbm=True,
    )
