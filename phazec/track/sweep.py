"""The sweep-end step as a Hydra callback: summarise a multirun in its sweep directory.

Hydra calls `on_multirun_end` only when every job succeeded: after a failed job its sweeper re-raises
the job's error once the batch is done. The summary is then written at interpreter exit instead, so
it always exists and lists the failed jobs too.
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from phazec.interrupt import Interrupted, exit_interrupted
from phazec.report.sweep import Summary, write_summary

log = logging.getLogger(__name__)


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
        """Stop a multirun whose job a signal interrupted (the summary is written at exit)."""
        error = job_return._return_value if job_return.status is JobStatus.FAILED else None
        if self._sweep_dir is not None and isinstance(error, Interrupted):
            self.interrupted = True
            exit_interrupted(error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Summarise a multirun whose jobs all succeeded."""
        atexit.unregister(self._end_sweep)
        self._end_sweep(failed=False)

    def _end_sweep(self, failed: bool) -> None:
        assert self._sweep_dir is not None
        self.sweep_ended(write_summary(self._sweep_dir), failed)

    def sweep_ended(self, summary: Summary, failed: bool) -> None:
        """Called once the summary is written; `failed`: Hydra stopped the multirun on a failed job."""
        if summary.best is not None:
            log.info("best job of the sweep: %d (%s)", summary.best.num, " ".join(summary.best.overrides))
