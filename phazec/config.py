"""The config tree: one dataclass schema per group, registered in Hydra's ConfigStore.

`conf/config.yaml` starts its defaults list with `phazec_schema`, so every preset is merged into a
typed node: a misspelled key or a value of the wrong type fails at composition with Hydra's message.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import MISSING, ListConfig, OmegaConf

from phazec.errors import PhazecError
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.rundir import register_resolver
from phazec.solvers.placement import RECOMPUTE_MODES
from phazec.solvers.schema import SolverConfig


@dataclass
class TrainConfig:
    """Training knobs; lists are searched over."""

    microbatch: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    """Microbatch sizes (samples)."""
    recompute: list[Any] = field(default_factory=lambda: [False, True])
    """Activation recomputation modes: `none`, `selective` (the attention core), `full` (every layer);
    false and true mean none and full."""
    optimizer: str = "sgd"
    """`sgd` or `adam` (mixed-precision Adam: 16 bytes per parameter with weights and gradients)."""
    interleave: list[int] = field(default_factory=lambda: [1])
    """Model chunks per pipeline stage (Megatron's interleaved 1F1B when > 1)."""
    distributed_optimizer: list[bool] = field(default_factory=lambda: [False])
    """Shard the optimizer state over the data-parallel replicas (ZeRO-1)."""
    sequence_parallel: list[bool] = field(default_factory=lambda: [False])
    """Megatron's sequence parallelism (activations outside the attention and MLP GEMMs split t ways)."""
    last_stage_recomputes: bool = False
    """Megatron-LM's rule (true: every stage recomputes) or PHAZE's (false: the last stage never does)."""
    overlap_grad_reduce: bool = False
    """Overlap the data-parallel gradient all-reduce with the backward pass (Megatron-LM's default: off)."""
    overlap_param_gather: bool = False
    """With a distributed optimizer, gather the updated weights during the first stage's next forward
    pass (Megatron-Core's `--overlap-param-gather`; Megatron-LM's default: off)."""
    pipeline_sends_masks: bool = False
    """A pipeline stage also sends the next the tensors built from the model's inputs and constants
    alone (attention mask, rotary tables), as Megatron-DeepSpeed's pipeline engine sends each layer's
    outputs; false: every stage builds its own, as Megatron-LM's and Megatron-Core's stages do."""
    optimizer_step: bool = False
    """Time the optimizer step at HBM bandwidth: the replica's shard of the weights, gradients and state
    read and written once (all of them without a distributed optimizer), every gradient zeroed."""


@dataclass
class ParallelConfig:
    """Tensor-parallel settings used when lowering one training graph (phazec-ir)."""

    tp: int = 1
    """Tensor-parallel width."""
    vocab_parallel: bool = True
    """Split the embedding and LM head over the tensor-parallel group (Megatron's vocab-parallel)."""


@dataclass
class PlanConfig:
    """One training plan to time (`phazec-plan`), as Megatron-LM runs it."""

    tp: int = 1
    """Tensor-parallel width (one of `model.tp_widths` is not required)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel width (pipeline replicas)."""
    microbatch: int = 1
    """Microbatch size (samples); it must divide `system.global_batch`."""
    recompute: str = "none"
    """Activation recomputation: `none`, `selective` (the attention core) or `full` (every layer)."""
    sequence_parallel: bool = False
    """Megatron's sequence parallelism inside the tensor-parallel group."""
    interleave: int = 1
    """Virtual pipeline stages per device (interleaved 1F1B); it must divide the layers per stage."""
    layers: list[int] | None = None
    """Transformer blocks of each stage, first stage first; None splits them evenly (Megatron)."""
    distributed_optimizer: bool = False
    """Shard the optimizer state over the data-parallel replicas (Megatron's distributed optimizer)."""
    last_stage_recomputes: bool = True
    """Megatron-LM's rule (true: every stage recomputes) or PHAZE's (false: the last stage never does)."""
    overlap_grad_reduce: bool = False
    """Overlap the data-parallel gradient all-reduce with the backward pass (Megatron-LM's default: off)."""
    overlap_param_gather: bool = False
    """With a distributed optimizer, gather the updated weights during the first stage's next forward
    pass (Megatron-Core's `--overlap-param-gather`; Megatron-LM's default: off)."""
    pipeline_sends_masks: bool = False
    """A pipeline stage also sends the next the tensors built from the model's inputs and constants
    alone (attention mask, rotary tables), as Megatron-DeepSpeed's pipeline engine sends each layer's
    outputs; false: every stage builds its own, as Megatron-LM's and Megatron-Core's stages do."""
    optimizer_step: bool = True
    """Time the optimizer step at HBM bandwidth: the replica's shard of the weights, gradients and state
    read and written once (all of them without a distributed optimizer), every gradient zeroed."""
    require_fit: bool = False
    """Make a plan that does not fit in HBM an error instead of a warning."""


@dataclass
class RayConfig:
    """The Ray cluster of `search.executor=ray`."""

    address: str = ""
    """`auto` (the cluster `ray start` began on this machine), `host:port` of a head's GCS, `ray://host:10001`
    (Ray client), or empty for a local Ray on 127.0.0.1 started for the run and stopped after it."""
    retries: int = 3
    """Times Ray runs a batch again after it raised, its worker process died or its node died (Ray's
    `max_retries`, exceptions included); a batch failing once more stops the search."""


@dataclass
class SearchConfig:
    """Architecture search strategy, its processes and its saved state."""

    strategy: str = "phaze"
    """`phaze` (area bins, largest first, early stop), `exhaustive`, `bounded` (exhaustive's answer,
    skipping designs a proven bound rules out), `bo` (Bayesian optimisation of one block's forward
    latency, then the chosen design placed) or `wham` (WHAM's critical-path local search per stage,
    then the placement DP over the union of each stage's top-k designs)."""
    objective: str = "throughput"
    """`throughput` (samples/s) or `throughput_per_watt` (samples/s per watt of the design's peak power,
    `phazec.hw.energy.peak_power_w`): what every strategy maximises."""
    top_k: int = 4
    """Designs the wham strategy keeps per pipeline stage in its local search."""
    bin_mm2: float = 0.01
    """Width of an area bin (phaze strategy)."""
    patience: int = 5
    """Consecutive non-improving bins after which the phaze strategy stops."""
    batch_designs: int = 8
    """Designs per batch of the exhaustive and bounded strategies (phaze's batches are its bins): the
    unit handed to a worker process and saved for resuming."""
    workers: int | None = None
    """Processes evaluating designs; None means one per core, 1 evaluates in this process. With
    `executor=ray`: batches running at once; None means one per CPU of the cluster."""
    executor: str = "local"
    """`local` (`workers` processes on this machine) or `ray` (Ray tasks on the cluster of `ray`)."""
    ray: RayConfig = field(default_factory=RayConfig)
    resume: bool = True
    """Continue from the state a killed run with the same config saved; false starts afresh."""
    trials: int = 100
    """Trials of the bo strategy's sampler."""
    seed: int = 0
    """Seed of the bo strategy's sampler."""


@dataclass
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


@dataclass
class Config:
    """The whole tree; group presets live in `conf/<group>/`."""

    model: ModelConfig = MISSING
    hw: HwConfig = MISSING
    system: SystemConfig = MISSING
    cost: CostConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cache_dir: str = ""
    """Where exported ONNX files and solver results are cached; empty means $PHAZEC_CACHE_DIR or
    ~/.cache/phazec."""


OPTIMIZERS = ("sgd", "adam")


def validate_train(train: TrainConfig) -> None:
    """Range checks of the training knobs; raises PhazecError naming the bad value."""
    bad = [m for m in train.microbatch if m <= 0]
    if bad or not train.microbatch:
        raise PhazecError(
            f"train.microbatch={list(train.microbatch)} must list positive microbatch sizes (samples), "
            "e.g. [1, 2, 4, 8]."
        )
    if not train.recompute:
        raise PhazecError(
            "train.recompute=[] lists no recompute setting, so no plan can be tried; give [false], [true] "
            "or [false, true]."
        )
    if train.optimizer not in OPTIMIZERS:
        raise PhazecError(f"train.optimizer={train.optimizer!r} is not supported; valid: {list(OPTIMIZERS)}.")
    for name in ("interleave", "distributed_optimizer", "sequence_parallel"):
        if not getattr(train, name):
            raise PhazecError(f"train.{name}=[] is not valid: list at least one setting to search.")
    for value in train.recompute:
        if not isinstance(value, bool) and value not in RECOMPUTE_MODES:
            raise PhazecError(
                f"train.recompute value {value!r} is not a recompute mode; valid: {list(RECOMPUTE_MODES)} "
                "(false and true mean none and full)."
            )
    bad = [v for v in train.interleave if v < 1]
    if bad:
        raise PhazecError(
            f"train.interleave={list(train.interleave)} is not valid: give model chunks per stage >= 1, "
            "e.g. [1, 2]."
        )


STRATEGIES = ("phaze", "exhaustive", "bounded", "bo", "wham")
EXECUTORS = ("local", "ray")
OBJECTIVES = ("throughput", "throughput_per_watt")


def validate_search(search: SearchConfig) -> None:
    """Range checks of the search settings; raises PhazecError naming the bad value."""
    if search.strategy not in STRATEGIES:
        raise PhazecError(
            f"search.strategy={search.strategy!r} is not a strategy; valid: {list(STRATEGIES)}."
        )
    if search.objective not in OBJECTIVES:
        raise PhazecError(
            f"search.objective={search.objective!r} is not an objective; valid: {list(OBJECTIVES)} "
            "(samples/s, or samples/s per watt of the design's peak power)."
        )
    for name in ("bin_mm2", "patience", "batch_designs", "trials", "top_k"):
        if getattr(search, name) <= 0:
            raise PhazecError(f"search.{name}={getattr(search, name)} is not valid: it must be positive.")
    if search.workers is not None and search.workers < 1:
        raise PhazecError(
            f"search.workers={search.workers} is not valid: give a number of processes >= 1 (1 evaluates "
            "in this process), or leave it unset (null) for one per core."
        )
    if search.executor not in EXECUTORS:
        raise PhazecError(
            f"search.executor={search.executor!r} is not an executor; valid: {list(EXECUTORS)}."
        )
    if search.ray.retries < 0:
        raise PhazecError(
            f"search.ray.retries={search.ray.retries} is not valid: give how many times Ray may run a "
            "failed batch again (0 or more)."
        )


def override_strings(task: Any) -> list[str]:
    """The command-line overrides Hydra keeps (`hydra.overrides.task`) as the strings given. Read item by
    item, the list would resolve a value `${...}` (an interpolation of the job's config) in Hydra's own
    node, where it names nothing."""
    raw = OmegaConf.to_container(task, resolve=False) if isinstance(task, ListConfig) else task
    assert isinstance(raw, list | tuple)
    return [str(override) for override in raw]


def model_list(overrides: list[str]) -> tuple[list[str] | None, dict[str, Any]]:
    """The presets of a `model=[a,b,...]` override (None without a list; Hydra merges a list of
    presets into one `model` node, so the job reads them back from its overrides), and the
    `model.<key>=<value>` overrides to apply to each (keys without the prefix)."""
    names: list[str] | None = None
    keys: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        value = override.value()
        if key == "model" and isinstance(value, list):
            names = [str(v) for v in value]
        elif key.startswith("model."):
            if override.is_delete():
                raise PhazecError(f"~{key} cannot be combined with a list of models; drop it.")
            keys[key.removeprefix("model.")] = value
    return names, keys


def conf_dir() -> str:
    """The config tree: packaged inside phazec in a wheel (`phazec/conf`), else the repository's `conf/`."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if packaged.is_dir() else here.parent / "conf")


def group_presets(group: str, root: Path | None = None) -> list[str]:
    """The names of config group `group`'s presets (its YAML files) under `root` (default: `conf_dir()`),
    sorted; none for a folder that does not exist."""
    return sorted(path.stem for path in (root or Path(conf_dir())).joinpath(group).glob("*.yaml"))


def register() -> None:
    """Register the schema with Hydra and the run-directory resolver; called before composition."""
    ConfigStore.instance().store(name="phazec_schema", node=Config)
    register_resolver()
