"""Expert parallelism on a toy MoE block built by hand (2 experts, top-1, ep 2): the all-to-alls, their
bytes and time, the per-device weights; bad expert-parallel settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.config.settings import settings_from_config, typed
from phazec.cost.model import MODELS, op_costs
from phazec.cost.network import sent_bytes
from phazec.cost.ops import OpKind as CostKind
from phazec.errors import PhazecError
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, System
from phazec.ir.core import Graph, Layer, LayerClass, LayerKind, Model, Op, OpKind, Routing, Tensor
from phazec.passes.pipeline import GraphSettings, training_pipeline
from phazec.passes.training import Collectives, graph_totals
from phazec.predict.layer_costs import Split, op_table
from phazec.solvers.placement.evaluate import plan_figures
from phazec.solvers.placement.problem import Placement, PlacementProblem, Variant
from tests.conftest import compose_config
from tests.solvers.placement.placement_reference import best_placement, plan_settings

# --- The toy: one MoE block, 2 experts, top-1 ------------------------------------------------------
# Per sample s = 4 tokens of h = 2 (bf16); top-1 over E = 2 experts puts C = 4 x 1 / 2 = 2 tokens on
# each. x [4, 2] -> permute (a view, balanced; the expert-parallel pass makes it a kernel) p [E=2, C=2,
# h=2] -> expert GEMM with w1 [2, 2, 2] -> Relu -> expert GEMM with w2 [2, 2, 2] -> o [2, 2, 2] ->
# unpermute y [4, 2].
S, H, E = 4, 2, 2


def toy_model(experts: int = E, seq: int = S) -> Model:
    """The toy; with `experts` instead of E and `seq` tokens a sample instead of S (experts dividing
    them), each expert takes seq / experts tokens."""

    def tokens(name: str) -> Tensor:
        return Tensor(name, (experts, seq // experts, H), "bfloat16", 1)

    tensors = {
        "x": Tensor("x", (seq, H), "bfloat16", 0),
        "w1": Tensor("w1", (experts, H, H), "bfloat16"),
        "w2": Tensor("w2", (experts, H, H), "bfloat16"),
        "y": Tensor("y", (seq, H), "bfloat16", 0),
        **{n: tokens(n) for n in ("p", "u", "r", "o")},
    }
    ops = [
        Op("permute", "Reshape", OpKind.DATA, ("x",), ("p",)),
        Op("up", "MatMul", OpKind.GEMM, ("p", "w1"), ("u",)),
        Op("act", "Relu", OpKind.VECTOR, ("u",), ("r",)),
        Op("down", "MatMul", OpKind.GEMM, ("r", "w2"), ("o",)),
        Op("unpermute", "Reshape", OpKind.DATA, ("o",), ("y",)),
    ]
    graph = Graph(tensors, ops, ["x"], ["w1", "w2"], [], ["y"])
    routing = Routing(
        experts=experts,
        top_k=1,
        tokens_per_expert=seq // experts,
        expert_parameters=("w1", "w2"),
        expert_parameter_count=8 * experts,
    )
    layer = Layer(0, "block.0", LayerKind.BLOCK, 0)
    return Model("toy_moe", [layer], [], [LayerClass(graph, (0,))], 8 * experts, seq, routing=routing)


def test_toy_active_parameters_are_top_k_over_the_experts() -> None:
    model = toy_model()
    assert (model.parameter_count, model.active_parameter_count) == (16, 8)


def test_toy_all_to_alls_bytes_time_and_weights_by_hand() -> None:
    """ep 2: a dispatch before the first expert GEMM and a combine after the last, forward and (the
    autodiff pass) backward, each over the 2 devices. At microbatch 2 a device's permuted tokens are
    2 x 4 x 2 bf16 = 32 B; an all-to-all over 2 devices sends (2 - 1) / 2 of them, 16 B. On a tier of
    16 B/s (efficiency 1), 0.5 s per step and 0.25 s per call it takes 16 / 16 + 1 x 0.5 + 0.25 =
    1.75 s. Each device holds 1 of the 2 experts: its expert GEMMs are 1 product of 4 x 2 rows per
    sample (2 tokens from each device) instead of 2 of 2, and its weights 2 x (1 x 2 x 2) x 2 B = 16 B
    of the 32, as are its gradients (plain SGD keeps no state)."""
    split = training_pipeline(1, GraphSettings(expert_parallel=2)).run(toy_model())[0].classes[0]
    forward = [(op.op_type, op.inputs, op.outputs) for op in split.graph.ops]
    assert forward == [
        ("Reshape", ("x",), ("p.unpermuted",)),
        ("Permute", ("p.unpermuted",), ("p",)),
        ("AllToAll", ("p",), ("p.dispatched",)),
        ("MatMul", ("p.dispatched", "w1"), ("u",)),
        ("Relu", ("u",), ("r",)),
        ("MatMul", ("r", "w2"), ("o",)),
        ("AllToAll", ("o",), ("o.combined",)),
        ("Reshape", ("o.combined",), ("y",)),
    ]
    graph = split.graph
    assert [graph.tensors[t].shape for t in ("p", "p.dispatched", "u", "o", "o.combined", "w1")] == [
        (2, 2, 2), (1, 4, 2), (1, 4, 2), (1, 4, 2), (2, 2, 2), (1, 2, 2)
    ]  # fmt: skip
    assert split.backward is not None
    backward = [op for op in split.backward.ops if op.op_type == "AllToAll"]
    assert [op.attrs["group"] for op in [*graph.ops, *backward] if op.op_type == "AllToAll"] == [2] * 4
    # A tier far slower than any real one (built directly: `system_from_config` refuses it) keeps the
    # figures whole.
    system = System("two", 2, 4, (80e9,), (NetworkTier(2, 16.0, 0.5, 0.25),))
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=a100").hw, "hw")))
    for g, is_backward in ((graph, False), (split.backward, True)):
        table = op_table(g, Split(2, is_backward))
        exchanges = np.flatnonzero(table.kind == CostKind.ALL_TO_ALL)
        assert len(exchanges) == 2
        assert table.collective_bytes[exchanges].tolist() == [32.0, 32.0]
        assert sent_bytes(table, system)[exchanges].tolist() == [16.0, 16.0]
        seconds = op_costs(table, designs, system, MODELS["tiled"]).all_cores_s[exchanges, 0]
        assert seconds.tolist() == [1.75, 1.75]
    # `phazec-ir`'s per-device table counts them by type, forward and backward.
    totals = (graph_totals(graph, 2), graph_totals(split.backward, 2))
    assert [t.collectives for t in totals] == [(Collectives("AllToAll", 2, 64),)] * 2
    gemms = [op for op in graph.ops if op.op_type == "MatMul"]
    assert [graph.tensors[op.outputs[0]].shape_at(2) for op in gemms] == [(1, 8, 2)] * 2
    memory = split.memory
    assert memory is not None
    assert (memory.parameter_count, memory.parameter_bytes, memory.gradient_bytes) == (8, 16, 16)
    assert memory.expert_parameter_bytes == 16  # every weight of the toy is an expert's
    whole = training_pipeline(1).run(toy_model())[0].classes[0].memory
    assert whole is not None and (whole.parameter_bytes, whole.expert_parameter_bytes) == (32, 32)


def test_permute_and_regrouping_are_kernels_priced_by_their_bytes() -> None:
    """The toy with 4 experts (C = 1 token each per sample) at ep 2: each device holds 2 of them, so
    the tokens it receives are regrouped by local expert after the dispatch and back before the
    combine (Megatron-Core's all-to-all dispatcher sorts its chunks), beside the block's permute. At
    microbatch 2 each of these copies reads and writes 4 x 1 x 2 x 2 samples x 2 B = 32 B, and so does
    each one's gradient in the backward pass (the permute's: the unpermute). On an A100 each is a copy
    of 16 elements, one cycle of arithmetic on its 108 x 256 vector lanes (1 / 1.41e9 s, longer than
    its 64 B over HBM at 2.039e12 B/s x 0.87), plus 18 us a kernel. A deduplicating dispatcher
    regroups nothing: its reorders are free, its permute is not."""
    split = training_pipeline(1, GraphSettings(expert_parallel=2)).run(toy_model(4))[0].classes[0]
    assert [(op.op_type, op.inputs, op.outputs) for op in split.graph.ops] == [
        ("Reshape", ("x",), ("p.unpermuted",)),
        ("Permute", ("p.unpermuted",), ("p",)),
        ("AllToAll", ("p",), ("p.dispatched",)),
        ("Permute", ("p.dispatched",), ("p.sorted",)),
        ("MatMul", ("p.sorted", "w1"), ("u",)),
        ("Relu", ("u",), ("r",)),
        ("MatMul", ("r", "w2"), ("o",)),
        ("Permute", ("o",), ("o.sorted",)),
        ("AllToAll", ("o.sorted",), ("o.combined",)),
        ("Reshape", ("o.combined",), ("y",)),
    ]
    assert split.backward is not None
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=a100").hw, "hw")))
    system = System("two", 2, 4, (80e9,), (NetworkTier(2, 16.0, 0.5, 0.25),))
    copy_s = 1 / 1.41e9 + 18e-6
    for graph, is_backward in ((split.graph, False), (split.backward, True)):
        permutes = [i for i, op in enumerate(graph.ops) if op.op_type == "Permute"]
        assert [graph.ops[i].attrs.get("reorder", 0) for i in permutes] == (
            [0, 1, 1] if not is_backward else [1, 1, 0]
        )
        table = op_table(graph, Split(2, is_backward))
        assert table.kind[permutes].tolist() == [CostKind.VECTOR] * 3
        assert (table.bytes_read[permutes].tolist(), table.bytes_written[permutes].tolist()) == (
            [32.0] * 3,
        ) * 2
        seconds = op_costs(table, designs, system, MODELS["tiled"]).all_cores_s[permutes, 0]
        assert seconds.tolist() == pytest.approx([copy_s] * 3, rel=1e-12)
        flex = op_table(graph, Split(2, is_backward, deduplicated=True))
        assert flex.kind[permutes].tolist() == [
            CostKind.FREE if graph.ops[i].attrs.get("reorder") else CostKind.VECTOR for i in permutes
        ]
    # One local expert (the 2-expert toy at ep 2): nothing to regroup; at ep 1 the permute alone.
    for experts, ep in ((2, 2), (4, 1)):
        alone = training_pipeline(1, GraphSettings(expert_parallel=ep)).run(toy_model(experts))[0].classes[0]
        assert [op.op_type for op in alone.graph.ops].count("Permute") == 1


def test_fp8_casts_one_kernel_per_local_expert() -> None:
    """The 4-expert toy at ep 2 in FP8: each device's expert GEMMs (2 products, its 2 experts) cast
    their token operand as Transformer Engine's grouped linear layer does, a kernel per local expert:
    the forward products and the backward input gradients' (which read the weights) 2 cast kernels
    each, the weight gradients' none. On an A100 with 2x FP8 a forward product's casts stream 3 x its
    32 B bf16 token operand at microbatch 2 (`QUANTIZE_BYTES_PER_OPERAND_BYTE`) and pay 2 x 18 us."""
    split = training_pipeline(1, GraphSettings(expert_parallel=2)).run(toy_model(4))[0].classes[0]
    assert split.backward is not None
    forward = op_table(split.graph, Split(2, False, low_precision=True))
    backward = op_table(split.backward, Split(2, True, low_precision=True))
    gemms = np.flatnonzero(forward.kind == CostKind.GEMM)
    assert forward.batch[gemms].tolist() == [2.0, 2.0]
    assert forward.quantize_kernels[gemms].tolist() == [2.0, 2.0]
    cast = np.flatnonzero(backward.quantize_bytes > 0)
    assert len(cast) == 2 and backward.quantize_kernels[cast].tolist() == [2.0, 2.0]
    assert forward.quantize_bytes[gemms[0]] == 3 * 32
    hw = compose_config("hw=a100", "hw.device.fp8_rate=2.0").hw
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, hw, "hw")))
    system = System("two", 2, 4, (80e9,), (NetworkTier(2, 16.0, 0.5, 0.25),))
    with_casts = op_costs(forward, designs, system, MODELS["tiled"]).all_cores_s[gemms[0], 0]
    without = replace(forward, quantize_bytes=np.zeros(len(forward)))
    gemm_s = op_costs(without, designs, system, MODELS["tiled"]).all_cores_s[gemms[0], 0]
    assert with_casts - gemm_s == pytest.approx(96 / (2.039e12 * 0.87) + 2 * 18e-6, rel=1e-9)


def test_expert_gemms_run_a_kernel_per_expert_on_four_streams() -> None:
    """Transformer Engine's grouped linear layer runs each local expert's product as a cuBLAS kernel of
    its own, over 4 streams: the toy with 8 experts (8 tokens a sample) at ep 1 runs ceil(8 / 4) = 2
    kernels in a row for each expert GEMM, forward, input gradients and weight gradients, each paying
    the kernel latency (18 us on an A100); at ep 2 (4 local experts) one, as a dense GEMM."""
    for ep, kernels in ((1, 2.0), (2, 1.0)):
        split = training_pipeline(1, GraphSettings(expert_parallel=ep)).run(toy_model(8, seq=8))[0].classes[0]
        assert split.backward is not None
        for graph, is_backward in ((split.graph, False), (split.backward, True)):
            table = op_table(graph, Split(1, is_backward))
            gemms = np.flatnonzero(table.kind == CostKind.GEMM)
            assert len(gemms) == (3 if is_backward else 2)  # the first layer's input needs no gradient
            assert table.kernels[gemms].tolist() == [kernels] * len(gemms)
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=a100").hw, "hw")))
    system = System("two", 2, 4, (80e9,), (NetworkTier(2, 16.0, 0.5, 0.25),))
    split = training_pipeline(1, GraphSettings(expert_parallel=1)).run(toy_model(8, seq=8))[0].classes[0]
    table = op_table(split.graph, Split(1, False))
    gemm = int(np.flatnonzero(table.kind == CostKind.GEMM)[0])
    one = replace(table, kernels=np.ones(len(table)))
    seconds = [op_costs(t, designs, system, MODELS["tiled"]).all_cores_s[gemm, 0] for t in (table, one)]
    assert seconds[0] - seconds[1] == pytest.approx(18e-6, rel=1e-9)


def test_routing_weights_read_by_the_experts_get_a_dispatch_of_their_own() -> None:
    """The toy with each token copy's routing weight g [E, C, 1] (a view of the per-token weights gw)
    scaling the activation before the down GEMM: under ep 2 the weights go through their own
    all-to-all, right before the product that reads them, to [E/2, 2C, 1]."""
    model = toy_model()
    cls = model.classes[0]
    graph = cls.graph
    tensors = {
        **graph.tensors,
        "gw": Tensor("gw", (S, 1), "bfloat16", 0),
        "g": Tensor("g", (E, S // E, 1), "bfloat16", 1),
        "rg": Tensor("rg", (E, S // E, H), "bfloat16", 1),
    }
    ops = [
        graph.ops[0],
        Op("weights", "Reshape", OpKind.DATA, ("gw",), ("g",)),
        *graph.ops[1:3],
        Op("weigh", "Mul", OpKind.VECTOR, ("r", "g"), ("rg",)),
        replace(graph.ops[3], inputs=("rg", "w2")),
        graph.ops[4],
    ]
    weighted = replace(graph, tensors=tensors, ops=ops, inputs=["x", "gw"])
    model = replace(model, classes=[replace(cls, graph=weighted)])
    split = training_pipeline(1, GraphSettings(expert_parallel=2)).run(model)[0].classes[0]
    assert [(op.op_type, op.inputs, op.outputs) for op in split.graph.ops] == [
        ("Reshape", ("x",), ("p.unpermuted",)),
        ("Permute", ("p.unpermuted",), ("p",)),
        ("Reshape", ("gw",), ("g",)),
        ("AllToAll", ("p",), ("p.dispatched",)),
        ("MatMul", ("p.dispatched", "w1"), ("u",)),
        ("Relu", ("u",), ("r",)),
        ("AllToAll", ("g",), ("g.dispatched",)),
        ("Mul", ("r", "g.dispatched"), ("rg",)),
        ("MatMul", ("rg", "w2"), ("o",)),
        ("AllToAll", ("o",), ("o.combined",)),
        ("Reshape", ("o.combined",), ("y",)),
    ]
    assert split.graph.tensors["g.dispatched"].shape == (1, 4, 1)
    assert split.backward is not None
    assert sum(op.op_type == "AllToAll" for op in split.backward.ops) == 3  # the weights' gradient too


def test_a_tensor_read_outside_the_experts_for_its_type_alone_is_not_combined() -> None:
    """GPT-OSS's clamp casts its limit like the gate's projection (`CastLike(limit, u)`, as the exporter
    writes it): an op outside the expert region that reads a region tensor for its type alone
    (CastLike's target) or its shape brings nothing back, so ep 2 keeps one dispatch and one combine,
    and the cast reads the device's own tensor."""
    model = toy_model()
    cls = model.classes[0]
    graph = cls.graph
    tensors = {
        **graph.tensors,
        "limit": Tensor("limit", (), "float32"),
        "cast": Tensor("cast", (), "bfloat16"),
        "shape": Tensor("shape", (3,), "int64"),
    }
    ops = [
        *graph.ops[:2],
        Op("like", "CastLike", OpKind.DATA, ("limit", "u"), ("cast",)),
        Op("size", "Shape", OpKind.DATA, ("u",), ("shape",)),
        *graph.ops[2:],
    ]
    typed = replace(graph, tensors=tensors, ops=ops, constants=["limit"])
    model = replace(model, classes=[replace(cls, graph=typed)])
    split = training_pipeline(1, GraphSettings(expert_parallel=2)).run(model)[0].classes[0]
    exchanges = [(op.inputs, op.outputs) for op in split.graph.ops if op.op_type == "AllToAll"]
    assert exchanges == [(("p",), ("p.dispatched",)), (("o",), ("o.combined",))]
    assert [op.inputs for op in split.graph.ops if op.op_type in ("CastLike", "Shape")] == [
        ("limit", "u"),
        ("u",),
    ]
    assert split.backward is not None
    assert sum(op.op_type == "AllToAll" for op in split.backward.ops) == 2


def test_expert_parallelism_needs_experts_it_divides() -> None:
    with pytest.raises(
        PhazecError,
        match=r"^ep=3 does not divide the model's 2 routed experts.*valid widths: 1, 2\. "
        r"\(pass expert-parallel",
    ):
        training_pipeline(1, GraphSettings(expert_parallel=3)).run(toy_model())


PLAN = ("hw=h100", "system=dgx_h100", "system.devices=16", "system.global_batch=64", "tracking=none")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=llama2_7b", "plan.ep=2"),
            r"^plan.ep=2 \(expert parallelism\) does not apply to model 'llama2_7b': it has no "
            r"Mixture-of-Experts layers .* use plan.ep=1, or a MoE model such as model=qwen3_30b_a3b\.$",
        ),
        (
            ("model=mixtral_8x7b", "train.ep=3"),
            r"^train.ep=3 does not divide the 8 routed experts of model 'mixtral_8x7b'.* "
            r"valid: \[1, 2, 4, 8\]\.$",
        ),
        (
            ("model=qwen3_30b_a3b", "plan.ep=32"),
            r"^plan.ep=32 does not divide the 16 devices \(system.devices\)",
        ),
        (
            ("model=mixtral_8x7b", "model.hf_config.num_experts_per_tok=9"),
            r"^model.hf_config.num_experts_per_tok=9 is not valid for 8 experts",
        ),
        (
            ("model=mixtral_8x7b", "model.moe.capacity_factor=0"),
            r"^model.moe.capacity_factor=0.0 is not valid: give a positive factor",
        ),
        (
            ("model=mixtral_8x7b", "model.moe.capacity_factor=-1.5"),
            r"^model.moe.capacity_factor=-1.5 is not valid",
        ),
    ],
)
def test_bad_expert_settings_are_one_paragraph_before_any_work(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    """Each is refused when the settings are read: nothing is exported into the empty cache."""
    from phazec.commands.plan import predict_plan

    with pytest.raises(PhazecError, match=message) as err:
        predict_plan(settings_from_config(compose_config(*PLAN, *overrides, f"cache_dir={tmp_path}")))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "onnx").exists()


