"""The training-graph passes on every preset at full depth (issue 3's acceptance figures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache

import pytest

from phazec.errors import PhazecError
from phazec.ir.core import LayerKind, Model
from phazec.ir.ops import GEMM_TYPES, gemm_dims
from phazec.ir.verify import verify_graph
from phazec.passes.pipeline import GraphSettings, training_pipeline
from phazec.passes.training import TrainingRow, rows_at
from tests.conftest import PRESETS, model_config

config = cache(model_config)
"""A preset's model config, composed once."""

CASES = [(name, width) for name in PRESETS for width in config(name).tp_widths]
"""Every preset at every tensor-parallel width it allows."""

STRUCTURE_CASES = [*CASES, ("llama2_7b", 4), ("opt_350m", 2), ("bert_large", 8)]
"""Plus the other architectures (SwiGLU, post-LN) split at widths their presets do not list."""


def hidden_and_heads(name: str) -> tuple[int, int]:
    """Hidden width h and attention heads a of a preset, from its Hugging Face config."""
    hf = config(name).hf_config
    return int(hf.get("hidden_size", hf.get("n_embd", 0))), int(
        hf.get("num_attention_heads", hf.get("n_head", 0))
    )


@pytest.mark.parametrize(("name", "width"), CASES)
def test_backward_gemm_flops_are_twice_forward(
    name: str, width: int, lowered: Callable[[str], Model]
) -> None:
    unfused, _ = training_pipeline(width, GraphSettings(fuse=False)).run(lowered(name))
    for cls in unfused.classes:
        assert cls.backward is not None
        verify_graph(cls.backward, name)
        for op in (op for op in cls.graph.ops if op.op_type in GEMM_TYPES):
            grads = [g for g in cls.backward.ops if g.name in (f"{op.name}.grad_a", f"{op.name}.grad_b")]
            assert len(grads) == 2, op.name
            for microbatch in (1, 3):
                backward = sum(gemm_dims(g, cls.backward, microbatch).flops for g in grads)
                assert backward == 2 * gemm_dims(op, cls.graph, microbatch).flops, op.name
    fused, _ = training_pipeline(width).run(lowered(name))
    for row in rows_at(fused, 2):
        assert row.backward.gemm_flops == 2 * row.forward.gemm_flops, row.name


@pytest.mark.parametrize(("name", "width"), STRUCTURE_CASES)
def test_all_reduces_per_block(name: str, width: int, lowered: Callable[[str], Model]) -> None:
    model, _ = training_pipeline(width).run(lowered(name))
    h, _ = hidden_and_heads(name)
    s = model.seq_len
    count = 2 if width > 1 else 0
    for row in rows_at(model, 3):
        if row.kind == LayerKind.BLOCK.value:
            forward, backward = row.forward.collective("AllReduce"), row.backward.collective("AllReduce")
            assert (forward.count, backward.count) == (count, count)
            assert forward.tensor_bytes == backward.tensor_bytes == count * s * 3 * h * 2
        else:
            assert row.forward.collectives == row.backward.collectives == ()


@pytest.mark.parametrize(("name", "width"), STRUCTURE_CASES)
def test_each_device_holds_one_tth_of_the_block_weights(
    name: str, width: int, lowered: Callable[[str], Model]
) -> None:
    """Replicated per block: the norms' weights (and biases), the two row-parallel biases."""
    model = lowered(name)
    h, _ = hidden_and_heads(name)
    replicated = 2 * h if config(name).arch == "LlamaForCausalLM" else 2 * 2 * h + 2 * h
    block = next(layer for layer in model.layers if layer.kind is LayerKind.BLOCK)
    full = model.graph_of(block.index).parameter_count()
    sharded, _ = training_pipeline(width).run(model)
    memory = sharded.classes[block.cls].memory
    assert memory is not None
    assert (full - replicated) % width == 0
    assert memory.parameter_count == (full - replicated) // width + replicated


def test_gpt3_block_on_one_of_eight_devices(lowered: Callable[[str], Model]) -> None:
    """h = 12288: (12 h^2 + 7 h) / 8 tensor-parallel weights and biases + 6 h replicated = 226,576,896."""
    model, _ = training_pipeline(8, GraphSettings(optimizer="adam")).run(lowered("gpt3_175b"))
    block = next(row for row in rows_at(model, 1) if row.kind == "block")
    assert block.parameters == 226_576_896 == (12 * 12288**2 + 7 * 12288) // 8 + 6 * 12288
    assert block.memory.state_bytes == 16 * 226_576_896


