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


FSDP_PLAN = (
    *TINY_LLAMA, "hw=h100", "system=dgx_h100", "system.devices=2", "system.global_batch=4", "plan.tp=1",
    "plan.pp=1", "plan.dp=2", "plan.microbatch=2", "plan.zero_stage=3", "plan.precision=fp8", "tracking=none",
)  # fmt: skip
"""The tiny Llama on 2 H100s, FSDP (ZeRO-3) in FP8."""


def test_fp8_weight_gathers_halve_the_gathered_linear_weights(cache_dir: Path) -> None:
    # A block holds 4 x 256 x 256 + 3 x 256 x 512 = 655,360 linear weights and 2 x 256 norm weights:
    # 1,311,744 B in bf16, the largest layer (the embedding and the output layer: 1024 x 256 x 2 =
    # 524,288 B each). ZeRO-3 holds two gathered copies of it; with `fp8_param_gather` its linear
    # weights are gathered at one byte: 1,311,744 - 655,360 = 656,384 B a copy, 1,310,720 B fewer in
    # all. The gradients (reduce-scattered in bf16) and the optimizer state do not change. On an
    # NVLink slowed to 100 MB/s (0.75 of it reached) the gathers outlast the passes: each of the two
    # all-gathers of a microbatch moves (d - 1) / d = 1/2 of the 2 x 655,360 B fewer, 1,310,720 / 7.5e7
    # = 17.48 ms less exposed in all; the reduce-scatter is the same.
    from phazec.commands.plan import predict_plan

    slow = "system.tiers.0.bandwidth_bytes_per_s=1.0e8"
    bf16, fp8 = (
        predict_plan(
            settings_from_config(
                compose_config(*FSDP_PLAN, slow, f"plan.fp8_param_gather={on}", f"cache_dir={cache_dir}")
            )
        )
        for on in ("false", "true")
    )
    assert bf16.memory.weights_bytes - fp8.memory.weights_bytes == 2 * 655_360
    assert bf16.memory.gradients_bytes == fp8.memory.gradients_bytes
    assert bf16.memory.optimizer_state_bytes == fp8.memory.optimizer_state_bytes
    assert fp8.breakdown.weight_gather_s > 0
    gained_s = bf16.breakdown.weight_gather_s - fp8.breakdown.weight_gather_s
    assert gained_s == pytest.approx(1_310_720 / 7.5e7, rel=1e-12)
    assert bf16.time_per_batch_s - fp8.time_per_batch_s == pytest.approx(gained_s, rel=1e-12)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("plan.zero_stage=1",),
            r"^plan.fp8_param_gather=true gathers the FP8 copies of the weights ZeRO-3 shards, but "
            r"plan.zero_stage is 1: set plan.zero_stage=3 and plan.precision=fp8",
        ),
        (("plan.precision=bf16",), r"but plan.precision is 'bf16': set plan.zero_stage=3"),
        (
            ("train.fp8_param_gather=true", "train.zero_stage=[1,2]", "train.precision=[fp8]"),
            r"^train.fp8_param_gather=true .* but train.zero_stage is \[1, 2\]: set train.zero_stage=\[3\]",
        ),
    ],
)
def test_fp8_weight_gathers_without_zero_3_or_fp8_are_refused(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    with pytest.raises(PhazecError, match=message) as err:
        settings_from_config(
            compose_config(*FSDP_PLAN, "plan.fp8_param_gather=true", *overrides, f"cache_dir={tmp_path}")
        )
    assert "\n" not in str(err.value)
    assert not (tmp_path / "onnx").exists()