def test_a_plans_ep_must_divide_its_stage_devices(tmp_path: Path) -> None:
    from phazec.commands.plan import predict_plan

    overrides = ("model=qwen3_30b_a3b", "plan.ep=16", "plan.dp=8", "plan.pp=2", f"cache_dir={tmp_path}")
    with pytest.raises(PhazecError, match=r"^plan.ep=16 does not divide the 8 devices of a pipeline stage"):
        predict_plan(settings_from_config(compose_config(*PLAN, *overrides)))
    assert not (tmp_path / "onnx").exists()


MOE_PLAN = (
    "model=qwen3_30b_a3b", "model.hf_config.num_hidden_layers=2", "model.seq_len=512",
    "model.baseline={pp: 2, dp: 8, tp: 1}", "hw=a100", "system=dgx_a100", "system.devices=16",
    "system.global_batch=32", "train.optimizer=adam", "tracking=none", "plan.pp=2", "plan.dp=8",
    "plan.ep=8", "plan.microbatch=2", "plan.recompute=full",
)  # fmt: skip


TENSOR_PARALLEL = (
    "model.baseline={pp: 2, dp: 4, tp: 2}", "model.tp_widths=[2]", "plan.tp=2", "plan.dp=4",
    "plan.sequence_parallel=true", "train.sequence_parallel=[true]",
)  # fmt: skip
"""The same plan at tp 2 x dp 4 with sequence parallelism (each ep group a node's 4 replicas' 2 ranks)."""