@pytest.mark.parametrize(
    ("name", "width", "formula_bytes"),
    [
        ("gpt3_175b", 1, 2_868_903_936),
        ("gpt3_175b", 8, 578_813_952),
        ("megatron_gpt2_8_3b", 1, 232_783_872),
        ("megatron_gpt2_8_3b", 8, 56_623_104),
    ],
)
def test_block_activations_match_korthikanti(
    name: str, width: int, formula_bytes: int, lowered: Callable[[str], Model]
) -> None:
    """Korthikanti et al. 2022, no recompute: s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes per block.

    GPT-3 175B (s 2048, h 12288, a 96): 2,868,903,936 at t = 1 and 578,813,952 at t = 8 per sample.
    Megatron-GPT2 8.3B (s 1024, h 3072, a 24): 232,783,872 at t = 1 and 56,623,104 at t = 8.
    The per-sample stash equals the formula exactly; the fixed part is the attention scale (2 bytes).
    """
    model, _ = training_pipeline(width).run(lowered(name))
    h, a = hidden_and_heads(name)
    s = model.seq_len
    assert s * h * (10 + 24 / width + 5 * a * s / (h * width)) == formula_bytes
    block = next(row for row in rows_at(model, 4) if row.kind == "block")
    assert block.memory.stash_per_sample_bytes == formula_bytes
    assert abs(block.memory.stash_bytes(1) - formula_bytes) <= 0.1 * formula_bytes
    assert block.stash_bytes == 4 * formula_bytes + block.memory.stash_fixed_bytes


def test_impossible_width_names_model_and_valid_widths(lowered: Callable[[str], Model]) -> None:
    message = (
        r"width 2 does not divide the 25 attention heads and FFN size 6400 of model 'gpt2_xl'; "
        r"valid widths: 1, 5, 25\."
    )
    with pytest.raises(PhazecError, match=message):
        training_pipeline(2).run(lowered("gpt2_xl"))


def test_vocab_parallel_embedding_and_head(lowered: Callable[[str], Model]) -> None:
    """GPT-2 2.5B at t = 4: the tied word embedding keeps ceil(50257 / 4) = 12565 rows per device."""
    model = lowered("megatron_gpt2_2_5b")
    h, s, rows = 1920, 1024, 12565
    trained, _ = training_pipeline(4, GraphSettings(vocab_parallel=True)).run(model)
    by_kind = {row.kind: row for row in rows_at(trained, 2)}
    embedding, head = by_kind["embedding"], by_kind["head"]
    assert (embedding.tp_width, head.tp_width) == (4, 4)
    assert embedding.parameters == rows * h + s * h  # word rows + replicated positions
    assert head.parameters == rows * h + 2 * h  # word rows (tied) + final layer norm
    assert (embedding.forward.collective("AllReduce").count, embedding.backward.collectives) == (1, ())
    assert (head.forward.collectives, head.backward.collective("AllReduce").count) == ((), 1)
    assert embedding.forward.collective("AllReduce").tensor_bytes == 2 * s * h * 2
    assert head.backward.collective("AllReduce").tensor_bytes == 2 * s * h * 2
    assert head.forward.gemm_flops == 2 * (2 * s) * h * rows
    assert head.backward.gemm_flops == 2 * head.forward.gemm_flops
    replicated, _ = training_pipeline(4).run(model)
    assert [row.tp_width for row in rows_at(replicated, 1) if row.kind != "block"] == [1, 1]


def without_kernels(row: TrainingRow) -> TrainingRow:
    """A row with its kernel counts zeroed: what fusion must leave as it was."""
    return replace(row, forward=replace(row.forward, kernels=0), backward=replace(row.backward, kernels=0))


@pytest.mark.parametrize(("name", "width"), STRUCTURE_CASES[-3:] + [(name, 1) for name in PRESETS])
def test_elementwise_fusion_keeps_flops_collectives_and_memory(
    name: str, width: int, lowered: Callable[[str], Model]
) -> None:
    """Fusing elementwise groups (a GELU or SwiGLU's chain, bias-dropout-add) into one kernel each
    changes the number of kernels only: every layer's FLOPs, all-reduces and memory stay exact."""
    plain, _ = training_pipeline(width, GraphSettings(optimizer="adam")).run(lowered(name))
    fused, _ = training_pipeline(width, GraphSettings(optimizer="adam", fuse_elementwise=True)).run(
        lowered(name)
    )
    for before, after in zip(plain.classes, fused.classes, strict=True):
        assert after.backward is not None and before.backward is not None
        for graph in (after.graph, after.backward):
            verify_graph(graph, name)
        assert after.memory == before.memory
    for row, plain_row in zip(rows_at(fused, 3), rows_at(plain, 3), strict=True):
        assert row.forward.kernels <= plain_row.forward.kernels
        assert row.backward.kernels <= plain_row.backward.kernels
        assert without_kernels(row) == without_kernels(plain_row)
    blocks = [(b, a) for b, a in zip(plain.classes, fused.classes, strict=True) if b.graph.ops != a.graph.ops]
    assert blocks, "no elementwise group fused"
    for before, after in blocks:
        assert len(after.graph.ops) < len(before.graph.ops)
