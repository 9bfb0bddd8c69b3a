"""A deduplicating token dispatcher's all-to-alls (`Training.moe_token_dispatcher` flex, DeepEP and
HybridEP): each token sent once per device and node holding one of its experts
(`phazec.cost.network.tier_bytes`, `hit_probability`)."""

import itertools
import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from phazec.commands.plan import predict_plan
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config
from phazec.cost.network import Routed, exchange_s, hit_probability, network_latency_s, tier_bytes
from phazec.cost.ops import OpKind, OpTable, OpWork
from phazec.hw.system import NetworkTier, System
from phazec.predict.training import Knobs
from tests.conftest import compose_config, refused_before_export
from tests.predict.test_all_to_all_overlap import PLAN


def test_hit_probability_by_hand() -> None:
    """Without groups: 1 - C(E - m, k) / C(E, k). With 4 groups of 2 experts, 2 chosen, top-2: a group is
    chosen with probability 3/6 and then holds one of the token's 2 experts (of the chosen 4) with
    probability 1 - C(2, 2) / C(4, 2) = 5/6, so 5/12; two groups: 1 - (1/6 + 4/6 x 1/6) = 13/18; one
    expert: 2/8, as without groups. A unit of 4 that does not divide 6 experts wraps round."""
    assert hit_probability(Routed(6, 2, 1, 1), 3) == float(Fraction(4, 5))
    grouped = Routed(8, 2, 4, 2)
    assert hit_probability(grouped, 2) == float(Fraction(5, 12))
    assert hit_probability(grouped, 4) == float(Fraction(13, 18))
    assert hit_probability(grouped, 1) == 0.25
    assert hit_probability(grouped, 8) == 1.0
    assert hit_probability(Routed(6, 2, 1, 1), 4) == float(Fraction(14, 15))


def _exchange(collective_bytes: float, g: int, routed: Routed | None) -> OpWork:
    plain = OpWork(OpKind.ALL_TO_ALL, collective_bytes=round(collective_bytes), group_size=g)
    if routed is None:
        return plain
    return replace(
        plain,
        routed_experts=routed.experts,
        top_k=routed.top_k,
        expert_groups=routed.groups,
        group_top_k=routed.chosen,
    )


def test_two_tiers_by_hand() -> None:
    """4 devices in nodes of 2, 8 experts, top-2, 1,600 bytes of token copies (800 of tokens). Every copy
    sent: 1/4 to the node's other device, 2/4 across, 400 and 800 B. Deduplicated: across, the token goes
    to the other node when it holds one of its experts (1 - C(4, 2) / C(8, 2) = 22/28), 800 x 22/28 B;
    inside the nodes, both its own node and the other node's receiving device send it on to the
    node's other device when that one holds one (1 - C(6, 2) / C(8, 2) = 13/28), 2 x 800 x 13/28 B. The
    slowest tier sets the time, with 3 latencies and a call."""
    system = System(
        "two nodes", 4, 4, (80e9,), (NetworkTier(2, 400.0, 0.5, 2.0), NetworkTier(4, 100.0, 1.0, 4.0))
    )
    routed = Routed(8, 2, 1, 1)
    ops = OpTable.from_rows([_exchange(1600, 4, None), _exchange(1600, 4, routed)])
    sent = tier_bytes(ops, system)
    assert sent[:, 0].tolist() == [400.0, 800.0]
    assert sent[:, 1].tolist() == pytest.approx([2 * 800 * 13 / 28, 800 * 22 / 28], rel=1e-15)
    assert exchange_s(ops, system).tolist() == pytest.approx([8.0, 800 * 22 / 28 / 100], rel=1e-15)
    latency = network_latency_s(ops, system)
    assert latency.tolist() == pytest.approx([8.0 + 3 + 4, 800 * 22 / 28 / 100 + 3 + 4], rel=1e-15)