@pytest.mark.slow  # a search on the A100 design
@pytest.mark.parametrize("tp", [1, 2])
def test_phazec_plan_and_phazec_give_a_moe_plan_the_same_time(
    tp: int, cache_dir: Path, tmp_path: Path
) -> None:
    """Qwen3-30B-A3B (2 blocks, s = 512) on 16 devices, pp 2 x dp 8 with 8-way expert parallelism (and
    tp 2 x pp 2 x dp 4, `TENSOR_PARALLEL`): the same time to the bit from `phazec-plan` and from the
    search's fixed plan (the C++ DP's model), and the all-to-alls in its breakdown (two NVLink nodes of
    8: each ep group inside one)."""
    from phazec.commands.plan import predict_plan
    from phazec.commands.search import run_search
    from phazec.config.settings import tpuv4_space
    from phazec.report.table import result_table

    plan = (*MOE_PLAN, *(TENSOR_PARALLEL if tp > 1 else ()), f"cache_dir={cache_dir}")
    report = predict_plan(settings_from_config(compose_config(*plan)))
    assert report.fits and report.breakdown.ep_communication_s > 0
    assert report.breakdown.total_s == pytest.approx(report.time_per_batch_s, rel=1e-12)
    search = compose_config(
        *plan, "train.ep=8", "train.microbatch=[2]", "train.recompute=[full]",
        "train.last_stage_recomputes=true", "train.optimizer_step=true", "system.hbm_gb=[80]",
        "search.workers=1",
    )  # fmt: skip
    result = run_search(settings_from_config(search), tmp_path / "search", tpuv4_space())
    fixed = result["baselines"]["found_design_megatron_plan"]
    assert fixed["time_per_batch_s"] == report.time_per_batch_s
    assert result["plan"]["tp"] == tp and result["plan"]["dp"] * tp % 8 == 0
    assert (result["plan"]["ep"], result["plan"]["optimizer"]) == (8, "adam")
    assert f"d={result['plan']['dp']} ep=8" in result_table(result)


