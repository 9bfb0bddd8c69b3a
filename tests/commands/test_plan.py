"""Megatron-LM's execution in the placement model, by hand; Korthikanti's activation bytes on a real
GPT block; `phazec-plan` against `phazec` on the same fixed plan; bad plans."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec import api
from phazec.cli import run_plan
from phazec.commands.plan import predict_plan
from phazec.commands.search import run_search
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config, tpuv4_space, typed
from phazec.cost.model import OpCosts, latency_model_from_config
from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.export import exported_onnx
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, system_from_config
from phazec.hw.validation import Validation, ratio_range, validation
from phazec.ir.core import Graph, LayerMemory, Op, OpKind, Tensor
from phazec.passes.attention import is_causal
from phazec.passes.memory import megatron_bytes
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.layer_costs import (
    Split,
    class_costs,
    neighbour_gemms,
    op_table,
    overlap_collectives,
    sequence_split,
    sequence_split_width,
)
from phazec.predict.plan_report import plan_stages
from phazec.predict.training import Knobs
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.evaluate import PlanFigures, explain_plan, plan_figures
from phazec.solvers.placement.problem import Placement, PlacementProblem, Variant
from tests.conftest import compose_config
from tests.solvers.placement.placement_reference import best_placement, best_time_s, plan_settings

# --- A 2-stage, 2-microbatch toy, by hand ----------------------------------------------------------
# Layers 0 -> 1, one per stage: forward 1 s, backward 2 s, attention core 0.25 s each, op recompute's
# ops 0.5 s; 1000 B of weights per device. Per sample (microbatch 1) a layer stashes 100 B: 40 B of
# attention core, 40 B not split by tensor parallelism (LayerNorm and dropout), and 20 B of input; op
# recompute keeps 50 B of it, 20 B of them not split. Its bytes per recompute mode come from
# `megatron_bytes`, as the Evaluator builds them: without sequence parallelism stash 100, selective 60,
# input 20, op 50; with it (t = 2) the unsplit bytes and the input split 2 ways: 80, 40, 10, 40. The
# edge 0 -> 1 carries 50 B; one tier of 4 devices at 100 B/s: a transfer takes 0.5 s.
# m = 2 microbatches, s = 2 stages; stage 0 keeps 2 microbatches in flight, stage 1 one.
LAYER = LayerMemory(
    parameter_count=0, parameter_bytes=0, gradient_bytes=0, optimizer="sgd", optimizer_state_bytes=0,
    stash_fixed_bytes=0, stash_per_sample_bytes=100, input_fixed_bytes=0, input_per_sample_bytes=20,
    core_per_sample_bytes=40, replicated_per_sample_bytes=40, checkpoint_per_sample_bytes=20,
    op_per_sample_bytes=50, op_replicated_per_sample_bytes=20,
)  # fmt: skip


def toy(t: int = 1, sequence_parallel: bool = False, **overrides: Any) -> PlacementProblem:
    """The toy with its layers split over t devices (t = 2: 2 stages x 2 devices, d = 1), its bytes
    with or without sequence parallelism."""
    layer = megatron_bytes(LAYER, 1, t if sequence_parallel else 1)

    def both(value: int) -> np.ndarray:
        return np.array([[value, value]])

    fields: dict[str, Any] = {
        "t_values": np.array([t]),
        "forward_latency_s": np.array([[1.0, 1.0]]),
        "backward_latency_s": np.array([[2.0, 2.0]]),
        "param_bytes": both(1000),
        "activation_bytes": both(layer.stash_bytes),
        "stash_bytes": both(layer.stash_bytes),
        "input_bytes": both(layer.checkpoint_bytes),
        "selective_stash_bytes": both(layer.selective_bytes),
        "selective_recompute_s": np.array([[0.25, 0.25]]),
        "op_stash_bytes": both(layer.op_bytes),
        "op_recompute_s": np.array([[0.5, 0.5]]),
        "tensor_parallel": np.full((1, 2), t > 1),
        "edges": np.array([(0, 1)]),
        "edge_bytes": np.array([50]),
        "device_count": 4,
        "microbatch_count": 2,
        "samples_per_microbatch": 1,
        "tiers": (NetworkTier(4, 100.0, 0.0),),
    }
    return PlacementProblem(**{**fields, **overrides})


def toy_variant(t: int = 1, recompute: str = "none", **others: int | bool) -> Variant:
    """The toy's variant at width t: 1 MB of HBM, Megatron-LM's rule (the last stage recomputes too)
    unless `others` says otherwise."""
    return Variant(t, 10**6, plan_settings(recompute, **{"last_stage_recomputes": True, **others}))


# Time. Load per microbatch = forward 1 + backward 2 + recompute (selective 0.25, full the forward
# 1, op 0.5) + 2 v transfers of 0.5 s on stage 0 (each of its v chunks sends and receives; stage 1 has no
# cut after it); time = max load * (m + (s - 1) / v) = max load * (2 + 1 / v). Sequence parallelism
# moves the same bytes (reduce-scatter + all-gather for all-reduce), and the layers' latencies are
# given here (the cost pass is what splits their replicated vector work): the time does not change.
#   v = 1: none [4, 3] -> 12; selective [4.25, 3.25] -> 12.75; full [5, 4] -> 15; op [4.5, 3.5] -> 13.5.
#   v = 2: none [5, 3] -> 12.5; selective [5.25, 3.25] -> 13.125; full [6, 4] -> 15; op [5.5, 3.5]
#   -> 13.75.
# Memory per device = weights + gradients 2 x 1000 + ceil(kept x u / v) + working, with u the
# (chunk-)microbatches in flight: v = 1: u = 2 and 1; v = 2: 2 (q - 1) + (v - 1) s + 1 = 5 and 3,
# the 5 capped at the m v = 4 chunk-microbatches there are (Megatron's warm-up runs all 4 forwards).
# kept: none the stash, selective the selective stash, full the input, op the op stash; working: none
# 0, selective one attention core 40, full one layer's stash, op what it does not keep of one layer's
# stash (100 - 50; with SP 80 - 40).
#   no SP (100, 60, 20): v = 1: none 2000 + 200, 2000 + 100; selective 2000 + 120 + 40,
#     2000 + 60 + 40; full 2000 + 40 + 100, 2000 + 20 + 100. v = 2: none 2000 + 200, 2000 + 150;
#     selective 2000 + 120 + 40, 2000 + 90 + 40; full 2000 + 40 + 100, 2000 + 30 + 100.
#   SP (80, 40, 10): v = 1: none 2000 + 160, 2000 + 80; selective 2000 + 80 + 40, 2000 + 40 + 40;
#     full 2000 + 20 + 80, 2000 + 10 + 80. v = 2: none 2000 + 160, 2000 + 120; selective
#     2000 + 80 + 40, 2000 + 60 + 40; full 2000 + 20 + 80, 2000 + 15 + 80.
#   op, no SP: v = 1: 2000 + 100 + 50, 2000 + 50 + 50; v = 2: 2000 + 100 + 50, 2000 + 75 + 50.
#   op, SP: v = 1: 2000 + 80 + 40, 2000 + 40 + 40; v = 2: 2000 + 80 + 40, 2000 + 60 + 40.
TIMES: dict[tuple[str, int], tuple[list[float], float]] = {
    ("none", 1): ([4.0, 3.0], 12.0),
    ("selective", 1): ([4.25, 3.25], 12.75),
    ("full", 1): ([5.0, 4.0], 15.0),
    ("none", 2): ([5.0, 3.0], 12.5),
    ("selective", 2): ([5.25, 3.25], 13.125),
    ("full", 2): ([6.0, 4.0], 15.0),
    ("op", 1): ([4.5, 3.5], 13.5),
    ("op", 2): ([5.5, 3.5], 13.75),
}
MEMORY: dict[tuple[str, bool, int], list[int]] = {
    ("none", False, 1): [2200, 2100],
    ("selective", False, 1): [2160, 2100],
    ("full", False, 1): [2140, 2120],
    ("none", False, 2): [2200, 2150],
    ("selective", False, 2): [2160, 2130],
    ("full", False, 2): [2140, 2130],
    ("none", True, 1): [2160, 2080],
    ("selective", True, 1): [2120, 2080],
    ("full", True, 1): [2100, 2090],
    ("none", True, 2): [2160, 2120],
    ("selective", True, 2): [2120, 2100],
    ("full", True, 2): [2100, 2095],
    ("op", False, 1): [2150, 2100],
    ("op", False, 2): [2150, 2125],
    ("op", True, 1): [2120, 2080],
    ("op", True, 2): [2120, 2100],
}


@pytest.mark.parametrize("interleave", [1, 2])
@pytest.mark.parametrize("sequence_parallel", [False, True])
@pytest.mark.parametrize("mode", ["none", "selective", "full", "op"])
def test_toy_iteration_and_memory_by_hand(mode: str, sequence_parallel: bool, interleave: int) -> None:
    # The formulas, straight from `plan_figures`: a one-layer stage cannot be cut into two model
    # chunks, so `explain_plan` and the DP refuse the v = 2 plan (the next test), but the arithmetic
    # is the same on stages that can.
    problem = toy(2, sequence_parallel)
    stages = ((0,), (1,))
    figures = plan_figures(problem, toy_variant(2, mode, interleave=interleave), stages, 1)
    placement = figures.placement
    loads, time_s = TIMES[mode, interleave]
    assert [s.load_s for s in placement.stages] == loads
    assert placement.time_per_batch_s == time_s
    assert [s.memory_bytes for s in placement.stages] == MEMORY[mode, sequence_parallel, interleave]
    it = figures.iteration
    parts = it.forward_s + it.backward_s + it.recompute_s + it.p2p_s + it.bubble_s + it.dp_sync_s
    assert parts == pytest.approx(time_s, rel=1e-12)


# Block recompute, by hand: a chain of 6 layers on 2 stages of 3, (0 1 2) and (3 4 5); layers 0 (the
# embedding) and 5 (the output layer) are not transformer blocks. Forward f = 0.5, 1, 1.5, 1, 2, 0.75 s,
# backward 2 f; stash 10, 100, 120, 100, 150, 200 B, inputs 5, 20, 20, 20, 30, 30 B, activations
# 10, 100, 130, 100, 160, 200 B; 100 B of weights a layer (weights + gradients 600 B a stage); no bytes
# cross the cut, m = 2, every stage recomputes (Megatron's rule).
# A stage reruns its first N v blocks (N = recompute_layers): each keeps its inputs and is rebuilt alone
# (the working set is the largest of their activations); every other layer keeps its stash.
#   N = 1, v = 1: stage 0 reruns block 1: load 3 + 6 + 1 = 10, kept 10 + 20 + 120 = 150, working 100;
#     stage 1 reruns block 3: load 3.75 + 7.5 + 1 = 12.25, kept 20 + 150 + 200 = 370, working 100.
#     Time 12.25 (2 + 1) = 36.75; memory 600 + 2 x 150 + 100 = 1000 and 600 + 370 + 100 = 1070.
#   N = 2 (N = 3, more than a stage holds, the same): stage 0 reruns blocks 1 and 2: load 11.5, kept
#     10 + 20 + 20 = 50, working 130; stage 1 blocks 3 and 4: load 14.25, kept 20 + 30 + 200 = 250,
#     working 160. Time 14.25 x 3 = 42.75; memory 600 + 100 + 130 = 830 and 600 + 250 + 160 = 1010.
#   N = 1, v = 2: N v = 2 blocks a stage, as N = 2 above: time 14.25 (2 + 1/2) = 35.625; in flight
#     min(2 (q - 1) + (v - 1) s + 1, m v) = 4 and 3 chunk-microbatches: memory 600 + 50 x 4 / 2 + 130 =
#     830 and 600 + ceil(250 x 3 / 2) + 160 = 1135.
BLOCK_TOY = {
    (1, 1): ([10.0, 12.25], 36.75, [1.0, 1.0], [1000, 1070]),
    (2, 1): ([11.5, 14.25], 42.75, [2.5, 3.0], [830, 1010]),
    (3, 1): ([11.5, 14.25], 42.75, [2.5, 3.0], [830, 1010]),
    (1, 2): ([11.5, 14.25], 35.625, [2.5, 3.0], [830, 1135]),
}


@pytest.mark.parametrize(("layers", "interleave"), sorted(BLOCK_TOY))
def test_block_recompute_by_hand(layers: int, interleave: int) -> None:
    forward = np.array([[0.5, 1.0, 1.5, 1.0, 2.0, 0.75]])

    def row(*values: int) -> np.ndarray:
        return np.array([values])

    problem = toy(
        forward_latency_s=forward,
        backward_latency_s=2 * forward,
        param_bytes=row(*[100] * 6),
        activation_bytes=row(10, 100, 130, 100, 160, 200),
        stash_bytes=row(10, 100, 120, 100, 150, 200),
        input_bytes=row(5, 20, 20, 20, 30, 30),
        selective_stash_bytes=None,
        selective_recompute_s=None,
        op_stash_bytes=None,
        op_recompute_s=None,
        tensor_parallel=np.zeros((1, 6), dtype=bool),
        block_layers=np.array([False, True, True, True, True, False]),
        edges=np.array([(v, v + 1) for v in range(5)]),
        edge_bytes=np.zeros(5, dtype=np.int64),
    )
    variant = toy_variant(1, "block", recompute_layers=layers, interleave=interleave)
    figures = plan_figures(problem, variant, ((0, 1, 2), (3, 4, 5)), 1)
    loads, time_s, recompute_s, memory = BLOCK_TOY[layers, interleave]
    assert [s.load_s for s in figures.placement.stages] == loads
    assert figures.placement.time_per_batch_s == time_s
    assert [t.recompute_s for t in figures.times] == recompute_s
    assert [s.memory_bytes for s in figures.placement.stages] == memory
    assert [c.block_layers for c in figures.costs] == [min(2, layers * interleave)] * 2
    assert figures.modes == ("block", "block")
    # The DP's optimum over every split and width is the brute force's.
    best = best_placement(problem, 10**6, variant.settings)
    assert isinstance(best, Placement) and best.time_per_batch_s == best_time_s(problem, variant)


def test_toy_zero_bubble_h1_by_hand() -> None:
    # The toy at t = 2 without recompute, half of each backward pass weight gradients (W = 1 s of 2):
    # loads [4, 3] (stage 0's 1 s of transfers), 1F1B 4 x (2 + 1) = 12 s, a 4 s bubble. ZB-H1 keeps
    # 1F1B's microbatches in flight and defers W into the bubble, (s - 1) max(0, L - 2 W) = 4 - 2 = 2 s:
    # 2 x 4 + 2 = 10 s, the same memory.
    problem = toy(2, weight_grad_latency_s=np.array([[1.0, 1.0]]))
    stages = ((0,), (1,))
    one_f_one_b = plan_figures(problem, toy_variant(2), stages, 1)
    figures = plan_figures(problem, toy_variant(2, pipeline_schedule=1), stages, 1)
    assert (one_f_one_b.placement.time_per_batch_s, one_f_one_b.iteration.bubble_s) == (12.0, 4.0)
    assert (figures.placement.time_per_batch_s, figures.iteration.bubble_s) == (10.0, 2.0)
    assert [s.memory_bytes for s in figures.placement.stages] == MEMORY["none", False, 1]
    it = figures.iteration
    assert it.forward_s + it.backward_s + it.p2p_s + it.bubble_s + it.dp_sync_s == 10.0


def fastest_zero_bubble_s(stages: int, microbatches: int, f: float, b: float, w: float) -> float:
    """The least makespan of `stages` equal stages running `microbatches` microbatches by brute force:
    every order of each stage's passes (a microbatch's forward f, then its input gradients b, then its
    weight gradients w; forward passes, and input-gradient passes, in microbatch order; at most 1F1B's
    stages - j microbatches in flight on stage j), each pass starting when its stage is free and the
    pass it waits for has ended (a forward pass the stage before's, an input-gradient pass the stage
    after's, or the same stage's forward pass on the last stage)."""
    passes = [(kind, i) for i in range(microbatches) for kind in "FBW"]
    took = {"F": f, "B": b, "W": w}

    def allowed(order: tuple[tuple[str, int], ...], j: int) -> bool:
        at = {p: k for k, p in enumerate(order)}
        if any(not at["F", i] < at["B", i] < at["W", i] for i in range(microbatches)):
            return False
        if any(at[k, i] > at[k, i + 1] for k in "FB" for i in range(microbatches - 1)):
            return False
        in_flight = itertools.accumulate((kind == "F") - (kind == "B") for kind, _ in order)
        return max(in_flight) <= stages - j

    orders = [[o for o in itertools.permutations(passes) if allowed(o, j)] for j in range(stages)]
    return min(makespan_s(chosen, took) for chosen in itertools.product(*orders))


def makespan_s(orders: Sequence[Sequence[tuple[str, int]]], took: dict[str, float]) -> float:
    """When the last pass ends, each stage running its `orders[j]` of passes (F forward, B input
    gradients, W weight gradients of microbatch i, each `took[kind]` long), each pass starting when its
    stage is free and the pass it waits for has ended (a forward pass the stage before's, an
    input-gradient pass the stage after's, or the same stage's forward pass on the last stage); inf if
    the orders wait on each other forever."""
    stages = len(orders)
    end: dict[tuple[int, str, int], float] = {}
    free, done = [0.0] * stages, [0] * stages
    moved = True
    while moved:
        moved = False
        for j in range(stages):
            while done[j] < len(orders[j]):
                kind, i = orders[j][done[j]]
                waits = {"F": (j - 1, "F", i) if j else None, "W": None}.get(
                    kind, (j + 1, "B", i) if j + 1 < stages else (j, "F", i)
                )
                if waits is not None and waits not in end:
                    break
                start = max(free[j], end[waits] if waits is not None else 0.0)
                end[j, kind, i] = free[j] = start + took[kind]
                done[j], moved = done[j] + 1, True
    return max(free) if done == [len(o) for o in orders] else math.inf


@pytest.mark.parametrize("weight_grad_s", [0.25, 0.5, 1.0, 1.5, 1.75])
def test_zero_bubble_h1_is_the_fastest_order_of_equal_stages(weight_grad_s: float) -> None:
    # The toy without its transfers (equal stages: F = 1 s, backward 2 s, W of it), 2 microbatches on 2
    # stages: ZB-H1's time is the least makespan over every order of the passes that keeps 1F1B's
    # microbatches in flight. A bubble slot is never shorter than its forward or its input-gradient
    # work (no weight gradients run beside the first forward chain or the last backward chain): with W
    # above the input gradients (1.5, 1.75) it is 1 s, where crediting the whole W twice gave
    # max(0, 3 - 2 W) = 0 s, 6 s in all against the 7 s no order reaches below.
    problem = toy(2, edge_bytes=np.array([0]), weight_grad_latency_s=np.full((1, 2), weight_grad_s))
    figures = plan_figures(problem, toy_variant(2, pipeline_schedule=1), ((0,), (1,)), 1)
    fastest = fastest_zero_bubble_s(2, 2, 1.0, 2.0 - weight_grad_s, weight_grad_s)
    assert figures.placement.time_per_batch_s == pytest.approx(fastest, abs=1e-12)


def zero_bubble_order_makespan_s(stages: int, microbatches: int, f: float, b: float, w: float) -> float:
    """The makespan (`makespan_s`) of one ZB-H1 order on `stages` equal stages: 1F1B's order (stages -
    1 - j forward passes of warm-up on stage j, then a forward and a backward pass in turn, then the
    last backward passes), each backward pass split into its input gradients b, then its weight
    gradients w, but stage j defers the weight gradients of its first j backward passes to its end."""

    def order(j: int) -> list[tuple[str, int]]:
        out = [("F", i) for i in range(min(stages - 1 - j, microbatches))]
        forward, deferred = len(out), list[tuple[str, int]]()
        for i in range(microbatches):
            if forward < microbatches:
                out.append(("F", forward))
                forward += 1
            out.append(("B", i))
            (deferred if i < j else out).append(("W", i))
        return out + deferred

    return makespan_s([order(j) for j in range(stages)], {"F": f, "B": b, "W": w})


@pytest.mark.parametrize(("stages", "microbatches"), [(2, 2), (3, 5), (4, 4), (5, 13), (8, 16)])
def test_zero_bubble_h1_is_the_makespan_of_an_order_of_its_passes(stages: int, microbatches: int) -> None:
    # Equal stages of F, input gradients B and weight gradients W (random, seeded; W above F or B too):
    # the model's ZB-H1 time, L m + (s - 1) max(0, L - 2 W'), W' = min(W, (min(F, B) + W) / 2), is the
    # makespan of 1F1B's order with stage j deferring its first j weight-gradient passes to its end.
    rng = np.random.default_rng(stages * 100 + microbatches)
    for f, b, w in rng.uniform(0.25, 3.0, size=(8, 3)):
        n = stages
        problem = toy(
            1,
            forward_latency_s=np.full((1, n), f),
            backward_latency_s=np.full((1, n), b + w),
            weight_grad_latency_s=np.full((1, n), w),
            param_bytes=np.zeros((1, n), dtype=np.int64),
            activation_bytes=np.zeros((1, n), dtype=np.int64),
            stash_bytes=np.zeros((1, n), dtype=np.int64),
            input_bytes=np.zeros((1, n), dtype=np.int64),
            selective_stash_bytes=None,
            selective_recompute_s=None,
            op_stash_bytes=None,
            op_recompute_s=None,
            tensor_parallel=np.zeros((1, n), dtype=bool),
            edges=np.array([(v, v + 1) for v in range(n - 1)]).reshape(-1, 2),
            edge_bytes=np.zeros(n - 1, dtype=np.int64),
            device_count=n,
            microbatch_count=microbatches,
            tiers=(NetworkTier(n, 100.0, 0.0),),
        )
        figures = plan_figures(problem, toy_variant(1, pipeline_schedule=1), tuple((v,) for v in range(n)), 1)
        expected = zero_bubble_order_makespan_s(stages, microbatches, f, b, w)
        assert figures.placement.time_per_batch_s == pytest.approx(expected, rel=1e-12)


def test_interleaving_needs_a_layer_per_model_chunk() -> None:
    # Two layers under interleave 2: two one-layer stages cannot each be cut into 2 chunks. The DP
    # keeps both layers in one stage (no pipeline: 2 microbatches x (3 + 3) s = 12 s), and
    # explain_plan names the plan it refuses.
    problem, chunked = toy(), toy_variant(interleave=2)
    (placement,) = solve_placements(problem, [chunked])
    assert isinstance(placement, Placement)
    assert ([s.layers for s in placement.stages], placement.d, placement.time_per_batch_s) == (
        [(0, 1)],
        1,
        12.0,
    )
    with pytest.raises(
        PhazecError, match=r"stages = \[\[0\], \[1\]\] is not valid under interleave 2: .* at least 2 layers"
    ):
        explain_plan(problem, chunked, [[0], [1]], 1)


def test_toy_phazes_rule_and_one_device_per_stage() -> None:
    # PHAZE's rule: the last stage does not recompute (load 3 s, memory 2000 + 100 as under none);
    # the time is still stage 0's 5 s x 3 = 15. The same toy on one device per stage (t = 1).
    variant = toy_variant(recompute="full", last_stage_recomputes=False)
    placement = explain_plan(toy(), variant, [[0], [1]], 1).placement
    assert [s.load_s for s in placement.stages] == [5.0, 3.0]
    assert placement.time_per_batch_s == 15.0
    assert [s.memory_bytes for s in placement.stages] == [2140, 2100]


def test_toy_zero_stages_2_and_3_by_hand() -> None:
    # Both layers in one stage (2000 B of weights, the larger layer 1000 B), d = 2 replicas of one
    # device (m = 1), mixed-precision Adam (6 x 2000 B of state, sharded: 6000), the step at 1000 B/s.
    # ZeRO-2: weights 2000, gradients sharded 1000, state 6000, one microbatch's activations 2 x 100:
    # 9200 B. Its load 1 + 1 + 2 + 2 = 6 s; its gradient sync over 2 replicas on the 100 B/s tier,
    # 2 * (1/2) * 2000 / 100 = 20 s (a reduce-scatter and an all-gather), none hidden; the step zeroes
    # 2000 B of gradients, reads its 1000 B of them, reads and writes its 1000 B of weights and 6000 B
    # of state: 17000 B, 17 s. Time 6 + 20 + 17 = 43.
    # ZeRO-3: the weights sharded too, 1000, with the gathered larger layer and the next, prefetched
    # (2 x 1000), and the gradients of a gathered layer (1000): 3000 + 2000 + 6000 + 200 = 11200 B.
    # Each microbatch gathers the weights before the forward pass (10 s, half the 20 s all-reduce;
    # the 2 s forward hides 2) and before the backward pass, then reduce-scatters the gradients (20 s;
    # the 4 s backward hides 4): 8 + 16 = 24 s exposed, a load of 30 s; no sync after the flush.
    # Time 30 + 17 = 47. At d = 1 nothing is gathered: the load is 6 s.
    problem = toy(optimizer_factor=8, hbm_bytes_per_s=1000.0)
    zero2 = explain_plan(problem, toy_variant(zero_stage=2), [[0, 1]], 2)
    assert figures_of(zero2) == (43.0, 9200, 20.0, 17.0, 0.0)
    zero3 = explain_plan(problem, toy_variant(zero_stage=3), [[0, 1]], 2)
    assert figures_of(zero3) == (47.0, 11200, 0.0, 17.0, 24.0)
    assert (zero3.memories[0].weights_bytes, zero3.memories[0].gradients_bytes) == (3000, 2000)
    alone = explain_plan(problem, toy_variant(zero_stage=3), [[0, 1]], 1)
    assert alone.times[0].load_s == 6.0


def test_toy_zero_3_with_fp8_weight_gathers_by_hand() -> None:
    # The ZeRO-3 toy above with each layer's 800 B of linear weights gathered as one-byte copies
    # (`fp8_param_gather`): 1000 - 800 / 2 = 600 B gathered a layer, 1200 B for the stage. Each gather
    # is half a 2 * (1/2) * 1200 / 100 = 12 s all-reduce: 6 s before the forward pass (2 s hidden: 4)
    # and 6 s before the backward pass, then the gradients' reduce-scatter of the 2000 B as before
    # (10 s): 16 s, 4 hidden, 12 exposed. 16 s exposed in all (24 s before), a load of 22 s; time
    # 22 + 17 = 39. Memory: the shard (1000) and two gathered copies of the larger layer (2 x 600),
    # the gradients as before (2000), state 6000, activations 200: 10400 B (11200 before).
    gathered = np.array([[600, 600]])
    problem = toy(optimizer_factor=8, hbm_bytes_per_s=1000.0, gather_bytes=gathered)
    zero3 = explain_plan(problem, toy_variant(zero_stage=3), [[0, 1]], 2)
    assert figures_of(zero3) == (39.0, 10400, 0.0, 17.0, 16.0)
    assert (zero3.memories[0].weights_bytes, zero3.memories[0].gradients_bytes) == (2200, 2000)
    zero2 = explain_plan(problem, toy_variant(zero_stage=2), [[0, 1]], 2)
    assert figures_of(zero2) == (43.0, 9200, 20.0, 17.0, 0.0)  # below stage 3 nothing is gathered


def test_toy_collectives_holding_a_share_of_the_cores_by_hand() -> None:
    # The toy on a 1000 B/s tier, its collectives' kernels holding a quarter of the cores while they run
    # beside computation: the computation beside C seconds of them takes 0.25 C longer, so a pass of W
    # seconds and a collective of C take max(W + 0.25 C, C) together (max(W, C) with every core free).
    # ZeRO-3, both layers in one stage, d = 2: each gather is half of a 2 * (1/2) * 2000 / 1000 = 2 s
    # all-reduce, 1 s, the reduce-scatter 1 s too. The 2 s forward pass hides its gather, 0.25 s
    # longer; the 4 s backward pass its gather and reduce-scatter, 0.5 s longer: 0.75 s exposed (0
    # with every core free), a load of 6.75 s, time 6.75 + the 17 s step = 23.75.
    # ZeRO-1 with both overlaps, one layer a stage (no pipeline bytes): a stage's sync is a 1 s
    # all-reduce's worth, a 0.5 s reduce-scatter beside the 2 s backward pass and a 0.5 s all-gather
    # beside the 1 s forward pass: 0.125 + 0.125 = 0.25 s exposed. Time 3 * (1 + 1) + 0.25 + 8.5 =
    # 14.75. Without a distributed optimizer the 1 s all-reduce beside the backward pass: 0.25 s, and
    # the 16 s step: 22.25. A collective no window hides is exposed whole, whatever the share.
    fast = (NetworkTier(4, 1000.0, 0.0),)
    held = toy(
        optimizer_factor=8,
        hbm_bytes_per_s=1000.0,
        tiers=fast,
        edge_bytes=np.array([0]),
        collective_share=0.25,
    )
    zero3 = explain_plan(held, toy_variant(zero_stage=3), [[0, 1]], 2)
    assert figures_of(zero3) == (23.75, 11200, 0.0, 17.0, 0.75)
    free = replace(held, collective_share=0.0)
    assert figures_of(explain_plan(free, toy_variant(zero_stage=3), [[0, 1]], 2)) == (
        23.0,
        11200,
        0.0,
        17.0,
        0.0,
    )
    both = toy_variant(zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True)
    zero1 = explain_plan(held, both, [[0], [1]], 2)
    assert figures_of(zero1) == (14.75, 5100, 0.25, 8.5, 0.0)
    plain = explain_plan(held, toy_variant(overlap_grad_reduce=True), [[0], [1]], 2)
    assert figures_of(plain)[::2] == (22.25, 0.25, 0.0)
    exposed = explain_plan(held, toy_variant(zero_stage=1), [[0], [1]], 2)
    assert exposed.iteration.dp_sync_s == 1.0
    with pytest.raises(PhazecError, match=r"collective_share = 1.5 is not valid: .* between 0 and 1"):
        replace(held, collective_share=1.5)


def test_toy_context_parallel_2_by_hand() -> None:
    # cp = 2 on the toy's two stages, d = 1: each stage runs on 2 devices (4 in all), with the latencies
    # and bytes the cost pass gives each device (its share of every sample's tokens), so the loads stay
    # [4, 3] and the time 4 * (2 + 1) = 12, but the gradients are reduced over the 2 context-parallel
    # devices of each stage, and a sharded optimizer shards over them: mixed-precision Adam's 6000 B
    # of a stage's state becomes 3000, and the sync, a reduce-scatter and an all-gather of
    # 2 * (1/2) * 1000 / 100 = 10 s, is exposed whole: 22 s. Stage 0 keeps its 2 microbatches in
    # flight (2 x 100 B): 1000 + 1000 + 3000 + 200 = 5200 B; stage 1 one: 5100 B. At cp = 1 and d = 2
    # the same group reduces and shards the same bytes, but each replica runs one microbatch.
    problem = toy(optimizer_factor=8)
    figures = explain_plan(problem, toy_variant(cp=2, zero_stage=1), [[0], [1]], 1)
    assert [s.devices for s in figures.placement.stages] == [2, 2]
    assert figures.placement.time_per_batch_s == 22.0
    assert figures.iteration.dp_sync_s == 10.0
    assert [s.memory_bytes for s in figures.placement.stages] == [5200, 5100]
    replicas = explain_plan(problem, toy_variant(zero_stage=1), [[0], [1]], 2)
    assert replicas.iteration.dp_sync_s == 10.0
    assert [m.optimizer_state_bytes for m in replicas.memories] == [3000, 3000]
    with pytest.raises(PhazecError, match="d = 2 is not valid for this plan: 2 replicas of a 4-device"):
        explain_plan(problem, toy_variant(cp=2), [[0], [1]], 2)


def figures_of(figures: PlanFigures) -> tuple[float, int, float, float, float]:
    """Time per batch, the stage's memory, the exposed DP sync, the step and the exposed ZeRO-3 gathers."""
    it = figures.iteration
    stage_bytes = figures.placement.stages[0].memory_bytes
    return figures.placement.time_per_batch_s, stage_bytes, it.dp_sync_s, it.optimizer_s, it.shard_s


