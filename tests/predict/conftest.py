"""The predict tests' shared model: a two-block Llama small enough to lower in seconds."""

from pathlib import Path

import pytest

from phazec.config.settings import typed
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model
from phazec.passes.pipeline import GraphSettings, training_graphs
from tests.conftest import compose_config

HIDDEN, FFN, TOKENS = 256, 512, 64
TINY_LLAMA = (
    "model=llama2_7b",
    f"model.hf_config.hidden_size={HIDDEN}",
    f"model.hf_config.intermediate_size={FFN}",
    "model.hf_config.num_attention_heads=4",
    "model.hf_config.num_key_value_heads=4",
    "model.hf_config.num_hidden_layers=2",
    "model.hf_config.vocab_size=1024",
    f"model.seq_len={TOKENS}",
    f"model.hf_config.max_position_embeddings={TOKENS}",
)


@pytest.fixture(scope="session")
def tiny(cache_dir: Path) -> Model:
    """A two-block Llama's training graph at t = 1 (flash attention, as the GPU presets run it)."""
    config = typed(ModelConfig, compose_config(*TINY_LLAMA).model, "model")
    model = load_model(config, cache_dir)
    return training_graphs(model, [1], GraphSettings(attention="flash", causal=True))[1]