def toy_problem(devices: int, param_bytes: int, expert_bytes: int, **others: Any) -> PlacementProblem:
    """The toy block in the placement model, on `devices` devices and as many microbatches of 2 samples:
    forward 1 s of compute and its two all-to-alls of 1.75 s each (the previous test's) = 4.5 s,
    backward 2 s + 2 x 1.75 = 5.5 s, 2 x 32 B of stash; `param_bytes` of weights per device,
    `expert_bytes` of them the routed experts'; one tier of 16 B/s and 0.5 s; `others` replace fields."""
    problem = PlacementProblem(
        t_values=np.array([1]),
        forward_latency_s=np.array([[1.0 + 2 * 1.75]]),
        backward_latency_s=np.array([[2.0 + 2 * 1.75]]),
        param_bytes=np.array([[param_bytes]]),
        expert_param_bytes=np.array([[expert_bytes]]),
        activation_bytes=np.array([[64]]),
        stash_bytes=np.array([[64]]),
        input_bytes=np.array([[16]]),
        tensor_parallel=np.zeros((1, 1), dtype=bool),
        edges=np.zeros((0, 2), dtype=np.int64),
        edge_bytes=np.zeros(0, dtype=np.int64),
        device_count=devices,
        microbatch_count=devices,
        samples_per_microbatch=2,
        tiers=(NetworkTier(devices, 16.0, 0.5),),
    )
    return replace(problem, **others)


