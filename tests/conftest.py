"""Shared fixtures: one ONNX cache and one lowering per preset for the whole test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import settings
from omegaconf import DictConfig, OmegaConf

from phazec.cli import conf_dir
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model

settings.register_profile("repeatable", derandomize=True)
settings.load_profile("repeatable")
"""Property tests draw the same examples on every run, so CI passes or fails the same way each time."""

PRESETS = (
    "bert_large",
    "gpt2_xl",
    "opt_350m",
    "llama2_7b",
    "megatron_bert",
    "megatron_gpt2_2_5b",
    "megatron_gpt2_8_3b",
    "gpt3_175b",
)
"""Every model preset in conf/model/ that builds a Hugging Face architecture."""


def compose_config(*overrides: str) -> DictConfig:
    """The composed phazec config for command-line style overrides."""
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        return compose("config", overrides=list(overrides))


def model_config(name: str) -> ModelConfig:
    """The typed `model` node of a preset."""
    cfg = OmegaConf.to_object(compose_config(f"model={name}").model)
    assert isinstance(cfg, ModelConfig)
    return cfg


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX cache for the session, so each preset is exported once."""
    return tmp_path_factory.mktemp("phazec-cache")


@pytest.fixture(scope="session")
def lowered(cache_dir: Path) -> Callable[[str], Model]:
    """Lower a preset at full depth, once per session."""
    models: dict[str, Model] = {}

    def lower(name: str) -> Model:
        if name not in models:
            models[name] = load_model(model_config(name), cache_dir)
        return models[name]

    return lower
