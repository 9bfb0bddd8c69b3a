"""DeepSeek-V2's and Llama 4's complex-valued rotary embeddings and their real-valued equivalent
(`phazec.frontend.rotary`): the same values on random queries and keys."""

from __future__ import annotations

import torch
import transformers.models.deepseek_v2.modeling_deepseek_v2 as modeling
import transformers.models.llama4.modeling_llama4 as llama4
from transformers import DeepseekV2Config, Llama4TextConfig

from phazec.frontend.rotary import apply_real_rotary, cos_sin


def test_the_real_rotation_equals_the_complex_one() -> None:
    config = DeepseekV2Config(
        hidden_size=64, num_attention_heads=2, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
        kv_lora_rank=16, q_lora_rank=16, max_position_embeddings=64,
    )  # fmt: skip
    rotary = modeling.DeepseekV2RotaryEmbedding(config)
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 2, 8, 16, generator=generator, dtype=torch.bfloat16)
    key = torch.randn(2, 1, 8, 16, generator=generator, dtype=torch.bfloat16)
    positions = torch.arange(8).repeat(2, 1)
    complex_q, complex_k = modeling.apply_rotary_emb(query, key, rotary(query, positions))
    real_q, real_k = apply_real_rotary(query, key, cos_sin(rotary, query, positions), heads_axis=1)
    assert real_q.dtype == complex_q.dtype == torch.bfloat16
    assert torch.equal(real_q, complex_q)
    assert torch.equal(real_k, complex_k)
    assert not torch.equal(real_q, query)  # it does rotate


def test_llama4s_rotation_heads_second_to_last() -> None:
    config = Llama4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    rotary = llama4.Llama4TextRotaryEmbedding(config)
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(2, 8, 2, 16, generator=generator, dtype=torch.bfloat16)  # [batch, seq, heads, dim]
    key = torch.randn(2, 8, 1, 16, generator=generator, dtype=torch.bfloat16)
    positions = torch.arange(8).repeat(2, 1)
    complex_q, complex_k = llama4.apply_rotary_emb(query, key, rotary(query, positions))
    real_q, real_k = apply_real_rotary(query, key, cos_sin(rotary, query, positions), heads_axis=2)
    assert torch.equal(real_q, complex_q)
    assert torch.equal(real_k, complex_k)