def test_toy_iteration_by_hand_on_two_devices() -> None:
    """The toy block on 2 devices with ep 2, 2 microbatches of 2 samples, in the placement model. Its
    per-device figures: forward 1 s of compute and its two all-to-alls of 1.75 s each on the critical
    path (the previous test's) = 4.5 s; backward 2 s + 2 x 1.75 = 5.5 s; 16 B of weights (one expert
    of two), 2 x 32 B of stash. ep 2 leaves only d = 2 (one replica per device, one microbatch each):
    1 x (4.5 + 5.5) = 10 s of work, then the gradient all-reduce. Its 16 B are all the experts', reduced
    over the expert-data-parallel group, d / ep = 1 device: nothing to send. The dense gradients' all-reduce
    over the 2 replicas has 0 B here and still pays its latency, 2 x 1 x 0.5 = 1 s: 11 s per batch.
    Memory per device: weights and gradients 16 + 16, one microbatch's 64 B in flight: 96 B."""
    problem = toy_problem(2, 16, 16)
    placed = best_placement(problem, 10**6, plan_settings(ep=2))
    assert isinstance(placed, Placement)
    assert (placed.d, placed.microbatches_per_pipeline, placed.time_per_batch_s) == (2, 1, 11.0)
    assert [s.memory_bytes for s in placed.stages] == [96]
    # On one device no data-parallel width makes an expert-parallel group of 2: no plan.
    alone = best_placement(replace(problem, device_count=1), 10**6, plan_settings(ep=2))
    assert not isinstance(alone, Placement)


