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
from phazec.predict.evaluator import all_to_all_s, held_share, overlapped
from phazec.predict.training import Knobs, Training
from tests.conftest import compose_config, refused_before_export


def test_a_layer_overlapped_by_hand() -> None:
    """The expert-parallel toy's layer (`tests/passes/test_expert_parallel.py`): forward 1 s of compute and
    two all-to-alls of 1.75 s, backward 2 s and two of 1.75 s, 10 s in all. Overlapped, each pass's
    computation runs beside the other's 3.5 s of all-to-alls: max(1, 3.5) + max(2, 3.5) = 7 s, every
    computation hidden. A layer that computes longer than it sends (5 s with 1 s of all-to-all, 9 s with
    1 s) hides every all-to-all: 4 + 8 = 12 s; one without all-to-alls is unchanged."""
    toy = overlapped(np.array([4.5]), np.array([5.5]), np.array([3.5]), np.array([3.5]))
    assert [float(x[0]) for x in toy] == [3.5, 3.5, 4.0]  # 3.5 - 1 + 3.5 - 2 of all-to-all left
    long = overlapped(np.array([5.0]), np.array([9.0]), np.array([1.0]), np.array([1.0]))
    assert [float(x[0]) for x in long] == [4.0, 8.0, 0.0]
    dense = overlapped(np.array([5.0]), np.array([9.0]), np.zeros(1), np.zeros(1))
    assert [float(x[0]) for x in dense] == [5.0, 9.0, 0.0]
    # With a quarter of the cores held by the all-to-alls' kernels, the computation beside each 1 s of
    # them takes 0.25 s longer: 4.25 + 8.25 = 12.5 s, 0.5 s of all-to-all left; the toy is all-to-all
    # bound (1 + 0.875 and 2 + 0.875 are under 3.5) and does not change.
    held = overlapped(np.array([5.0]), np.array([9.0]), np.array([1.0]), np.array([1.0]), 0.25)
    assert [float(x[0]) for x in held] == [4.25, 8.25, 0.5]
    toy_held = overlapped(np.array([4.5]), np.array([5.5]), np.array([3.5]), np.array([3.5]), 0.25)
    assert [float(x[0]) for x in toy_held] == [3.5, 3.5, 4.0]


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


def test_overlapped_lies_between_every_all_to_all_hidden_and_none_and_grows_with_each_pass() -> None:
    """Over a grid: F' + B' is at least max(F_c + B_c, F_a + B_a) and at most F + B; F' grows with F and
    does not depend on B (and B' the other way), so lower bounds on a pass give lower bounds."""
    values = [0.0, 0.5, 1.0, 2.0, 3.5, 7.0]
    for (f_a, b_a, f_c, b_c), held in itertools.product(
        itertools.product(values, repeat=4), [0.0, 0.25, 1.0]
    ):
        f, b = f_c + f_a, b_c + b_a
        forward, backward, exposed = _overlapped_at(f, b, f_a, b_a, held)
        assert max(f_c + b_c, f_a + b_a) <= forward + backward <= f + b
        assert forward + backward == pytest.approx(f_c + b_c + exposed)
        later, other, _ = _overlapped_at(f + 1.0, b + 2.0, f_a, b_a, held)
        assert later >= forward and other >= backward
        assert _overlapped_at(f, b + 5.0, f_a, b_a, held)[0] == forward


def _overlapped_at(f: float, b: float, f_a: float, b_a: float, held: float) -> tuple[float, float, float]:
    """`overlapped` of one design's figures."""
    out = overlapped(np.array([f]), np.array([b]), np.array([f_a]), np.array([b_a]), held)
    return float(out[0][0]), float(out[1][0]), float(out[2][0])


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
        expected = overlapped(before[:, 0, i], before[:, 1, i], *all_to_all_s(cls, costs))
        assert np.array_equal(after[:, 0, i], expected[0]) and np.array_equal(after[:, 1, i], expected[1])
        moved += int(not np.array_equal(after[:, :2, i], before[:, :2, i]))
    assert moved == 2  # the two MoE blocks; the embedding and the head send nothing


def test_overlapping_all_to_alls_without_expert_parallelism_is_refused(tmp_path: Path) -> None:
    refused_before_export(
        ("model=qwen3_30b_a3b", "plan.overlap_moe_expert_parallel_comm=true"),
        r"^plan.overlap_moe_expert_parallel_comm=true overlaps the expert-parallel all-to-alls, but "
        r"plan.ep=1 sends none: set plan.ep above 1",
        tmp_path,
    )
