"""The C++ placement DP equals a brute force over every plan, on random chains and branching DAGs.

The brute force (tests.placement_reference) times every plan and every data-parallel width
with the C++ model of one plan (`evaluate_plan`), whose functions the DP shares, so times compare
exactly: what this checks is the DP's search.
"""

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from phazec.hw.system import NetworkTier
from phazec.predict.offload import offloaded_problem
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.evaluate import evaluate_plan
from phazec.solvers.placement.problem import (
    RECOMPUTE_MODES,
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    Variant,
)
from tests.examples import examples
from tests.solvers.placement.placement_reference import (
    all_plans,
    best_time_s,
    min_memory_bytes,
    plan_settings,
)

pytestmark = pytest.mark.ext

MAX_PLANS = 300
"""Keeps one brute force well under a second."""


def plan_count(n: int, edges: list[tuple[int, int]]) -> int:
    """Number of plans, counted over sets of placed layers (a DP, independent of all_plans)."""
    preds = [0] * n
    for u, v in edges:
        preds[v] |= 1 << u
    ways = {0: 1}
    for placed in range(1 << n):
        if placed not in ways:
            continue
        rest = ((1 << n) - 1) & ~placed
        stage = rest
        while stage:
            taken = placed | stage
            if all(preds[v] & ~taken == 0 for v in range(n) if stage >> v & 1):
                ways[taken] = ways.get(taken, 0) + ways[placed]
            stage = (stage - 1) & rest
    return ways[(1 << n) - 1]


@st.composite
def layer_graphs(draw: st.DrawFn, branching: bool) -> tuple[int, list[tuple[int, int]]]:
    """A chain, or a DAG in which every layer after the first reads at least one earlier layer."""
    n = draw(st.integers(1, 8))
    if not branching:
        return n, [(v - 1, v) for v in range(1, n)]
    edges = []
    for v in range(1, n):
        sources = draw(st.sets(st.integers(0, v - 1), min_size=1, max_size=v))
        edges += [(u, v) for u in sorted(sources)]
    if plan_count(n, edges) > MAX_PLANS:
        edges += [(v - 1, v) for v in range(1, n) if (v - 1, v) not in edges]  # a chain with skip edges
    return n, edges


@st.composite
def problems(draw: st.DrawFn, branching: bool) -> PlacementProblem:
    """A random problem with random latencies, sizes, network tiers and devices."""
    n, edges = draw(layer_graphs(branching))
    devices = draw(st.integers(1, 16))
    t_values = draw(
        st.lists(
            st.sampled_from([t for t in (1, 2, 4, 8) if t <= devices]), min_size=1, max_size=2, unique=True
        )
    )
    widths = len(t_values)
    latency = st.floats(0.0, 10.0, allow_subnormal=False)
    size = st.integers(0, 1000)

    def matrix(
        element: st.SearchStrategy[float] | st.SearchStrategy[int],
    ) -> list[list[float]] | list[list[int]]:
        return draw(st.lists(st.lists(element, min_size=n, max_size=n), min_size=widths, max_size=widths))

    group_sizes = sorted(draw(st.sets(st.integers(1, 16), max_size=2)) | {16})
    stash = np.array(matrix(size))
    kept_share = np.array(matrix(st.floats(0.0, 1.0)))
    op_share = np.array(matrix(st.floats(0.0, 1.0)))
    params = np.array(matrix(size))
    # Routed experts' share of each layer's weights, at t > 1 only in tensor-parallel layers (as a MoE
    # block's, whose experts are whole on each of its t devices).
    tensor_parallel = np.array(matrix(st.booleans()), dtype=bool)
    held = tensor_parallel | (np.array(t_values) == 1)[:, None]
    expert_share = np.array(matrix(st.sampled_from([0.0, 0.0, 0.5, 1.0]))) * held
    experts = np.floor(params * expert_share).astype(np.int64)
    # The share of a layer's weight bytes ZeRO-3 gathers: all, or fewer where FP8 copies are gathered
    # (its dense and expert bytes alike).
    gather_share = np.array(matrix(st.one_of(st.just(1.0), st.floats(0.5, 1.0))))
    expert_gathered = np.floor(experts * gather_share).astype(np.int64)
    gathered = np.floor((params - experts) * gather_share).astype(np.int64) + expert_gathered
    # Transformer Engine's dummy weight gradients: a share of each layer's weights.
    dummy_share = np.array(matrix(st.sampled_from([0.0, 0.25, 1.0])))
    backward = np.array(matrix(latency))
    # The weight-gradient share of a backward pass: none, half, all, or any.
    grad_share = np.array(matrix(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))))
    return PlacementProblem(
        t_values=np.array(t_values),
        forward_latency_s=np.array(matrix(st.floats(0.001, 10.0))),
        backward_latency_s=backward,
        weight_grad_latency_s=backward * grad_share,
        param_bytes=params,
        expert_param_bytes=experts,
        gather_bytes=gathered,
        expert_gather_bytes=expert_gathered,
        dummy_wgrad_bytes=np.floor(params * dummy_share).astype(np.int64),
        activation_bytes=np.array(matrix(size)),
        stash_bytes=stash,
        input_bytes=np.array(matrix(size)),
        selective_stash_bytes=np.floor(stash * kept_share).astype(np.int64),
        selective_recompute_s=np.array(matrix(latency)),
        op_stash_bytes=np.floor(stash * op_share).astype(np.int64),
        op_recompute_s=np.array(matrix(latency)),
        tensor_parallel=tensor_parallel,
        block_layers=np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        edges=np.array(edges, dtype=np.int64),
        edge_bytes=np.array(
            draw(st.lists(st.integers(0, 50), min_size=len(edges), max_size=len(edges))), dtype=np.int64
        ),
        device_count=devices,
        microbatch_count=draw(st.integers(1, 32)),
        samples_per_microbatch=draw(st.integers(1, 4)),
        tiers=tuple(
            NetworkTier(g, draw(st.floats(1.0, 100.0)), draw(st.floats(0.0, 1.0))) for g in group_sizes
        ),
        optimizer_factor=draw(st.sampled_from([2, 8])),
        hbm_bytes_per_s=draw(st.sampled_from([0.0, 1000.0])),
        collective_share=draw(st.sampled_from([0.0, 0.0, 0.125, 1.0])),
        bound_sync_windows=draw(st.booleans()),
    )