@pytest.mark.parametrize(
    ("devices", "zero_stage", "parts"),
    [
        (2, 1, (48, 48, 192)),
        (2, 2, (48, 32, 192)),
        (2, 3, (128, 80, 192)),
        (4, 1, (48, 48, 96)),
        (4, 2, (48, 16, 96)),
        (4, 3, (112, 64, 96)),
    ],
)
def test_expert_state_is_sharded_over_the_expert_data_parallel_group_by_hand(
    devices: int, zero_stage: int, parts: tuple[int, int, int]
) -> None:
    """The toy block with a dense part besides its experts, with mixed-precision Adam (6 B of state per
    weight byte) and a distributed optimizer, ep 2 at d = 2 (ep = dp) and d = 4 (dp = 2 ep), one
    microbatch per replica (64 B in flight). Per device: 48 B of weights, 32 B dense (attention, router)
    and 16 B of the routed experts (one expert of two). Megatron-Core shards the dense ones over the d
    data-parallel replicas and the experts' over the expert-data-parallel group, d / ep devices: 1 at
    d = 2 (nothing sharded), 2 at d = 4.
      state (ZeRO >= 1): 6 x 32 / d + 6 x 16 / (d / ep): d = 2: 96 + 96 = 192; d = 4: 48 + 48 = 96
        (sharded as dense it was 6 x 48 / d = 144 and 72);
      gradients (ZeRO >= 2): 32 / d + 16 / (d / ep): d = 2: 16 + 16 = 32; d = 4: 8 + 8 = 16; ZeRO-3 adds
        the gathered layer's 48: 80 and 64;
      weights (ZeRO-3): the same shard, 32 and 16, plus the gathered layer and the next, 2 x 48: 128, 112.
    Memory = weights + gradients + state + 64."""
    problem = toy_problem(devices, 48, 16, optimizer_factor=8)
    variant = Variant(1, 10**6, plan_settings(ep=2, zero_stage=zero_stage))
    figures = plan_figures(problem, variant, ((0,),), devices)
    memory = figures.memories[0]
    assert (memory.weights_bytes, memory.gradients_bytes, memory.optimizer_state_bytes) == parts
    assert figures.placement.stages[0].memory_bytes == sum(parts) + 64
    assert figures.costs[0].expert_param_bytes == 16
    # The DP takes the same figures: its plan is this one (the only d that ep tiles at 2 devices; at 4,
    # d = 2 would leave 2 devices idle and twice the microbatches), and it fits in exactly its bytes.
    placed = best_placement(problem, sum(parts) + 64, variant.settings)
    assert isinstance(placed, Placement)
    assert (placed.d, placed.time_per_batch_s) == (devices, figures.placement.time_per_batch_s)
    assert not isinstance(best_placement(problem, sum(parts) + 63, variant.settings), Placement)


