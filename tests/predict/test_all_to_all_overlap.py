"""The expert-parallel all-to-alls overlapped with another microbatch's computation
(`Training.overlap_moe_expert_parallel_comm`, `phazec.predict.evaluator.overlapped`)."""

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from phazec.commands.plan import predict_plan
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config, typed
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.predict.evaluator import MoeParts, held_share, moe_parts, overlapped
from phazec.predict.training import Knobs, Training
from tests.conftest import compose_config, refused_before_export


def _parts(*figures: float) -> MoeParts:
    """`MoeParts` of one design: attention, dispatch, experts, combine, after the combine; then the
    backward's before the combine, combine, experts, dispatch, router and attention."""
    return MoeParts(*(np.array([x]) for x in figures))


def _overlapped_at(f: float, b: float, parts: MoeParts, held: float = 0.0) -> tuple[float, float, float]:
    """`overlapped` of one design's figures."""
    out = overlapped(np.array([f]), np.array([b]), parts, held)
    return float(out[0][0]), float(out[1][0]), float(out[2][0])


def test_a_layer_overlapped_by_hand() -> None:
    """The expert-parallel toy's layer (`tests/passes/test_expert_parallel.py`): forward 1 s of compute,
    0.5 s before the dispatch and 0.5 s of experts, and two all-to-alls of 1.75 s; backward 2 s, 1 s of
    experts and 1 s of router and attention, and two of 1.75 s, 10 s in all. Megatron-Core's four steps
    pair each all-to-all with one part of the other microbatch's computation: max(0.5, 1.75) +
    max(0.5, 1.75) = 3.5 s of the forward's and max(1, 1.75) + max(1, 1.75) = 3.5 s of the backward's,
    7 s, every computation hidden and 4 s of all-to-all left."""
    toy = _parts(0.5, 1.75, 0.5, 1.75, 0.0, 0.0, 1.75, 1.0, 1.75, 1.0)
    assert _overlapped_at(4.5, 5.5, toy) == (3.5, 3.5, 4.0)
    # A layer that computes longer than it sends, but not in the steps that send: forward attention
    # 0.2 s beside the backward combine's 0.9 s, experts 3.8 s beside its dispatch's 0.1 s; backward
    # experts 2 s beside the forward dispatch's 0.5 s, attention 6 s beside its combine's 0.5 s. The
    # whole layers would hide every all-to-all (max(4, 1) + max(8, 1) = 12 s); step by step 0.9 + 3.8
    # = 4.7 s and 2 + 6 = 8 s, 0.7 s of the backward combine left.
    uneven = _parts(0.2, 0.5, 3.8, 0.5, 0.0, 0.0, 0.9, 2.0, 0.1, 6.0)
    assert _overlapped_at(5.0, 9.0, uneven) == pytest.approx((4.7, 8.0, 0.7))
    # A quarter of the cores held by the all-to-alls' kernels: the computation beside each takes a
    # quarter of its time longer, 0.2 + 0.225 < 0.9, 3.8 + 0.025, 2 + 0.125, 6 + 0.125: 4.725 + 8.25.
    assert _overlapped_at(5.0, 9.0, uneven, 0.25) == pytest.approx((4.725, 8.25, 0.975))
    # The combine's own computation (its unpermutation and residual add, 0.4 s forward and 0.6 s
    # backward) runs beside nothing: it adds to the steps, 0.6 + 4.7 and 8 + 0.4.
    combined = _parts(0.2, 0.5, 3.8, 0.5, 0.4, 0.6, 0.9, 2.0, 0.1, 6.0)
    assert _overlapped_at(5.4, 9.6, combined) == pytest.approx((5.3, 8.4, 0.7))
    # The parts are the operators' summed latencies, scaled to each pass's scheduled computation: a
    # schedule that runs the forward's 8 s of operators in 4 s halves each of its parts.
    halved = _parts(0.4, 0.5, 7.6, 0.5, 0.0, 0.0, 0.9, 2.0, 0.1, 6.0)
    assert _overlapped_at(5.0, 9.0, halved) == pytest.approx((4.7, 8.0, 0.7))


