"""phazec from Python: each command as a function taking the command's overrides, returning plain data.

    from phazec import api

    ir = api.lower("model=bert_large")                  # what `phazec-ir model=bert_large` writes
    result = api.search("model=bert_large", "hw=tpuv4")  # what `phazec model=bert_large hw=tpuv4` writes
    timed = api.plan("model=bert_large", "hw=a100", "system=dgx_a100", "plan.tp=2")  # `phazec-plan ...`

Overrides are the command line's (`group=preset`, `key=value`, `model=[a,b]`); the config tree is the
commands' own (`conf_dir()`). Nothing is printed and no MLflow run is logged: tracking belongs to
the commands' Hydra callbacks. A function returns the JSON file's content the command writes
(`ir.json`, `result.json`) as dicts, lists, strings and numbers; files go to `out_dir`, or to a
temporary directory removed afterwards. A search with several worker processes spawns them, so a
script calling `search` needs the usual `if __name__ == "__main__":` guard.

Each command is a config name in `conf/` (`config` for `phazec`, `ir` for `phazec-ir`, `plan` for
`phazec-plan`) and a function of `phazec.commands` from its typed settings and an output directory to
its data; here, `lower_config`, `search_config` and `plan_config` check a composed config into those
settings (`phazec.config.settings.settings_from_config`) and call it. A new command adds the config, its
function in `phazec.commands`, its `*_config` here and a three-line public function like `lower`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict

from phazec.commands.common import run_multi
from phazec.commands.lower import lower as lower_model
from phazec.commands.plan import plan as time_one_plan
from phazec.commands.search import run_search
from phazec.commands.settings import Settings
from phazec.config import command_line as validate
from phazec.config.command_line import model_config, model_list
from phazec.config.preset_files import missing_values, search_dirs, yaml_message
from phazec.config.presets import conf_dir
from phazec.config.schema import register
from phazec.config.settings import path_name, settings_from_config, tpuv4_space
from phazec.errors import PhazecError
from phazec.predict.plan_report import PlanReport
from phazec.report.plots import write_plots
from phazec.util import atomic
from phazec.util.progress import stage


def composed(command: str, overrides: tuple[str, ...] | list[str]) -> DictConfig:
    """The config `command` (`config`: phazec, `ir`: phazec-ir, `plan`: phazec-plan) composes for these
    overrides.

    Raises:
        PhazecError: Hydra cannot compose them (an unknown preset or key, a value of the wrong type: the
            paragraph of `phazec.config.command_line.hydra_message`, naming a preset's file and line),
            a preset is not valid YAML or leaves a mandatory key unset (`phazec.config.preset_files`), or
            one fails `phazec.config.command_line.command_line` (a key appended that the schema does not
            have, a switch given other than true or false).
    """
    register()
    dirs = search_dirs(overrides)
    try:
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            cfg = compose(command, overrides=list(overrides), return_hydra_config=True)
    except HydraException as err:
        raise PhazecError(validate.hydra_message(err, dirs)) from err
    except yaml.YAMLError as err:  # a preset file that does not parse
        raise PhazecError(yaml_message(err)) from err
    except ValueError as err:  # Hydra's for a group given null (`model=null`)
        raise PhazecError(f"{str(err).rstrip('.')}; the command line was: {' '.join(overrides)}.") from err
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]  # composed only to name the preset files; its run directory is Hydra's to make
    validate.command_line(cfg, overrides)
    missing_values(cfg, choices, dirs)
    return cfg


def lower(*overrides: str, out_dir: Path | str | None = None) -> dict[str, Any]:
    """Lower a model as `phazec-ir` does; returns `ir.json`'s content: `model`, `seq_len`,
    `parameters`, `layers` (one dict per layer: index, name, kind, class, operators, parameters,
    forward FLOPs and activation bytes per sample), `edges` (layer graph, bytes) and `training`
    (per-device figures at `parallel.tp`)."""
    return _in(out_dir, lambda out: lower_config(composed("ir", overrides), out)[0])


def search(*overrides: str, out_dir: Path | str | None = None) -> dict[str, Any]:
    """Run the co-search as `phazec` does (one model, or `model=[a,b,...]`); returns `result.json`'s
    content: `design`, `plan` (microbatch, recompute, tp, pp, dp, stages), `time_per_batch_s`,
    `throughput_samples_per_s`, `baselines`, `speedup_vs_tpuv4`, `search` statistics and `config`."""
    return _in(out_dir, lambda out: search_config(composed("config", overrides), overrides, out))


def plan(*overrides: str, out_dir: Path | str | None = None) -> dict[str, Any]:
    """Time one training plan as `phazec-plan` does; returns `plan.json`'s content: the plan, the
    iteration time (`time_per_batch_s`) and rates, its `breakdown` into parts, the `memory` of the
    fullest stage, `fits`, `warning` and the `config`."""
    return _in(out_dir, lambda out: plan_config(composed("plan", overrides), out)[0])


def search_config(cfg: DictConfig, overrides: tuple[str, ...] | list[str], out_dir: Path) -> dict[str, Any]:
    """The co-search of a composed config and the overrides it was composed from (they tell a list of
    models, which Hydra merges into one `model` node): writes result.json, explored.csv and the plots
    to `out_dir` (several models: also each model's to `out_dir/<name>/`) and returns the result."""
    names, model_overrides = model_list(list(overrides))
    if names is not None and len(names) != 1:
        result = run_multi(models_settings(cfg, names, model_overrides), out_dir, tpuv4_space())
        dirs = [out_dir / name for name in names]
    else:
        result = run_search(settings_from_config(cfg), out_dir, tpuv4_space())
        dirs = [out_dir]
    with stage("plots"):
        for directory in dirs:
            with atomic.after(directory / "result.json"):
                write_plots(json.loads((directory / "result.json").read_text()), directory)
    return result


def _in(out_dir: Path | str | None, run: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """`run` on `out_dir`, or on a temporary directory removed afterwards."""
    if out_dir is not None:
        return run(Path(out_dir))
    with tempfile.TemporaryDirectory(prefix="phazec-") as tmp:
        return run(Path(tmp))


def models_settings(
    cfg: DictConfig, names: list[str], overrides: tuple[str, ...] = ()
) -> dict[str, Settings]:
    """The settings of each model of `model=[a,b,...]`: `cfg` with `model=<name>` and the
    `model.<key>=<value>` overrides, checked.

    Raises:
        PhazecError: the names are not distinct presets or not plain names (each names a result
            directory, `phazec.config.settings.path_name`), or a model's settings are not valid.
    """
    if not names or len(set(names)) != len(names):
        raise PhazecError(
            f"model={list(names)}: give a list of distinct model presets, e.g. model=[bert_large,opt_350m]."
        )
    return {
        path_name("model", name): settings_from_config(model_config(cfg, name, overrides)) for name in names
    }


def lower_config(cfg: DictConfig, out_dir: Path) -> tuple[dict[str, Any], str]:
    """Lower the configured model and write `out_dir/ir.json` (`phazec.commands.lower`); its content
    and the text `phazec-ir` prints."""
    return lower_model(settings_from_config(cfg), out_dir)


def plan_config(cfg: DictConfig, out_dir: Path) -> tuple[dict[str, Any], PlanReport]:
    """Time the configured plan and write `out_dir/plan.json` (`phazec.commands.plan`); its content
    and the report."""
    return time_one_plan(settings_from_config(cfg), out_dir)