def test_expert_bytes_without_a_distributed_optimizer_are_not_sharded() -> None:
    """Without ZeRO nothing is sharded: 48 + 48 + 6 x 48 + 64 = 448 B whatever the expert bytes."""
    variant = Variant(1, 10**6, plan_settings(ep=2))
    for expert_bytes in (0, 16):
        figures = plan_figures(toy_problem(4, 48, expert_bytes, optimizer_factor=8), variant, ((0,),), 4)
        assert figures.placement.stages[0].memory_bytes == 448


def test_expert_bytes_are_refused_beyond_the_layers() -> None:
    with pytest.raises(PhazecError, match=r"expert_param_bytes\[0, 0\] = 17 is not valid"):
        toy_problem(2, 16, 17)


# The toy block with a dense part, 48 B of weights a device of which 16 B are the routed experts', with
# mixed-precision Adam, a distributed optimizer and the step timed at 96 B/s (`toy_problem`).
ADAM = {"optimizer_factor": 8, "hbm_bytes_per_s": 96.0}


def test_expert_gradients_reduce_over_no_device_where_ep_is_dp_by_hand() -> None:
    """ep = dp = 2 on 2 devices (one tier of 16 B/s, 0.5 s): the expert-data-parallel group is 1 device,
    so only the 32 dense bytes are reduced, over the 2 replicas: 2 x 1/2 x 32 / 16 + 2 x 1 x 0.5 = 3 s,
    a reduce-scatter and an all-gather of 1.5 s each, none hidden. The step zeroes the 48 B of
    gradients, reads its shard of them and reads and writes its shard of the weights, 32 / 2 + 16 / 1
    = 32 B, and its state, 6 x 32 / 2 + 6 x 16 / 1 = 192 B: 48 + 3 x 32 + 2 x 192 = 528 B, 5.5 s.
    Time 10 (one microbatch) + 3 + 5.5 = 18.5 s. (Reduced over the dense group, all 48 B would take
    4 s, and the step 4.25 s.)"""
    problem = toy_problem(2, 48, 16, **ADAM)
    settings = plan_settings(ep=2, zero_stage=1)
    figures = plan_figures(problem, Variant(1, 10**6, settings), ((0,),), 2)
    assert (figures.iteration.dp_sync_s, figures.iteration.optimizer_s) == (3.0, 5.5)
    assert figures.placement.time_per_batch_s == 18.5
    placed = best_placement(problem, 10**6, settings)
    assert isinstance(placed, Placement) and (placed.d, placed.time_per_batch_s) == (2, 18.5)


def test_expert_gradients_reduce_across_nodes_where_dp_is_twice_ep_by_hand() -> None:
    """dp = 2 ep = 4 on 4 devices in nodes of 2 (16 B/s inside a node, 4 B/s and 0.5 s between). Megatron-Core
    orders a stage's ranks ep before dp: the expert-parallel groups are devices {0, 1} and {2, 3}, one
    node each, and the expert-data-parallel groups every ep-th device, {0, 2} and {1, 3}, across the
    nodes on one link each: 4 B/s. The dense group of the 4 replicas spans both nodes with 2 members in
    each, on two links: min(2 x 4, 16) = 8 B/s.
      dense: 2 x 3/4 x 32 / 8 + 2 x 3 x 0.5 = 6 + 3 = 9 s; experts: 2 x 1/2 x 16 / 4 + 2 x 1 x 0.5 = 5 s;
      14 s, a reduce-scatter and an all-gather of 7 s each, none hidden.
      step: 48 + 3 x (32 / 4 + 16 / 2) + 2 x (6 x 32 / 4 + 6 x 16 / 2) = 48 + 48 + 192 = 288 B, 3 s.
    Time 10 + 14 + 3 = 27 s. At d = 2 (2 microbatches a replica) it would be 20 + 3 + 5.5 = 28.5 s (the
    previous test's sync and step, inside a node): the DP takes d = 4."""
    tiers = (NetworkTier(2, 16.0, 0.5), NetworkTier(4, 4.0, 0.5))
    problem = toy_problem(4, 48, 16, tiers=tiers, **ADAM)
    settings = plan_settings(ep=2, zero_stage=1)
    figures = plan_figures(problem, Variant(1, 10**6, settings), ((0,),), 4)
    assert (figures.iteration.dp_sync_s, figures.iteration.optimizer_s) == (14.0, 3.0)
    assert figures.placement.time_per_batch_s == 27.0
    assert plan_figures(problem, Variant(1, 10**6, settings), ((0,),), 2).placement.time_per_batch_s == 28.5
    placed = best_placement(problem, 10**6, settings)
    assert isinstance(placed, Placement) and (placed.d, placed.time_per_batch_s) == (4, 27.0)


