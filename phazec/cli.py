"""Thin Hydra entry points; the work happens in plain functions that tests call through `compose()`."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from phazec.api import composed, lower_config, plan_config, search_config
from phazec.config import command_line as validate
from phazec.config.command_line import override_strings
from phazec.config.presets import conf_dir
from phazec.config.rundir import make_dir, results_line
from phazec.config.schema import register
from phazec.errors import PhazecError
from phazec.predict.plan_report import PlanReport
from phazec.report.plan import plan_table
from phazec.report.result import is_multi
from phazec.report.table import multi_table, result_table
from phazec.util.interrupt import Interrupted, ends_as_signalled, exit_interrupted, interruptible

__all__ = [
    "JobError",
    "UserErrorExit",
    "conf_dir",
    "ir_main",
    "main",
    "output_dir",
    "plan_main",
    "run_ir",
    "run_plan",
    "user_errors",
]
"""`conf_dir` is re-exported: scripts and tests find the config tree here."""


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print a PhazecError as one paragraph on stderr and exit 2, with no traceback."""
    try:
        yield
    except PhazecError as err:
        print(f"phazec: error: {err}", file=sys.stderr)
        sys.exit(2)


_STARTED: list[bool] = []
"""Holds True once a job or a multirun has started in this process: Hydra exits 1 both for a bad
command line (before any job) and for a crash inside a job, and a sweep with failed jobs exits 1;
only the first is bad input."""


class JobError(PhazecError, CompactHydraException):
    """A PhazecError leaving a job of any command: Hydra records the job as failed (its callbacks see
    the failure), a multirun goes on and names it when it ends (`phazec.track.sweep`), and a single
    run ends through `UserErrorExit`."""


class UserErrorExit(Callback):
    """Ends a single run whose job raised a PhazecError as `user_errors` does: one paragraph, exit 2.

    Registered in `conf/config.yaml`. Runs after every callback's `on_job_end`, so tracking has already
    recorded the failed job; without it Hydra would print a traceback and exit 1. It also creates the
    run (sweep) directory before Hydra does, so one that cannot be created is one paragraph too.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the run directory, or end with one paragraph and exit 2 if it cannot be."""
        make_dir(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the sweep directory, or end with one paragraph and exit 2 if it cannot be. The
        command line composed, so a later exit 1 is a failed job's (which may run in another process
        under a parallel launcher), not bad input."""
        make_dir(config.hydra.sweep.dir)
        _STARTED.append(True)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """End with a line naming the run directory and its files if the job succeeded; exit 2 with the
        job's message if it failed with a PhazecError; exit 130 or 143 with the interrupt message if a
        signal stopped it."""
        job_return = kwargs.get("job_return")
        if isinstance(job_return, JobReturn) and job_return.status is JobStatus.COMPLETED:
            print(results_line(config.hydra.runtime.output_dir, config.hydra.runtime.cwd))
        if isinstance(job_return, JobReturn) and job_return.status is JobStatus.FAILED:
            error = job_return._return_value  # the exception the job raised (JobReturn's own field)
            if isinstance(error, Interrupted):
                exit_interrupted(error)
            if isinstance(error, PhazecError):
                with user_errors():
                    raise error


def output_dir() -> Path:
    """Hydra's run directory, or the working directory outside a Hydra run."""
    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path.cwd()


def run_plan(cfg: DictConfig, out_dir: Path) -> PlanReport:
    """Time the configured plan, print its table and write `plan.json` to `out_dir`."""
    _, report = plan_config(cfg, out_dir)
    print(plan_table(report))
    if report.warning is not None:
        print(f"\nwarning: {report.warning}")
    return report


