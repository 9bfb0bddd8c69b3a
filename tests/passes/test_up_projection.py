"""Multi-head latent attention's up-projections as selective recompute reruns them
(`phazec.passes.memory.up_projection`, `Training.recompute_mla_up_proj`), on a tiny DeepSeek-V3 block."""

from pathlib import Path
from typing import Any

import pytest

from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model
from phazec.ir.ops import flops
from phazec.passes.attention import core_ops
from phazec.passes.memory import megatron_bytes, selective_ops, up_projection
from phazec.passes.pipeline import GraphSettings, training_graphs
from tests.conftest import compose_config, refused_before_export

S, HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V = 32, 4, 32, 16, 8, 8, 8
TINY_MLA = ModelConfig(
    name="tiny_mla", arch="DeepseekV3ForCausalLM", seq_len=S,
    hf_config={
        "hidden_size": 64, "vocab_size": 256, "max_position_embeddings": S, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 2, "first_k_dense_replace": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA,
        "qk_rope_head_dim": ROPE, "qk_nope_head_dim": NOPE, "v_head_dim": V,
    },
)  # fmt: skip
"""A dense and a MoE DeepSeek-V3 block of 4 heads: query latent 32, key-value latent 16, heads of 8 + 8
and 8."""


def two_blocks(cache_dir: Path) -> tuple[str, ...]:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens, on one stage of 8 H100s (ep 8), with
    selective recompute under flash attention."""
    return (
        "model=deepseek_v3", "model.hf_config.num_hidden_layers=2", "model.hf_config.first_k_dense_replace=1",
        "model.seq_len=256", "hw=h100", "system=dgx_h100", "system.devices=8", "system.global_batch=8",
        "train.optimizer=adam", "plan.ep=8", "plan.dp=8", "plan.recompute=selective",
        "hw.device.attention=flash",
        "solver.node_limit=200", "solver.search_node_limit=100000", f"cache_dir={cache_dir}",
    )  # fmt: skip


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lowered = load_model(TINY_MLA, tmp_path_factory.mktemp("mla"))

    def trained(kernel: str) -> Model:
        settings = GraphSettings(attention=kernel, causal=True, optimizer="adam")
        return training_graphs(lowered, [1], settings)[1]

    return trained


@pytest.mark.parametrize("kernel", ["flash", "unfused"])
def test_the_heads_queries_keys_and_values_are_what_it_drops(block: Any, kernel: str) -> None:
    """The block keeps each token's query (4 heads of 8 + 8), key (the same) and value (4 of 8) for the
    attention's backward pass, 40 bf16 elements a head: 32 x 4 x 40 x 2 = 10,240 bytes a sample. With
    the up-projections recomputed, selective recompute keeps that much less a sample."""
    model = block(kernel)
    layer = model.layers[1]
    cls = model.classes[layer.cls]
    memory = cls.memory
    assert memory is not None
    per_sample = S * HEADS * ((NOPE + ROPE) * 2 + V) * 2
    assert memory.rerun("mla_up_proj").per_sample_bytes == per_sample == 10_240
    plain = megatron_bytes(memory, 3, 1)
    recomputed = megatron_bytes(memory, 3, 1, modules={"mla_up_proj"})
    assert plain.selective_bytes - recomputed.selective_bytes == 3 * per_sample
    assert (recomputed.stash_bytes, recomputed.op_bytes) == (plain.stash_bytes, plain.op_bytes)
    # Nothing of the attention core itself is among what it reruns.
    assert not set(up_projection(cls.graph, S).ops) & set(core_ops(cls.graph, S))


def test_it_reruns_the_two_up_projection_products(block: Any) -> None:
    """The query's up-projection (32 latent to 4 x 16) and the keys' and values' (16 to 4 x (8 + 8)) are
    the GEMMs it runs again: 2 x 32 tokens x (32 x 64 + 16 x 64) = 196,608 FLOPs a sample, on top of
    nothing under flash attention, whose core selective recompute leaves alone."""
    cls = block("flash").classes[1]
    graph = cls.graph
    again = selective_ops(graph, S, {"mla_up_proj"})
    assert selective_ops(graph, S) == []
    gemms = [i for i in again if graph.ops[i].op_type in ("MatMul", "Gemm")]
    assert len(gemms) == 2
    assert sum(flops(graph.ops[i], graph, 1) for i in gemms) == 2 * S * (
        Q_LORA * HEADS * 16 + KV_LORA * HEADS * 16
    )
    assert sum(flops(graph.ops[i], graph, 1) for i in gemms) == 196_608


def test_phazec_plan_keeps_less_and_reruns_the_products(cache_dir: Path) -> None:
    """DeepSeek-V3 cut to a dense and a MoE block at 256 tokens, on one stage of 8 H100s (ep 8): with
    the up-projections recomputed, the stage keeps each block's heads' queries, keys and values less,
    256 x 128 x (192 + 192 + 128) x 2 bytes a block (33.5 MB, two blocks, one microbatch in flight), and
    runs the products again (time, and HFU above MFU)."""
    plain, up = (
        predict_plan(
            settings_from_config(compose_config(*two_blocks(cache_dir), f"plan.recompute_mla_up_proj={on}"))
        )
        for on in ("false", "true")
    )
    assert plain.memory.activation_stash_bytes - up.memory.activation_stash_bytes == 2 * 256 * 128 * 512 * 2
    assert plain.breakdown.recompute_s == 0 < up.breakdown.recompute_s
    assert plain.hfu == plain.mfu < up.hfu


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("model=llama2_7b", "plan.recompute=selective", "plan.recompute_mla_up_proj=true"),
            r"^plan.recompute_mla_up_proj=true recomputes multi-head latent attention's up-projections, but "
            r"model 'llama2_7b' has none .*kv_lora_rank",
        ),
        (
            ("model=deepseek_v3", "plan.recompute_mla_up_proj=true"),
            r"^plan.recompute_mla_up_proj=true extends selective recompute, but plan.recompute is 'none': "
            r"set plan.recompute=selective",
        ),
        (
            ("model=deepseek_v3", "train.recompute=[none,full]", "train.recompute_mla_up_proj=true"),
            r"^train.recompute_mla_up_proj=true extends selective recompute, but train.recompute is "
            r"\['none', 'full'\]: set train.recompute=\[selective\]",
        ),
    ],
)
def test_recomputing_up_projections_without_them_or_selective_recompute_is_refused(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    """One paragraph each, before the model is lowered (nothing exported into the empty cache)."""
    refused_before_export(overrides, message, tmp_path)