def test_toy_data_parallel_adam_zero_1_overlap_and_step() -> None:
    # d = 2 (m = 1), mixed-precision Adam: 12 B of state per parameter = 6 x 1000 B, sharded over 2
    # replicas: 3000. Stage 0: 1000 + 1000 + 3000 + 100 (its one microbatch in flight) = 5100. Its
    # gradient sync over the 2 replicas: 2 * (1/2) * 1000 / 100 = 10 s, half a reduce-scatter, half
    # an all-gather. The reduce-scatter's 5 s hide behind its backward (2 s): 3 exposed; the
    # all-gather's 5 s follow the step: 8 exposed; overlapped with the next forward pass (1 s,
    # overlap_param_gather): 4, so 7.
    # Optimizer step: every gradient zeroed (1000 B), the replica's half of the gradients read (500),
    # its half of the weights (500) and its state (3000) read and written: 8500 B at 1000 B/s = 8.5 s.
    # Time 4 * (1 + 1) + 8 + 8.5 = 24.5, or 23.5 with the gather overlapped.
    problem = toy(optimizer_factor=8, hbm_bytes_per_s=1000.0)
    reduced = toy_variant(zero_stage=1, overlap_grad_reduce=True)
    figures = explain_plan(problem, reduced, [[0], [1]], 2)
    assert figures.placement.time_per_batch_s == 24.5
    assert [s.memory_bytes for s in figures.placement.stages] == [5100, 5100]
    assert (figures.iteration.dp_sync_s, figures.iteration.optimizer_s) == (8.0, 8.5)
    gathered = toy_variant(zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True)
    figures = explain_plan(problem, gathered, [[0], [1]], 2)
    assert (figures.placement.time_per_batch_s, figures.iteration.dp_sync_s) == (23.5, 7.0)
    # Without a distributed optimizer there is no all-gather: the all-reduce's 10 s hide behind the
    # backward: 8 exposed, whatever overlap_param_gather says; 6000 B of Adam state unsharded, and the
    # step reads and writes all of it with the weights and gradients: 2 * 8000 B = 16 s.
    unsharded = toy_variant(overlap_grad_reduce=True, overlap_param_gather=True)
    plain = explain_plan(problem, unsharded, [[0], [1]], 2)
    assert (plain.iteration.dp_sync_s, plain.iteration.optimizer_s) == (8.0, 16.0)
    # fp32 gradients (Megatron-LM's under bf16): 2000 B of them, so 6100 B a stage. The reduce-scatter
    # is half an all-reduce of 2000 B, 10 s, 8 exposed behind the backward; the all-gather of the bf16
    # weights stays 5 s, exposed after the step, or 4 behind the next forward pass. The step zeroes 2000
    # B, reads its half of them (1000), reads and writes its half of the weights (1000) and its state
    # (6000): 10 s. Time 8 + 13 + 10 = 31, or 30 with the gather overlapped.
    fp32_variant = toy_variant(zero_stage=1, overlap_grad_reduce=True, grad_reduce_in_fp32=True)
    fp32 = explain_plan(problem, fp32_variant, [[0], [1]], 2)
    assert fp32.placement.time_per_batch_s == 31.0
    assert [s.memory_bytes for s in fp32.placement.stages] == [6100, 6100]
    assert (fp32.iteration.dp_sync_s, fp32.iteration.optimizer_s) == (13.0, 10.0)
    fp32_gathered = toy_variant(
        zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True, grad_reduce_in_fp32=True
    )
    assert explain_plan(problem, fp32_gathered, [[0], [1]], 2).placement.time_per_batch_s == 30.0