def run_ir(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Lower the configured model, print its layer table and write `ir.json` to `out_dir`."""
    report, text = lower_config(cfg, out_dir)
    print(text)
    return report


register()


def _job(cfg: DictConfig, work: Callable[[DictConfig, list[str], Path], object]) -> None:
    """A Hydra job of any of the commands: check the command line, then do `work` with the config, the
    command line's overrides and the run directory. A PhazecError leaves as a `JobError`, so Hydra
    records the job as failed and its callbacks see it (`UserErrorExit` ends a single run, a multirun
    goes on with its other jobs); a signal leaves as `Interrupted`."""
    _STARTED.append(True)
    overrides = override_strings(HydraConfig.get().overrides.task)
    try:
        validate.command_line(cfg, overrides)
        with interruptible():
            work(cfg, overrides, output_dir())
    except PhazecError as err:
        raise JobError(str(err)) from err


def _print_search(cfg: DictConfig, overrides: list[str], out_dir: Path) -> None:
    """Search as configured, print the result's tables and write its files to `out_dir`."""
    result = search_config(cfg, overrides, out_dir)
    if is_multi(result):
        for name in result["model"]:
            print(result_table(json.loads((out_dir / name / "result.json").read_text())))
        print(multi_table(result))
    else:
        print(result_table(result))


@hydra.main(version_base=None, config_path=conf_dir(), config_name="config")
def _search_app(cfg: DictConfig) -> None:
    _job(cfg, _print_search)


@contextlib.contextmanager
def bad_command_line_exits_2() -> Iterator[None]:
    """Turn Hydra's exit 1 for a command line it cannot compose (an unknown preset, a misspelled key:
    Hydra has already printed what is valid) into exit 2, as for any other bad input."""
    try:
        yield
    except SystemExit as exit_:
        if exit_.code == 1 and not _STARTED:
            sys.exit(2)
        raise


HYDRA_FLAGS = (
    "help", "hydra_help", "info", "cfg", "shell_completion", "config_path", "config_name",
    "experimental_rerun",
)  # fmt: skip
"""Hydra's own command-line flags whose command `check_command_line` leaves to Hydra: they print
something else or compose another config (`--config-dir` only adds to the search path)."""


def check_command_line(command: str, argv: list[str]) -> None:
    """Compose the command line's config (`phazec.api.composed`) before Hydra does, so that one it
    cannot compose ends as any bad input does, with one paragraph and exit 2, not Hydra's several lines;
    a multirun's with each value of its sweeps in turn (`phazec.config.command_line.sweep_command_lines`),
    so that a bad value fails before the first job, not when its own job's turn comes."""
    args = get_args_parser().parse_args(argv)
    with user_errors():
        searchpath = config_dir_searchpath(args.config_dir)
        if any(getattr(args, flag) for flag in HYDRA_FLAGS):
            return
        user_dir = Path(args.config_dir) if args.config_dir else None
        lines = validate.sweep_command_lines(args.overrides, user_dir) if args.multirun else [args.overrides]
        for overrides in lines:
            composed(command, [*searchpath, *overrides])


def config_dir_searchpath(config_dir: str | None) -> list[str]:
    """The override adding `--config-dir` to the search path, as Hydra does (none without one).

    Raises:
        PhazecError: the directory does not exist.
    """
    if config_dir is None:
        return []
    directory = Path(config_dir)
    if not directory.is_dir():
        raise PhazecError(
            f"--config-dir {config_dir!r} is not a directory: give a directory of your own presets, laid "
            "out as the shipped ones are (hw/<name>.yaml, model/<name>.yaml, ...)."
        )
    quoted = str(directory.resolve()).replace("\\", "\\\\").replace("'", "\\'")
    return [f"hydra.searchpath=['file://{quoted}']"]


def _entry(app: Callable[[], None], command: str) -> None:
    """Run a Hydra app as a command: a command line that does not compose ends with one paragraph and
    exit 2, Python warnings go to the run's log file, not the terminal, and any other command line
    Hydra rejects exits 2."""
    with ends_as_signalled():
        check_command_line(command, sys.argv[1:])
        logging.captureWarnings(True)
        with bad_command_line_exits_2():
            app()


def main() -> None:
    """`phazec`: search the accelerator and training plan with the highest throughput."""
    _entry(_search_app, "config")


@hydra.main(version_base=None, config_path=conf_dir(), config_name="ir")
def _ir_app(cfg: DictConfig) -> None:
    _job(cfg, lambda cfg, overrides, out_dir: run_ir(cfg, out_dir))


def ir_main() -> None:
    """`phazec-ir`: lower a model and print its layer table."""
    _entry(_ir_app, "ir")


@hydra.main(version_base=None, config_path=conf_dir(), config_name="plan")
def _plan_app(cfg: DictConfig) -> None:
    _job(cfg, lambda cfg, overrides, out_dir: run_plan(cfg, out_dir))


def plan_main() -> None:
    """`phazec-plan`: time one training plan as Megatron-LM runs it, with its breakdown and memory."""
    _entry(_plan_app, "plan")
