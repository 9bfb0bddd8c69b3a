"""Activation offloading (`train.offload_layers`, `plan.offload_layers`): the offloaded blocks' bytes and
the copies' exposed time by hand, on a toy and through `phazec-plan`, and the settings it refuses."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from phazec.commands.plan import timed_plan
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.hw.system import NetworkTier
from phazec.ir.core import LayerKind
from phazec.predict.evaluator import layer_arrays
from phazec.predict.offload import offloaded_problem
from phazec.predict.training import Training
from phazec.solvers.placement.evaluate import explain_plan
from phazec.solvers.placement.problem import PlacementProblem, Variant
from tests.conftest import compose_config
from tests.predict.conftest import TINY_LLAMA
from tests.solvers.placement.placement_reference import plan_settings

# --- A chain of three blocks, by hand ----------------------------------------------------------------
# Layers 0 -> 1 -> 2, all transformer blocks, one stage on one device, m = 2 microbatches: forward 1 s
# and backward 2 s each, 300 B kept per microbatch each, 1000 B of weights each (SGD: weights and
# gradients, 6000 B). Without offloading: load 3 + 6 = 9 s, time 2 x 9 = 18 s; memory 6000 + 900
# (one microbatch in flight on the one stage).
# offload_layers = 1 (at most 3 - 2): block 0's 300 B go to the host, memory 6000 + 600. Its copy takes
# 300 / bandwidth, hidden behind block 1's forward (1 s) on the way out and its backward (2 s) on the
# way back; a pass shorter than the copy waits for it:
#   1000 B/s: 0.3 s, hidden in both: load 9 s, time 18 s.
#   200 B/s: 1.5 s, forward of block 1 1.5 s, backward 2 s: load 9.5 s, time 19 s.
#   100 B/s: 3 s, forward 3 s, backward 3 s: load 12 s, time 24 s.


def chain() -> PlacementProblem:
    """The three-block chain."""
    return PlacementProblem(
        t_values=np.array([1]),
        forward_latency_s=np.array([[1.0, 1.0, 1.0]]),
        backward_latency_s=np.array([[2.0, 2.0, 2.0]]),
        param_bytes=np.array([[1000, 1000, 1000]]),
        activation_bytes=np.array([[300, 300, 300]]),
        stash_bytes=np.array([[300, 300, 300]]),
        input_bytes=np.array([[50, 50, 50]]),
        selective_stash_bytes=np.array([[200, 200, 200]]),
        tensor_parallel=np.zeros((1, 3), dtype=bool),
        edges=np.array([(0, 1), (1, 2)]),
        edge_bytes=np.array([10, 10]),
        device_count=1,
        microbatch_count=2,
        samples_per_microbatch=1,
        tiers=(NetworkTier(1, 100.0, 0.0),),
    )


@pytest.mark.parametrize(
    ("host_bytes_per_s", "load_s", "time_s"), [(1000.0, 9.0, 18.0), (200.0, 9.5, 19.0), (100.0, 12.0, 24.0)]
)
def test_toy_offloaded_block_by_hand(host_bytes_per_s: float, load_s: float, time_s: float) -> None:
    variant = Variant(1, 10**6, plan_settings())
    kept = explain_plan(chain(), variant, [[0, 1, 2]], 1)
    assert (kept.placement.time_per_batch_s, kept.placement.stages[0].memory_bytes) == (18.0, 6900)
    problem = offloaded_problem(chain(), [0, 1, 2], 1, host_bytes_per_s)
    assert problem.stash_bytes.tolist() == [[0, 300, 300]]
    assert problem.selective_stash.tolist() == [[0, 200, 200]]
    assert problem.input_bytes.tolist() == [[0, 50, 50]]
    figures = explain_plan(problem, variant, [[0, 1, 2]], 1)
    assert figures.placement.stages[0].load_s == load_s
    assert figures.placement.time_per_batch_s == time_s
    assert figures.placement.stages[0].memory_bytes == 6600
    assert figures.memories[0].stash_bytes == 600


def test_offloading_nothing_leaves_the_problem_as_it_is() -> None:
    problem = chain()
    assert offloaded_problem(problem, [0, 1, 2], 0, 0.0) is problem


def test_the_toy_refuses_more_blocks_than_it_can_overlap_and_no_host_link() -> None:
    with pytest.raises(
        PhazecError, match=r"offload_layers=2 is not valid for a model of 3 transformer blocks"
    ):
        offloaded_problem(chain(), [0, 1, 2], 2, 100.0)
    with pytest.raises(PhazecError, match=r"system.host_link_bytes_per_s = 0"):
        offloaded_problem(chain(), [0, 1, 2], 1, 0.0)


# --- Through phazec-plan: a four-block Llama on one H100 --------------------------------------------
FOUR_BLOCKS = (
    *TINY_LLAMA,
    "model.hf_config.num_hidden_layers=4",
    "hw=h100",
    "system=dgx_h100",
    "system.devices=1",
    "system.global_batch=2",
    "plan.tp=1",
    "plan.pp=1",
    "plan.dp=1",
    "plan.microbatch=1",
)


def test_a_plan_keeps_the_offloaded_blocks_on_the_host(cache_dir: Path) -> None:
    # Two of the four blocks offloaded: the stage keeps two blocks' stash less. Over PCIe Gen5 (64 GB/s)
    # the tiny blocks' copies hide behind the next block's passes: the time is the same. Over a link of
    # 1 kB/s each copy outlasts the pass it overlaps, which waits for it: blocks 2 and 3 (layers 2 and
    # 3 after the embedding) run their forward and backward passes in the copies' time, in each of the
    # m = 2 microbatches.
    def plan(*overrides: str) -> tuple[float, int, list[float], list[float], list[int]]:
        settings = settings_from_config(compose_config(*FOUR_BLOCKS, f"cache_dir={cache_dir}", *overrides))
        report, job, _ = timed_plan(settings)
        graph = job.evaluator.graphs[1]
        training = settings.plan.training
        latency = job.evaluator.layer_latencies_s(job.designs, training)[1][0]
        stash = layer_arrays(graph, Training(microbatch=1, precision=training.precision)).stash_bytes.tolist()
        assert [layer.kind for layer in graph.layers[1:5]] == [LayerKind.BLOCK] * 4
        memory = report.memory.activation_stash_bytes
        return report.time_per_batch_s, memory, latency[0].tolist(), latency[1].tolist(), stash

    base_s, base_bytes, forward, backward, stash = plan()
    fast_s, fast_bytes, *_ = plan("plan.offload_layers=2")
    assert fast_bytes == base_bytes - stash[1] - stash[2]
    assert fast_s == base_s
    slow_s, slow_bytes, *_ = plan("plan.offload_layers=2", "system.host_link_bytes_per_s=1000")
    assert slow_bytes == fast_bytes
    waits_s = sum(
        max(pass_s[layer], stash[layer - 1] / 1000) - pass_s[layer]
        for layer in (2, 3)
        for pass_s in (forward, backward)
    )
    assert waits_s > 0
    assert slow_s == pytest.approx(base_s + 2 * waits_s, rel=1e-12)


# --- Bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("plan.offload_layers=-1",), r"^plan.offload_layers=-1 is not valid: it must be an integer >= 0.$"),
        (
            ("train.offload_layers=-2",),
            r"^train.offload_layers=-2 is not valid: it must be an integer >= 0.$",
        ),
        (
            ("system=dgx_h100", "plan.offload_layers=3"),
            r"^plan.offload_layers=3 is not valid for a model of 4 transformer blocks: it must be 0 to 2\.",
        ),
        (
            ("system=phaze_1024", "plan.offload_layers=1"),
            r"^plan.offload_layers=1 offloads activations to the host, but the system has no host link "
            r"\(system.host_link_bytes_per_s = 0\)",
        ),
        (
            ("system=dgx_h100", "plan.offload_layers=1", "plan.recompute=selective"),
            r"^plan.offload_layers=1 does not combine with plan.recompute 'selective': Megatron-Core refuses",
        ),
        (
            ("system=dgx_h100", "train.offload_layers=1"),
            r"^train.offload_layers=1 does not combine with train.recompute 'full'.*"
            r"set train.recompute=\[none\]",
        ),
    ],
)
def test_an_offload_that_cannot_run_is_refused(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        settings_from_config(compose_config(*TINY_LLAMA, "model.hf_config.num_hidden_layers=4", *overrides))


def test_a_search_offloads_with_recompute_none() -> None:
    settings = settings_from_config(
        compose_config(*TINY_LLAMA, "system=dgx_h100", "train.offload_layers=0", "train.recompute=[none]")
    )
    assert settings.train.fixed.offload_layers == 0
    offloading = settings_from_config(
        compose_config(
            *TINY_LLAMA, "model.hf_config.num_hidden_layers=4", "system=dgx_h100", "train.offload_layers=2",
            "train.recompute=[none]",
        )
    )  # fmt: skip
    assert replace(offloading.train.fixed, offload_layers=0) == settings.train.fixed
