"""The fidelity bench's helpers: `fidelity_models.deepen` (two exported blocks repeated give the layer
graph of the deep export) and `bench_fidelity.stage_blocks` (uneven pipeline stages)."""

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from phazec.cli import conf_dir
from phazec.config.settings import typed
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_fidelity
import fidelity_models


def _lower(layers: int, cache_dir: Path) -> Model:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose("config", overrides=["model=gpt3_175b", "model.seq_len=64"])
    dims = {"n_embd": 128, "n_layer": layers, "n_head": 4, "vocab_size": 512, "n_positions": 64,
            "n_inner": 512}  # fmt: skip
    with open_dict(cfg.model.hf_config):
        cfg.model.hf_config.update(dims)
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    return load_model(model_cfg, cache_dir)


def test_deepened_model_is_the_deep_export(cache_dir: Path) -> None:
    deep = fidelity_models.deepen(_lower(2, cache_dir), 3)
    exported = _lower(3, cache_dir)
    assert deep.layers == exported.layers
    assert deep.edges == exported.edges
    assert [c.members for c in deep.classes] == [c.members for c in exported.classes]
    assert deep.parameter_count == exported.parameter_count


def test_uneven_stages_follow_megatron_deepspeeds_partition() -> None:
    """BLOOM: 70 blocks over 12 stages, the embedding and the head counted as a layer each (72 / 12 = 6
    per stage): 5 blocks on the first and last stage, 6 on the others."""
    assert bench_fidelity.stage_blocks(70, 12) == (5, *[6] * 10, 5)
    assert sum(bench_fidelity.stage_blocks(70, 12) or ()) == 70
    assert bench_fidelity.stage_blocks(96, 8) is None
    assert not bench_fidelity.splittable(71, 12)
