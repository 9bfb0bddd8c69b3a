"""Hand-computed placements, the branching-graph cost rules, baselines, and bad input."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from phazec.errors import PhazecError
from phazec.hw.system import NetworkTier
from phazec.solvers import core
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.evaluate import evaluate_plan, explain_plan
from phazec.solvers.placement.megatron import megatron_plan
from phazec.solvers.placement.problem import (
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    Stage,
    Variant,
    core_arguments,
    core_variant,
)
from tests.conftest import REPO
from tests.solvers.placement.placement_reference import best_placement, plan_settings

pytestmark = pytest.mark.ext


def problem_of(
    forward_s: list[float],
    backward_s: list[float],
    edges: list[tuple[int, int, int]],
    **overrides: Any,
) -> PlacementProblem:
    """A one-width (t = 1) problem with 1000-byte weights and 10-byte activations and stash per layer."""
    n = len(forward_s)
    fields: dict[str, Any] = {
        "t_values": np.array([1]),
        "forward_latency_s": np.array([forward_s]),
        "backward_latency_s": np.array([backward_s]),
        "param_bytes": np.full((1, n), 1000),
        "activation_bytes": np.full((1, n), 10),
        "stash_bytes": np.full((1, n), 10),
        "input_bytes": np.zeros((1, n), dtype=np.int64),
        "tensor_parallel": np.zeros((1, n), dtype=bool),
        "edges": np.array([(u, v) for u, v, _ in edges], dtype=np.int64),
        "edge_bytes": np.array([b for _, _, b in edges], dtype=np.int64),
        "device_count": 4,
        "microbatch_count": 4,
        "samples_per_microbatch": 2,
        "tiers": (NetworkTier(2, 100.0, 0.0), NetworkTier(4, 10.0, 0.0)),
    }
    return PlacementProblem(**{**fields, **overrides})


# Three layers 0 -> 1 -> 2 on 4 devices, 4 microbatches, SGD (2 x weight bytes), t = 1.
# Latencies: forward 1, 2, 1 s; backward 2, 4, 2 s. Each edge carries 50 bytes.
# Network: pairs of devices {0,1}, {2,3} at 100 B/s; all four at 10 B/s; no latency.
CHAIN = problem_of([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [(0, 1, 50), (1, 2, 50)])
ROOMY = Variant(1, 10**6, plan_settings())
"""t = 1 with 1 MB of HBM (room for any plan of these small problems), every setting at its default."""


def test_three_layer_chain_on_four_devices_by_hand() -> None:
    # The four plans, each with every d <= min(4 microbatches, 4 devices // k):
    # [012], k = 1: load 4 + 8 = 12 s, no cut.
    #   d=1: 12 * 4 = 48.  d=2 (m=2): 24 + all-reduce of 3000 B over devices 0..1 (tier 0):
    #   2*1/2*3000/100 = 30 -> 54.  d=3 (m=2): 24 + 2*2/3*3000/10 = 424 (devices {0,1} and {2}:
    #   the pair {2,3} holds one member, so one link).  d=4: both pairs hold two members, two links
    #   at 10 B/s each: 12 + 2*3/4*3000/20 = 237.
    # [0][12], k = 2, replicas on {0,1}, {2,3}: tier 0 (100 B/s), the cut carries edge 0->1 (50 B).
    #   stage 0: 1 + 2 + 2 * 50/100 = 4; stage 1: (2 + 1) + (4 + 2) = 9.
    #   d=1: 9 * (4 + 2 - 1) = 45.  d=2 (m=2): 9 * 3 + all-reduce of 1000 B over devices {0, 2}
    #   (tier 1): 1000/10 = 100 -> 127.
    # [01][2]: stage 0: 3 + 6 + 1 = 10, stage 1: 3.  d=1: 10 * 5 = 50.  d=2: 30 + 2000/10 = 230.
    # [0][1][2], k = 3 spans devices 0..2 (tier 1, 10 B/s): each cut costs 2 * 50/10 = 10 s.
    #   stage loads 3 + 10 = 13, 6 + 10 = 16, 3.  d=1 only: 16 * (4 + 3 - 1) = 96.
    # Best: [0][12] with d = 1, 45 s. Memory: stage 0 (position 2) 2*1000 + 10 + 1*10 = 2020 B,
    # stage 1 (position 1) 2*2000 + 20 = 4020 B.
    best = Placement(
        stages=(Stage((0,), 1, 4.0, 2020), Stage((1, 2), 1, 9.0, 4020)),
        t=1,
        d=1,
        hbm_bytes=10**6,
        microbatches_per_pipeline=4,
        time_per_batch_s=45.0,
        throughput_samples_per_s=8 / 45.0,
        fits_hbm=True,
    )
    assert best_placement(CHAIN, 10**6) == best
    assert evaluate_plan(CHAIN, ROOMY, [[0], [1, 2]], 1) == best
    assert evaluate_plan(CHAIN, ROOMY, [[0, 1, 2]], 3).time_per_batch_s == pytest.approx(424.0, rel=1e-15)
    assert evaluate_plan(CHAIN, ROOMY, [[0, 1, 2]], 4).time_per_batch_s == pytest.approx(237.0, rel=1e-15)


@pytest.mark.parametrize(("sequence_parallel", "time_s"), [(False, 65.0), (True, 45.0)])
def test_sequence_parallelism_splits_the_pipeline_sends_over_the_stage_devices(
    sequence_parallel: bool, time_s: float
) -> None:
    # CHAIN at t = 2, every layer tensor-parallel: [0][12] takes the 4 devices, so its cut goes on the
    # 10 B/s tier. Each device of stage 0 sends the cut's 50 B forward and receives its gradient, 2 x
    # 50/10 = 10 s a microbatch; under sequence parallelism a half of them, 5 s (Megatron-Core's
    # pipeline tensor is s / t tokens long). Stage loads 1 + 2 + 10 = 13 s (8 s) and 3 + 6 = 9 s;
    # d = 1: the largest times 4 + 2 - 1 slots, 65 s (45 s).
    wide = replace(CHAIN, t_values=np.array([2]), tensor_parallel=np.ones((1, 3), dtype=bool))
    variant = Variant(2, 10**6, plan_settings(sequence_parallel=sequence_parallel))
    placement = evaluate_plan(wide, variant, [[0], [1, 2]], 1)
    assert [stage.load_s for stage in placement.stages] == [13.0 - 5.0 * sequence_parallel, 9.0]
    assert placement.time_per_batch_s == time_s


@pytest.mark.parametrize(
    ("interleave", "bandwidth", "overlap", "loads_s", "time_s"),
    [
        (2, 100.0, False, [8.0, 6.0], 36.0),
        (2, 100.0, True, [6.0, 6.0], 27.0),
        (2, 5.0, False, [46.0, 6.0], 207.0),
        (2, 5.0, True, [40.0, 6.0], 180.0),
        (1, 100.0, False, [7.0, 6.0], 35.0),
        (1, 100.0, True, [7.0, 6.0], 35.0),
    ],
)
def test_overlapped_pipeline_sends_expose_only_what_outlasts_the_computation(
    interleave: int, bandwidth: float, overlap: bool, loads_s: list[float], time_s: float
) -> None:
    # Four layers 0 -> 1 -> 2 -> 3, each F = 1 s and B = 2 s, 50 bytes on each edge, split [01][23] on
    # devices 0 and 1 (the pipeline's tier: `bandwidth` B/s), d = 1, m = 4. Stage 0 sends the cut's 50 B
    # forward and receives its gradient once per model-chunk pass, 2 v times a microbatch: at v = 2 and
    # 100 B/s, 4 x 0.5 = 2 s beside 6 s of computation, so a load of 8 s, or 6 s with the sends beside
    # the next chunk's pass; at 5 B/s, 4 x 10 = 40 s: 46 s, or max(6, 40) = 40 s. Interleaved 1F1B
    # runs m + (s - 1) / v = 4.5 loads: 36, 27, 207 and 180 s. At v = 1 Megatron-Core's 1F1B blocks on
    # each send, so the switch changes nothing: 6 + 2 x 0.5 = 7 s, times 4 + 1 = 35 s.
    chain = problem_of(
        [1.0] * 4, [2.0] * 4, [(0, 1, 50), (1, 2, 50), (2, 3, 50)],
        tiers=(NetworkTier(2, bandwidth, 0.0), NetworkTier(4, 10.0, 0.0)),
    )  # fmt: skip
    variant = Variant(1, 10**6, plan_settings(interleave=interleave, overlap_p2p_comm=overlap))
    placement = evaluate_plan(chain, variant, [[0, 1], [2, 3]], 1)
    assert [stage.load_s for stage in placement.stages] == loads_s
    assert placement.time_per_batch_s == time_s


def test_zero_bubble_h1_on_four_uniform_stages_by_hand() -> None:
    # Four layers, each F = 1 s and a backward pass of 2 s, of which W = 1 s is weight gradients (Qi et
    # al.'s B = 1, W = 1), one per stage, m = 8 microbatches, nothing sent, no weights to sync.
    # 1F1B: m (F + B + W) + (p - 1)(F + B + W) = 8 x 3 + 3 x 3 = 33 s, a bubble of 9 s.
    # ZB-H1: m (F + B + W) + (p - 1)(F + B - W) = 8 x 3 + 3 x 1 = 27 s, a bubble of 3 s.
    # With stage 2's W halved (its backward still 2 s), ZB-H1 credits each bubble slot the least W of any
    # stage: 8 x 3 + 3 x (3 - 2 x 0.5) = 30 s, a bubble of 6 s.
    uniform = problem_of(
        [1.0] * 4, [2.0] * 4, [(0, 1, 0), (1, 2, 0), (2, 3, 0)],
        weight_grad_latency_s=np.ones((1, 4)), param_bytes=np.zeros((1, 4), dtype=np.int64),
        microbatch_count=8,
    )  # fmt: skip
    stages = [[0], [1], [2], [3]]
    for schedule, problem, time_s, bubble_s in [
        (0, uniform, 33.0, 9.0),
        (1, uniform, 27.0, 3.0),
        (1, replace(uniform, weight_grad_latency_s=np.array([[1.0, 1.0, 0.5, 1.0]])), 30.0, 6.0),
    ]:
        variant = Variant(1, 10**6, plan_settings(pipeline_schedule=schedule))
        figures = explain_plan(problem, variant, stages, 1)
        assert (figures.placement.time_per_batch_s, figures.iteration.bubble_s) == (time_s, bubble_s)
        assert [cost.weight_grad_s for cost in figures.costs] == problem.weight_grad_s[0].tolist()


def test_zero_bubble_h1_chain_on_four_devices_by_hand() -> None:
    # CHAIN (above) with half of each backward pass weight gradients, W = 1, 2, 1 s; a stage's W is the
    # critical path of its layers' (their sum on a chain). ZB-H1's time at d = 1: m L + (s - 1) max(0,
    # L - 2 W), L the largest load and W the stages' least weight-gradient time.
    # [012]: 12 x 4 = 48 (no bubble).  [0][12]: loads 4 and 9, W 1 and 3: 36 + (9 - 2) = 43.
    # [01][2]: loads 10 and 3, W 3 and 1: 40 + (10 - 2) = 48.  [0][1][2]: loads 13, 16, 3, W 1, 2, 1:
    # 64 + 2 x (16 - 2) = 92. Wider d adds syncs as under 1F1B (54, 125, 230, ...). Best: [0][12] at
    # d = 1, 43 s (1F1B: 45 s), its bubble 7 s: stage 0 defers 1 s only, though stage 1 sets the pace.
    chain = replace(CHAIN, weight_grad_latency_s=np.array([[1.0, 2.0, 1.0]]))
    zero_bubble = Variant(1, 10**6, plan_settings(pipeline_schedule=1))
    best = best_placement(chain, 10**6, plan_settings(pipeline_schedule=1))
    assert isinstance(best, Placement)
    assert ([s.layers for s in best.stages], best.d, best.time_per_batch_s) == ([(0,), (1, 2)], 1, 43.0)
    assert [s.memory_bytes for s in best.stages] == [2020, 4020]  # 1F1B's microbatches in flight
    assert explain_plan(chain, zero_bubble, [[0], [1, 2]], 1).iteration.bubble_s == 7.0
    assert evaluate_plan(chain, zero_bubble, [[0, 1], [2]], 1).time_per_batch_s == 48.0
    assert evaluate_plan(chain, zero_bubble, [[0], [1], [2]], 1).time_per_batch_s == 92.0


def test_zero_bubble_h1_pipelines_where_1f1b_runs_one_stage() -> None:
    # Two layers, F = 2 s and B = 5 s (W = 2.5 s of it, so 2.5 s of input gradients), on 2 devices, one
    # microbatch, op recompute with Megatron's rule: layer 1 reruns 4 s of ops. One stage: load 18 s,
    # 18 s. Two: loads 7 and 11 s; 1F1B 11 x 2 = 22 s. ZB-H1 credits each stage's W only down to a
    # slot of its forward or input-gradient work, W' = min(2.5, (min(2, 2.5) + 2.5) / 2) = 2.25 s:
    # 11 + (11 - 2 x 2.25) = 17.5 s, the optimum. The DP's bound on a plan with an 11 s bottleneck,
    # 11 (m + (s - 1)(1 - 2 x 2.5 / 7)) = 14.1 s, must stay below it (a bound crediting W once,
    # 11 (2 - 2.5 / 7) = 18.1 s, would drop it for the 18 s plan).
    problem = problem_of(
        [2.0, 2.0], [5.0, 5.0], [(0, 1, 0)],
        weight_grad_latency_s=np.array([[2.5, 2.5]]), op_recompute_s=np.array([[0.0, 4.0]]),
        param_bytes=np.zeros((1, 2), dtype=np.int64), device_count=2, microbatch_count=1,
    )  # fmt: skip
    for schedule, stages, time_s in [(0, [(0, 1)], 18.0), (1, [(0,), (1,)], 17.5)]:
        settings = plan_settings("op", last_stage_recomputes=True, pipeline_schedule=schedule)
        best = best_placement(problem, 10**6, settings)
        assert isinstance(best, Placement)
        assert ([s.layers for s in best.stages], best.time_per_batch_s) == (stages, time_s)


def test_expert_parallelism_keeps_the_data_parallel_widths_it_tiles() -> None:
    # The same plans by hand, with the expert-parallel groups tiling each stage's d t devices (t = 1):
    # ep 2 leaves d = 2 and 4: [012] d=2 54 s, d=4 237 s; [0][12] d=2 127 s; [01][2] d=2 230 s: the
    # best is [012] at d = 2, 54 s. ep 4 leaves d = 4, which only [012] (k = 1) reaches: 237 s.
    two = best_placement(CHAIN, 10**6, plan_settings(ep=2))
    assert isinstance(two, Placement)
    assert ([s.layers for s in two.stages], two.d, two.time_per_batch_s) == ([(0, 1, 2)], 2, 54.0)
    four = best_placement(CHAIN, 10**6, plan_settings(ep=4))
    assert isinstance(four, Placement)
    assert ([s.layers for s in four.stages], four.d) == ([(0, 1, 2)], 4)
    assert four.time_per_batch_s == pytest.approx(237.0, rel=1e-15)


def test_a_least_memory_report_tells_zero_stages_apart_where_experts_shard_at_d_1() -> None:
    # Four layers on 2 devices at t = 2, the second tensor-parallel with 4 B of routed experts, ep 1:
    # their expert-data-parallel group is t d / ep = 2 devices even at d = 1, so ZeRO-2 shards their
    # gradients (2 B a device) where ZeRO-1 does not, and no plan fits 1000 B. The variants' least
    # memory differs by those 2 B, and one call solving both reports each as it is alone (a search
    # shares one report between variants whose least memory is the same: here it is not).
    problem = PlacementProblem(
        t_values=np.array([2]), forward_latency_s=np.ones((1, 4)), backward_latency_s=np.zeros((1, 4)),
        param_bytes=np.array([[5, 8, 8, 471]]), expert_param_bytes=np.array([[0, 4, 0, 0]]),
        activation_bytes=np.zeros((1, 4), dtype=np.int64), stash_bytes=np.array([[0, 0, 0, 198]]),
        input_bytes=np.zeros((1, 4), dtype=np.int64), tensor_parallel=np.array([[False, True, False, False]]),
        edges=np.array([[0, 1], [1, 2], [2, 3]]), edge_bytes=np.zeros(3, dtype=np.int64), device_count=2,
        microbatch_count=1, samples_per_microbatch=1, tiers=(NetworkTier(16, 1.0, 0.0),),
    )  # fmt: skip
    variants = [Variant(2, 1000, plan_settings("none", interleave=2, zero_stage=z)) for z in (1, 2)]
    together = solve_placements(problem, variants)
    alone = [solve_placements(problem, [v])[0] for v in variants]
    assert list(together) == alone
    assert all(isinstance(r, NoFeasiblePlacement) for r in together)
    least = [cast(NoFeasiblePlacement, r).min_memory_bytes for r in together]
    assert least[0] - least[1] == 2


def test_the_bound_under_zero_3_and_overlapped_sends_never_exceeds_the_real_time() -> None:
    # Four layers (forward 1 s, backward 2 s, 100 B each), two stages of two, d = 2, interleave 2 with the
    # sends beside the next chunk's pass, ZeRO-3, one tier at 10 B/s. Stage 0 sends 4 x 10 s = 40 s, more
    # than its 6 s of computation; its gathers are half a 2 x (1/2) x 200 / 10 = 20 s all-reduce, 10 s
    # before each pass, and a 10 s reduce-scatter: max(0, 10 - 2) + max(0, 20 - 4) = 24 s. Its load is
    # max(6, 40) + 24 = 64 s, stage 1's (no sends) 6 + 24 = 30; time 64 x (1 + 1/2) = 96 s. With 1 ms
    # forward passes the real time grows (less of each gather is hidden: 40 + 25.998, 98.997 s), so the
    # search's bound on those shorter latencies may not take this form: it takes
    # max(F + B + R + gathers, sends + h G) = max(4.002 + 25.998, 40) = 40 s for stage 0, 60 s in all.
    z = np.zeros((1, 4), dtype=np.int64)
    real = PlacementProblem(
        t_values=np.array([1]), forward_latency_s=np.ones((1, 4)), backward_latency_s=np.full((1, 4), 2.0),
        param_bytes=np.full((1, 4), 100), activation_bytes=z, stash_bytes=z, input_bytes=z,
        tensor_parallel=np.zeros((1, 4), dtype=bool), edges=np.array([[0, 1], [1, 2], [2, 3]]),
        edge_bytes=np.array([0, 100, 0]), device_count=4, microbatch_count=2, samples_per_microbatch=1,
        tiers=(NetworkTier(4, 10.0, 0.0),),
    )  # fmt: skip
    variant = Variant(1, 10**6, plan_settings("none", interleave=2, zero_stage=3, overlap_p2p_comm=True))
    stages = [[0, 1], [2, 3]]
    assert explain_plan(real, variant, stages, 2).placement.time_per_batch_s == 96.0
    short = replace(real, forward_latency_s=np.full((1, 4), 0.001))
    assert explain_plan(short, variant, stages, 2).placement.time_per_batch_s == pytest.approx(98.997)
    bound = explain_plan(replace(short, bound_sync_windows=True), variant, stages, 2).placement
    assert [s.load_s for s in bound.stages] == pytest.approx([40.0, 30.0])
    assert bound.time_per_batch_s == pytest.approx(60.0) and bound.time_per_batch_s <= 96.0


def test_three_layer_chain_under_memory_limits_and_recompute() -> None:
    # HBM 4000 B: [012] needs 2*3000 + 30 = 6030; [0][12] 4020; [01][2] 2*2000 + 20 + 1*20 = 4040;
    # [0][1][2] needs 2030, 2020, 2010: only it fits -> 96 s.
    # Full recompute at 4000 B (PHAZE's rule: the last stage does not recompute): each layer keeps
    # its input (0 B here) per microbatch in flight, plus one layer's activations (10 B) as the
    # working set. [0][12]: stage 1 (last, no recompute) still needs 4020; [01][2]: stage 0 needs
    # 2*2000 + 0 + 10 = 4010. [0][1][2]: memory 2000 + 0 + 10 = 2010, 2010, and 2000 + 1*10 = 2010;
    # loads add the forward again except on the last stage: 3 + 1 + 10 = 14, 6 + 2 + 10 = 18, 3
    # -> 18 * 6 = 108 s.
    # HBM 2000 B: nothing fits; the least peak is 2030 B ([0][1][2], stage 0: weights and
    # gradients 2000, no working set without recompute, stash 3 * 10 for 3 microbatches in flight).
    variants = [
        Variant(1, 4000, plan_settings()),
        Variant(1, 4000, plan_settings("full")),
        Variant(1, 2000, plan_settings()),
    ]
    tight, recompute, none = solve_placements(CHAIN, variants)
    assert isinstance(tight, Placement) and isinstance(recompute, Placement)
    assert [s.layers for s in tight.stages] == [(0,), (1,), (2,)]
    assert (tight.time_per_batch_s, [s.memory_bytes for s in tight.stages]) == (96.0, [2030, 2020, 2010])
    assert [s.load_s for s in recompute.stages] == [14.0, 18.0, 3.0]
    assert (recompute.time_per_batch_s, [s.memory_bytes for s in recompute.stages]) == (
        108.0,
        [2010, 2010, 2010],
    )
    assert none == NoFeasiblePlacement(
        t=1,
        hbm_bytes=2000,
        min_memory_bytes=2030,
        parameter_bytes=2000,
        activation_bytes=0,
        stash_bytes=30,
    )
    assert none.dominant == "parameters"


def test_microbatches_in_flight_stop_at_the_microbatches_there_are() -> None:
    # CHAIN with 2 microbatches on 3 stages: Megatron's warm-up runs both forwards and stops, so stage
    # 0 keeps 2 (not 3) microbatches: [0][1][2] needs 2000 + 2 * 10 = 2020, 2020, 2010 B and fits in
    # 2025 B (every other plan needs 4020 B or more). Loads 13, 16, 3 -> 16 * (2 + 3 - 1) = 64 s.
    two = replace(CHAIN, microbatch_count=2)
    placement = best_placement(two, 2025)
    assert isinstance(placement, Placement)
    assert [s.layers for s in placement.stages] == [(0,), (1,), (2,)]
    assert (placement.time_per_batch_s, [s.memory_bytes for s in placement.stages]) == (
        64.0,
        [2020, 2020, 2010],
    )
    assert evaluate_plan(two, Variant(1, 2025, plan_settings()), [[0], [1], [2]], 1) == placement


# A chain of 5 layers, forward 5, 3, 3, 3, 5 s, backward twice that (loads 15, 9, 9, 9, 15 s), weights
# 150, 150, 500, 250, 100 B, no cut bytes; 10 devices, 2 microbatches, one tier of 50 B/s, HBM 1550 B:
# no stage of more than 765 B of weights fits (SGD keeps 2 bytes per weight byte, plus 10 B of stash
# per layer and microbatch in flight), so [012], [123], [234] and any longer stage never do.
SYNCS = problem_of(
    [5.0, 3.0, 3.0, 3.0, 5.0],
    [10.0, 6.0, 6.0, 6.0, 10.0],
    [(i, i + 1, 0) for i in range(4)],
    param_bytes=np.array([[150, 150, 500, 250, 100]]),
    device_count=10,
    microbatch_count=2,
    tiers=(NetworkTier(16, 50.0, 0.0),),
)
SYNCS_VARIANT = Variant(1, 1550, plan_settings())
"""t = 1 with SYNCS's 1550 B of HBM, every setting at its default."""