def test_sequence_parallel_and_recompute_bytes_of_a_layer_by_hand() -> None:
    # A layer at t = 2 with a per-sample stash of 100 B: 40 B not split by tensor parallelism, 30 B of
    # attention core, 16 B of floating-point input; 2 fixed bytes. Microbatch 3.
    memory = LayerMemory(
        parameter_count=0, parameter_bytes=0, gradient_bytes=0, optimizer="sgd", optimizer_state_bytes=0,
        stash_fixed_bytes=2, stash_per_sample_bytes=100, input_fixed_bytes=0, input_per_sample_bytes=20,
        core_per_sample_bytes=30, replicated_per_sample_bytes=40, checkpoint_per_sample_bytes=16,
    )  # fmt: skip
    plain = megatron_bytes(memory, 3, 1)
    assert (plain.stash_bytes, plain.selective_bytes, plain.checkpoint_bytes) == (302, 212, 48)
    # Sequence parallel: the 120 B not split by tensor parallelism and the input split 2 ways.
    split = megatron_bytes(memory, 3, 2)
    assert (split.stash_bytes, split.selective_bytes, split.checkpoint_bytes) == (242, 152, 24)


# --- Korthikanti et al. 2022, section 4, on a lowered GPT block ------------------------------------
S, H, A = 32, 64, 4
"""Sequence, hidden size and heads of the tiny GPT-2 the real-model tests lower."""

