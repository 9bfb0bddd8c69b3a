"""`model=hf model.config_json=...`: a Hugging Face config.json read as it is, no download.

The two files under tests/frontend/configs/ are the published config.json of Llama 3 8B
(meta-llama/Meta-Llama-3-8B) and Qwen2.5-7B (Qwen/Qwen2.5-7B, at 32,768 positions). Each model's
parameters are counted three ways: by hand, on the model phazec builds on the meta device, and on the
model transformers builds from the same file by its own reading (`AutoConfig.from_pretrained`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.frontend.export import build_config, build_meta_model
from phazec.frontend.schema import ModelConfig
from tests.conftest import compose_config

CONFIGS = Path(__file__).parent / "configs"


def hand_count(
    vocab: int, hidden: int, layers: int, *, heads: int, kv_heads: int, ffn: int, qkv_bias: bool
) -> int:
    """Parameters of a Llama-style decoder (untied embedding and head, RMSNorm weights only):
    embedding V h; per block Q and O h x h, K and V h x (kv_heads x head_dim) (with biases on Q, K, V
    when `qkv_bias`), the SwiGLU MLP 3 h f, two norms 2 h; the final norm h; the head V h."""
    kv = kv_heads * (hidden // heads)
    attention = 2 * hidden * hidden + 2 * hidden * kv + ((hidden + 2 * kv) if qkv_bias else 0)
    block = attention + 3 * hidden * ffn + 2 * hidden
    return vocab * hidden + layers * block + hidden + vocab * hidden


MODELS = {
    "llama3_8b": (
        "LlamaForCausalLM",
        8192,
        hand_count(128256, 4096, 32, heads=32, kv_heads=8, ffn=14336, qkv_bias=False),
    ),
    "qwen2_5_7b": (
        "Qwen2ForCausalLM",
        32768,
        hand_count(152064, 3584, 28, heads=28, kv_heads=4, ffn=18944, qkv_bias=True),
    ),
}
"""Each file's model class, position count and parameters by hand."""


def model_of(*overrides: str) -> ModelConfig:
    """The checked model settings of `overrides`."""
    return settings_from_config(compose_config(*overrides, "tracking=none")).model


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(MODELS))
def test_a_config_json_builds_the_published_model(name: str) -> None:
    arch, positions, parameters = MODELS[name]
    model = model_of("model=hf", f"model.config_json={CONFIGS / name / 'config.json'}")
    assert (model.arch, model.seq_len, model.hf_config) == (arch, positions, {})
    assert count(build_meta_model(model)) == parameters
    with torch.device("meta"):
        theirs = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(CONFIGS / name))  # type: ignore[no-untyped-call]
    assert count(theirs) == parameters
    assert parameters == {"llama3_8b": 8_030_261_248, "qwen2_5_7b": 7_615_616_512}[name]  # as published


def test_a_key_renamed_by_transformers_means_the_same() -> None:
    """Llama 3's file says `rope_theta`; the installed transformers reads it into its own name (5.x:
    `rope_parameters`), for the file's keys and for `model.hf_config`'s alike."""
    theta = json.loads((CONFIGS / "llama3_8b" / "config.json").read_text())["rope_theta"]
    config = build_config(model_of("model=hf", f"model.config_json={CONFIGS / 'llama3_8b'}"))
    assert config.rope_parameters["rope_theta"] == theta == 500000.0
    preset = model_of("model=llama2_7b", "+model.hf_config.rope_theta=500000.0")
    assert build_config(preset).rope_parameters["rope_theta"] == 500000.0


def test_hf_config_overrides_the_file() -> None:
    model = model_of(
        "model=hf", f"model.config_json={CONFIGS / 'llama3_8b'}", "+model.hf_config.num_hidden_layers=2",
        "model.seq_len=1024",
    )  # fmt: skip
    assert model.seq_len == 1024
    assert count(build_meta_model(model)) == hand_count(
        128256, 4096, 2, heads=32, kv_heads=8, ffn=14336, qkv_bias=False
    )


def test_an_unknown_key_is_named_with_the_closest_valid_one() -> None:
    model = model_of(
        "model=hf", f"model.config_json={CONFIGS / 'qwen2_5_7b'}", "+model.hf_config.hiden_size=64"
    )
    with pytest.raises(
        PhazecError, match=r"does not define: 'hiden_size' \(did you mean 'hidden_size'\?\)\. "
    ):
        build_config(model)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"model.config_json='.*missing.json' is not a file; give the path of a Hugging Face config"),
        ("{not json", r"model.config_json='.*' cannot be read as JSON \(Expecting property name"),
        (
            '{"hidden_size": 8}',
            r"names no model class: a Hugging Face config.json lists it as \"architectures\"",
        ),
        ('{"architectures": ["LlamaForCausalLM"]}', r"names no position count .* model.seq_len=<tokens>\."),
        (
            '{"architectures": ["NoSuchForCausalLM"], "n_positions": 8}',
            r"model.arch='NoSuchForCausalLM' is not supported",
        ),
    ],
)
def test_bad_config_files_are_named(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / ("missing.json" if content is None else "config.json")
    if content is not None:
        path.write_text(content)
    with pytest.raises(PhazecError, match=message):
        build_config(model_of("model=hf", f"model.config_json={path}"))


def test_the_hf_preset_needs_a_file() -> None:
    message = r"model 'hf' names no model: give a Hugging Face config.json \(model=hf model.config_json="
    with pytest.raises(PhazecError, match=message):
        model_of("model=hf")
