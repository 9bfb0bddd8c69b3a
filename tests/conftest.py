"""Shared fixtures: one ONNX cache and one lowering per preset for the whole test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import settings
from omegaconf import DictConfig

from phazec.cli import conf_dir
from phazec.config.settings import settings_from_config, typed
from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model
from tests.examples import scale

pytest_plugins = ("pytester", "tests.store_guard")
"""pytester runs a session inside a test; the store guard (tests/store_guard) checks that every MLflow
store a test opens lies in the session's temporary directory."""

REPO = Path(__file__).resolve().parents[1]
"""The repository's root (tests live in packages that mirror phazec's)."""


def pytest_configure(config: pytest.Config) -> None:
    """Property tests draw the same examples on every run, so CI passes or fails the same way each
    time (the `repeatable` profile); under `make stress` (`tests/examples.py`) they draw `scale()`
    times as many, afresh (from `--hypothesis-seed` where given)."""
    factor = scale()
    settings.register_profile("repeatable", derandomize=True)
    settings.register_profile("stress", max_examples=100 * factor)
    settings.load_profile("stress" if factor > 1 else "repeatable")


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests lowering full-depth presets (the `lowered` fixture) are `slow`: `pytest -m "not slow"`
    (`make test-quick`) leaves them out. Tests that solve with Gurobi (named so, or given the backend
    `gurobi` as a parameter) are `gurobi`: `pytest -m "not gurobi"` runs the suite without its licence.
    Hypothesis's tests are `property` (`make stress` runs them alone). `ext` (the compiled core's own
    tests) and `ray` (a Ray cluster on 127.0.0.1) are marked in their modules."""
    for item in items:
        if "lowered" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if "gurobi" in item.name:
            item.add_marker(pytest.mark.gurobi)
        if getattr(getattr(item, "function", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


def compose_config(*overrides: str) -> DictConfig:
    """The composed phazec config for command-line style overrides."""
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        return compose("config", overrides=list(overrides))


def refused_before_export(overrides: tuple[str, ...], message: str, cache_dir: Path) -> None:
    """The settings of `overrides` are refused in one paragraph matching `message`, before the model is
    lowered: nothing is exported into the empty `cache_dir`."""
    with pytest.raises(PhazecError, match=message) as err:
        settings_from_config(compose_config(*overrides, f"cache_dir={cache_dir}"))
    assert "\n" not in str(err.value)
    assert not (cache_dir / "onnx").exists()


MOE_PRESETS = (
    "qwen3_30b_a3b",
    "qwen3_235b_a22b",
    "mixtral_8x7b",
    "gpt_oss_120b",
    "deepseek_v3",
    "deepseek_v2",
    "llama4_scout",
    "gpt_oss_20b",
    "kimi_k2",
)
"""Every Mixture-of-Experts model preset in conf/model/ (lowered shallow: `SHALLOW`)."""

SHALLOW = {
    **dict.fromkeys(("megatron_gpt2_2_5b", "megatron_gpt2_8_3b"), "model.hf_config.n_layer=4"),
    **dict.fromkeys(MOE_PRESETS[:4], "model.hf_config.num_hidden_layers=2"),
    "deepseek_v3": "model.hf_config.num_hidden_layers=4",
    "deepseek_v2": "model.hf_config.num_hidden_layers=2",
    "llama4_scout": "model.hf_config.num_hidden_layers=4",
    "gpt_oss_20b": "model.hf_config.num_hidden_layers=2",
    "kimi_k2": "model.hf_config.num_hidden_layers=2",
}
"""Presets the suite lowers with 4 blocks instead of their 54 and 72: GPT-2's architecture is
exported at full depth as gpt2_xl and gpt3_175b, and every figure the suite checks on these two is per
block, embedding or head, or is compared with Hugging Face's model at the same depth (their full
exports took a minute of CI). The MoE presets keep 2 blocks (DeepSeek-V3 4: its 3 dense and one MoE
block; DeepSeek-V2's and Kimi K2's 2 are their dense block and one MoE block; Llama 4 Scout 4:
three blocks with rotary embeddings and one without); their full-depth counts are checked on
Hugging Face's model alone (`tests/frontend/test_moe.py`)."""


def model_config(name: str) -> ModelConfig:
    """The typed `model` node of a preset (at the depth `SHALLOW` gives it, if any)."""
    overrides = [f"model={name}", *([SHALLOW[name]] if name in SHALLOW else [])]
    cfg = typed(ModelConfig, compose_config(*overrides).model, "model")
    assert isinstance(cfg, ModelConfig)
    return cfg


SHARED_CACHES = ("onnx", "schedules")
"""The cache directories a session's xdist workers share: each entry is keyed by its content's inputs
and written atomically and sealed, as a user's cache is, so one worker's export or schedule is the
other's cache hit. Search states and everything else stay each worker's own."""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One cache for the session, so each preset is exported and each schedule solved once: its
    `SHARED_CACHES` are the same directories in every xdist worker."""
    cache = tmp_path_factory.mktemp("phazec-cache")
    if worker_id != "master":
        shared = tmp_path_factory.getbasetemp().parent / "phazec-shared-cache"
        for name in SHARED_CACHES:
            (shared / name).mkdir(parents=True, exist_ok=True)
            (cache / name).symlink_to(shared / name, target_is_directory=True)
    return cache


def sharing(cache: Path, cache_dir: Path, names: tuple[str, ...] = ("onnx",)) -> Path:
    """`cache` (made if missing) with the session cache's `names` directories linked into it: a cache
    of its own that shares only those (by default the exported models, so every schedule is solved)."""
    cache.mkdir(parents=True, exist_ok=True)
    for name in names:
        (cache_dir / name).mkdir(exist_ok=True)
        (cache / name).symlink_to(cache_dir / name, target_is_directory=True)
    return cache


@pytest.fixture(scope="session")
def lowered(cache_dir: Path) -> Callable[[str], Model]:
    """Lower a preset (at full depth, except `SHALLOW`), once per session."""
    models: dict[str, Model] = {}

    def lower(name: str) -> Model:
        if name not in models:
            models[name] = load_model(model_config(name), cache_dir)
        return models[name]

    return lower