TINY = (
    "model=gpt2_xl",
    "model.hf_config.n_layer=2",
    f"model.hf_config.n_embd={H}",
    f"model.hf_config.n_head={A}",
    f"model.seq_len={S}",
    f"model.hf_config.n_positions={S}",
    "tracking=none",
)


@pytest.fixture(scope="module")
def tiny_graphs(cache_dir: Path) -> dict[int, Any]:
    cfg = compose_config(*TINY, f"cache_dir={cache_dir}")
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    return training_graphs(
        load_model(model_cfg, cache_dir), [1, 2], GraphSettings(optimizer="adam", vocab_parallel=True)
    )


@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("sp", [False, True])
def test_block_activation_bytes_are_korthikantis(tiny_graphs: dict[int, Any], t: int, sp: bool) -> None:
    model = tiny_graphs[t]
    block = model.classes[model.layers[1].cls]
    assert block.memory is not None
    b = 3
    figures = megatron_bytes(block.memory, b, t if sp else 1)
    s, h, a = S, H, A
    # Per layer, 2-byte activations (section 4): 34sbh + 5as^2b at t = 1; sbh(10 + 24/t + 5as/(ht))
    # with tensor parallelism; sbh/t (34 + 5as/h) with sequence parallelism too. Selective recompute
    # drops the 5as^2b/t term; full recompute keeps the layer input 2sbh (/t with sequence
    # parallelism). phazec's graph also stashes one fixed 2-byte scalar (the attention scale).
    if sp:
        none = s * b * h * 34 // t + 5 * a * s * s * b // t
    else:
        none = s * b * h * 10 + s * b * h * 24 // t + 5 * a * s * s * b // t
    assert figures.stash_bytes == none + 2
    assert figures.selective_bytes == none - 5 * a * s * s * b // t + 2
    assert figures.checkpoint_bytes == 2 * s * b * h // (t if sp else 1)


def test_sequence_parallelism_splits_the_replicated_vector_work(tiny_graphs: dict[int, Any]) -> None:
    # At t = 2 the layer norms, dropouts and residual adds (and the causal mask's Where) act on
    # per-sample tensors tensor parallelism leaves whole; sequence parallelism gives each device 1/2
    # of the sequence. The first layer norm at microbatch 3: 3 x 32 x 64 = 6144 bf16 elements in and
    # out (12288 B each) plus 2 x 64 x 2 = 256 B of weights: 6144 -> 3072 elements, 12544 -> 6400 B
    # read, 12288 -> 6144 B written. GEMMs, the softmax on split scores and collectives keep theirs.
    block = tiny_graphs[2].classes[tiny_graphs[2].layers[1].cls]
    graph = block.graph
    whole, split = op_table(graph, Split(3, False)), op_table(graph, Split(3, False, 2))
    ln = next(i for i, op in enumerate(graph.ops) if op.op_type == "LayerNormalization")
    assert (whole.vector_elements[ln], whole.bytes_read[ln], whole.bytes_written[ln]) == (6144, 12544, 12288)
    assert (split.vector_elements[ln], split.bytes_read[ln], split.bytes_written[ln]) == (3072, 6400, 6144)
    halved = [op.op_type for op in graph.ops if sequence_split(op, graph)]
    assert halved == ["LayerNormalization", "Where", "Dropout", "Add", "LayerNormalization", "Dropout", "Add"]
    for i, op in enumerate(graph.ops):
        if not sequence_split(op, graph):
            assert (split.vector_elements[i], split.bytes_read[i]) == (
                whole.vector_elements[i],
                whole.bytes_read[i],
            )
    backward = [op.op_type for op in block.backward.ops if sequence_split(op, block.backward)]
    assert sorted(set(backward)) == ["Add", "Dropout", "LayerNormalization", "ReduceSum"]
    # At t = 1 there is nothing to split: the same costs with or without sequence parallelism.
    one = tiny_graphs[1].classes[tiny_graphs[1].layers[1].cls]
    cfg = compose_config("hw=a100", "system=dgx_a100")
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    system = system_from_config(typed(SystemConfig, cfg.system, "system"))
    model = latency_model_from_config(typed(CostConfig, cfg.cost, "cost"))
    plain = class_costs(one, designs, system, model, Split(3))
    sp = class_costs(one, designs, system, model, Split(3, sequence_parallel=sequence_split_width(one, True)))
    assert np.array_equal(plain.forward.all_cores_s, sp.forward.all_cores_s)