Drawn = tuple[PlacementProblem, int, dict[str, int | bool]]
"""A problem, an HBM size and the settings of a plan but the recompute mode (every mode is tried)."""


@st.composite
def problems_and_settings(draw: st.DrawFn, branching: bool) -> Drawn:
    """A random problem, HBM size, interleave, pipeline schedule (ZB-H1 at interleave 1 only) and
    switches."""
    interleave = draw(st.integers(1, 3))
    others = {
        "interleave": interleave,
        "recompute_layers": draw(st.integers(1, 3)),
        "pipeline_schedule": draw(st.integers(0, 1)) if interleave == 1 else 0,
        "zero_stage": draw(st.integers(0, 3)),
        "cp": draw(st.integers(1, 2)),
        "last_stage_recomputes": draw(st.booleans()),
        "overlap_grad_reduce": draw(st.booleans()),
        "overlap_param_gather": draw(st.booleans()),
        "overlap_p2p_comm": draw(st.booleans()),
        "grad_reduce_in_fp32": draw(st.booleans()),
        "gradient_accumulation_fusion": draw(st.booleans()),
        "ep": draw(st.sampled_from([1, 1, 2, 4])),
        "sequence_parallel": draw(st.booleans()),
    }
    return draw(problems(branching)), draw(st.integers(1_000, 40_000)), others


def variants_of(drawn: Drawn) -> list[Variant]:
    """One variant per t of the problem and recompute mode."""
    problem, hbm_bytes, others = drawn
    return [
        Variant(int(t), hbm_bytes, plan_settings(mode, **others))
        for t in problem.t_values
        for mode in RECOMPUTE_MODES
        if t * int(others.get("cp", 1)) <= problem.device_count
    ]


def check_against_brute_force(drawn: Drawn) -> None:
    """Every variant's optimum equals the brute force's, and re-evaluating its plan reproduces it."""
    problem = drawn[0]
    variants = variants_of(drawn)
    for variant, result in zip(variants, solve_placements(problem, variants), strict=True):
        expected = best_time_s(problem, variant)
        if isinstance(result, NoFeasiblePlacement):
            assert expected is None
            assert result.min_memory_bytes == min_memory_bytes(problem, variant)
            # what fits can still be refused when no data-parallel width makes expert-parallel groups
            assert result.min_memory_bytes > variant.hbm_bytes or int(variant.settings["ep"]) > 1
            parts = result.parameter_bytes + result.activation_bytes + result.stash_bytes
            assert parts == result.min_memory_bytes
            continue
        assert isinstance(result, Placement)
        assert result.time_per_batch_s == expected
        assert evaluate_plan(problem, variant, [s.layers for s in result.stages], result.d) == result