def test_every_stage_syncs_its_own_weights_and_the_dp_keeps_lighter_slower_rests() -> None:
    # At d = 2 (m = 1) a plan of s stages takes X s + the largest stage sync w / 50 (2 * 1/2 * w / 50):
    # [01][2][34]: X 24, 72 + max(6, 10, 7) = 82.      [01][23][4]: 72 + max(6, 15, 2) = 87.
    # [0][12][34]: 72 + max(3, 13, 7) = 85.            [0][12][3][4]: X 18, 72 + 13 = 85.
    # [0][1][23][4]: 72 + 15 = 87.                     [0][1][2][3][4]: X 15, 75 + 10 = 85.
    # At d = 1 (m = 2, no sync) X (s + 1) is at least 90. So 82 s, whose rest [2][34] has the larger
    # largest load (24 > [23][4]'s 18): a DP keeping only the least-load partition of {2, 3, 4}
    # would find 85.
    placement = best_placement(SYNCS, 1550)
    assert isinstance(placement, Placement)
    assert ([s.layers for s in placement.stages], placement.d) == ([(0, 1), (2,), (3, 4)], 2)
    assert placement.time_per_batch_s == 82.0
    best = explain_plan(SYNCS, SYNCS_VARIANT, [[0, 1], [2], [3, 4]], 2).iteration
    assert (best.dp_sync_stage, best.dp_sync_s) == (1, 10.0)
    heavy = explain_plan(SYNCS, SYNCS_VARIANT, [[0, 1], [2, 3], [4]], 2)
    assert heavy.placement.time_per_batch_s == 87.0
    assert (heavy.iteration.dp_sync_stage, heavy.iteration.dp_sync_s) == (1, 15.0)


