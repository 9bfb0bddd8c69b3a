"""A Hugging Face `config.json`, read as it is (`model.config_json`): no download, no preset.

Its `architectures` names the model class (`model.arch`, unless given), its other keys are the
keyword arguments of the class's config (`model.hf_config`'s keys override them). Keys that only
record where and how the file was made (`FILE_RECORDS`) are left out. The installed transformers
reads the keys as `from_pretrained` would, so a key renamed between its versions (Llama 3's
`rope_theta`, `rope_parameters` in transformers 5) means the same; a key it does not know stays an
attribute of the config, unused, as it does for `from_pretrained`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from phazec.errors import PhazecError
from phazec.frontend.schema import ModelConfig

FILE_RECORDS = (
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "auto_map",
    "use_cache",
)
"""Keys of a config.json that are no argument of the model: its class (read into `model.arch`), its
type, the versions and element type it was saved with (`model.dtype` sets phazec's), where it came
from, and the generation cache (phazec turns it off)."""
POSITION_KEYS = ("max_position_embeddings", "n_positions")
"""Where a config names its position count: `model.seq_len` defaults to it."""


def file_keys(path: str) -> dict[str, Any]:
    """The model's keys in the config.json at `path` (`FILE_RECORDS` left out).

    Raises:
        PhazecError: the file is missing, is not JSON, or is not a config (an object naming its
            `architectures`).
    """
    data = _read(path)
    return {key: value for key, value in data.items() if key not in FILE_RECORDS}


def _read(path: str) -> dict[str, Any]:
    """The JSON object of config file `path`, with a non-empty list of `architectures`."""
    file = Path(path).expanduser()
    if file.is_dir() and (file / "config.json").is_file():
        file = file / "config.json"
    if not file.is_file():
        raise PhazecError(
            f"model.config_json={path!r} is not a file; give the path of a Hugging Face config.json "
            "(the file beside a model's weights on the Hub, or its directory)."
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PhazecError(
            f"model.config_json={path!r} cannot be read as JSON ({' '.join(str(error).split())}); give "
            "a Hugging Face config.json."
        ) from None
    named = data.get("architectures") if isinstance(data, dict) else None
    if not (isinstance(named, list) and named and all(isinstance(a, str) for a in named)):
        raise PhazecError(
            f"model.config_json={path!r} names no model class: a Hugging Face config.json lists it as "
            '"architectures": ["LlamaForCausalLM"]; add it, or give the class as model.arch.'
        )
    assert isinstance(data, dict)
    return data


def with_config_json(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with what its config.json says (nothing to do without one): `arch` from its first
    `architectures` entry unless `model.arch` is set, and `seq_len`, when 0, its position count. The
    file's keys themselves are read again where the model is built (`model_kwargs`).

    Raises:
        PhazecError: neither a file nor `model.arch` is given, the file cannot be read as a config,
            or it names no position count for a `seq_len` of 0.
    """
    if cfg.source != "hf":
        return cfg
    if not cfg.config_json:
        if not cfg.arch:
            raise PhazecError(
                f"model {cfg.name!r} names no model: give a Hugging Face config.json "
                "(model=hf model.config_json=/path/to/config.json), or a model class with its config "
                "(model.arch=LlamaForCausalLM and model.hf_config)."
            )
        return cfg
    data = _read(cfg.config_json)
    arch = cfg.arch or data["architectures"][0]
    seq_len = cfg.seq_len
    if not seq_len:
        positions = [data[key] for key in POSITION_KEYS if isinstance(data.get(key), int)]
        if not positions:
            raise PhazecError(
                f"model.config_json={cfg.config_json!r} names no position count "
                f"({', '.join(POSITION_KEYS)}); give the sequence length as model.seq_len=<tokens>."
            )
        seq_len = positions[0]
    return replace(cfg, arch=arch, seq_len=seq_len)


def model_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """The keyword arguments of the model's config class: the config.json's keys, if any, with
    `model.hf_config`'s over them."""
    from_file = file_keys(cfg.config_json) if cfg.config_json else {}
    return {**from_file, **cfg.hf_config}
