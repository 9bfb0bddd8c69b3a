"""Config to objects: validate a composed config, lower the model and build its Evaluator.

Both commands start here: `phazec` (the co-search, `phazec.commands.search`) and `phazec-plan` (one plan,
`phazec.predict.plan_report`). The result is plain data (`Job`); nothing here searches or times anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from phazec.config import command_line as validate
from phazec.config.schema import validate_train
from phazec.cost.model import check_applies, latency_model_from_config
from phazec.errors import PhazecError
from phazec.frontend import default_cache_dir, load_model
from phazec.frontend.schema import ModelConfig
from phazec.hw.designs import Designs
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import Model
from phazec.passes.attention import is_causal
from phazec.passes.training import training_pipeline
from phazec.predict.evaluator import Evaluator, Knobs
from phazec.search.driver import check_search
from phazec.solvers.placement.model import recompute_mode
from phazec.solvers.schedule.backends import check_config
from phazec.solvers.schedule.solve import ScheduleCache
from phazec.solvers.schema import SolverConfig
from phazec.util.progress import stage


@dataclass(frozen=True)
class Job:
    """One model, set up: its config, the design space, and the evaluator holding its training graphs."""

    cfg: DictConfig
    model_cfg: ModelConfig
    designs: Designs
    evaluator: Evaluator


def check_knobs(cfg: DictConfig, global_batch: int) -> Knobs:
    """The training knobs, validated: microbatches dividing the global batch, positive HBM sizes."""
    validate_train(cfg.train)
    bad = [m for m in cfg.train.microbatch if global_batch % m]
    if bad:
        divisors = [d for d in (1, 2, 4, 8, 16, 32) if global_batch % d == 0]
        raise PhazecError(
            f"train.microbatch values {bad} do not divide the global batch {global_batch} "
            f"(system.global_batch); use divisors such as {divisors}."
        )
    hbm = [float(g) for g in cfg.system.hbm_gb]
    if not hbm or min(hbm) <= 0:
        raise PhazecError(f"system.hbm_gb={hbm} must list positive HBM sizes in GB, e.g. [32, 64, 80].")
    train = cfg.train
    return Knobs(
        microbatches=tuple(int(m) for m in train.microbatch),
        recompute=tuple(recompute_mode(r) for r in train.recompute),
        hbm_bytes=tuple(round(g * 1e9) for g in hbm),
        optimizer=str(train.optimizer),
        interleave=tuple(int(v) for v in train.interleave),
        distributed_optimizer=tuple(bool(x) for x in train.distributed_optimizer),
        sequence_parallel=tuple(bool(x) for x in train.sequence_parallel),
        last_stage_recomputes=bool(train.last_stage_recomputes),
        overlap_grad_reduce=bool(train.overlap_grad_reduce),
        overlap_param_gather=bool(train.overlap_param_gather),
        pipeline_sends_masks=bool(train.pipeline_sends_masks),
        optimizer_step=bool(train.optimizer_step),
    )


def training_graphs(
    model: Model,
    widths: list[int],
    optimizer: str,
    vocab_parallel: bool,
    *,
    attention: str = "unfused",
    causal: bool = False,
    fuse_elementwise: bool = False,
    fuse_norm_rope: bool = False,
) -> dict[int, Model]:
    """The per-device training graph of the model at each allowed tensor-parallel width, its attention
    core priced as the kernel `attention` (`phazec.passes.attention`), its elementwise groups fused
    into one kernel each with `fuse_elementwise` (`phazec.passes.fuse`) and its RMSNorm and rotary-embedding
    chains with `fuse_norm_rope` (`phazec.passes.norm_rope`)."""
    return {
        t: training_pipeline(
            t,
            optimizer=optimizer,
            vocab_parallel=vocab_parallel,
            attention=attention,
            causal=causal,
            fuse_elementwise=fuse_elementwise,
            fuse_norm_rope=fuse_norm_rope,
        ).run(model)[0]
        for t in sorted(set(widths))
    }


def configured_graphs(
    cfg: DictConfig,
    model_cfg: ModelConfig,
    designs: Designs,
    model: Model,
    *,
    widths: list[int],
    optimizer: str,
) -> dict[int, Model]:
    """`training_graphs` of a lowered model as the config and the hw space's device model ask: vocabulary
    parallelism, the device's attention kernel, elementwise, norm and rotary fusion, the model's causality."""
    device = designs.device
    return training_graphs(
        model, widths, optimizer, cfg.parallel.vocab_parallel, attention=device.attention,
        causal=is_causal(model_cfg.arch, model_cfg.causal), fuse_elementwise=device.fuse_elementwise,
        fuse_norm_rope=device.fuse_norm_rope,
    )  # fmt: skip


def setup(cfg: DictConfig, knobs: Knobs | None = None, widths: list[int] | None = None) -> Job:
    """Validate the config, enumerate the space, lower the model and build its Evaluator.

    Args:
        cfg: the composed config.
        knobs: the training knobs to evaluate; None reads the searched ones (`train.*`).
        widths: the tensor-parallel widths to build training graphs for; None means `model.tp_widths`.
    """
    check_search(cfg.search)
    validate.before_lowering(cfg, default_cache_dir(cfg.cache_dir))
    solver = OmegaConf.to_object(cfg.solver)
    assert isinstance(solver, SolverConfig)
    check_config(solver)
    system = system_from_config(cfg.system)
    knobs = knobs if knobs is not None else check_knobs(cfg, system.global_batch)
    model_cfg = OmegaConf.to_object(cfg.model)
    assert isinstance(model_cfg, ModelConfig)
    designs = enumerate_designs(hw_space_from_config(cfg.hw))
    latency_model = latency_model_from_config(cfg.cost)
    check_applies(latency_model, designs)  # before a lowering that can take minutes
    with stage("lowering"):
        model = load_model(model_cfg, default_cache_dir(cfg.cache_dir))
    with stage("training graphs"):
        widths = list(model_cfg.tp_widths if widths is None else widths)
        graphs = configured_graphs(cfg, model_cfg, designs, model, widths=widths, optimizer=knobs.optimizer)
    evaluator = Evaluator(
        graphs=graphs,
        system=system,
        latency_model=latency_model,
        solver=solver,
        knobs=knobs,
        cache=ScheduleCache(default_cache_dir(cfg.cache_dir) / "schedules"),
        lp_dir=default_cache_dir(cfg.cache_dir) / "lp" if solver.write_lp else None,
    )
    return Job(cfg, model_cfg, designs, evaluator)
