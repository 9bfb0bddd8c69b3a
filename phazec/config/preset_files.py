"""A bad preset file named by its path and line: YAML that does not parse, a value of the wrong type,
a mandatory key left unset. Hydra reports the first with a traceback, the second without the file,
and the third (a schema field without a default) not at all until something reads it.

A preset `<group>/<name>` is found as Hydra finds it: in the shipped tree first, then in each
directory of the search path a command line adds (`--config-dir`, `hydra.searchpath=[file://...]`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from phazec.config.presets import conf_dir
from phazec.errors import PhazecError

SEARCHPATH = "hydra.searchpath"


def search_dirs(overrides: Sequence[str]) -> list[Path]:
    """The directories presets are found in, in Hydra's order: the shipped tree, then the `file://`
    entries of a `hydra.searchpath` override (what `--config-dir` adds)."""
    dirs = [Path(conf_dir())]
    given = [o for o in overrides if o.startswith(SEARCHPATH)]
    for override in OverridesParser.create().parse_overrides(given):
        value = override.value()
        entries = value if isinstance(value, list) else [value]
        dirs += [
            Path(str(entry).removeprefix("file://")) for entry in entries if str(entry).startswith("file://")
        ]
    return dirs


def preset_file(config_path: str, dirs: Sequence[Path]) -> Path | None:
    """The file of preset `config_path` (`hw/tpuv4`), the first of `dirs` that has it; None if none."""
    return next((d / f"{config_path}.yaml" for d in dirs if (d / f"{config_path}.yaml").is_file()), None)


def key_line(path: Path, keys: Sequence[str]) -> int | None:
    """The line (from 1) where the nested key `keys` (`["device", "attention"]`) is set in the YAML file
    at `path`; None if the file does not set it (it comes from a preset the file's defaults name)."""
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        pairs = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
        if not pairs:
            return None
        line = pairs[0][0].start_mark.line + 1
        node = pairs[0][1]
    return line if keys else None


def where(config_path: str, full_key: str, dirs: Sequence[Path]) -> str:
    """`The preset <file>, line <n>` for the key `full_key` (`hw.clock_hz`) of preset `config_path`
    (`hw/mine`), as far as they are known."""
    path = preset_file(config_path, dirs)
    if path is None:
        return f"The preset {config_path}"
    group_keys = full_key.split(".")[len(config_path.split("/")) - 1 :]
    line = key_line(path, group_keys)
    return f"The preset {path}" + (f", line {line}" if line is not None else "")


def yaml_message(err: yaml.YAMLError) -> str:
    """A preset that is not valid YAML, as one paragraph naming its file, line and column."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"A preset is not valid YAML: {' '.join(str(err).split())}."
    mark = err.problem_mark
    context = ""
    if err.context and (start := err.context_mark) is not None:
        context = f" ({err.context} from line {start.line + 1}, column {start.column + 1})"
    return (
        f"The preset {mark.name}, line {mark.line + 1}, column {mark.column + 1}, is not valid YAML: "
        f"{err.problem}{context}. Fix the file: close every [ and {{, quote a value holding ': ', and "
        "indent nested keys by the same amount."
    )


def missing_values(cfg: DictConfig, choices: Mapping[str, Any], dirs: Sequence[Path]) -> None:
    """Every group of a composed, resolved config sets the keys its schema leaves without a default;
    `choices` are the presets chosen (Hydra's `hydra.runtime.choices`).

    Raises:
        PhazecError: a group's preset does not set one; the message names the preset's file.
    """
    for key in cfg:
        group = str(key)
        if OmegaConf.is_missing(cfg, group):  # model=[] leaves `model` missing
            continue
        node = cfg[group]
        if not isinstance(node, DictConfig):
            continue
        missing = sorted(OmegaConf.missing_keys(node))  # full keys (`system.devices`)
        if missing:
            choice = choices.get(group)
            path = preset_file(f"{group}/{choice}", dirs) if choice is not None else None
            named = f"The preset {path} ({group}={choice})" if path else f"The {group} config"
            one = len(missing) == 1
            raise PhazecError(
                f"{named} does not set {', '.join(missing)}, which {'has' if one else 'have'} no default: "
                f"set {'it' if one else 'them'} in the file or on the command line (the shipped presets of "
                f"conf/{group}/ show each key)."
            )