def table_shared_across_d() -> PlacementProblem:
    """Five layers on 8 devices in nodes of 3, 3 microbatches, 51 bytes of HBM: no plan fits (stage 1
    alone keeps 14 bytes for each of its 3 microbatches in flight at position 4 of 5). The DP once
    shared a frontier table between widths d whose in-flight counts differed at the deeper positions:
    made for d = 2 (2 microbatches each, so at most 2 in flight), it served d = 1 and took five
    one-layer stages (stage 1 at 62 bytes) for a plan that fits."""
    n = 5
    zeros = np.zeros((1, n), dtype=np.int64)
    return PlacementProblem(
        t_values=np.array([1]),
        forward_latency_s=np.array([[1.0, 2.0, 1.0, 1.0, 1.0]]),
        backward_latency_s=np.array([[1.0, 2.0, 1.0, 1.0, 1.0]]),
        param_bytes=np.array([[7, 10, 6, 5, 14]]),
        activation_bytes=zeros,
        stash_bytes=np.array([[7, 14, 12, 5, 10]]),
        input_bytes=zeros,
        tensor_parallel=np.ones((1, n), dtype=bool),
        edges=np.array([(v - 1, v) for v in range(1, n)]),
        edge_bytes=np.full(n - 1, 18),
        device_count=8,
        microbatch_count=3,
        samples_per_microbatch=1,
        tiers=(NetworkTier(3, 25.0, 0.0), NetworkTier(8, 3.0, 0.0)),
    )


@settings(max_examples=examples(60), deadline=None)
@given(problems_and_settings(branching=False))
@example(drawn=(table_shared_across_d(), 51, {}))
def test_chains_match_brute_force(drawn: Drawn) -> None:
    check_against_brute_force(drawn)


@st.composite
def block_chains(draw: st.DrawFn) -> Drawn:
    """A random chain made a transformer's shape: every layer between the first (the embedding) and the
    last (the head) a copy of the second, and every edge the same bytes. Equal stages tie everywhere:
    the DP's skips must keep the first of equal plans, as the brute force's order does."""
    problem, hbm_bytes, others = draw(problems_and_settings(branching=False))
    n = problem.layer_count

    def blocks(a: NDArray[Any]) -> NDArray[Any]:
        out = a.copy()
        if n > 3:
            out[:, 2 : n - 1] = out[:, 1:2]
        return out

    per_layer = (
        "forward_latency_s", "backward_latency_s", "weight_grad_latency_s", "param_bytes",
        "expert_param_bytes", "gather_bytes", "expert_gather_bytes", "dummy_wgrad_bytes", "activation_bytes",
        "stash_bytes", "input_bytes", "selective_stash_bytes", "selective_recompute_s", "op_stash_bytes",
        "op_recompute_s", "tensor_parallel",
    )  # fmt: skip
    changed: dict[str, Any] = {name: blocks(getattr(problem, name)) for name in per_layer}
    edge_bytes = np.full_like(problem.edge_bytes, int(problem.edge_bytes[0]) if n > 1 else 0)
    return replace(problem, **changed, edge_bytes=edge_bytes), hbm_bytes, others


@settings(max_examples=examples(60), deadline=None)
@given(block_chains())
def test_chains_of_identical_blocks_match_brute_force(drawn: Drawn) -> None:
    check_against_brute_force(drawn)


@st.composite
def zero_bubble_block_chains(draw: st.DrawFn) -> Drawn:
    """A chain of identical blocks (`block_chains`) under ZB-H1, every layer's weight gradients the same
    share, below half, of its backward pass and nothing sent between stages: the plans whose bottleneck
    stage defers as much as the DP's bound on the bubble allows (`PlanModel::pace`), where a bound too
    high would drop the optimum."""
    problem, hbm_bytes, others = draw(block_chains())
    share = draw(st.floats(0.0, 0.45))
    uniform = replace(
        problem,
        weight_grad_latency_s=problem.backward_latency_s * share,
        edge_bytes=np.zeros_like(problem.edge_bytes),
    )
    return uniform, hbm_bytes, {**others, "interleave": 1, "pipeline_schedule": 1}