def test_overlapped_collectives_by_hand() -> None:
    # GEMM g1 (4 s) -> all-reduce r1 over 2 devices (10 s) -> add -> GEMM g2 (2 s) -> all-reduce r2
    # over 4 devices (8 s) -> add. Overlapped, each half h of a collective hides behind the GEMM next
    # to it (g): max(h - g, 0) + min(h, g) / t is exposed, all of h without a GEMM.
    #   r1: h = 5; behind g1: 1 + 4/2 = 3; behind g2 (its first GEMM after the add): 3 + 2/2 = 4 -> 7.
    #   r2: h = 4; behind g2: 2 + 2/4 = 2.5; no GEMM after it in the layer, so the next layer's first,
    #   g1: 0 + 4/4 = 1 -> 3.5. A collective after an add (no GEMM before it) and in a layer without
    #   GEMMs is all exposed.
    x = Tensor("x", (1, 8), "bfloat16", 0)
    names = ["w", "y", "z", "u", "o", "p", "q"]
    tensors = {"x": x} | {n: replace(x, name=n) for n in names}
    ops = [
        Op("g1", "Gemm", OpKind.GEMM, ("x", "w"), ("y",)),
        Op("r1", "AllReduce", OpKind.COLLECTIVE, ("y",), ("z",), {"group": 2}),
        Op("a1", "Add", OpKind.VECTOR, ("z", "x"), ("u",)),
        Op("g2", "Gemm", OpKind.GEMM, ("u", "w"), ("o",)),
        Op("r2", "AllReduce", OpKind.COLLECTIVE, ("o",), ("p",), {"group": 4}),
        Op("a2", "Add", OpKind.VECTOR, ("p", "x"), ("q",)),
    ]
    graph = Graph(tensors, ops, ["x"], ["w"], [], ["q"])
    assert neighbour_gemms(graph, 1) == (0, 3)
    assert neighbour_gemms(graph, 4) == (3, 0)
    seconds = np.array([[4.0], [10.0], [1.0], [2.0], [8.0], [1.0]])
    costs = OpCosts(seconds, seconds.copy(), np.zeros_like(seconds), np.zeros_like(seconds))
    overlapped = overlap_collectives(graph, costs)
    assert overlapped.all_cores_s[:, 0].tolist() == [4.0, 7.0, 1.0, 2.0, 3.5, 1.0]
    assert overlapped.single_core_s[:, 0].tolist() == [4.0, 7.0, 1.0, 2.0, 3.5, 1.0]
    vector = Graph(tensors, [ops[2], replace(ops[4], inputs=("u",))], ["x"], [], [], ["p"])
    assert neighbour_gemms(vector, 1) == (None, None)
    alone = overlap_collectives(
        vector, OpCosts(seconds[:2], seconds[:2].copy(), np.zeros((2, 1)), np.zeros((2, 1)))
    )
    assert alone.all_cores_s[:, 0].tolist() == [4.0, 10.0]


def test_overlapped_gathers_and_scatters_by_hand() -> None:
    # GEMM g1 (4 s) -> reduce-scatter rs over 2 devices (6 s) -> add -> all-gather ag over 2 devices
    # (6 s) -> GEMM g2 (2 s), as around the multi-token-prediction projection. A reduce-scatter hides
    # whole behind the GEMM producing its input: 2 + 4/2 = 4 s exposed; an all-gather whole behind the
    # first GEMM using its result: 4 + 2/2 = 5 s, nothing behind the add before it.
    x = Tensor("x", (1, 8), "bfloat16", 0)
    tensors = {"x": x} | {n: replace(x, name=n) for n in ["w", "y", "z", "u", "v", "o"]}
    ops = [
        Op("g1", "Gemm", OpKind.GEMM, ("x", "w"), ("y",)),
        Op("rs", "ReduceScatter", OpKind.COLLECTIVE, ("y",), ("z",), {"group": 2}),
        Op("a1", "Add", OpKind.VECTOR, ("z", "x"), ("u",)),
        Op("ag", "AllGather", OpKind.COLLECTIVE, ("u",), ("v",), {"group": 2}),
        Op("g2", "Gemm", OpKind.GEMM, ("v", "w"), ("o",)),
    ]
    graph = Graph(tensors, ops, ["x"], ["w"], [], ["o"])
    seconds = np.array([[4.0], [6.0], [1.0], [6.0], [2.0]])
    costs = OpCosts(seconds, seconds.copy(), np.zeros_like(seconds), np.zeros_like(seconds))
    assert overlap_collectives(graph, costs).all_cores_s[:, 0].tolist() == [4.0, 4.0, 1.0, 5.0, 2.0]
    # An all-reduce of 9 s between GEMMs of 1 and 6 s whose all-gather carries FP8 (`fp8_gathers`): its
    # reduce-scatter, two thirds, 6 s behind the first (5 + 1/2 = 5.5), its gather, 3 s, behind the
    # second (0 + 3/2 = 1.5): 7 s exposed, where halves of 4.5 s leave 3.5 + 1/2 + 4.5/2 = 6.25 s.
    reduced = [ops[0], Op("ar", "AllReduce", OpKind.COLLECTIVE, ("y",), ("v",), {"group": 2}), ops[4]]
    fp8 = Graph(tensors, reduced, ["x"], ["w"], [], ["o"])
    seconds = np.array([[1.0], [9.0], [6.0]])
    costs = OpCosts(seconds, seconds.copy(), np.zeros_like(seconds), np.zeros_like(seconds))
    assert overlap_collectives(fp8, costs, frozenset({1})).all_cores_s[:, 0].tolist() == [1.0, 7.0, 6.0]
    assert overlap_collectives(fp8, costs).all_cores_s[:, 0].tolist() == [1.0, 6.25, 6.0]


@pytest.fixture(scope="module")
def tiny_flash_graphs(cache_dir: Path) -> dict[int, Any]:
    cfg = compose_config(*TINY, f"cache_dir={cache_dir}")
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    model = load_model(model_cfg, cache_dir)
    return training_graphs(
        model, [1, 2], GraphSettings(optimizer="adam", vocab_parallel=True, attention="flash", causal=True)
    )


@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("sp", [False, True])
def test_flash_block_keeps_korthikantis_selective_bytes(
    tiny_flash_graphs: dict[int, Any], t: int, sp: bool
) -> None:
    # Flash attention keeps what selective recompute keeps (section 4's bytes without the 5as^2b/t
    # term), on the real block as on the toy: QKV's input, Q, K, V, the context and the dropout masks
    # outside the core. The 2-byte attention scale goes into the kernel, so nothing is added.
    graphs = tiny_flash_graphs
    block = graphs[t].classes[graphs[t].layers[1].cls]
    assert block.memory is not None
    b = 3
    figures = megatron_bytes(block.memory, b, t if sp else 1)
    s, h = S, H
    selective = s * b * h * 34 // t if sp else s * b * h * 10 + s * b * h * 24 // t
    assert figures.stash_bytes == figures.selective_bytes == selective


@pytest.mark.parametrize("kernel", ["unfused", "flash"])
def test_head_dim_equal_to_the_sequence_keeps_korthikantis_bytes(cache_dir: Path, kernel: str) -> None:
    # Two heads of d = H / 2 = 32 = S: Q, K, V and the context [b, a, s, d] have the scores' shape
    # [b, a, s, s], yet only the core's s x s tensors are the 5as^2b selective recompute drops (and
    # flash keeps none of them). t = 1, microbatch 3, the 2-byte attention scale kept unfused only.
    a = 2
    heads = tuple(
        f"model.hf_config.n_head={a}" if o.startswith("model.hf_config.n_head=") else o for o in TINY
    )
    cfg = compose_config(*heads, f"cache_dir={cache_dir}")
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    model = load_model(model_cfg, cache_dir)
    graphs = training_graphs(
        model, [1], GraphSettings(optimizer="adam", vocab_parallel=True, attention=kernel, causal=True)
    )
    block = graphs[1].classes[graphs[1].layers[1].cls]
    assert block.memory is not None
    b, s, h = 3, S, H
    figures = megatron_bytes(block.memory, b, 1)
    core = 5 * a * s * s * b if kernel == "unfused" else 0
    scale = 2 if kernel == "unfused" else 0
    assert (figures.stash_bytes, figures.selective_bytes) == (
        34 * s * b * h + core + scale,
        34 * s * b * h + scale,
    )


# --- phazec-plan ------------------------------------------------------------------------------------
PLAN = (
    *TINY,
    "hw=tpuv4",
    "system=dgx_a100",
    "system.devices=8",
    "system.global_batch=16",
    "train.optimizer=adam",
    "plan.tp=2",
    "plan.pp=2",
    "plan.dp=2",
    "plan.microbatch=2",
    "plan.recompute=full",
)


