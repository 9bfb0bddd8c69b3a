"""Checks run before the first design is evaluated, so bad input fails in a second, not after a search.

Each check raises a PhazecError naming the bad value and what would be valid. The groups' own range
checks (`validate_search`, `validate_train`, the system and solver checks) run where their objects
are built; these cover what crosses groups or lies outside the config: a command line Hydra cannot
compose (`hydra_message`, one paragraph instead of Hydra's several lines), a key appended with
`+key=value` that the schema does not have (`schema_keys`), an interpolation that names no key
(`resolve`), non-finite numbers anywhere, the model's dimensions, switches given something other than
true or false, the directories written, the worker count, and whether the fixed baseline plan can run
on the system (a warning only: such a baseline is reported "not applicable" in the result, never a
reason to drop a finished search).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, RangeSweep
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from phazec.config.preset_files import where, yaml_message
from phazec.config.presets import conf_dir, group_presets
from phazec.errors import PhazecError

log = logging.getLogger(__name__)


KEY_DETAILS = ("full_key:", "reference_type=", "object_type=")
"""OmegaConf's lines locating a bad key in its own classes: the override already names the key."""
NOT_A_LIST = "is not a ListConfig, list or tuple"
"""OmegaConf's message for a scalar merged into a list field."""


def hydra_message(err: HydraException, dirs: Sequence[Path] = ()) -> str:
    """Hydra's error for a command line it cannot compose, as one paragraph: its lines and OmegaConf's
    cause as sentences, a list of available options comma-separated, without the config search path
    and OmegaConf's class details; an override Hydra cannot parse is named first, a key the schema
    does not have (on the command line or in a preset file) is listed with the keys it has, a list given
    for a mapping (or the reverse) says which form to give, and one value given for a list says to
    bracket it. A bad key or value of a preset file names the file and line, found in `dirs` (the
    shipped tree and the user's, `phazec.config.preset_files.search_dirs`)."""
    cause = err.__cause__ or err.__context__  # a preset's bad key: Hydra raises without `from`
    preset = re.match(r"In '([^']*)': ", str(err))  # a key of a preset file, not of the command line
    located = ""
    if preset and isinstance(cause, OmegaConfBaseException) and cause.full_key:
        located = f"{where(preset[1], str(cause.full_key), dirs or [Path(conf_dir())])}: "
    if (
        isinstance(cause, ConfigAttributeError | ConfigKeyError)
        and (fields := schema_fields(cause.object_type)) is not None
    ):
        return located + unknown_key(str(cause.full_key), fields)
    if preset and isinstance(cause, ValidationError) and cause.full_key:
        reason = str(cause).splitlines()[0].rstrip(".")
        return f"{located}{cause.full_key} is not valid: {reason}; give a value of the type its schema has."
    override = str(err).splitlines()[0].removeprefix("Error merging override ")
    if isinstance(cause, ConfigTypeError) and str(cause).startswith("Cannot merge") and cause.full_key:
        return form_mismatch(override, cause.full_key)
    if isinstance(cause, ValidationError) and NOT_A_LIST in str(cause) and cause.full_key:
        value = override.partition("=")[2].strip()
        return (
            f"{override} is not valid: {cause.full_key} is a list of the values to search; give "
            f"{cause.full_key}=[{value}] for that value alone."
        )
    lines = str(err).splitlines()
    if isinstance(cause, OmegaConfBaseException):
        lines += str(cause).splitlines()
    sentences: list[str] = []
    for raw in lines:
        line = re.sub(r"^In '[^']*': ", "", raw.strip())
        if line.startswith("Config search path"):
            break
        if not line or line.startswith(KEY_DETAILS):
            continue
        if raw.startswith("\t") and sentences:
            sentences[-1] += f"{'' if sentences[-1].endswith(':') else ','} {line}"
        else:
            sentences.append(line)
    text = " ".join(s if s.endswith((".", ":")) else f"{s}." for s in sentences)
    if isinstance(err, MissingConfigException) and err.options is None and err.missing_cfg_file:
        group = err.missing_cfg_file.partition("/")[0]  # a preset named in a list: Hydra lists none
        text += f" Available options in '{group}': {', '.join(group_presets(group))}."
    if isinstance(err, OverrideParseException):
        return f"{err.override} is not a valid override: {text}"
    return text


def form_mismatch(override: str, key: str) -> str:
    """The message for an override that gives a list where the config holds a mapping, or the reverse:
    Hydra merges an override into the node it replaces, and cannot merge the one into the other. A
    hardware knob is a list on some presets and a range `{pow2: [lo, hi]}` on others."""
    to_list = override.partition("=")[2].lstrip().startswith("[")
    given, held = ("a list", "a mapping") if to_list else ("a mapping", "a list")
    how = f"Give {key} as {held}."
    if key.startswith("hw.") and key.count(".") == 1:
        how = (
            f"This preset gives {key} as a range: give {key}={{pow2:[lo,hi]}}, or {key}={{pow2:[v,v]}} "
            "for one value v (a power of two)."
            if to_list
            else f"This preset lists {key}'s values: give a list, such as {key}=[1,2,4]."
        )
    return (
        f"{override} cannot be applied: {key} holds {held} here, and an override is merged into the value "
        f"it replaces, so {given} cannot replace it. {how}"
    )


