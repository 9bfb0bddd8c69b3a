"""phazec's Hydra sweeper (`hydra/sweeper: phazec`, the default of phazec's configs).

It sweeps as Hydra's basic sweeper does (the cartesian product of the command line's and the config's
`hydra.sweeper.params`, in batches of `max_batch_size`), except that a failed job does not end the
sweep: Hydra's sweeper re-raises a batch's first failure, so later batches never run and the command
ends with Hydra's lines about `HYDRA_FULL_ERROR`. Here every batch runs, each job's callbacks record
it as it ends, and the sweep callback (`phazec.track.sweep`) names the failed jobs once the sweep is
summarised and exits 1.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from omegaconf import OmegaConf


@dataclass
class PhazecSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.phazec_sweeper.sweeper.PhazecSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="phazec", node=PhazecSweeperConf, provider="phazec")


class PhazecSweeper(BasicSweeper):
    """Hydra's basic sweeper that runs every batch whatever the jobs' outcomes (the module docstring)."""

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        """Run every job of the sweep; returns each batch's job returns, failed jobs' included. A
        `max_batch_size` below 1 (Hydra's sweeper fails an assertion) ends the command with one
        paragraph and exit 2, before any job."""
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        if self.max_batch_size is not None and self.max_batch_size < 1:
            from phazec.cli import user_errors
            from phazec.errors import PhazecError

            with user_errors():
                raise PhazecError(
                    f"hydra.sweeper.max_batch_size={self.max_batch_size} is not valid: give the number of "
                    "jobs to launch at once, at least 1, or null for all of them."
                )
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        self.overrides = self.split_arguments(overrides, self.max_batch_size)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns: list[Sequence[JobReturn]] = []
        first_job = 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            returns.append(self.launcher.launch(batch, initial_job_idx=first_job))
            first_job += len(batch)
        return returns
