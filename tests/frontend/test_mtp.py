"""DeepSeek's multi-token prediction (`model.mtp_layers`, `phazec.frontend.mtp`): built while exporting, a
layer of its own between the blocks and the head, counted by hand, placed on the last pipeline stage."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.frontend import load_model
from phazec.frontend.lower import graph_signature
from phazec.ir.core import LayerKind, Model
from phazec.ir.ops import gemm_dims
from tests.conftest import compose_config, refused_before_export
from tests.frontend.test_moe import FULL_DEPTH, deepseek_counts, typed_full_depth
from tests.passes.test_up_projection import TINY_MLA

H, VOCAB = TINY_MLA.hf_config["hidden_size"], TINY_MLA.hf_config["vocab_size"]


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Model, Model]:
    """The tiny DeepSeek-V3 (a dense and a MoE block) without and with one MTP module."""
    cache = tmp_path_factory.mktemp("mtp")
    return load_model(TINY_MLA, cache), load_model(replace(TINY_MLA, mtp_layers=1), cache)


def moe_block_parameters(hf: dict[str, Any]) -> int:
    """A DeepSeek MoE block's parameters by hand: one more MoE block's worth of `deepseek_counts`."""
    dense = hf["first_k_dense_replace"]
    with_one, without = ({**hf, "num_hidden_layers": dense + n} for n in (1, 0))
    return deepseek_counts(with_one)[0] - deepseek_counts(without)[0]


def test_the_module_is_a_layer_between_the_last_block_and_the_head(lowered: tuple[Model, Model]) -> None:
    """It reads the last block's output and hands its own to the head, which also takes the last block's
    for the main loss; the head runs the output layer and a cross entropy for each."""
    _, model = lowered
    assert [(layer.name, layer.kind) for layer in model.layers] == [
        ("embedding", LayerKind.EMBEDDING),
        ("block.0", LayerKind.BLOCK),
        ("block.1", LayerKind.BLOCK),
        ("mtp.1", LayerKind.MTP),
        ("head", LayerKind.HEAD),
    ]
    pairs = {(e.src, e.dst) for e in model.edges if e.per_sample_bytes}
    assert {(2, 3), (3, 4), (2, 4)} <= pairs
    head = model.classes[model.layers[4].cls].graph
    assert [op.op_type for op in head.ops].count("SoftmaxCrossEntropyLoss") == 2
    outputs = [gemm_dims(op, head).n for op in head.ops if op.op_type in ("MatMul", "Gemm")]
    assert outputs == [VOCAB, VOCAB]


def test_its_parameters_are_a_projection_three_norms_and_a_block_like_the_last(
    lowered: tuple[Model, Model],
) -> None:
    """2h x h (eh_proj) + 3h (enorm, hnorm, its final norm) + a MoE block, by hand: the embedding and the
    output layer are the model's own. Its layer also reads the embedding weight (a copy kept on its
    stage), so its graph holds V h more."""
    plain, model = lowered
    added = 2 * H * H + 3 * H + moe_block_parameters(TINY_MLA.hf_config)
    assert model.parameter_count - plain.parameter_count == added
    mtp = model.classes[model.layers[3].cls].graph
    assert mtp.parameter_count() == added + VOCAB * H
    embedding = model.classes[model.layers[0].cls].graph
    assert set(embedding.weights) <= set(mtp.weights)
    projections = [gemm_dims(op, mtp) for op in mtp.ops if op.op_type in ("MatMul", "Gemm")]
    assert (2 * H, H) in [(d.k, d.n) for d in projections]


def test_the_main_models_blocks_are_exported_as_without_it(lowered: tuple[Model, Model]) -> None:
    """The export runs the blocks as transformers' forward does: their graphs are the same."""
    plain, model = lowered
    for i in (1, 2):
        same = graph_signature(model.classes[model.layers[i].cls].graph)
        assert same == graph_signature(plain.classes[plain.layers[i].cls].graph)


def test_deepseek_v3_with_its_mtp_module_has_11_6_billion_parameters_more() -> None:
    """Full depth, by hand: 671,026,404,352 + 2 x 7168^2 + 3 x 7168 + one MoE block (11,507,286,016) =
    682,636,472,320; with the checkpoint's own copies of the embedding and output layer (2 x 129,280 x
    7168) it is DeepSeek's 685B."""
    hf = typed_full_depth("deepseek_v3").hf_config
    h = hf["hidden_size"]
    assert moe_block_parameters(hf) == 11_507_286_016
    with_mtp = FULL_DEPTH["deepseek_v3"][0] + 2 * h * h + 3 * h + moe_block_parameters(hf)
    assert with_mtp == 682_636_472_320
    assert round((with_mtp + 2 * hf["vocab_size"] * h) / 1e9) == 684


def test_phazec_plan_puts_it_on_the_last_stage_with_a_copy_of_the_embedding(cache_dir: Path) -> None:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens, pp 2 on 8 H100s, ep 1, bf16 weights: the
    last stage holds the MoE block, the MTP module and the head, and its weights grow by the module's
    parameters and the embedding's copy, 2 bytes each."""
    base = (
        "model=deepseek_v3", "model.hf_config.num_hidden_layers=2", "model.hf_config.first_k_dense_replace=1",
        "model.seq_len=256", "hw=h100", "system=dgx_h100", "system.devices=8", "system.global_batch=8",
        "train.optimizer=adam", "plan.pp=2", "plan.dp=4", "hw.device.attention=flash",
        "solver.node_limit=200", "solver.search_node_limit=100000", f"cache_dir={cache_dir}",
    )  # fmt: skip
    plain, mtp = (
        predict_plan(settings_from_config(compose_config(*base, f"model.mtp_layers={n}"))) for n in (0, 1)
    )
    assert (plain.layers_per_stage, mtp.layers_per_stage) == ((2, 2), (2, 3))
    assert plain.memory.stage == mtp.memory.stage == 1  # the MoE block outweighs the embedding
    hf = typed_full_depth("deepseek_v3").hf_config
    h = hf["hidden_size"]
    module = 2 * h * h + 3 * h + moe_block_parameters(hf)
    assert mtp.memory.weights_bytes - plain.memory.weights_bytes == 2 * (module + hf["vocab_size"] * h)
    assert mtp.time_per_batch_s > plain.time_per_batch_s


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=deepseek_v3", "model.mtp_layers=-1"),
            r"^model.mtp_layers=-1 is not valid: give the number of multi-token-prediction modules",
        ),
        (
            ("model=llama2_7b", "model.mtp_layers=1"),
            r"^model.mtp_layers=1 adds DeepSeek's multi-token-prediction modules, which phazec builds for "
            r"the Hugging Face classes \['DeepseekV3ForCausalLM'\] only, and model 'llama2_7b' is "
            r"LlamaForCausalLM: set model.mtp_layers=0",
        ),
        (
            ("model=deepseek_v3", "model.mtp_layers=1", "plan.tp=2", "plan.sequence_parallel=false"),
            r"^plan.tp=2 on the Mixture-of-Experts model 'deepseek_v3' needs sequence parallelism",
        ),
    ],
)
def test_a_bad_mtp_count_or_plan_is_one_paragraph_before_any_export(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    refused_before_export(overrides, message, tmp_path)