def test_overlap_hides_every_stage_sync_behind_the_first_stage_and_the_bound_stays_below() -> None:
    # [0][12][34] at d = 2 with overlap_grad_reduce: X 24, 72 s of pipeline; the first stage's last
    # backward pass (10 s) hides its own sync (3 s) and the later stages' (13 - 10 = 3 s exposed,
    # 7 s hidden): 75 s. Layer 0's backward pass at 12 s leaves X at 24 and hides 2 s more: 73 s,
    # faster for a slower layer. The bound opens every window as wide as X: nothing exposed, 72 s
    # either way, never above the real time, never falling as a latency grows.
    plan = [[0], [1, 2], [3, 4]]
    overlap = Variant(1, 1550, plan_settings(overlap_grad_reduce=True))
    slower = replace(SYNCS, backward_latency_s=np.array([[12.0, 6.0, 6.0, 6.0, 10.0]]))
    real = explain_plan(SYNCS, overlap, plan, 2)
    assert real.placement.time_per_batch_s == 75.0
    assert (real.iteration.dp_sync_stage, real.iteration.dp_sync_s) == (1, 3.0)
    assert evaluate_plan(slower, overlap, plan, 2).time_per_batch_s == 73.0
    for problem in (SYNCS, slower):
        bound = replace(problem, bound_sync_windows=True)
        assert evaluate_plan(bound, overlap, plan, 2).time_per_batch_s == 72.0
    # Without overlap no window opens, and the bound is the real time.
    bound = replace(SYNCS, bound_sync_windows=True)
    assert evaluate_plan(bound, SYNCS_VARIANT, plan, 2).time_per_batch_s == 85.0