@pytest.mark.parametrize("sends", [False, True])
def test_a_cut_carries_the_mask_only_when_the_pipeline_sends_it(cache_dir: Path, sends: bool) -> None:
    """The tiny GPT-2's embedding builds the causal mask from the inputs alone (s x s booleans per
    sample) and reads no activation from before; each block reads it. Stage 0 (embedding, block 0)
    sends block 0's output, s h bf16 per sample, to stage 1, and the mask only when the pipeline sends
    what each layer reads (Megatron-DeepSpeed's engine); Megatron's stages build their own."""
    cfg = compose_config(*PLAN, f"cache_dir={cache_dir}", f"plan.pipeline_sends_masks={str(sends).lower()}")
    settings = settings_from_config(cfg)
    job = setup(
        settings, Knobs.single(settings.plan.training, round(max(settings.system.hbm_bytes))), widths=[2]
    )
    model = job.evaluator.graphs[2]
    edges = {(e.src, e.dst): e for e in model.edges}
    assert (edges[0, 2].per_sample_bytes, edges[0, 2].built_per_sample_bytes) == (0, S * S)
    assert (edges[1, 2].per_sample_bytes, edges[1, 2].built_per_sample_bytes) == (2 * S * H, 0)
    training = replace(settings.plan.training, microbatch=2)
    latencies = job.evaluator.layer_latencies_s(job.designs, training)
    problem = job.evaluator.problem(latencies, 0, training, job.designs)
    stages = plan_stages(model, settings.plan)
    assert stages[0] == (0, 1)
    microbatch = 2
    mask = microbatch * S * S if sends else 0
    cost = plan_figures(problem, Variant(2, 80 * 10**9, plan_settings()), stages, 1).costs[0]
    assert cost.cut_bytes == microbatch * 2 * S * H + mask == 8192 + mask


@pytest.mark.parametrize("schedule", ["1f1b", "zb_h1"])
def test_phazec_plan_and_phazec_give_the_same_time(
    cache_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    schedule: str,
) -> None:
    cfg = compose_config(*PLAN, f"cache_dir={cache_dir}", f"plan.pipeline_schedule={schedule}")
    with caplog.at_level(logging.WARNING):
        report = run_plan(cfg, tmp_path)
    assert "baseline" not in caplog.text  # gpt2_xl's baseline (1024 devices) is the search's, not the plan's
    content = json.loads((tmp_path / "plan.json").read_text())
    assert content["optimizer"] == "adam"
    assert content["band"] == {"low_s": None, "high_s": None, "basis": "no validation data", "source": None}
    printed = capsys.readouterr().out
    assert "\noptimizer state (adam)  " in printed
    zero_bubble = schedule == "zb_h1"
    assert ("\nbubble (ZB-H1)  " in printed, ", ZB-H1; layers per stage" in printed) == (zero_bubble,) * 2
    assert f"\niteration: {report.time_per_batch_s:.4g} s (no validation data)\n" in printed
    parts = report.breakdown.total_s
    assert parts == pytest.approx(report.time_per_batch_s, rel=1e-12)
    assert report.fits and report.warning is None
    assert report.layers_per_stage == (2, 2)  # embedding + block, block + head
    memory = report.memory
    assert memory.total_bytes + memory.headroom_bytes == 80 * 10**9
    search = compose_config(
        *PLAN, f"cache_dir={cache_dir}", "model.tp_widths=[2]", "model.baseline={pp: 2, dp: 2, tp: 2}",
        "train.microbatch=[2]", "train.recompute=[full]", "train.last_stage_recomputes=true",
        "train.optimizer_step=true", "system.hbm_gb=[80]", "search.workers=1",
        f"train.pipeline_schedule={schedule}",
    )  # fmt: skip
    result = run_search(settings_from_config(search), tmp_path / "search", tpuv4_space())
    fixed = result["baselines"]["found_design_megatron_plan"]
    assert fixed["time_per_batch_s"] == report.time_per_batch_s
    assert (tmp_path / "search" / "trace.json").exists()  # ZB-H1's too, its weight gradients in slots
    assert result["band"]["basis"] == fixed["band"]["basis"] == "no validation data"
    assert fixed["within_model_error"] is None
    # the Python route: the same figures, plain data
    timed = api.plan(*PLAN, f"cache_dir={cache_dir}", f"plan.pipeline_schedule={schedule}")
    assert timed["time_per_batch_s"] == report.time_per_batch_s
    assert timed["breakdown"]["bubble_s"] == report.breakdown.bubble_s


def test_an_onnx_file_told_it_is_causal_plans_as_its_preset(cache_dir: Path) -> None:
    """The preset's own exported file as a user's ONNX model: the sequence length read from its
    attention scores and `model.causal=true` give the preset's plan, figure for figure."""
    common = ("hw=a100", "system=dgx_a100", "system.devices=8", "system.global_batch=16", "plan.tp=1",
              "plan.pp=1", "plan.dp=8", "plan.microbatch=2", "plan.recompute=selective",
              f"cache_dir={cache_dir}")  # fmt: skip
    preset = api.plan(*TINY, *common)
    model_cfg = typed(ModelConfig, compose_config(*TINY).model, "model")
    assert isinstance(model_cfg, ModelConfig)
    path = exported_onnx(model_cfg, cache_dir)
    told = api.plan("model=onnx", f"model.path={path}", "model.causal=true", "tracking=none", *common)
    for key in ("time_per_batch_s", "tokens_per_s", "model_tflops_per_device", "breakdown", "memory"):
        assert told[key] == preset[key], key
    assert is_causal("", None) is False and is_causal("GPT2LMHeadModel", False) is False


def test_llama3_on_an_h200_plans_as_on_an_h100_with_faster_memory(cache_dir: Path) -> None:
    """`phazec-plan model=llama3_8b hw=h200 system=dgx_h200` (two blocks, sequence 1024): the H200 is the
    H100's silicon with 4.8 TB/s of HBM instead of 3.35, so the memory-bound optimizer step takes
    3.35 / 4.8 of the H100's time, the same links give the same DP synchronisation, the whole step is
    faster, and the plan is measured against the H200's usable 148.0 GB (docs/devices.md, HBM capacity)."""
    common = ("model=llama3_8b", "model.hf_config.num_hidden_layers=2", "model.seq_len=1024",
              "tracking=none", "system.devices=8", "system.global_batch=16", "train.optimizer=adam",
              "plan.tp=1", "plan.pp=1", "plan.dp=8", "plan.microbatch=2", "plan.recompute=selective",
              f"cache_dir={cache_dir}")  # fmt: skip
    h200 = api.plan(*common, "hw=h200", "system=dgx_h200")
    h100 = api.plan(*common, "hw=h100", "system=dgx_h100")
    assert h200["fits"] and h200["memory"]["total_bytes"] + h200["memory"]["headroom_bytes"] == 148 * 10**9
    assert h200["memory"]["total_bytes"] == h100["memory"]["total_bytes"]
    assert h200["breakdown"]["optimizer_s"] == pytest.approx(
        h100["breakdown"]["optimizer_s"] * 3.35 / 4.8, rel=1e-9
    )
    assert h200["breakdown"]["dp_sync_s"] == h100["breakdown"]["dp_sync_s"]
    assert 0 < h200["time_per_batch_s"] < h100["time_per_batch_s"]
    # Each carries its own chip's band: the H200's two held-out rows, the H100's eight.
    for content, chip, count in ((h200, "h200", 2), (h100, "h100", 8)):
        rows = validation(content["config"]["hw"])
        assert isinstance(rows, Validation) and len(rows.rows) == count
        low, high = ratio_range(rows.rows)
        time_s = content["time_per_batch_s"]
        assert (content["band"]["low_s"], content["band"]["high_s"]) == (time_s * low, time_s * high)
        assert content["band"]["basis"] == f"{chip} held-out residuals ({count} rows), 90%"


BAD_PLANS = [
    (
        "hw=tpu_small",
        r"hw=tpu_small spans more than one design \(hw.num_tc \(3 values\), hw.tc_width \(2 values\), "
        r"hw.tc_depth \(2 values\), hw.num_vc \(2 values\), hw.glb_bytes \(2 values\)\); phazec-plan times",
    ),
    (
        "plan.recompute=some",
        r"plan.recompute='some' is not valid: it must be one of "
        r"\['none', 'selective', 'full', 'op', 'block'\]",
    ),
    ("plan.tp=3", r"3 \* 2 \* 2 = 12 does not divide the 8 devices"),
    ("plan.microbatch=3", r"plan.microbatch=3 does not divide the global batch 16"),
    ("plan.dp=8", r"2 \* 2 \* 8 = 32 does not divide"),
    (
        "plan.dp=auto plan.tp=3",
        r"plan.dp=auto fills the 8 devices \(system.devices\) with replicas of plan.tp x plan.pp = 3 x 2 = 6 "
        r"devices each, and 6 does not divide 8; choose a tp x pp among the divisors of 8 \(1, 2, 4, 8\)",
    ),
    ("plan.dp=0", r"plan.dp=0 is not valid: it must be a positive integer, or 'auto' \(the default\)\."),
    ("plan.interleave=0", r"plan.interleave=0 is not valid: it must be a positive integer"),
    (
        "plan.pp=1 plan.interleave=2",
        r"plan.interleave=2 needs plan.pp > 1: .* set plan.interleave=1 or plan.pp > 1\.",
    ),
    (
        "plan.pipeline_schedule=zb_h2",
        r"plan.pipeline_schedule='zb_h2' is not valid: it must be one of \['1f1b', 'zb_h1'\]\.",
    ),
    (
        "plan.pipeline_schedule=zb_h1 plan.interleave=2",
        r"^plan.pipeline_schedule=zb_h1 is not an interleaved schedule, but plan.interleave is 2: ZB-H1 runs "
        r"one model chunk per stage .* set plan.interleave=1, or plan.pipeline_schedule=1f1b for interleaved "
        r"1F1B\.$",
    ),
    (
        "train.pipeline_schedule=zb_h1 train.interleave=[1,2]",
        r"^train.pipeline_schedule=zb_h1 is not an interleaved schedule, but train.interleave is \[1, 2\]: "
        r".* set train.interleave=\[1\], or train.pipeline_schedule=1f1b",
    ),
    ("plan.tp=-1", r"plan.tp=-1 is not valid: it must be a positive integer"),
    ("plan.microbatch=0", r"plan.microbatch=0 is not valid: it must be a positive integer"),
    (
        "system.devices=32 plan.microbatch=4 plan.dp=8",
        r"plan.dp=8 does not divide the 4 microbatches of a batch \(global batch 16 / microbatch 4\)",
    ),
    (
        "system.devices=12 plan.dp=3",
        r"plan.dp=3 does not divide the 8 microbatches .* divisible by microbatch x dp = 6\.",
    ),
    (
        "system.hbm_gb=[nan]",
        r"system.hbm_gb\[0\] = nan is not valid: it must be a finite number greater than 0",
    ),
    ("system.devices=-8", r"system.devices = -8 is not valid: it must be a positive integer"),
    ("system.global_batch=0", r"system.global_batch = 0 is not valid: it must be a positive integer"),
]


