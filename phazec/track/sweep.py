"""The sweep-end step as a Hydra callback: summarise a multirun in its sweep directory.

A failed job's error is written to `error.txt` in its directory as it ends (a single run's too). phazec's
sweeper (`hydra_plugins.phazec_sweeper`) runs every job whatever the others' outcomes, then Hydra calls
`on_multirun_end`: the summary is written and, if a job failed, the command ends naming the failed jobs,
exit status 1. Hydra's basic sweeper (`hydra/sweeper=basic`) instead re-raises a batch's first failure
and never calls `on_multirun_end`; nor does a signal. The summary is then written at interpreter exit,
so it always exists and lists the failed jobs too.
"""

from __future__ import annotations

import atexit
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from phazec.config.rundir import results_line
from phazec.errors import PhazecError
from phazec.report.sweep import ERROR_TXT, Summary, failure_message, write_summary
from phazec.util import atomic
from phazec.util.interrupt import Interrupted, exit_interrupted

log = logging.getLogger(__name__)


def one_line(error: BaseException) -> str:
    """An error as one line: its type and its message with whitespace collapsed."""
    return " ".join(f"{type(error).__name__}: {error}".split())


def error_message(error: BaseException) -> str:
    """What a failed job says in one line: a PhazecError's paragraph, any other error's type and message."""
    return " ".join(str(error).split()) if isinstance(error, PhazecError) else one_line(error)


def error_text(error: BaseException) -> str:
    """A failed job's `error.txt`: `error_message` on the first line, then, for an error that is neither
    a PhazecError nor a signal's `Interrupted` (a bug, not bad input or a stop), its traceback."""
    expected = isinstance(error, PhazecError | Interrupted)
    trace = "" if expected else "".join(traceback.format_exception(error))
    return f"{error_message(error)}\n{trace}"


class SweepCallback(Callback):
    """Writes the sweep summary (`phazec.report.sweep.write_summary`) when a multirun ends."""

    def __init__(self) -> None:
        self._sweep_dir: Path | None = None
        self.interrupted = False
        """Whether a signal stopped the multirun."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Remember the sweep directory; summarise at exit should Hydra never end the multirun."""
        self._sweep_dir = Path(config.hydra.sweep.dir)
        atexit.register(self._end_sweep, failed=True)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Write a failed job's `error.txt` (in a multirun, say it failed); stop a multirun whose job a
        signal interrupted (the summary is written at exit)."""
        if job_return.status is not JobStatus.FAILED:
            return
        error = job_return._return_value  # the exception the job raised (JobReturn's own field)
        atomic.write_bytes(Path(config.hydra.runtime.output_dir) / ERROR_TXT, error_text(error).encode())
        if self._sweep_dir is None:
            return
        if isinstance(error, Interrupted):
            self.interrupted = True
            exit_interrupted(error)
        log.warning("job %s failed: %s", config.hydra.job.num, error_message(error))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Summarise the multirun; if a job failed, end the command naming the failed jobs, exit 1;
        else end with a line naming the sweep directory and its files."""
        atexit.unregister(self._end_sweep)
        message = failure_message(self._end_sweep(failed=False))
        if message is not None:
            print(f"phazec: error: {message}", file=sys.stderr)
            sys.exit(1)
        assert self._sweep_dir is not None
        print(results_line(self._sweep_dir, config.hydra.runtime.cwd))

    def _end_sweep(self, failed: bool) -> Summary:
        assert self._sweep_dir is not None
        summary = write_summary(self._sweep_dir)
        self.sweep_ended(summary, failed)
        return summary

    def sweep_ended(self, summary: Summary, failed: bool) -> None:
        """Called once the summary is written; `failed`: Hydra stopped the multirun on a failed job."""
        if summary.best is not None:
            log.info("best job of the sweep: %d (%s)", summary.best.num, " ".join(summary.best.overrides))