def _interleaved_syncs(first_stage_bytes: int) -> PlacementProblem:
    """Six layers (forward 1 s, backward 2 s), three stages of two at d = 2 (m = 3), each stage's two
    layers its two model chunks; the first stage's weights `first_stage_bytes` a layer, the others' 50.
    A d = 2 all-reduce of w bytes at 50 B/s takes w / 50 s."""
    bytes_per_layer = [first_stage_bytes] * 2 + [50] * 4
    return problem_of(
        [1.0] * 6,
        [2.0] * 6,
        [(i, i + 1, 0) for i in range(5)],
        param_bytes=np.array([bytes_per_layer]),
        device_count=6,
        microbatch_count=6,
        tiers=(NetworkTier(16, 50.0, 0.0),),
    )


@pytest.mark.parametrize(
    ("first_stage_bytes", "zero_stage", "gather", "exposed_s"),
    [
        # Plain all-reduce, S = 2 w / 50: 10 s (250 B a layer), 16 s (400 B). The window is
        # (v - 1) g / v = 1 x 3 / 2 of the first stage's backward pass B = 4 s: 6 s; the floor, the last
        # chunk's half of the sync, S / 2. max(5, 4) = 5 and max(8, 10) = 10; the later stages' 2 s
        # syncs leave max(1, -4) = 1.
        (250, 0, False, 5.0),
        (400, 0, False, 10.0),
        # A distributed optimizer's reduce-scatter and all-gather, 8 s each of the 16 s: the first
        # behind 6 s of backward passes, max(4, 2) = 4; the second exposed whole without
        # overlap_param_gather, 8, or behind 1.5 x the forward pass F = 2 s, max(4, 5) = 5.
        (400, 1, False, 12.0),
        (400, 1, True, 9.0),
    ],
)
def test_an_interleaved_pipeline_syncs_each_model_chunk_apart(
    first_stage_bytes: int, zero_stage: int, gather: bool, exposed_s: float
) -> None:
    # [01][23][45] at d = 2, v = 2: loads F + B = 6 s, 6 x (3 + 2 / 2) = 24 s of pipeline. Megatron-Core
    # syncs each model chunk's gradients when its last backward pass ends: the backward passes run chunk
    # by chunk in groups of g = min(s, m) = 3 microbatches, so the first chunk's reduction hides behind
    # the other chunk's 3 passes of B / v = 2 s, and the last chunk's is left.
    problem = _interleaved_syncs(first_stage_bytes)
    settings = plan_settings(
        interleave=2, overlap_grad_reduce=True, overlap_param_gather=gather, zero_stage=zero_stage
    )
    variant = Variant(1, 10**6, settings)
    plan = [[0, 1], [2, 3], [4, 5]]
    explained = explain_plan(problem, variant, plan, 2)
    assert (explained.iteration.dp_sync_stage, explained.iteration.dp_sync_s) == (0, exposed_s)
    assert explained.placement.time_per_batch_s == 24.0 + exposed_s
    # The bound opens each window as wide as 1.5 X (X = 6 s; half each when both open): never above.
    bound = replace(problem, bound_sync_windows=True)
    assert evaluate_plan(bound, variant, plan, 2).time_per_batch_s <= 24.0 + exposed_s