def test_the_flex_dispatcher_holds_its_sms_of_the_chip() -> None:
    """Megatron-Core's DeepEP default, 20 SMs, of an H100's 132 (one tensor core each in the preset);
    the all-to-all dispatcher's NCCL kernels the preset's 16 (`hw.device.collective_sms`); at most every
    core; none on the template, whose network runs beside its cores."""
    h100 = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=h100").hw, "hw")))
    flex = Training(ep=8, moe_token_dispatcher="flex")
    assert held_share(h100, flex).tolist() == [20 / 132]
    assert held_share(h100, replace(flex, moe_flex_sms=32)).tolist() == [32 / 132]
    assert held_share(h100, replace(flex, moe_flex_sms=500)).tolist() == [1.0]
    assert held_share(h100, replace(flex, moe_token_dispatcher="alltoall")).tolist() == [16 / 132]
    tpuv4 = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=tpuv4").hw, "hw")))
    assert held_share(tpuv4, replace(flex, moe_token_dispatcher="alltoall")).tolist() == [0.0]


def test_overlapped_lies_between_the_whole_layers_pairing_and_none_and_grows_with_each_pass() -> None:
    """Over a grid of parts: F' + B' is at least the whole layers' pairing, max(F_c, B_a) + max(B_c,
    F_a), every all-to-all of one pass hidden behind all of the other's computation, and at most F + B;
    each grows with either pass's latency, so lower bounds on them give lower bounds."""
    values = [0.0, 0.5, 2.0, 7.0]
    for figures in itertools.product(values, repeat=6):
        attention, dispatch, experts, combine_grad, experts_grad, attention_grad = figures
        parts = _parts(attention, dispatch, experts, dispatch, 0.5, 0.25, combine_grad, experts_grad,
                       combine_grad, attention_grad)  # fmt: skip
        f_c, b_c = attention + experts + 0.5, 0.25 + experts_grad + attention_grad
        f_a, b_a = 2 * dispatch, 2 * combine_grad
        f, b = f_c + f_a, b_c + b_a
        for held in (0.0, 0.25, 1.0):
            forward, backward, exposed = _overlapped_at(f, b, parts, held)
            whole = max(f_c + held * b_a, b_a) + max(b_c + held * f_a, f_a)
            assert whole - 1e-12 <= forward + backward <= f + b + 1e-12
            assert forward + backward == pytest.approx(f_c + b_c + exposed)
            later, other, _ = _overlapped_at(f + 1.0, b + 2.0, parts, held)
            assert later >= forward and other >= backward


PLAN = (
    "model=qwen3_30b_a3b", "model.hf_config.num_hidden_layers=2", "model.seq_len=512", "hw=tpuv4",
    "system=dgx_a100", "system.devices=16", "system.global_batch=32", "train.optimizer=adam",
    "tracking=none", "plan.pp=1", "plan.dp=16", "plan.ep=16", "plan.microbatch=2",
)  # fmt: skip
"""Qwen3-30B-A3B cut to 2 blocks at 512 tokens on 16 devices, 16-way expert parallelism over two nodes."""


