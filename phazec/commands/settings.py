"""The settings every command reads: a composed config checked and typed once, at a command's entry
(`phazec.config.settings.settings_from_config`), and the two groups only the commands read (tracking,
`phazec-ir`'s parallel settings). Nothing from here down sees the composed config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phazec.cost.model import LatencyModel
from phazec.frontend.schema import ModelConfig
from phazec.hw.space import HwSpace
from phazec.hw.system import System
from phazec.predict.plan_report import Plan
from phazec.predict.training import Knobs
from phazec.search.schema import SearchConfig
from phazec.solvers.schema import SolverConfig


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """Tensor-parallel settings of the training graphs (`phazec-ir` lowers at `tp`)."""

    tp: int = 1
    """Tensor-parallel width of the graph `phazec-ir` reports."""
    vocab_parallel: bool = True
    """Split the embedding and LM head over the tensor-parallel group (Megatron's vocab-parallel)."""


@dataclass(frozen=True, kw_only=True)
class TrackingConfig:
    """Where runs are logged."""

    backend: str = "none"
    """`none` or `mlflow`."""
    uri: str = ""
    """MLflow tracking URI (`sqlite:////abs/file.db`, `http://host:port`, ...); empty means the SQLite file
    `phazec.db` in the directory the command was started in."""
    experiment: str = "phazec"
    """MLflow experiment; a sweep's parent run and its job runs share it."""
    artifacts: str = ""
    """Artifact location of a new experiment; empty means `mlartifacts/` beside a SQLite store and the
    server's own location for any other store."""
    http_retries: int = 2
    """Retries of a failed request to an `http(s)://` tracking server (MLflow's own default is 7)."""
    http_timeout_s: int = 10
    """Timeout of one request to an `http(s)://` tracking server."""


@dataclass(frozen=True)
class Settings:
    """Every group of a composed config, checked and typed."""

    model: ModelConfig
    hw: HwSpace
    """The hardware space, validated (enumerate it with `phazec.hw.space.enumerate_designs`)."""
    system: System
    cost: LatencyModel
    train: Knobs
    """The training settings a search tries (`train.*`, with `system.hbm_gb`)."""
    plan: Plan
    """The plan `phazec-plan` times (`plan.*`, with `train.optimizer`)."""
    parallel: ParallelConfig
    search: SearchConfig
    solver: SolverConfig
    tracking: TrackingConfig
    cache_dir: Path
    """Where exported ONNX files and solver results are cached (`cache_dir`, resolved)."""
    config: dict[str, Any]
    """The resolved config as plain data: what result.json and plan.json echo, and what a search
    state's key hashes."""