def test_top_one_sends_as_many_bytes_across_the_top_tier_and_never_more_anywhere_on_one_tier() -> None:
    """With top-1 each token has one copy, so the top tier carries what every copy sent does; on one
    tier, and on the top tier of any system, deduplication never sends more (a unit is hit with
    probability at most k times its share of the experts)."""
    tiers = {
        1: (NetworkTier(64, 1.0, 0.0, 0.0),),
        2: (NetworkTier(8, 4.0, 0.0, 0.0), NetworkTier(64, 1.0, 0.0, 0.0)),
    }
    for (n, tier_list), g, (experts, k, groups, chosen) in itertools.product(
        tiers.items(), (2, 8, 16, 64), ((64, 1, 1, 1), (64, 8, 1, 1), (256, 8, 8, 4), (128, 4, 4, 2))
    ):
        system = System("grid", 64, 64, (80e9,), tier_list)
        routed = Routed(experts, k, groups, chosen)
        ops = OpTable.from_rows([_exchange(8192 * k, g, None), _exchange(8192 * k, g, routed)])
        plain, deduplicated = tier_bytes(ops, system).T
        assert deduplicated[-1] <= plain[-1] * (1 + 1e-12)
        if n == 1:
            assert deduplicated[0] <= plain[0] * (1 + 1e-12)
        if k == 1:
            assert deduplicated[-1] == pytest.approx(plain[-1], rel=1e-12)


def test_phazec_plan_prices_each_all_to_all_deduplicated_by_hand(cache_dir: Path) -> None:
    """Qwen3-30B-A3B at ep 16 over two DGX A100 nodes (128 experts, top-8, 8 a device): a dispatch or
    combine of B bytes of token copies sends B/8 x 2 x 7 x P(device) over NVLink, P(device) = 1 - C(120,
    8) / C(128, 8), and B/8 x P(node) over InfiniBand, P(node) = 1 - C(64, 8) / C(128, 8); the slowest
    sets its time, plus 15 latencies and a call of InfiniBand's. The plan is faster than with every copy
    sent, by less than its all-to-alls."""
    plain_settings = settings_from_config(compose_config(*PLAN, f"cache_dir={cache_dir}"))
    flex_settings = settings_from_config(
        compose_config(*PLAN, "plan.moe_token_dispatcher=flex", f"cache_dir={cache_dir}")
    )
    training = flex_settings.plan.training
    job = setup(flex_settings, Knobs.single(training, round(max(flex_settings.system.hbm_bytes))), widths=[1])
    nvlink, infiniband = flex_settings.system.tiers
    p_device = 1 - Fraction(math.comb(120, 8), math.comb(128, 8))
    p_node = 1 - Fraction(math.comb(64, 8), math.comb(128, 8))
    model = job.evaluator.graphs[1]
    checked = 0
    for c, cls in enumerate(model.classes):
        costs = job.evaluator.class_costs(model, c, job.designs, training)
        for graph, op_costs in ((cls.graph, costs.forward), (cls.backward, costs.backward)):
            if graph is None or op_costs is None:
                continue
            for i, op in enumerate(graph.ops):
                if op.op_type != "AllToAll":
                    continue
                copies = graph.tensors[op.inputs[0]].nbytes(training.microbatch)
                wire_s = max(
                    copies / 8 * 2 * 7 * float(p_device) / nvlink.bandwidth_bytes_per_s,
                    copies / 8 * float(p_node) / infiniband.bandwidth_bytes_per_s,
                )
                expected = wire_s + 15 * infiniband.latency_s + infiniband.call_latency_s
                assert op_costs.all_cores_s[i, 0] == pytest.approx(expected, rel=1e-12)
                checked += 1
    assert checked == 2 * 3  # per pass: the tokens' and their routing weights' dispatch, the combine
    plain, flex = predict_plan(plain_settings), predict_plan(flex_settings)
    a2a = plain.breakdown.ep_communication_s
    assert 0 < flex.breakdown.ep_communication_s < a2a
    assert plain.time_per_batch_s - a2a < flex.time_per_batch_s < plain.time_per_batch_s
    assert np.isclose(flex.breakdown.total_s, flex.time_per_batch_s, rtol=1e-12)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=qwen3_30b_a3b", "plan.moe_token_dispatcher=flex"),
            r"^plan.moe_token_dispatcher=flex deduplicates the tokens of the expert-parallel all-to-alls, "
            r"but plan.ep=1 sends none: set plan.ep above 1 .* or plan.moe_token_dispatcher=alltoall\.$",
        ),
        (
            ("model=qwen3_30b_a3b", "plan.moe_token_dispatcher=deepep"),
            r"^plan.moe_token_dispatcher='deepep' is not valid: it must be one of \['alltoall', 'flex'\]\.$",
        ),
        (
            ("model=deepseek_v3", "model.hf_config.n_group=3"),
            r"^model.hf_config.n_group=3 and topk_group=4 are not valid for 256 experts",
        ),
    ],
)
def test_bad_dispatcher_settings_are_one_paragraph_before_any_work(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    refused_before_export(overrides, message, tmp_path)
