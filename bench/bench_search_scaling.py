"""Search scaling: one exhaustive search on the local executor and on 1, 2 and 4 Ray worker processes.

BERT-large on the 8 designs of tpu_small with a 32 MiB buffer and 4 vector cores, one design per
batch, one knob setting. Every run starts from an empty schedule cache, so each does the same ILP
work; the Ray runs start a local Ray on 127.0.0.1 with N CPUs (one worker process each), and their
wall time includes starting it. Prints per run the wall time and the speed-up over the local executor
with one process, and the Ray overhead per task: (Ray with 1 worker - local with 1 process) / tasks.
On a 2-core machine the speed-up cannot pass 2.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from phazec.cli import conf_dir
from phazec.commands.setup import Job, setup
from phazec.config.settings import settings_from_config
from phazec.predict.evaluator import Timings
from phazec.search.driver import search
from phazec.search.loop import Found
from phazec.search.state import SearchState
from phazec.solvers.schedule.solve import ScheduleCache

OVERRIDES = [
    "model=bert_large", "hw=tpu_small", "hw.glb_bytes=[33554432]", "hw.num_vc=[4]",
    "train.microbatch=[8]", "train.recompute=[false]", "system.hbm_gb=[32]", "tracking=none",
    "search=exhaustive", "search.batch_designs=1",
]  # fmt: skip
RUNS = [("local", 1), ("local", 2), ("ray", 1), ("ray", 2), ("ray", 4)]
"""(executor, workers) of each run."""


def config(*overrides: str) -> DictConfig:
    """The composed config of the benchmark's search with more overrides."""
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        return compose("config", overrides=[*OVERRIDES, *overrides])


def timed(job: Job, executor: str, workers: int, scratch: Path) -> tuple[float, Found]:
    """Wall seconds of one search from an empty schedule cache, and what it found."""
    cfg = config(f"search.executor={executor}", f"search.workers={workers}")
    run_dir = scratch / f"{executor}-{workers}"
    evaluator = replace(job.evaluator, cache=ScheduleCache(run_dir / "schedules"), timings=Timings())
    start = time.perf_counter()
    found = search(evaluator, job.designs, cfg.search, SearchState(run_dir / "state", False), str(run_dir))
    return time.perf_counter() - start, found


def main() -> None:
    """Run every configuration once and print the table."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="phazec-scaling-") as tmp:
        scratch = Path(tmp)
        os.environ["RAY_TMPDIR"] = str(scratch)
        job = setup(settings_from_config(config()))
        tasks = len(job.designs)
        walls: dict[tuple[str, int], float] = {}
        answers = set()
        for executor, workers in RUNS:
            walls[executor, workers], found = timed(job, executor, workers, scratch)
            assert found.best is not None
            answers.add((found.best.design, found.best.microbatch, repr(found.best.result)))
        assert len(answers) == 1, "the runs disagree"
        base = walls["local", 1]
        print(f"exhaustive search, {tasks} designs in {tasks} tasks, empty schedule cache each run")
        print(f"{'executor':>8} {'workers':>7} {'wall_s':>8} {'speed-up':>8}")
        for (executor, workers), wall in walls.items():
            print(f"{executor:>8} {workers:>7} {wall:8.2f} {base / wall:8.2f}")
        overhead = (walls["ray", 1] - base) / tasks
        print(f"Ray overhead per task (Ray start included): {overhead * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