@settings(max_examples=examples(60), deadline=None)
@given(zero_bubble_block_chains())
def test_zero_bubble_chains_of_identical_blocks_match_brute_force(drawn: Drawn) -> None:
    check_against_brute_force(drawn)


@st.composite
def offloaded_block_chains(draw: st.DrawFn) -> Drawn:
    """A chain of identical blocks (`block_chains`) with its first blocks' activations offloaded to the
    host (`offloaded_problem`): their bytes 0, the next block's passes as long as their copies at
    least."""
    problem, hbm_bytes, others = draw(block_chains())
    blocks = list(range(1, problem.layer_count - 1))
    offload_layers = draw(st.integers(0, max(len(blocks) - 2, 0)))
    host_bytes_per_s = draw(st.floats(10.0, 1000.0))
    return offloaded_problem(problem, blocks, offload_layers, host_bytes_per_s), hbm_bytes, others


@settings(max_examples=examples(60), deadline=None)
@given(offloaded_block_chains())
def test_chains_with_offloaded_blocks_match_brute_force(drawn: Drawn) -> None:
    check_against_brute_force(drawn)


def narrow_pipeline_at_t8() -> PlacementProblem:
    """Eight layers without tensor-parallel ones at t = 8 on 8 devices, nodes of 5: a pipeline of
    narrow stages is shorter than t, whose later stages' DP groups were once placed past the last
    device (a zero bandwidth)."""
    n = 8
    zeros = np.zeros((1, n), dtype=np.int64)
    return PlacementProblem(
        t_values=np.array([8]),
        forward_latency_s=np.ones((1, n)),
        backward_latency_s=np.zeros((1, n)),
        param_bytes=zeros,
        activation_bytes=zeros,
        stash_bytes=zeros,
        input_bytes=zeros,
        tensor_parallel=np.zeros((1, n), dtype=bool),
        edges=np.array([(v - 1, v) for v in range(1, n)]),
        edge_bytes=np.zeros(n - 1, dtype=np.int64),
        device_count=8,
        microbatch_count=2,
        samples_per_microbatch=1,
        tiers=(NetworkTier(1, 1.0, 0.0), NetworkTier(5, 1.0, 0.0), NetworkTier(16, 1.0, 0.0)),
    )


@settings(max_examples=examples(60), deadline=None)
@given(problems_and_settings(branching=True))
@example(drawn=(narrow_pipeline_at_t8(), 1000, {}))
def test_branching_dags_match_brute_force(drawn: Drawn) -> None:
    check_against_brute_force(drawn)


