"""Context parallelism (`train.cp`, `plan.cp`): each device's share of a layer's work and bytes, the
ring that passes keys and values, and the plans it refuses."""

from dataclasses import replace

import numpy as np
import pytest

from phazec.config.settings import settings_from_config, typed
from phazec.cost.model import MODELS, op_costs
from phazec.cost.ops import OpKind
from phazec.errors import PhazecError
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import NetworkTier, System
from phazec.ir.core import LayerKind, Model
from phazec.passes.memory import megatron_bytes
from phazec.predict.layer_costs import Split, op_table
from tests.conftest import compose_config
from tests.predict.conftest import HIDDEN, TOKENS


def _block(model: Model) -> int:
    return next(layer.cls for layer in model.layers if layer.kind is LayerKind.BLOCK)


def test_each_device_does_its_share_of_a_block(tiny: Model) -> None:
    # cp = 2: each device holds TOKENS / 2 of the sample's tokens. A projection's rows halve (its
    # weight gradient's reduction, over the tokens, halves instead); flash attention's causal tiles
    # halve (the ring balances them); every per-sample byte halves; the weights do not.
    block = tiny.classes[_block(tiny)]
    assert block.backward is not None
    whole = op_table(block.graph, Split(1, False))
    half = op_table(block.graph, Split(1, False, context_parallel=2, ring_group=2))
    gemm = (whole.kind == OpKind.GEMM) & (whole.k == HIDDEN) & (whole.n == HIDDEN)
    assert gemm.any()
    assert (half.m[gemm] == whole.m[gemm] / 2).all() and (whole.m[gemm] == TOKENS).all()
    weight_bytes = 2 * HIDDEN * HIDDEN
    assert (half.bytes_read[gemm] == (whole.bytes_read[gemm] - weight_bytes) / 2 + weight_bytes).all()
    flash = whole.kind == OpKind.ATTENTION
    assert int(flash.sum()) == 1
    assert half.batch[flash][0] == whole.batch[flash][0] / 2
    # The ring: one step (cp - 1) of the device's key and value blocks: 2 x TOKENS / 2 x HIDDEN bf16
    # (four heads, each with its own keys and values), over the tier of 2 devices.
    assert (half.ring_steps[flash][0], half.ring_bytes[flash][0]) == (1, 2 * TOKENS // 2 * HIDDEN * 2)
    assert half.group_size[flash][0] == 2
    back_whole = op_table(block.backward, Split(1, True))
    back_half = op_table(block.backward, Split(1, True, context_parallel=2, ring_group=2))
    wgrad = (back_whole.kind == OpKind.GEMM) & (back_whole.k == TOKENS)
    assert wgrad.any() and (back_half.k[wgrad] == TOKENS / 2).all()
    grad_flash = back_whole.kind == OpKind.ATTENTION
    assert back_half.ring_bytes[grad_flash][0] == 2 * half.ring_bytes[flash][0]  # keys, values, gradients
    memory = block.memory
    assert memory is not None
    one, two = megatron_bytes(memory, 2, 1), megatron_bytes(memory, 2, 1, 2)
    assert two.stash_bytes == memory.stash_fixed_bytes + memory.stash_per_sample_bytes  # 2 samples / 2
    assert one.stash_bytes == memory.stash_fixed_bytes + 2 * memory.stash_per_sample_bytes


def test_the_all_to_all_variant_trades_the_attention_tensors_around_the_kernel(tiny: Model) -> None:
    # cp = 2, a2a: the forward kernel's query, key, value and output, TOKENS / 2 x HIDDEN bf16 each on a
    # device, half of each sent to the other device (one step of a quarter of their 4 x 16 KiB); the
    # backward kernel's output gradient and query, key and value gradients the same. Not beside the
    # kernel: its latency is its compute plus the exchange, where the ring's is the longer of the two.
    block = tiny.classes[_block(tiny)]
    assert block.backward is not None
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, compose_config("hw=h100").hw, "hw")))
    system = System("two", 2, 2, (80e9,), (NetworkTier(2, 1e9, 1e-6, 1e-5),))
    for graph, backward in ((block.graph, False), (block.backward, True)):
        ring = op_table(graph, Split(1, backward, context_parallel=2, ring_group=2))
        swap = op_table(graph, Split(1, backward, context_parallel=2, ring_group=2, cp_all_to_all=True))
        flash = int(np.flatnonzero(swap.kind == OpKind.ATTENTION)[0])
        tensor = TOKENS // 2 * HIDDEN * 2
        assert (swap.ring_steps[flash], swap.ring_bytes[flash], swap.ring_exposed[flash]) == (
            1,
            2 * tensor,
            True,
        )
        assert not ring.ring_exposed[flash] and swap.batch[flash] == ring.batch[flash]  # the same tiles
        alone = replace(swap, ring_steps=np.zeros_like(swap.ring_steps))  # the kernel without exchanges
        compute_s = op_costs(alone, designs, system, MODELS["tiled"]).all_cores_s[flash, 0]
        swap_s = op_costs(swap, designs, system, MODELS["tiled"]).all_cores_s[flash, 0]
        ring_s = op_costs(ring, designs, system, MODELS["tiled"]).all_cores_s[flash, 0]
        exchange_s = 2 * tensor / 1e9 + 1e-6 + 1e-5  # one step at the tier's bandwidth, its latency and call
        assert swap_s == pytest.approx(compute_s + exchange_s, rel=1e-12)
        ring_bytes = (2 if backward else 1) * 2 * tensor  # keys and values (and their gradients)
        assert ring_s == pytest.approx(max(compute_s, ring_bytes / 1e9 + 1e-6 + 1e-5), rel=1e-12)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("hw=h100", "model.seq_len=4096", "plan.dp=1", "plan.cp=3"),
            r"plan.cp=3 does not divide the sequence of model.seq_len=4096",
        ),
        (
            ("hw=a100", "hw.device.attention=unfused", "train.cp=[1,2]"),
            r"train.cp=2 needs a fused attention kernel",
        ),
        (("plan.cp=0",), r"plan.cp=0 is not valid: it must be a positive integer"),
        (
            ("model=llama3_8b", "hw=h100", "plan.tp=8", "plan.cp=2", "plan.dp=1", "plan.cp_comm_type=a2a"),
            r"plan.cp_comm_type=a2a at tp 8 and cp 2 is not valid for model 'llama3_8b': .* 4 attention "
            r"heads and 1 key-value heads",
        ),
        (
            ("model=llama3_8b", "hw=h100", "train.cp=[1,16]", "train.cp_comm_type=a2a"),
            r"train.cp_comm_type=a2a at tp 1 and cp 16 is not valid for .* 32 attention heads and 8 key",
        ),
        (
            ("plan.cp_comm_type=ring",),
            r"plan.cp_comm_type='ring' is not valid: it must be one of \['p2p', 'a2a'\]",
        ),
    ],
)
def test_a_context_parallel_width_that_cannot_run_is_refused(
    overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(PhazecError, match=message):
        settings_from_config(compose_config(*overrides))