@pytest.mark.parametrize(
    ("zero_stage", "gather", "exposed_s", "step_s"),
    [
        # fp32 gradients: the first stage's 800 B of weights have 1,600 B of gradients. Their all-reduce
        # takes 2 x 1/2 x 1,600 / 50 = 32 s, twice the bf16 16 s: behind 6 s of backward passes, the
        # floor half of it, max(16, 26) = 26 s. The step zeroes and reads the 1,600 B and reads and
        # writes the 800 B of weights: 4,800 B at 400 B/s, 12 s (bf16: 3,200 B, 8 s).
        (0, False, 26.0, 12.0),
        # A distributed optimizer reduce-scatters the fp32 gradients, R = 32 / 2 = 16 s, behind the
        # backward passes max(8, 10) = 10 s, and all-gathers the bf16 weights, G = 16 / 2 = 8 s: exposed
        # whole, or behind 1.5 x F = 3 s, max(4, 5) = 5 s. Its step: gradients 2 x (800 + 400) B, its
        # weights' shard 2 x 400 B: 3,200 B, 8 s.
        (1, False, 18.0, 8.0),
        (1, True, 15.0, 8.0),
    ],
)
def test_fp32_gradients_double_the_reduction_the_gradient_memory_and_their_step_bytes(
    zero_stage: int, gather: bool, exposed_s: float, step_s: float
) -> None:
    # The interleaved toy above ([01][23][45], d = 2, v = 2, 24 s of pipeline, 400 B a first-stage
    # layer) with Megatron-LM's fp32 gradient buffer (`grad_reduce_in_fp32`) and the step timed.
    problem = replace(_interleaved_syncs(400), hbm_bytes_per_s=400.0)
    settings = plan_settings(
        interleave=2,
        overlap_grad_reduce=True,
        overlap_param_gather=gather,
        zero_stage=zero_stage,
        grad_reduce_in_fp32=True,
    )
    plan = [[0, 1], [2, 3], [4, 5]]
    explained = explain_plan(problem, Variant(1, 10**6, settings), plan, 2)
    iteration = explained.iteration
    assert (iteration.dp_sync_stage, iteration.dp_sync_s, iteration.optimizer_s) == (0, exposed_s, step_s)
    assert explained.placement.time_per_batch_s == 24.0 + exposed_s + step_s
    # The gradients take twice the bytes (ZeRO-1 does not shard them); weights and state do not change.
    bf16 = explain_plan(problem, Variant(1, 10**6, {**settings, "grad_reduce_in_fp32": False}), plan, 2)
    first, first_bf16 = explained.memories[0], bf16.memories[0]
    assert (first.gradients_bytes, first_bf16.gradients_bytes) == (1600, 800)
    assert replace(first, gradients_bytes=800) == first_bf16
    # ZeRO-2 shards them: 2 x 400 B against 400 B.
    sharded = {**settings, "zero_stage": 2}
    assert explain_plan(problem, Variant(1, 10**6, sharded), plan, 2).memories[0].gradients_bytes == 800
    bound = replace(problem, bound_sync_windows=True)
    assert (
        evaluate_plan(bound, Variant(1, 10**6, settings), plan, 2).time_per_batch_s
        <= 24.0 + exposed_s + step_s
    )