def tensor_parallel_toy(devices: int, **others: Any) -> PlacementProblem:
    """`toy_problem` at t = 2, its block tensor-parallel (a stage of it 2 devices wide), with Adam and a
    distributed optimizer timed as `ADAM`: 48 B of weights a device, 16 B of them routed experts' (whole
    on each of the 2 tensor-parallel devices, expert tensor parallelism 1)."""
    problem = toy_problem(devices, 48, 16, **ADAM, **others)
    return replace(problem, t_values=np.array([2]), tensor_parallel=np.ones((1, 1), dtype=bool))


def test_expert_group_holds_the_tensor_parallel_devices_by_hand() -> None:
    """t = 2, ep 2, d = 2 on 4 devices (one tier of 16 B/s, 0.5 s). Megatron-Core draws the
    expert-parallel ranks from a stage's t d devices: each expert-parallel group is one replica's 2
    tensor-parallel devices, and the expert-data-parallel group the same device of both replicas,
    t d / ep = 2 devices (at t = 1 it would be d / ep = 1).
      sync: dense 2 x 1/2 x 32 / 16 + 2 x 1 x 0.5 = 3 s; experts 2 x 1/2 x 16 / 16 + 1 = 2 s: 5 s;
      step: 48 + 3 x (32 / 2 + 16 / 2) + 2 x (6 x 32 / 2 + 6 x 16 / 2) = 48 + 72 + 288 = 408 B, 4.25 s;
      memory: 48 + 48 + 144 of state + 64 in flight = 304 B;
    2 microbatches a replica: 20 + 5 + 4.25 = 29.25 s. At d = 1 (4 microbatches, nothing to reduce)
    the step is 48 + 3 x 48 + 2 x 288 = 768 B, 8 s: 48 s. The DP takes d = 2."""
    problem = tensor_parallel_toy(4)
    settings = plan_settings(ep=2, zero_stage=1)
    figures = plan_figures(problem, Variant(2, 10**6, settings), ((0,),), 2)
    assert (figures.iteration.dp_sync_s, figures.iteration.optimizer_s) == (5.0, 4.25)
    assert figures.placement.stages[0].memory_bytes == 304
    assert figures.memories[0].optimizer_state_bytes == 144
    assert figures.placement.time_per_batch_s == 29.25
    assert plan_figures(problem, Variant(2, 10**6, settings), ((0,),), 1).placement.time_per_batch_s == 48.0
    placed = best_placement(problem, 10**6, settings)
    assert isinstance(placed, Placement) and (placed.t, placed.d, placed.time_per_batch_s) == (2, 2, 29.25)


def test_expert_group_of_tensor_parallel_stages_across_nodes_by_hand() -> None:
    """t = 2, ep 4, d = 4 on 8 devices in nodes of 4 (16 B/s inside a node, 4 B/s and 0.5 s between).
    Replica r holds devices 2r and 2r + 1. The expert-parallel groups are 4 consecutive of the stage's
    ranks, {0..3} and {4..7}, one node each; the expert-data-parallel groups every 4th, {0, 4} ... {3, 7},
    t d / ep = 2 devices across the nodes on one link each: 4 B/s. The dense groups {0, 2, 4, 6} and
    {1, 3, 5, 7} have 2 members in each node, on two links: min(2 x 4, 16) = 8 B/s.
      dense 2 x 3/4 x 32 / 8 + 2 x 3 x 0.5 = 9 s; experts 2 x 1/2 x 16 / 4 + 2 x 1 x 0.5 = 5 s: 14 s;
      step: 48 + 3 x (32 / 4 + 16 / 2) + 2 x (6 x 32 / 4 + 6 x 16 / 2) = 288 B, 3 s;
    2 microbatches a replica: 20 + 14 + 3 = 37 s."""
    tiers = (NetworkTier(4, 16.0, 0.5), NetworkTier(8, 4.0, 0.5))
    problem = tensor_parallel_toy(8, tiers=tiers)
    settings = plan_settings(ep=4, zero_stage=1)
    figures = plan_figures(problem, Variant(2, 10**6, settings), ((0,),), 4)
    assert (figures.iteration.dp_sync_s, figures.iteration.optimizer_s) == (14.0, 3.0)
    assert figures.placement.time_per_batch_s == 37.0