@pytest.mark.parametrize(("override", "message"), BAD_PLANS)
def test_bad_plans_are_named(override: str, message: str, tmp_path: Path) -> None:
    """Each is refused before the model is lowered (nothing exported into the empty cache)."""
    with pytest.raises(PhazecError, match=message):
        predict_plan(settings_from_config(compose_config(*PLAN, *override.split(), f"cache_dir={tmp_path}")))
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("plan.interleave=3", r"plan.interleave=3 needs at least 3 layers in every .* hold \[2, 2\]"),
        ("plan.layers=[2,1]", r"plan.layers=\[2, 1\] is not valid: give 2 positive block counts"),
        ("plan.tp=8", r"tensor-parallel width 8 does not divide"),
        ("plan.pp=3", r"plan.pp=3 does not divide the model's 2 transformer blocks; choose a divisor of 2"),
    ],
)
def test_bad_plans_needing_the_model_are_named(override: str, message: str, cache_dir: Path) -> None:
    overrides = [*PLAN, override, f"cache_dir={cache_dir}"]
    if override == "plan.tp=8":
        overrides += ["plan.dp=1", "plan.pp=1"]
    if override == "plan.pp=3":
        overrides += ["system.devices=12"]
    with pytest.raises(PhazecError, match=message):
        predict_plan(settings_from_config(compose_config(*overrides)))


def test_uneven_model_chunks_are_timed_as_a_vth_of_their_stage(cache_dir: Path) -> None:
    """Two blocks on two stages under interleave 2: the chunks are the embedding, a block, a block and
    the head, far from equal, which the search's placement already allows (a layer per chunk). The
    bubble is (s - 1) / v = 1/2 of a microbatch's load of the slowest stage, m = 16 / (2 x 2) = 4."""
    config = compose_config(*PLAN, "plan.interleave=2", f"cache_dir={cache_dir}")
    report = predict_plan(settings_from_config(config))
    b = report.breakdown
    work_s = (
        b.forward_s + b.backward_s + b.recompute_s + b.tp_communication_s + b.ep_communication_s
        + b.pipeline_p2p_s + b.weight_gather_s
    )  # fmt: skip
    assert report.layers_per_stage == (2, 2)
    assert b.bubble_s == pytest.approx((2 - 1) / 2 * work_s / 4, rel=1e-12)


def test_fp32_gradients_double_the_reported_gradients_and_lengthen_the_sync(cache_dir: Path) -> None:
    """`plan.grad_reduce_in_fp32` reaches the compiled model by name: the tiny plan's gradients take
    twice their bytes (weights and optimizer state unchanged) and its exposed DP all-reduce, of twice
    the bytes, grows, the computation unchanged."""
    bf16, fp32 = (
        predict_plan(
            settings_from_config(
                compose_config(*PLAN, f"plan.grad_reduce_in_fp32={on}", f"cache_dir={cache_dir}")
            )
        )
        for on in ("false", "true")
    )
    assert fp32.memory.gradients_bytes == 2 * bf16.memory.gradients_bytes > 0
    assert fp32.memory.weights_bytes == bf16.memory.weights_bytes
    assert fp32.memory.optimizer_state_bytes == bf16.memory.optimizer_state_bytes
    assert fp32.breakdown.forward_s == bf16.breakdown.forward_s
    assert fp32.breakdown.dp_sync_s > bf16.breakdown.dp_sync_s > 0


def test_fused_gradient_accumulation_keeps_a_blocks_linear_weights_once(cache_dir: Path) -> None:
    """`plan.gradient_accumulation_fusion`: each stage (one GPT-2 block each, tp 2) also keeps
    Transformer Engine's dummy weight gradients, a bf16 copy of its block's linear weights on the
    device: qkv h x 3h, the projection h x h, the MLP's h x 4h and 4h x h, 12 h^2 at t = 2 (the
    biases and norms are no GEMM's weights): 6 h^2 x 2 bytes more gradients, the time unchanged."""
    plain, fused = (
        predict_plan(
            settings_from_config(
                compose_config(*PLAN, f"plan.gradient_accumulation_fusion={on}", f"cache_dir={cache_dir}")
            )
        )
        for on in ("false", "true")
    )
    assert fused.memory.gradients_bytes - plain.memory.gradients_bytes == 6 * H * H * 2
    assert fused.time_per_batch_s == plain.time_per_batch_s


def test_overlapped_pipeline_sends_leave_the_interleaved_bubble_only(cache_dir: Path) -> None:
    """Four blocks split 3 + 1 under interleave 2 (stage 0, the embedding and three blocks, sets the
    pace), m = 16 / (2 x 2) = 4: `plan.overlap_p2p_comm` hides stage 0's sends behind its chunks' passes,
    which outlast them, so the iteration loses them from each of its m + (s - 1) / v = 4.5 loads and
    nothing else moves."""
    common = (
        *PLAN,
        "model.hf_config.n_layer=4",
        "plan.layers=[3,1]",
        "plan.interleave=2",
        f"cache_dir={cache_dir}",
    )
    plain, hidden = (
        predict_plan(settings_from_config(compose_config(*common, f"plan.overlap_p2p_comm={overlap}")))
        for overlap in ("false", "true")
    )
    sends_s = plain.breakdown.pipeline_p2p_s / 4  # a microbatch's, at the bottleneck stage
    assert plain.breakdown.bottleneck_stage == hidden.breakdown.bottleneck_stage == 0 and sends_s > 0
    assert hidden.breakdown.pipeline_p2p_s == 0
    assert hidden.breakdown.forward_s == plain.breakdown.forward_s
    assert hidden.breakdown.backward_s == plain.breakdown.backward_s
    assert hidden.memory == plain.memory
    assert hidden.time_per_batch_s == pytest.approx(plain.time_per_batch_s - 4.5 * sends_s, rel=1e-12)


def test_selective_recompute_repeats_each_attention_core(cache_dir: Path) -> None:
    """Selective recompute repeats each attention core's ops (QK^T through AV): on the template's
    unfused attention they take time and count in HFU; a flash kernel's backward recomputes the
    scores itself, so there it adds nothing."""
    reports = {
        (kernel, mode): predict_plan(
            settings_from_config(
                compose_config(
                    *PLAN, f"cache_dir={cache_dir}", f"plan.recompute={mode}", f"hw.device.attention={kernel}"
                )
            )
        )
        for kernel in ("unfused", "flash")
        for mode in ("none", "selective")
    }
    unfused, plain = reports["unfused", "selective"], reports["unfused", "none"]
    assert unfused.breakdown.recompute_s > 0 and plain.breakdown.recompute_s == 0
    assert unfused.time_per_batch_s > plain.time_per_batch_s
    assert unfused.hfu > unfused.mfu and plain.hfu == plain.mfu  # HFU counts the repeated FLOPs
    flash = reports["flash", "selective"]
    assert (
        flash.breakdown.recompute_s == 0
        and flash.time_per_batch_s == reports["flash", "none"].time_per_batch_s
    )


def test_zero_bubble_defers_each_layers_weight_gemms(cache_dir: Path) -> None:
    """A layer's W (what ZB-H1 defers) is its weight-gradient products, each alone on all cores, at most
    its backward pass: a block's four linear layers (attention's qkv and projection, the MLP's two), the
    head's one, none in the embedding (its gradient is a scatter, not a product). ZB-H1 times the tiny
    GPT-2's plan faster than 1F1B, by its bubble alone, with the same memory."""
    settings = settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}"))
    training = settings.plan.training
    job = setup(settings, Knobs.single(training, round(max(settings.system.hbm_bytes))), widths=[2])
    evaluator, designs = job.evaluator, job.designs
    model = evaluator.graphs[2]
    latencies = evaluator.layer_latencies_s(designs, training)[2]
    counts = []
    for i, layer in enumerate(model.layers):
        cls = model.classes[layer.cls]
        assert cls.backward is not None
        costs = evaluator.class_costs(model, layer.cls, designs, training).backward
        assert costs is not None
        products = [j for j, op in enumerate(cls.backward.ops) if op.attrs.get("grad") == "weight"]
        counts.append(len(products))
        summed = sum((costs.all_cores_s[j] for j in products), np.zeros(len(designs)))
        assert np.array_equal(latencies[:, 4, i], np.minimum(summed, latencies[:, 1, i]))
    assert counts == [0, 4, 4, 1]
    assert all(latencies[0, 4, 1:] > 0)
    zero_bubble = compose_config(*PLAN, f"cache_dir={cache_dir}", "plan.pipeline_schedule=zb_h1")
    plain, deferred = predict_plan(settings), predict_plan(settings_from_config(zero_bubble))
    assert deferred.breakdown.bubble_s < plain.breakdown.bubble_s
    assert plain.time_per_batch_s - deferred.time_per_batch_s == pytest.approx(
        plain.breakdown.bubble_s - deferred.breakdown.bubble_s, rel=1e-9
    )
    assert deferred.memory == plain.memory


def test_op_recompute_runs_every_other_linear_layer_again_under_flash(cache_dir: Path) -> None:
    """Under a flash kernel Megatron's selective recompute repeats nothing, but torchtitan's op-level
    checkpointing runs half the linear layers, the norms and the elementwise ops again: it takes time
    and counts in HFU, less than full recompute, and keeps less than no recompute and more than full."""
    reports = {
        mode: predict_plan(
            settings_from_config(
                compose_config(
                    *PLAN, f"cache_dir={cache_dir}", f"plan.recompute={mode}", "hw.device.attention=flash"
                )
            )
        )
        for mode in ("none", "op", "full")
    }
    none, op, full = reports["none"], reports["op"], reports["full"]
    assert 0 < op.breakdown.recompute_s < full.breakdown.recompute_s and none.breakdown.recompute_s == 0
    assert none.time_per_batch_s < op.time_per_batch_s < full.time_per_batch_s
    assert none.hfu == none.mfu and op.hfu > op.mfu
    stash = {mode: r.memory.activation_stash_bytes for mode, r in reports.items()}
    assert stash["full"] < stash["op"] < stash["none"]


