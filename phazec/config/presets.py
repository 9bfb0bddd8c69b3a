"""The shipped presets: where the config tree is, and the presets of each group (a preset itself is
composed by Hydra, never read by path: `phazec.config.command_line.preset`)."""

from __future__ import annotations

from pathlib import Path

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