def test_fused_gradient_accumulation_keeps_each_stages_largest_dummy_weight_gradients() -> None:
    # The chain's plan [0][12] at d = 1 (stage memory 2020 and 4020 B) with Transformer Engine's dummy
    # weight gradients of 100, 400 and 250 B: a stage keeps its largest layer's (its blocks share
    # them), 2020 + 100 and 4020 + 400 B, counted with the gradients; the time does not change.
    problem = replace(CHAIN, dummy_wgrad_bytes=np.array([[100, 400, 250]]))
    fused = Variant(1, 10**6, plan_settings(gradient_accumulation_fusion=True))
    figures = explain_plan(problem, fused, [[0], [1, 2]], 1)
    assert [stage.memory_bytes for stage in figures.placement.stages] == [2120, 4420]
    assert [memory.gradients_bytes for memory in figures.memories] == [1100, 2400]
    assert figures.placement.time_per_batch_s == 45.0
    assert evaluate_plan(problem, ROOMY, [[0], [1, 2]], 1) == evaluate_plan(CHAIN, ROOMY, [[0], [1, 2]], 1)
    # The search keeps the plan whose stages fit with them: at 4419 B stage 1 no longer does.
    roomy = best_placement(problem, 4420, plan_settings(gradient_accumulation_fusion=True))
    tight = best_placement(problem, 4419, plan_settings(gradient_accumulation_fusion=True))
    assert isinstance(roomy, Placement) and isinstance(tight, Placement)
    assert roomy.time_per_batch_s == 45.0 < tight.time_per_batch_s


def test_dp_rails_count_each_nodes_members_when_the_pipeline_does_not_divide_the_node() -> None:
    # CHAIN as [0][1][2] (the only plan in 2050 B): k = 3 devices per replica on nodes of 8 (10^6 B/s
    # inside, 1000 B/s per member's link between). The first stage's DP group is ids 0, 3, 6, 9, ...:
    # with d = 4 the nodes hold {0, 3, 6} and {9}: one link, 2 * 3/4 * 1000 B / 1000 = 1.5 s; with
    # d = 5 they hold {0, 3, 6} and {9, 12}: two links, 2 * 4/5 * 1000 / 2000 = 0.8 s.
    tiers = (NetworkTier(8, 1e6, 0.0), NetworkTier(64, 1000.0, 0.0))
    problem = replace(CHAIN, tiers=tiers, device_count=15, microbatch_count=5)
    variant = Variant(1, 2050, plan_settings())
    syncs = [explain_plan(problem, variant, [[0], [1], [2]], d).iteration.dp_sync_s for d in (4, 5)]
    assert syncs == [pytest.approx(1.5, rel=1e-15), pytest.approx(0.8, rel=1e-15)]
    # The DP (C++) prices it the same: d = 5, loads 3.1, 6.1, 3 (each cut 2 * 50 B / 1000 B/s), one
    # microbatch each: 6.1 * (1 + 3 - 1) + 0.8 = 19.1 s (d = 4: 6.1 * 4 + 1.5 = 25.9).
    placement = best_placement(problem, 2050)
    assert isinstance(placement, Placement)
    assert placement.d == 5
    assert placement.time_per_batch_s == pytest.approx(19.1, rel=1e-14)
    assert placement == evaluate_plan(problem, variant, [[0], [1], [2]], 5)