def test_block_recompute_reruns_the_blocks_and_not_the_embedding_or_output_layer(cache_dir: Path) -> None:
    """Megatron-Core's block method on the tiny GPT-2 (one block a stage, pp 2): it reruns each stage's
    block, so it takes time and counts in HFU, less than full recompute, which also reruns the
    embedding and the output layer; it keeps each block's input where no recompute keeps its stash, and
    keeps the embedding's and the output layer's stash, which full recompute does not."""
    reports = {
        mode: predict_plan(
            settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}", f"plan.recompute={mode}"))
        )
        for mode in ("none", "block", "full")
    }
    none, block, full = reports["none"], reports["block"], reports["full"]
    assert 0 < block.breakdown.recompute_s < full.breakdown.recompute_s
    assert none.time_per_batch_s < block.time_per_batch_s < full.time_per_batch_s
    assert none.hfu == none.mfu and 1 < block.hfu / block.mfu < full.hfu / full.mfu
    stash = {mode: r.memory.activation_stash_bytes for mode, r in reports.items()}
    assert stash["full"] < stash["block"] < stash["none"]
    more = compose_config(*PLAN, f"cache_dir={cache_dir}", "plan.recompute=block", "plan.recompute_layers=4")
    assert predict_plan(settings_from_config(more)).time_per_batch_s == block.time_per_batch_s  # 1 a stage


def test_recompute_layers_without_block_recompute_is_refused(cache_dir: Path) -> None:
    llama = ("model=llama2_7b", "tracking=none", f"cache_dir={cache_dir}", "plan.recompute=block")
    with pytest.raises(
        PhazecError, match=r"plan.recompute_layers=33 is not valid: 33 is more than the model's 32"
    ):
        settings_from_config(compose_config(*llama, "plan.recompute_layers=33"))
    assert (
        settings_from_config(
            compose_config(*llama, "plan.recompute_layers=32")
        ).plan.training.recompute_layers
        == 32
    )
    with pytest.raises(
        PhazecError, match=r"plan.recompute_layers=2 sets how many blocks .* plan.recompute is 'full'"
    ):
        settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}", "plan.recompute_layers=2"))
    with pytest.raises(
        PhazecError, match=r"plan.recompute_layers=0 is not valid: it must be a positive integer"
    ):
        settings_from_config(
            compose_config(*PLAN, f"cache_dir={cache_dir}", "plan.recompute=block", "plan.recompute_layers=0")
        )
    with pytest.raises(
        PhazecError, match=r"train.recompute_layers=\[2, 3\] .* train.recompute is \['none', 'full'\]"
    ):
        settings_from_config(
            compose_config(
                *PLAN, f"cache_dir={cache_dir}", "train.recompute=[none,full]", "train.recompute_layers=[2,3]"
            )
        )


def test_sequence_parallelism_without_tensor_parallelism_is_warned_and_off(
    cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At tp 1 sequence parallelism splits nothing: warned, then timed and reported as off (Megatron-LM
    turns it off there), so the report equals the plan without it."""
    common = (*PLAN, f"cache_dir={cache_dir}", "plan.tp=1", "system.devices=4")
    with caplog.at_level(logging.WARNING):
        asked = predict_plan(settings_from_config(compose_config(*common, "plan.sequence_parallel=true")))
    assert "plan.sequence_parallel=true splits nothing at plan.tp=1" in caplog.text
    assert asked == predict_plan(
        settings_from_config(compose_config(*common, "plan.sequence_parallel=false"))
    )
    assert not asked.plan.training.sequence_parallel


def test_a_plan_that_does_not_fit_warns_or_fails(cache_dir: Path) -> None:
    tight = compose_config(*PLAN, f"cache_dir={cache_dir}", "system.hbm_gb=[0.0001]")
    report = predict_plan(settings_from_config(tight))
    assert not report.fits and report.memory.headroom_bytes < 0
    assert report.warning is not None and "the plan does not fit: stage" in report.warning
    assert report.warning.endswith(  # only what the plan does not use yet (it recomputes fully)
        "Try a distributed optimizer (plan.zero_stage=1), FSDP (plan.zero_stage=3), sequence "
        "parallelism (plan.sequence_parallel=true), or more tensor or pipeline parallelism."
    )
    every = compose_config(
        *PLAN, f"cache_dir={cache_dir}", "system.hbm_gb=[0.0001]", "plan.zero_stage=3",
        "plan.sequence_parallel=true",
    )  # fmt: skip
    assert str(predict_plan(settings_from_config(every)).warning).endswith(
        "Try more tensor or pipeline parallelism."
    )
    strict = compose_config(
        *PLAN, f"cache_dir={cache_dir}", "system.hbm_gb=[0.0001]", "plan.require_fit=true"
    )
    with pytest.raises(PhazecError, match=r"does not fit.*plan.require_fit=true makes this an error"):
        predict_plan(settings_from_config(strict))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("plan.recompute=some", "phazec: error: plan.recompute='some' is not valid: it must be one of"),
        # Hydra's words for a value its typed config cannot hold, as one paragraph.
        (
            "plan.tp=nan",
            "phazec: error: Error merging override plan.tp=nan. Value 'nan' of type 'float' could not be "
            "converted to Integer.\n",
        ),
        ("plan.dp=nan", "phazec: error: plan.dp=nan is not valid: it must be a positive integer, or 'auto'"),
    ],
)
def test_the_command_answers_bad_input_with_one_paragraph(
    override: str, message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from phazec.cli import plan_main; plan_main()", *PLAN, override,
         f"cache_dir={tmp_path}", f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


def test_explored_csv_names_each_plans_knobs(cache_dir: Path, tmp_path: Path) -> None:
    # Every (sequence parallelism, interleave, distributed optimizer) setting gets its own row (one
    # design, microbatch, t, recompute and HBM here); the fastest feasible row is result.json's plan.
    cfg = compose_config(
        *TINY, "hw=tpuv4", "system.devices=4", "system.global_batch=8", f"cache_dir={cache_dir}",
        "model.tp_widths=[2]", "train.microbatch=[2]", "train.recompute=[full]", "system.hbm_gb=[80]",
        "train.sequence_parallel=[false,true]", "train.interleave=[1,2]",
        "train.zero_stage=[0,1]", "search.workers=1",
    )  # fmt: skip
    result = run_search(settings_from_config(cfg), tmp_path, tpuv4_space())
    rows = list(csv.DictReader((tmp_path / "explored.csv").open()))
    settings = {(r["tp"], r["recompute"], r["sequence_parallel"], r["interleave"], r["zero_stage"])
                for r in rows}  # fmt: skip
    assert len(rows) == len(settings) == 2 * 2 * 2
    feasible = [r for r in rows if r["feasible"] == "True"]
    time_s = min(float(r["time_per_batch_s"]) for r in feasible)
    assert time_s == result["time_per_batch_s"]
    fastest = {
        (r["tp"], r["recompute"], r["sequence_parallel"], r["interleave"], r["zero_stage"])
        for r in feasible
        if float(r["time_per_batch_s"]) == time_s
    }
    plan = result["plan"]
    knobs = ("tp", "recompute", "sequence_parallel", "interleave", "zero_stage")
    assert tuple(str(plan[k]) for k in knobs) in fastest


def test_a_plan_sweep_ranks_the_plans_that_fit(cache_dir: Path, tmp_path: Path) -> None:
    """`phazec-plan -m`: only the command line's sweeps run (not the search knobs tpuv4's sweep file
    declares), every job is read from its plan.json, and the best is the fastest plan that fits. With
    `plan.dp=auto` every plan fills the 8 devices (tp 1: dp 4; tp 2: dp 2, at pp 2); tp 3 x pp 2
    divides no 8 devices, and the text table says why under it, sizes in GB."""
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-c", "from phazec.cli import plan_main; plan_main()", "-m", *PLAN,
         "plan.dp=auto", "plan.tp=1,2,3", "system.hbm_gb=[80],[0.0001]", f"cache_dir={cache_dir}",
         "tracking=none", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the tp 3 jobs failed
    with (sweep / "sweep_comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["overrides"], r["status"], r["dp"], r["devices"]) for r in rows] == [
        ("plan.tp=1 system.hbm_gb=[80]", "ok", "4", "8"),
        ("plan.tp=1 system.hbm_gb=[0.0001]", "over HBM", "4", "8"),
        ("plan.tp=2 system.hbm_gb=[80]", "ok", "2", "8"),
        ("plan.tp=2 system.hbm_gb=[0.0001]", "over HBM", "2", "8"),
        ("plan.tp=3 system.hbm_gb=[80]", "failed", "", ""),
        ("plan.tp=3 system.hbm_gb=[0.0001]", "failed", "", ""),
    ]
    assert list(rows[0]) == [
        "job", "status", "overrides", "throughput_samples_per_s", "time_per_batch_s", "within_model_error",
        "mfu", "microbatch", "recompute", "tp", "pp", "dp", "devices", "memory_bytes", "hbm_bytes", "dir",
        "error",
    ]  # fmt: skip
    assert [r["hbm_bytes"] for r in rows[:4]] == ["80000000000", "100000"] * 2
    assert all(int(r["memory_bytes"]) > 100_000 for r in rows[:4])
    throughputs = [float(r["throughput_samples_per_s"]) for r in rows[:4]]
    assert throughputs[0] == throughputs[1] and throughputs[2] == throughputs[3]  # memory does not time
    best = json.loads((sweep / "sweep_best.json").read_text())
    assert best["job"] == (0 if throughputs[0] > throughputs[2] else 2)
    assert best["result"]["samples_per_s"] == max(throughputs)
    text = (sweep / "sweep_comparison.txt").read_text().splitlines()
    assert text[0].split() == [
        "job", "status", "overrides", "samples/s", "s/batch", "in", "error", "mfu", "mb", "recompute", "tp",
        "pp", "dp", "devices", "memory", "GB", "hbm", "GB",
    ]  # fmt: skip
    assert text[2].split()[-4:] == ["4", "8", f"{int(rows[0]['memory_bytes']) / 1e9:.1f}", "80.0"]
    reason = "plan.dp=auto fills the 8 devices (system.devices) with replicas of plan.tp x plan.pp = 3 x 2"
    assert [line.partition(": ")[0] for line in text[8:]] == ["job 4 failed", "job 5 failed"]
    assert all(line.partition(": ")[2].startswith(reason) for line in text[8:])
    assert len(text) == 10
