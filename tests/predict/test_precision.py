"""Precision (`train.precision`, `plan.precision`): which GEMMs run in FP8, their casts, and the
chips that can run them."""

from pathlib import Path

import pytest

from phazec.config.settings import settings_from_config, typed
from phazec.cost.ops import OpKind
from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import LayerKind, Model
from phazec.passes.memory import megatron_bytes
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.layer_costs import (
    FP8_GATHER_SHARE,
    QUANTIZE_BYTES_PER_OPERAND_BYTE,
    Split,
    fp8_gathers,
    low_precision_class,
    op_table,
)
from tests.conftest import compose_config
from tests.predict.conftest import FFN, HIDDEN, TINY_LLAMA, TOKENS


def _block(model: Model) -> int:
    return next(layer.cls for layer in model.layers if layer.kind is LayerKind.BLOCK)


def test_the_linear_layers_of_a_block_run_in_fp8(tiny: Model) -> None:
    # A Llama block's seven linear layers (q, k, v, o, gate, up, down) run in FP8: forward, and in the
    # backward pass each one's input gradient and weight gradient; flash attention stays in bf16. Only
    # the forward products and the input gradients' cast an operand: the activation going in, and the
    # output gradient coming back (the weight gradients read the copies those casts wrote).
    block = tiny.classes[_block(tiny)]
    assert low_precision_class(tiny, _block(tiny), "fp8")
    assert not low_precision_class(tiny, _block(tiny), "bf16")
    assert block.backward is not None
    forward = op_table(block.graph, Split(1, False, low_precision=True))
    backward = op_table(block.backward, Split(1, True, low_precision=True))
    assert int(forward.low_precision.sum()) == 7
    assert int(backward.low_precision.sum()) == 14
    assert int((backward.quantize_bytes > 0).sum()) == 7
    assert not forward.low_precision[forward.kind == OpKind.ATTENTION].any()
    # A projection of the attention (q, k, v or o): its input is TOKENS x HIDDEN in bf16, its weight
    # HIDDEN x HIDDEN; its operands move at one byte each, its bf16 result at two.
    bf16 = op_table(block.graph, Split(1, False))
    q = next(
        i
        for i, op in enumerate(block.graph.ops)
        if forward.low_precision[i] and forward.n[i] == HIDDEN and forward.k[i] == HIDDEN
    )
    activation_bytes = 2 * TOKENS * HIDDEN
    assert forward.quantize_bytes[q] == QUANTIZE_BYTES_PER_OPERAND_BYTE * activation_bytes
    assert forward.bytes_read[q] == bf16.bytes_read[q] / 2 == (activation_bytes + 2 * HIDDEN * HIDDEN) / 2
    assert forward.bytes_written[q] == bf16.bytes_written[q] == 2 * TOKENS * HIDDEN


def test_fp8_keeps_the_linear_layers_inputs_as_one_byte_copies(tiny: Model) -> None:
    # Per sample, the Llama block's stash loses a byte per element of the inputs of its linear layers
    # read by their weight gradients alone: the two RMSNorm outputs (q, k, v; gate, up) and the SwiGLU
    # product (down); the attention output, which the flash kernel's backward reads too, keeps its bf16
    # tensor and gains the o projection's copy.
    memory = tiny.classes[_block(tiny)].memory
    assert memory is not None
    change = TOKENS * (-HIDDEN - HIDDEN - FFN + HIDDEN)
    assert memory.fp8_per_sample_bytes == change == -TOKENS * (HIDDEN + FFN)
    bf16, fp8 = megatron_bytes(memory, 2, 1), megatron_bytes(memory, 2, 1, low_precision=True)
    assert bf16.stash_bytes - fp8.stash_bytes == 2 * TOKENS * (HIDDEN + FFN)


def test_tensor_parallel_gathers_carry_the_fp8_copy_under_sequence_parallelism(cache_dir: Path) -> None:
    # The tiny Llama at t = 2: each block's two all-reduces (after the attention's output projection and
    # after the MLP's down projection, forward; of the input gradients of the MLP's and the attention's
    # first products, backward) stand for a reduce-scatter and the next all-gather, whose result the
    # next linear layer reads in FP8. Under sequence parallelism the gather moves the one-byte copy:
    # (2 + 1) / 4 of the bf16 all-reduce's 2 x 64 x 256 x 2 = 65,536 B at microbatch 2, 49,152 B;
    # without sequence parallelism, or in bf16, all of it.
    config = typed(ModelConfig, compose_config(*TINY_LLAMA).model, "model")
    model = training_graphs(
        load_model(config, cache_dir), [2], GraphSettings(attention="flash", causal=True)
    )[2]
    block = model.classes[_block(model)]
    assert block.backward is not None
    bf16_bytes = 2 * TOKENS * HIDDEN * 2
    for graph, backward in ((block.graph, False), (block.backward, True)):
        reduces = [i for i, op in enumerate(graph.ops) if op.op_type == "AllReduce"]
        assert len(reduces) == 2
        fp8 = Split(2, backward, sequence_parallel=2, low_precision=True)
        assert fp8_gathers(graph, fp8) == frozenset(reduces)
        assert op_table(graph, fp8).collective_bytes[reduces].tolist() == [FP8_GATHER_SHARE * bf16_bytes] * 2
        for plain in (Split(2, backward, low_precision=True), Split(2, backward, sequence_parallel=2)):
            assert fp8_gathers(graph, plain) == frozenset()
            assert op_table(graph, plain).collective_bytes[reduces].tolist() == [bf16_bytes] * 2
    assert FP8_GATHER_SHARE == 0.75


def test_the_embedding_and_the_output_layer_stay_in_bf16(tiny: Model) -> None:
    others = {layer.cls for layer in tiny.layers if layer.kind is not LayerKind.BLOCK}
    assert others
    for cls in others:
        assert not low_precision_class(tiny, cls, "fp8")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("hw=a100", "plan.precision=fp8"),
            r"plan.precision='fp8' is not valid on hw=a100: its tensor cores run bf16 only",
        ),
        (
            ("hw=h100", "train.precision=[bf16,mxfp8]"),
            r"train.precision='mxfp8' is not valid on hw=h100: its tensor cores run bf16, fp8 only",
        ),
        (("hw=tpu_area", "train.precision=[fp8]"), r"hw.device.fp8_rate=2"),
        (
            ("plan.precision=fp16",),
            r"plan.precision='fp16' is not valid: it must be one of \['bf16', 'fp8', 'mxfp8'\]",
        ),
    ],
)
def test_a_precision_the_chip_cannot_run_is_refused(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        settings_from_config(compose_config(*overrides))


def test_fp8_on_the_template_with_fp8_tensor_cores_is_accepted() -> None:
    settings = settings_from_config(
        compose_config("hw=tpu_area", "hw.device.fp8_rate=2", "train.precision=[fp8]")
    )
    assert settings.train.tried("precision") == ("fp8",)
