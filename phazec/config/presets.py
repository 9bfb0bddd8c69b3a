"""The presets: where the shipped config tree is, the presets of each group, and one preset composed.

A preset is always composed by Hydra, never read by path, so a preset of the user's (`--config-dir`)
beside the shipped ones is found the same way, and its keys are checked against the schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

import phazec


def conf_dir() -> str:
    """The config tree: packaged inside phazec in a wheel (`phazec/conf`), else the repository's `conf/`."""
    package = Path(phazec.__file__).resolve().parent
    packaged = package / "conf"
    return str(packaged if packaged.is_dir() else package.parent / "conf")


def group_presets(group: str, root: Path | None = None) -> list[str]:
    """The names of config group `group`'s presets (its YAML files) under `root` (default: `conf_dir()`),
    sorted; none for a folder that does not exist."""
    return sorted(path.stem for path in (root or Path(conf_dir())).joinpath(group).glob("*.yaml"))


def preset(group: str, name: str, overrides: tuple[str, ...] = ()) -> DictConfig:
    """Config group `group` as preset `name` gives it (with `overrides`, e.g. `model.seq_len=512`),
    composed in the running command's config search path (the shipped tree outside a command)."""
    choice = [f"{group}={name}", *overrides]
    if GlobalHydra.instance().is_initialized():
        composed = compose("config", overrides=choice)
    else:
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            composed = compose("config", overrides=choice)
    node: Any = composed[group]
    assert isinstance(node, DictConfig)
    return node