def test_phazec_plan_hides_the_all_to_alls_the_layers_computation_covers(cache_dir: Path) -> None:
    """With the overlap, each layer's latencies the placement reads are `overlapped` of the plain ones
    (the wiring through the evaluator), the plan is faster, by at most its all-to-alls, and the breakdown
    reports what is left of them and still adds up to the iteration."""
    plain_settings = settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}"))
    on = compose_config(*PLAN, "plan.overlap_moe_expert_parallel_comm=true", f"cache_dir={cache_dir}")
    plain, overlap = predict_plan(plain_settings), predict_plan(settings_from_config(on))
    a2a = plain.breakdown.ep_communication_s
    assert a2a > 0 and overlap.breakdown.ep_communication_s < a2a
    assert plain.time_per_batch_s - a2a <= overlap.time_per_batch_s < plain.time_per_batch_s
    assert overlap.breakdown.total_s == pytest.approx(overlap.time_per_batch_s, rel=1e-12)
    training = plain_settings.plan.training
    job = setup(
        plain_settings, Knobs.single(training, round(max(plain_settings.system.hbm_bytes))), widths=[1]
    )
    evaluator, designs = job.evaluator, job.designs
    model = evaluator.graphs[1]
    before = evaluator.layer_latencies_s(designs, training)[1]
    after = evaluator.layer_latencies_s(designs, replace(training, overlap_moe_expert_parallel_comm=True))[1]
    moved = 0
    for i, layer in enumerate(model.layers):
        cls = model.classes[layer.cls]
        costs = evaluator.class_costs(model, layer.cls, designs, training)
        parts = moe_parts(cls, costs)
        if parts is None:  # no all-to-alls: unchanged
            assert np.array_equal(after[:, :2, i], before[:, :2, i])
            continue
        expected = overlapped(before[:, 0, i], before[:, 1, i], parts)
        assert np.array_equal(after[:, 0, i], expected[0]) and np.array_equal(after[:, 1, i], expected[1])
        moved += int(not np.array_equal(after[:, :2, i], before[:, :2, i]))
    assert moved == 2  # the two MoE blocks; the embedding and the head send nothing


def test_a_moe_layer_is_cut_at_its_dispatch_and_combine(cache_dir: Path) -> None:
    """Qwen3-30B-A3B's MoE block (`PLAN`): its forward pass dispatches the tokens and their routing
    weights and combines once, the backward pass the other way round, each all-to-all named for its
    role by the expert-parallel pass; `moe_parts` puts each in its part, and every other operator in
    the part of the computation around it, nothing counted twice."""
    settings = settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}"))
    training = settings.plan.training
    job = setup(settings, Knobs.single(training, round(max(settings.system.hbm_bytes))), widths=[1])
    model = job.evaluator.graphs[1]
    block = next(
        c for c, cls in enumerate(model.classes) if any(op.op_type == "AllToAll" for op in cls.graph.ops)
    )
    cls = model.classes[block]
    assert cls.backward is not None
    costs = job.evaluator.class_costs(model, block, job.designs, training)
    assert costs.backward is not None
    parts = moe_parts(cls, costs)
    assert parts is not None
    for graph, op_costs, roles in (
        (cls.graph, costs.forward, {"dispatch": parts.dispatch, "combine": parts.combine}),
        (cls.backward, costs.backward, {"dispatch": parts.dispatch_grad, "combine": parts.combine_grad}),
    ):
        exchanges = [(i, op.name) for i, op in enumerate(graph.ops) if op.op_type == "AllToAll"]
        assert len(exchanges) == 3
        for role, part in roles.items():
            named = [i for i, name in exchanges if f".{role}" in name]
            assert len(named) == (2 if role == "dispatch" else 1)
            assert np.array_equal(part, op_costs.all_cores_s[named].sum(axis=0))
    computation = parts.attention + parts.experts + parts.after_combine
    forward_ops = [i for i, op in enumerate(cls.graph.ops) if op.op_type != "AllToAll"]
    assert np.allclose(computation, costs.forward.all_cores_s[forward_ops].sum(axis=0), rtol=1e-12)
    backward_computation = parts.before_combine_grad + parts.experts_grad + parts.attention_grad
    backward_ops = [i for i, op in enumerate(cls.backward.ops) if op.op_type != "AllToAll"]
    assert np.allclose(backward_computation, costs.backward.all_cores_s[backward_ops].sum(axis=0), rtol=1e-12)


def test_overlapping_all_to_alls_without_expert_parallelism_is_refused(tmp_path: Path) -> None:
    refused_before_export(
        ("model=qwen3_30b_a3b", "plan.overlap_moe_expert_parallel_comm=true"),
        r"^plan.overlap_moe_expert_parallel_comm=true overlaps the expert-parallel all-to-alls, but "
        r"plan.ep=1 sends none: set plan.ep above 1",
        tmp_path,
    )