def test_a_tensor_sent_to_many_layers_crosses_a_cut_once() -> None:
    # An embedding (0) feeds every block; 0->1 carries hidden state and mask (30 B), 0->2 and 0->3
    # the mask (10 B); 1->2 and 2->3 hidden states (20 B). One tier of 4 devices at 10 B/s.
    problem = problem_of(
        [1.0] * 4,
        [2.0] * 4,
        [(0, 1, 30), (0, 2, 10), (0, 3, 10), (1, 2, 20), (2, 3, 20)],
        tiers=(NetworkTier(4, 10.0, 0.0),),
        microbatch_count=1,
    )
    # [01][23]: the cut carries layer 0's largest edge into {2,3} (10) and layer 1's (20): 30 B,
    # 3 s each way. Stage 0: forward path 0->1 = 2, backward 4, + 6 = 12; stage 1: 2 + 4 = 6.
    # Time = 12 * (1 + 2 - 1) = 24.
    two = evaluate_plan(problem, ROOMY, [[0, 1], [2, 3]], 1)
    assert ([s.load_s for s in two.stages], two.time_per_batch_s) == ([12.0, 6.0], 24.0)
    # [0][1][23]: cut 1 carries 0's largest edge into {1,2,3} (30 B); cut 2 relays the mask and
    # carries 1->2 (10 + 20 = 30 B). With full recompute each layer keeps its input (30 B here) per
    # microbatch in flight (the one microbatch there is, on every stage) plus one layer's activations
    # (10 B); the last stage does not recompute (PHAZE's rule): 2 * 2000 + 2 * 10.
    inputs = replace(problem, input_bytes=np.full((1, 4), 30))
    three = evaluate_plan(inputs, Variant(1, 10**6, plan_settings("full")), [[0], [1], [2, 3]], 1)
    assert [s.load_s for s in three.stages] == [1 + 2 + 1 + 6.0, 1 + 2 + 1 + 6.0, 2 + 4.0]
    assert [s.memory_bytes for s in three.stages] == [2000 + 30 + 10, 2000 + 30 + 10, 2 * 2000 + 20]


def test_stage_load_follows_the_critical_path() -> None:
    # 0 feeds 1 and 2, which run side by side: forward 1 + max(2, 3) = 4; backward max(1, 1) + 1 = 2.
    problem = problem_of([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [(0, 1, 0), (0, 2, 0)], microbatch_count=1)
    assert evaluate_plan(problem, ROOMY, [[0, 1, 2]], 1).stages[0].load_s == 6.0


def transformer(blocks: int, t_values: list[int], devices: int, **overrides: Any) -> PlacementProblem:
    """An HF-export-shaped layer graph: an embedding feeding every block and the head, blocks in a
    chain. Blocks take 1 s forward and 2 s backward at t = 1, split evenly over t."""
    n = blocks + 2
    edges = [(v, v + 1, 100) for v in range(n - 1)] + [(0, v, 8) for v in range(2, n)]
    widths = np.array(t_values)[:, None]
    figures = np.ones((len(t_values), n)) / widths
    return PlacementProblem(
        t_values=np.array(t_values),
        forward_latency_s=figures,
        backward_latency_s=2 * figures,
        param_bytes=(10**6 // widths).repeat(n, axis=1),
        activation_bytes=np.full((len(t_values), n), 10**4),
        stash_bytes=np.full((len(t_values), n), 10**4),
        input_bytes=np.zeros((len(t_values), n), dtype=np.int64),
        tensor_parallel=np.ones((len(t_values), n), dtype=bool),
        edges=np.array([(u, v) for u, v, _ in edges]),
        edge_bytes=np.array([b for _, _, b in edges]),
        device_count=devices,
        microbatch_count=256,
        samples_per_microbatch=1,
        tiers=(NetworkTier(4, 1e11, 1e-6), NetworkTier(max(devices, 8), 1e10, 1e-5)),
        **overrides,
    )


def test_llama_shaped_graph_places_and_beats_the_megatron_baseline() -> None:
    # Llama2-7B's layer graph: 32 blocks between the embedding and the head, 1024 devices.
    problem = transformer(32, [1, 2], 1024)
    best = best_placement(problem, 10**9)
    assert isinstance(best, Placement)
    found = Variant(best.t, 10**9, plan_settings())
    assert evaluate_plan(problem, found, [s.layers for s in best.stages], best.d) == best
    baseline = evaluate_plan(problem, Variant(1, 10**9, plan_settings()), megatron_plan(problem, 8), 128)
    assert [len(s.layers) for s in baseline.stages] == [5] + [4] * 6 + [5]
    assert best.time_per_batch_s <= baseline.time_per_batch_s


def test_megatron_plan_splits_blocks_evenly() -> None:
    problem = transformer(6, [1], 8)
    assert megatron_plan(problem, 3) == ((0, 1, 2), (3, 4), (5, 6, 7))
    assert megatron_plan(problem, 4) == ((0, 1), (2, 3), (4,), (5, 6, 7))
    assert megatron_plan(problem, 1) == (tuple(range(8)),)
    with pytest.raises(PhazecError, match=r"pp = 7 is not valid.*1\.\.6"):
        megatron_plan(problem, 7)


def test_solving_is_deterministic_and_batched_equals_single() -> None:
    problem = transformer(12, [1, 2, 4], 64)
    variants = [
        Variant(t, hbm, plan_settings(mode))
        for t in (1, 2, 4)
        for mode in ("none", "full")
        for hbm in (10**7, 10**9)
    ]
    batched = solve_placements(problem, variants)
    assert batched == solve_placements(problem, variants)
    assert batched == tuple(solve_placements(problem, [v])[0] for v in variants)


def test_nothing_fits_reports_what_dominates() -> None:
    # One 1000-byte-weight layer needs 2000 B for weights and gradients wherever it goes.
    problem = transformer(6, [1], 8, optimizer_factor=8)
    result = best_placement(problem, 10**6)
    assert isinstance(result, NoFeasiblePlacement)
    # Adam: 8 x 10**6 weight bytes per layer; the best plan has one layer on some stage.
    assert result.parameter_bytes == 8 * 10**6 and result.dominant == "parameters"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"forward_latency_s": np.array([[1.0, -2.0, 1.0]])},
            r"forward_latency_s\[0, 1\] = .*-2\.0.*>= 0 seconds",
        ),
        (
            {"stash_bytes": np.array([[1, 2, -3]])},
            r"stash_bytes\[0, 2\] = .*-3.*between 0 and 1099511627776 bytes",
        ),
        ({"param_bytes": np.array([[1, 2**62, 3]])}, r"param_bytes\[0, 1\] = .*4611686018427387904.*1 TiB"),
        ({"param_bytes": np.array([[1, 2]])}, r"param_bytes has shape \(1, 2\).*\(1, 3\)"),
        (
            {"edges": np.array([[0, 1], [1, 2], [2, 0]]), "edge_bytes": np.array([1, 1, 1])},
            r"cycle 0 -> 1 -> 2 -> 0",
        ),
        (
            {"dummy_wgrad_bytes": np.array([[1, 1001, 1]])},
            r"dummy_wgrad_bytes\[0, 1\] = 1001 is not valid: a layer's dummy weight gradients are at",
        ),
        ({"device_count": 0}, r"device_count = 0 is not valid"),
        ({"t_values": np.array([8])}, r"t_values = \[8\] is not valid for 4 devices"),
        ({"edge_bytes": np.array([50])}, r"edge_bytes \(1,\)"),
        ({"optimizer_factor": 0}, r"optimizer_factor = 0 is not valid: it must be a positive integer"),
        ({"tiers": (NetworkTier(2, 100.0, 0.0),)}, r"group sizes \[2\] are not valid.*>= 4 devices"),
        (
            {"tiers": (NetworkTier(cast(int, 2.5), 100.0, 0.0), NetworkTier(4, 10.0, 0.0))},
            r"\[2\.5, 4\] are not valid.*integer",
        ),
        (
            {"tiers": (NetworkTier(4, 100.0, float("inf")),)},
            r"group sizes \[4\] are not valid.*finite latencies",
        ),
        ({"forward_latency_s": np.zeros((1, 3)), "backward_latency_s": np.zeros((1, 3))}, r"at t = 1 is 0"),
        (
            {"weight_grad_latency_s": np.array([[1.0, 4.5, 1.0]])},
            r"weight_grad_latency_s\[0, 1\] = 4.5 is not valid: the weight gradients are part of the "
            r"backward, at most backward_latency_s\[0, 1\] = 4.0",
        ),
    ],
)
def test_bad_problems_raise_a_clear_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        replace(CHAIN, **change)


