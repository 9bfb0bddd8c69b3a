"""The config tree: one dataclass schema per group, registered in Hydra's ConfigStore.

`conf/config.yaml` starts its defaults list with `phazec_schema`, so every preset is merged into a
typed node: a misspelled key or a value of the wrong type fails at composition with Hydra's message.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import MISSING, ListConfig, OmegaConf

from phazec.config.rundir import register_resolver
from phazec.errors import PhazecError
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.search.schema import SearchConfig
from phazec.solvers.placement.model import RECOMPUTE_MODES
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


def register() -> None:
    """Register the schema with Hydra and the run-directory resolver; called before composition."""
    ConfigStore.instance().store(name="phazec_schema", node=Config)
    register_resolver()