def schema_fields(kind: Any) -> list[str] | None:
    """The field names of a schema dataclass; None for anything else (a plain dict node)."""
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return [field.name for field in dataclasses.fields(kind)]
    return None


def unknown_key(key: str, fields: list[str]) -> str:
    """The message for a dotted `key` that its parent node's schema, with these fields, does not have."""
    return f"{key} is not a key of {key.rpartition('.')[0] or 'the config'}; valid keys: {', '.join(fields)}."


def schema_keys(node: DictConfig, path: str = "") -> None:
    """Every key of a node the schema types is one of its fields. Hydra's `+key=value` appends a key
    the schema does not have, which nothing would read: a misspelled `+hw.device.hbm_share=true` would
    change nothing, silently."""
    fields = schema_fields(OmegaConf.get_type(node))
    for key, value in node.items_ex(resolve=False):
        full = f"{path}.{key!s}" if path else str(key)
        if fields is not None and key not in fields:
            raise PhazecError(unknown_key(full, fields))
        if isinstance(value, DictConfig) and not OmegaConf.is_missing(node, key):  # model=[] is missing
            schema_keys(value, full)


def command_line(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> None:
    """The checks of a config composed from a command line, which also resolve it (`resolve`): no key
    the schema lacks (`schema_keys`), every interpolation resolvable, and every switch given true or
    false (`switches`)."""
    schema_keys(cfg)
    resolve(cfg)
    switches(cfg, overrides)


def resolve(cfg: DictConfig) -> None:
    """Resolve every interpolation of the config in place, so that a node read on its own (`hw` by
    `hw_space_from_config`) holds values: a value `${...}` given on the command line names a key of the
    whole config (`hw.num_vc=${hw.num_tc}`), and one that names no key fails here, not deep in the run."""
    try:
        OmegaConf.to_container(cfg, resolve=True)  # names the key that fails, which `resolve` does not
    except OmegaConfBaseException as err:
        reason = str(err).splitlines()[0].rstrip(".")
        where = err.full_key or "the config"
        raise PhazecError(
            f"{where}: {reason}; an interpolation ${{...}} must name a key of the config."
        ) from err
    OmegaConf.resolve(cfg)


def sweep_command_lines(
    overrides: list[str] | tuple[str, ...], config_dir: Path | None = None
) -> list[list[str]]:
    """The command lines that check a multirun's overrides before its first job: the overrides that are
    not sweeps, then those with each value of each choice sweep (`hw=tpuv4,tpu_small`), each preset a
    glob picks (`hw=glob(tpu*)`, among the shipped presets and those of the user's `config_dir`) and
    the first value of each range sweep in turn.

    Raises:
        PhazecError: an override Hydra cannot parse (`hydra_message`), a range with no value, a glob
            that picks no preset or names no config group of phazec's, or an interval sweep for phazec's
            sweeper (`hydra_plugins.phazec_sweeper`), which like Hydra's basic one cannot sample.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as err:
        raise PhazecError(hydra_message(err)) from err
    basic = not any(override.key_or_group == "hydra/sweeper" for override in parsed)
    fixed = [str(override.input_line) for override in parsed if not override.is_sweep_override()]
    lines = [fixed]
    for override in parsed:
        key = override.get_key_element()
        if override.is_interval_sweep() and basic:
            raise PhazecError(
                f"{override.input_line} cannot be swept: an interval is sampled by a sweeper such as "
                "Hydra's Optuna sweeper (hydra/sweeper=optuna), and a multirun uses phazec's sweeper, which "
                "like Hydra's basic one takes values (key=a,b,c) or a range (key=range(start,stop,step))."
            )
        sweep = override.value()
        if isinstance(sweep, Glob):
            values = glob_presets(str(override.input_line), override.key_or_group, sweep, config_dir)
        elif isinstance(sweep, RangeSweep):
            values = range_start(override, sweep)
        elif override.is_choice_sweep():
            values = list(override.sweep_string_iterator())
        else:
            continue
        lines += [[*fixed, f"{key}={value}"] for value in values]
    return lines


def range_start(override: Override, sweep: RangeSweep) -> list[str]:
    """The first value of a range sweep, as Hydra gives it to its first job, in a one-item list.

    Raises:
        PhazecError: the range has a step of 0 or no value (Hydra would stop with a traceback, or
            launch no job and exit 0).
    """
    assert sweep.start is not None and sweep.stop is not None
    if sweep.step == 0 or (sweep.stop - sweep.start) * sweep.step <= 0:
        raise PhazecError(
            f"{override.input_line} sweeps no value: range(start, stop, step) runs from start up to stop "
            "(not included) by a step that is not 0 and points from start to stop, e.g. range(1,4) or "
            "range(8,0,-2)."
        )
    return [next(override.sweep_string_iterator())]


def glob_presets(override: str, group: str, glob: Glob, config_dir: Path | None = None) -> list[str]:
    """The presets of config group `group` (shipped, or in the user's `config_dir`) that `glob` picks;
    [] for Hydra's own groups (hydra/...), which phazec leaves to Hydra.

    Raises:
        PhazecError: `group` is not one of phazec's config groups, or the glob picks none of its presets.
    """
    if group == "hydra" or group.startswith("hydra/"):
        return []
    root = Path(conf_dir())
    folder = root / group
    groups = sorted(path.name for path in root.iterdir() if path.is_dir() and path.name != "hydra")
    if not folder.is_dir():
        raise PhazecError(
            f"{override} cannot be swept: glob() picks presets of a config group ({', '.join(groups)}), "
            f"and {group} is not one; sweep a value with key=a,b,c or key=range(start,stop,step)."
        )
    presets = sorted({*group_presets(group), *(group_presets(group, config_dir) if config_dir else [])})
    picked: list[str] = glob.filter(presets)
    if not picked:
        raise PhazecError(f"{override} picks no preset of {group}; its presets: {', '.join(presets)}.")
    return picked


def switches(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> None:
    """A switch (a boolean setting, or a list of them) given on the command line is true or false:
    OmegaConf reads any integer as one (2 as true), which would hide a slip."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_delete() or override.is_sweep_override():
            continue
        key, given = override.key_or_group, override.value()
        composed = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        pairs = (
            zip(composed, given, strict=False)
            if isinstance(composed, ListConfig) and isinstance(given, list)
            else [(composed, given)]
        )
        if any(isinstance(value, bool) and not isinstance(raw, bool) for value, raw in pairs):
            raise PhazecError(
                f"{override.input_line} is not valid: {key} is a switch; give true "
                f"or false{' for each element' if isinstance(given, list) else ''}."
            )


def override_strings(task: Any) -> list[str]:
    """The command-line overrides Hydra keeps (`hydra.overrides.task`) as the strings given. Read item by
    item, the list would resolve a value `${...}` (an interpolation of the job's config) in Hydra's own
    node, where it names nothing."""
    raw = OmegaConf.to_container(task, resolve=False) if isinstance(task, ListConfig) else task
    assert isinstance(raw, list | tuple)
    return [str(override) for override in raw]


def model_list(overrides: list[str]) -> tuple[list[str] | None, tuple[str, ...]]:
    """The presets of a `model=[a,b,...]` override (None without a list; Hydra merges a list of
    presets into one `model` node, so the job reads them back from its overrides), and the
    `model.<key>=<value>` overrides to apply to each, as given."""
    names: list[str] | None = None
    keys: list[str] = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        value = override.value()
        if key == "model" and isinstance(value, list):
            names = [str(v) for v in value]
        elif key.startswith("model."):
            if override.is_delete():
                raise PhazecError(f"~{key} cannot be combined with a list of models; drop it.")
            keys.append(str(override.input_line))
    return names, tuple(keys)


def preset(group: str, name: str, overrides: tuple[str, ...] = ()) -> DictConfig:
    """Config group `group` as preset `name` gives it, with `overrides` (e.g. `model.seq_len=512`),
    composed in the running command's config search path (the shipped tree outside a command). A
    preset is composed, never read by path: one of the user's (`--config-dir`) beside the shipped ones
    is found the same way, and its keys are checked against the schema.

    Raises:
        PhazecError: Hydra cannot compose it (an unknown preset, a bad key; `hydra_message`).
    """
    choice = [f"{group}={name}", *overrides]
    try:
        if GlobalHydra.instance().is_initialized():
            composed = compose("config", overrides=choice)
        else:
            with initialize_config_dir(config_dir=conf_dir(), version_base=None):
                composed = compose("config", overrides=choice)
    except HydraException as err:
        raise PhazecError(hydra_message(err)) from err
    except yaml.YAMLError as err:
        raise PhazecError(yaml_message(err)) from err
    node: Any = composed[group]
    assert isinstance(node, DictConfig)
    return node


def model_config(cfg: DictConfig, name: str, overrides: tuple[str, ...] = ()) -> DictConfig:
    """`cfg` with its `model` node replaced by preset `name` composed with the `model.<key>=<value>`
    `overrides`: the config `model=<name>` composes (each model of `model=[a,b,...]` gets its own)."""
    out = copy.deepcopy(cfg)
    out.model = preset("model", name, overrides)
    assert isinstance(out, DictConfig)
    return out
