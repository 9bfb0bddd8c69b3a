"""The frontend on every preset (at full depth, except `conftest.SHALLOW`): exact parameter counts, exact
block FLOPs, layer graphs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from phazec.config.settings import typed
from phazec.frontend.export import build_meta_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import LayerKind, Model, OpKind
from phazec.ir.ops import flops
from phazec.ir.verify import verify
from tests.conftest import PRESETS, compose_config, model_config


def block_gemm_flops(model: Model, microbatch: int = 1) -> int:
    """Forward GEMM FLOPs of one transformer block as lowered."""
    block = next(layer for layer in model.layers if layer.kind is LayerKind.BLOCK)
    graph = model.graph_of(block.index)
    return sum(flops(op, graph, microbatch) for op in graph.ops if op.kind is OpKind.GEMM)


def analytic_block_flops(name: str) -> int:
    """Forward GEMM FLOPs of one block per sample, written out for each architecture.

    With sequence s, hidden h and FFN width f (a multiply-add counts 2 FLOPs):
      attention projections Q, K, V and output: 4 GEMMs of (s x h) @ (h x h) -> 2 * s * 4h^2
      attention scores Q K^T and context P V, over all heads: 2 products of s x s x h -> 2 * 2 * s^2 h
      MLP: two GEMMs (s x h) @ (h x f) and (s x f) @ (f x h) -> 2 * s * 2hf
      SwiGLU MLP (Llama): gate and up (h x f) plus down (f x h) -> 2 * s * 3hf
    """
    cfg = model_config(name)
    hf = cfg.hf_config
    s = cfg.seq_len
    h = int(hf["hidden_size"] if "hidden_size" in hf else hf["n_embd"])
    f = int(hf.get("intermediate_size", hf.get("ffn_dim", 4 * h)))
    mlp_gemms = 3 if cfg.arch == "LlamaForCausalLM" else 2
    return 2 * s * 4 * h * h + 2 * 2 * s * s * h + 2 * s * mlp_gemms * h * f


@pytest.mark.parametrize("name", PRESETS)
def test_parameter_count_equals_hugging_face(name: str, lowered: Callable[[str], Model]) -> None:
    model = lowered(name)
    verify(model)
    reference = build_meta_model(model_config(name))
    assert model.parameter_count == reference.num_parameters()


@pytest.mark.parametrize("name", PRESETS)
def test_block_gemm_flops_are_analytic(name: str, lowered: Callable[[str], Model]) -> None:
    model = lowered(name)
    assert block_gemm_flops(model) == analytic_block_flops(name)
    assert block_gemm_flops(model, microbatch=3) == 3 * analytic_block_flops(name)


def test_gpt3_has_96_identical_blocks(lowered: Callable[[str], Model]) -> None:
    model = lowered("gpt3_175b")
    kinds = [layer.kind for layer in model.layers]
    assert kinds == [LayerKind.EMBEDDING, *[LayerKind.BLOCK] * 96, LayerKind.HEAD]
    assert sorted(c.count for c in model.classes) == [1, 1, 96]


def test_llama_layer_graph(lowered: Callable[[str], Model]) -> None:
    model = lowered("llama2_7b")
    assert [layer.name for layer in model.layers] == ["embedding", *[f"block.{i}" for i in range(32)], "head"]
    block_classes = {layer.cls for layer in model.layers if layer.kind is LayerKind.BLOCK}
    assert len(block_classes) == 1
    assert model.classes[block_classes.pop()].count == 32
    edges = {(e.src, e.dst): e for e in model.edges}
    # The embedding feeds every block (hidden states to the first, rotary tables and mask to all),
    # and each block feeds the next: hidden states of s x h bf16 elements per sample.
    assert all((0, b) in edges for b in range(1, 33))
    assert all(edges[(b, b + 1)].per_sample_bytes == 4096 * 4096 * 2 for b in range(1, 33))
    assert all(edges[(b, b + 1)].fixed_bytes == 0 for b in range(1, 33))
    # The mask (s x s booleans per sample) and the rotary tables (cos and sin, s x 128 bf16 each) are
    # built from the inputs and constants alone: every block reads them, none is an activation.
    built = (4096 * 128 * 2 * 2, 4096 * 4096)
    assert all(
        (edges[(0, b)].built_fixed_bytes, edges[(0, b)].built_per_sample_bytes) == built for b in range(1, 33)
    )
    assert edges[(0, 1)].per_sample_bytes == 4096 * 4096 * 2
    assert all(edges[(0, b)].per_sample_bytes == edges[(0, b)].fixed_bytes == 0 for b in range(2, 33))


def test_tied_lm_head_reads_the_embedding_weight(lowered: Callable[[str], Model]) -> None:
    # GPT2 ties its LM head to the token embedding: the model counts it once, the head holds a copy
    # (as a pipeline stage must), and no weight travels along a layer-graph edge.
    model = lowered("gpt2_xl")
    head = model.graph_of(len(model.layers) - 1)
    embedding = model.graph_of(0)
    assert set(head.weights) & set(embedding.weights)
    assert all(e.fixed_bytes < 1024 for e in model.edges)


def test_export_is_deterministic_and_cached(lowered: Callable[[str], Model], cache_dir: object) -> None:
    # Lowering the cached file again gives the same IR: the microbatch is a parameter, not a re-export.
    from phazec.frontend import load_model
    from phazec.ir.printer import format_model

    first = lowered("bert_large")
    again = load_model(model_config("bert_large"), cache_dir)  # type: ignore[arg-type]
    assert format_model(first) == format_model(again)


def test_meta_build_needs_no_weights() -> None:
    model = build_meta_model(model_config("gpt3_175b"))
    assert all(p.device == torch.device("meta") for p in model.parameters())


LLAMA3 = {"llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496, "llama3_405b": 405_853_388_800}
"""The Llama 3 presets and their parameter counts as Meta publishes them (8.03B, 70.55B, 405.85B)."""


def llama_parameters(hf: dict[str, int], layers: int) -> int:
    """A Llama model's parameters by hand, from its Hugging Face config at `layers` blocks: per block the
    Q and output projections (h x h each), K and V (h x kv_heads * head_dim each), gate, up and down
    (3 h f) and two RMSNorm weights (2 h); the token embedding and the untied output layer (V h each)
    and the final norm (h)."""
    h, f, vocab = hf["hidden_size"], hf["intermediate_size"], hf["vocab_size"]
    kv = hf["num_key_value_heads"] * (h // hf["num_attention_heads"])
    return layers * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + 2 * vocab * h + h


@pytest.mark.parametrize("name", LLAMA3)
def test_llama3_parameter_counts_by_hand(name: str) -> None:
    hf = model_config(name).hf_config
    by_hand = llama_parameters(hf, hf["num_hidden_layers"])
    assert by_hand == LLAMA3[name]
    assert build_meta_model(model_config(name)).num_parameters() == by_hand


@pytest.mark.slow
@pytest.mark.parametrize("name", LLAMA3)
def test_llama3_lowered_blocks_equal_hugging_face(name: str, cache_dir: Path) -> None:
    """Each preset lowered with two blocks (sequence 256, to export fast): the same parameters as Hugging
    Face's model at that depth, and the hand count at two blocks."""
    from phazec.frontend import load_model

    overrides = (f"model={name}", "model.hf_config.num_hidden_layers=2", "model.seq_len=256")
    cfg = typed(ModelConfig, compose_config(*overrides).model, "model")
    assert isinstance(cfg, ModelConfig)
    model = load_model(cfg, cache_dir)
    verify(model)
    reference = build_meta_model(cfg).num_parameters()
    assert model.parameter_count == reference == llama_parameters(cfg.hf_config, 2)