def test_bad_plans_and_variants_raise_a_clear_error() -> None:
    with pytest.raises(PhazecError, match=r"edge 0 -> 1 runs from stage 1 back to stage 0"):
        evaluate_plan(CHAIN, ROOMY, [[1, 2], [0]], 1)
    with pytest.raises(PhazecError, match=r"hold each layer 0\.\.2 exactly once"):
        evaluate_plan(CHAIN, ROOMY, [[0, 1]], 1)
    with pytest.raises(PhazecError, match=r"d = 3 is not valid.*6 devices"):
        evaluate_plan(CHAIN, ROOMY, [[0], [1, 2]], 3)
    with pytest.raises(PhazecError, match=r"t = 2 is not valid.*\[1\] only"):
        solve_placements(CHAIN, [Variant(2, 1000, plan_settings())])
    with pytest.raises(PhazecError, match=r"hbm_bytes = 0 is not valid"):
        solve_placements(CHAIN, [Variant(1, 0, plan_settings())])
    # The interleave is checked where it is read, in the compiled model (ValueError).
    with pytest.raises(ValueError, match=r"interleave and HBM bytes must be positive"):
        evaluate_plan(CHAIN, Variant(1, 10**6, plan_settings(interleave=0)), [[0, 1, 2]], 1)
    with pytest.raises(ValueError, match=r"interleave and HBM bytes must be positive"):
        solve_placements(CHAIN, [Variant(1, 10**6, plan_settings(interleave=0))])
    # ZB-H1 runs one model chunk per stage; `phazec.config.settings` names the knobs first.
    with pytest.raises(ValueError, match=r"ZB-H1 is not interleaved: interleave must be 1"):
        solve_placements(CHAIN, [Variant(1, 10**6, plan_settings(interleave=2, pipeline_schedule=1))])
    with pytest.raises(ValueError, match=r"unknown pipeline schedule"):
        evaluate_plan(CHAIN, Variant(1, 10**6, plan_settings(pipeline_schedule=2)), [[0, 1, 2]], 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"interleave": None}, r"plan setting 'interleave' is missing"),
        ({"interleaved": 2}, r"unknown plan setting 'interleaved'"),
        ({"recompute": True}, r"plan setting 'recompute' must be an int"),
        ({"overlap_grad_reduce": 1}, r"plan setting 'overlap_grad_reduce' must be a bool"),
    ],
)
def test_the_extension_reads_each_plan_setting_by_name(change: dict[str, Any], message: str) -> None:
    # A variant's settings reach the C++ model as a dict by name (PHAZEC_PLAN_SETTINGS); a missing,
    # unknown or mistyped one is refused by name, never read as a default.
    arguments = core_arguments(CHAIN)
    index, hbm_bytes, settings = core_variant(CHAIN, ROOMY)
    bad = {name: value for name, value in {**settings, **change}.items() if value is not None}
    with pytest.raises(ValueError, match=message):
        core.evaluate_plan(**arguments, variant=(index, hbm_bytes, bad), stages=[[0, 1, 2]], d=1)
    with pytest.raises(ValueError, match=message):
        core.solve_placements(**arguments, variants=[(index, hbm_bytes, bad)])


def test_shipped_stubs_match_the_extension(tmp_path: Path) -> None:
    root = REPO
    generated = tmp_path / "_core.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "phazec._core", "-o", str(generated)],
        check=True,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "-q",
            "--config",
            str(root / "pyproject.toml"),
            str(generated),
        ],
        check=True,
    )
    shipped = (root / "phazec" / "_core.pyi").read_text().splitlines()
    assert [line for line in shipped if not line.startswith("# ")] == generated.read_text().splitlines()