@st.composite
def variant_batches(draw: st.DrawFn) -> tuple[PlacementProblem, list[Variant]]:
    """A problem (a chain, a chain of identical blocks, where equal plans tie, or a branching DAG) and
    up to eight variants, each a base setting with up to two of the settings the model reads, its width
    or its HBM size drawn anew (so that variants often differ in one knob, as a search's do)."""
    chains, dags = problems_and_settings(branching=False), problems_and_settings(branching=True)
    problem, hbm_bytes, _ = draw(st.one_of(chains, block_chains(), dags))
    knobs: dict[str, st.SearchStrategy[Any]] = {
        "recompute": st.sampled_from(RECOMPUTE_MODES),
        "interleave": st.integers(1, 3),
        "recompute_layers": st.integers(1, 3),
        "zero_stage": st.integers(0, 3),
        "cp": st.integers(1, 2),
        "last_stage_recomputes": st.booleans(),
        "overlap_grad_reduce": st.booleans(),
        "overlap_param_gather": st.booleans(),
        "overlap_p2p_comm": st.booleans(),
        "grad_reduce_in_fp32": st.booleans(),
        "gradient_accumulation_fusion": st.booleans(),
        "ep": st.sampled_from([1, 1, 2]),
        "pipeline_schedule": st.integers(0, 1),
        "t": st.sampled_from([int(t) for t in problem.t_values]),
        "hbm": st.sampled_from([hbm_bytes, hbm_bytes // 2, 2 * hbm_bytes]),
    }
    base = draw(st.fixed_dictionaries(knobs))
    variants = []
    for _ in range(draw(st.integers(2, 8))):
        changed = draw(st.lists(st.sampled_from(sorted(knobs)), max_size=2, unique=True))
        chosen = {**base, **{name: draw(knobs[name]) for name in changed}}
        t, hbm = chosen.pop("t"), chosen.pop("hbm")
        if chosen["interleave"] > 1:
            chosen["pipeline_schedule"] = 0  # ZB-H1 runs one model chunk per stage
        if t * chosen["cp"] <= problem.device_count:
            variants.append(Variant(t, hbm, plan_settings(**chosen)))
    return problem, variants


@settings(max_examples=examples(60), deadline=None)
@given(variant_batches())
def test_plans_found_for_other_variants_leave_each_optimum_as_alone(
    batch: tuple[PlacementProblem, list[Variant]],
) -> None:
    # In one call, each variant's search starts from the fastest plan found for an earlier variant of
    # its width that is a plan of it too (an incumbent), and variants share least-memory reports, each
    # started from the least peak of the plans found before: the result of each, plan and ties
    # included, is the one it gets alone, and its time (or least memory) the brute force's.
    problem, variants = batch
    for variant, result in zip(variants, solve_placements(problem, variants), strict=True):
        assert result == solve_placements(problem, [variant])[0]
        time_s = result.time_per_batch_s if isinstance(result, Placement) else None
        assert time_s == best_time_s(problem, variant)
        if isinstance(result, NoFeasiblePlacement):
            assert result.min_memory_bytes == min_memory_bytes(problem, variant)


@settings(max_examples=examples(60), deadline=None)
@given(problems_and_settings(branching=True), st.data())
def test_the_bound_on_shorter_latencies_never_exceeds_the_optimum(drawn: Drawn, data: st.DataObject) -> None:
    # What the `bounded` search relies on: the DP's optimum with bound_sync_windows on latencies no
    # longer than the real ones is at most the real optimum (up to rounding), for every variant.
    real = replace(drawn[0], bound_sync_windows=False)

    def shorter(latency_s: NDArray[np.float64]) -> NDArray[np.float64]:
        share = data.draw(st.lists(st.floats(0.0, 1.0), min_size=latency_s.size, max_size=latency_s.size))
        out: NDArray[np.float64] = latency_s * np.array(share).reshape(latency_s.shape)
        return out

    backward_s = shorter(real.backward_latency_s)
    bound = replace(
        real,
        bound_sync_windows=True,
        forward_latency_s=np.maximum(shorter(real.forward_latency_s), 0.001),  # drawn >= 0.001
        backward_latency_s=backward_s,
        weight_grad_latency_s=np.minimum(shorter(real.weight_grad_s), backward_s),
        selective_recompute_s=shorter(real.selective_s),
        op_recompute_s=shorter(real.op_s),
    )
    variants = variants_of(drawn)
    for optimum, lower in zip(
        solve_placements(real, variants), solve_placements(bound, variants), strict=True
    ):
        assert isinstance(lower, Placement) == isinstance(optimum, Placement)
        if isinstance(optimum, Placement) and isinstance(lower, Placement):
            assert lower.time_per_batch_s <= optimum.time_per_batch_s * (1.0 + 1e-12)


@settings(max_examples=examples(30), deadline=None)
@given(layer_graphs(branching=True))
def test_all_plans_enumerates_each_plan_once(graph: tuple[int, list[tuple[int, int]]]) -> None:
    n, edges = graph
    problem = PlacementProblem(
        t_values=np.array([1]),
        forward_latency_s=np.ones((1, n)),
        backward_latency_s=np.zeros((1, n)),
        param_bytes=np.zeros((1, n), dtype=np.int64),
        activation_bytes=np.zeros((1, n), dtype=np.int64),
        stash_bytes=np.zeros((1, n), dtype=np.int64),
        input_bytes=np.zeros((1, n), dtype=np.int64),
        tensor_parallel=np.zeros((1, n), dtype=bool),
        edges=np.array(edges, dtype=np.int64),
        edge_bytes=np.zeros(len(edges), dtype=np.int64),
        device_count=1,
        microbatch_count=1,
        samples_per_microbatch=1,
        tiers=(NetworkTier(1, 1.0, 0.0),),
    )
    plans = list(all_plans(problem))
    assert len(plans) == len(set(plans)) == plan_count(n, edges)
