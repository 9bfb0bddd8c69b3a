"""Deep models from shallow exports (`phazec.frontend.depth`): what `load_model` gives from two exported
blocks a run is what lowering the whole export gives."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.depth import EXPORTED_PER_RUN, block_runs, repeat_block, shallow
from phazec.frontend.export import build_config, build_meta_model, exported_onnx
from phazec.frontend.lower import graph_signature, lower_onnx
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import LayerKind, Model
from phazec.ir.verify import verify

TINY_GPT2 = ModelConfig(
    name="tiny_gpt2",
    arch="GPT2LMHeadModel",
    seq_len=32,
    hf_config={"n_embd": 64, "n_layer": 5, "n_head": 4, "vocab_size": 256, "n_positions": 32, "n_inner": 128},
)


def tiny(name: str, arch: str, **hf_config: Any) -> ModelConfig:
    """A small model of `arch` at 32 tokens, with 64 hidden units and a 256-token vocabulary."""
    dims = {"hidden_size": 64, "vocab_size": 256, "max_position_embeddings": 32, "num_attention_heads": 4}
    return ModelConfig(name=name, arch=arch, seq_len=32, hf_config={**dims, **hf_config})


TINY_LLAMA = tiny(
    "tiny_llama", "LlamaForCausalLM", intermediate_size=160, num_hidden_layers=4, num_key_value_heads=2
)
TINY_QWEN3_MOE = tiny(
    "tiny_qwen3_moe", "Qwen3MoeForCausalLM", intermediate_size=128, moe_intermediate_size=32,
    num_hidden_layers=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
)  # fmt: skip
TINY_QWEN3 = tiny(
    "tiny_qwen3", "Qwen3ForCausalLM", intermediate_size=128, num_hidden_layers=4, num_key_value_heads=2,
    head_dim=16, layer_types=["full_attention"] * 4,
)  # fmt: skip
"""A per-layer list given in the config: the shallow export's is cut to its blocks."""
TINY_DEEPSEEK = tiny(
    "tiny_deepseek_v3", "DeepseekV3ForCausalLM", intermediate_size=128, moe_intermediate_size=32,
    num_hidden_layers=6, first_k_dense_replace=3, num_key_value_heads=4, n_shared_experts=1,
    n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=32, kv_lora_rank=16,
    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
)  # fmt: skip


def full_depth(cfg: ModelConfig, cache_dir: Path) -> Model:
    """The model exported and lowered whole, as before shallow exports."""
    return lower_onnx(exported_onnx(cfg, cache_dir), cfg.name, cfg.seq_len)


def assert_same(deep: Model, whole: Model) -> None:
    verify(deep)
    assert deep.layers == whole.layers
    assert deep.edges == whole.edges
    assert [c.members for c in deep.classes] == [c.members for c in whole.classes]
    assert [graph_signature(c.graph) for c in deep.classes] == [
        graph_signature(c.graph) for c in whole.classes
    ]
    assert deep.parameter_count == whole.parameter_count
    if whole.routing is None:
        assert deep.routing is None
    else:  # the names of the repeated blocks' experts are not made up
        assert deep.routing is not None
        assert deep.routing == replace(whole.routing, expert_parameters=deep.routing.expert_parameters)


@pytest.mark.parametrize(
    ("cfg", "runs"),
    [
        (TINY_GPT2, (5,)),
        (TINY_LLAMA, (4,)),
        (TINY_QWEN3_MOE, (4,)),
        (TINY_QWEN3, (4,)),
        (TINY_DEEPSEEK, (3, 3)),
        (
            replace(
                TINY_DEEPSEEK,
                hf_config={**TINY_DEEPSEEK.hf_config, "first_k_dense_replace": 1, "num_hidden_layers": 4},
            ),
            (1, 3),
        ),
    ],
    ids=["gpt2", "llama", "qwen3_moe", "qwen3_layer_types", "deepseek_v3", "deepseek_v3_one_dense"],
)
def test_two_blocks_a_run_repeated_are_the_whole_export(
    cfg: ModelConfig, runs: tuple[int, ...], tmp_path: Path
) -> None:
    plan = shallow(cfg, tmp_path)
    assert plan is not None and plan.runs == runs
    assert plan.exported == tuple(min(run, EXPORTED_PER_RUN) for run in runs)
    deep = load_model(cfg, tmp_path)
    assert_same(deep, full_depth(cfg, tmp_path))
    assert deep.parameter_count == build_meta_model(cfg).num_parameters()
    exported = sorted(p.name for p in (tmp_path / "onnx").glob("*.onnx"))
    assert len(exported) == 2  # the shallow export, and the whole one this test made


def test_a_cached_decision_lowers_without_building_the_config(tmp_path: Path) -> None:
    """The second lowering reads the runs from the cache: a config the installed transformers could not
    build is never built again (here: the decision file stands for it)."""
    first = load_model(TINY_LLAMA, tmp_path)
    (decision,) = (tmp_path / "onnx").glob("*.depth.json")
    assert load_model(TINY_LLAMA, tmp_path) == first
    decision.write_text("damaged")  # dropped with a log line and decided again
    assert load_model(TINY_LLAMA, tmp_path) == first
    assert decision.read_text() != "damaged"


def hf(cfg: ModelConfig, **keys: Any) -> Any:
    return build_config(replace(cfg, hf_config={**cfg.hf_config, **keys}))


def test_blocks_that_vary_otherwise_are_exported_whole() -> None:
    assert block_runs(hf(TINY_QWEN3_MOE, decoder_sparse_step=2)) is None  # every other block MoE
    assert block_runs(hf(TINY_QWEN3_MOE, mlp_only_layers=[1])) is None  # a dense block among MoE ones
    gpt_oss = tiny(
        "tiny_gpt_oss", "GptOssForCausalLM", num_hidden_layers=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=4, intermediate_size=32,
    )  # fmt: skip
    assert block_runs(build_config(gpt_oss)) is None  # alternating sliding and full attention
    assert block_runs(hf(TINY_LLAMA)) == (4,)
    assert block_runs(hf(TINY_LLAMA, num_hidden_layers=1)) == (1,)


def test_a_model_of_at_most_two_blocks_a_run_is_exported_as_it_is(tmp_path: Path) -> None:
    two = replace(TINY_LLAMA, hf_config={**TINY_LLAMA.hf_config, "num_hidden_layers": 2})
    assert shallow(two, tmp_path) is None


def test_repeat_block_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    model = full_depth(replace(TINY_GPT2, hf_config={**TINY_GPT2.hf_config, "n_layer": 2}), tmp_path)
    blocks = [layer.index for layer in model.layers if layer.kind is LayerKind.BLOCK]
    with pytest.raises(PhazecError, match="no run of two identical blocks at layers 0 and 1"):
        repeat_block(model, 0, 1, 4)  # the embedding and a block
    with pytest.raises(PhazecError, match="at least 2 blocks, not 1"):
        repeat_block(model, blocks[0], blocks[1], 1)
