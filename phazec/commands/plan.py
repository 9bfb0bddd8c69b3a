"""`phazec-plan`: time one training plan as Megatron-LM runs it (`predict_plan(cfg) -> PlanReport`).

The plan (`plan.*`: tp, pp, dp, microbatch, recompute, sequence_parallel, interleave, ...) is checked,
then timed on the one design of the `hw` preset by `phazec.predict.plan_report.time_plan`, with the same
model of time and memory the search uses, so `phazec` prints the same time for the same fixed plan. A
plan that does not fit in HBM is still timed, with a warning (an error with `plan.require_fit=true`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from phazec.commands.setup import setup
from phazec.config.schema import PlanConfig
from phazec.errors import PhazecError
from phazec.hw.designs import KNOBS
from phazec.hw.space import HwSpace, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.predict.evaluator import Knobs
from phazec.predict.plan_report import PlanReport, time_plan
from phazec.solvers.placement.model import RECOMPUTE_MODES, recompute_mode
from phazec.util import atomic

log = logging.getLogger(__name__)


def check_plan(plan: PlanConfig, devices: int, global_batch: int) -> None:
    """Range checks of the plan that need no model; raises PhazecError naming the bad value."""
    for name in ("tp", "pp", "dp", "microbatch", "interleave"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PhazecError(f"plan.{name}={value!r} is not valid: it must be a positive integer.")
    if plan.recompute not in RECOMPUTE_MODES:
        raise PhazecError(
            f"plan.recompute={plan.recompute!r} is not a recompute mode; valid: {list(RECOMPUTE_MODES)}."
        )
    width = plan.tp * plan.pp * plan.dp
    if devices % width:
        raise PhazecError(
            f"plan.tp * plan.pp * plan.dp = {plan.tp} * {plan.pp} * {plan.dp} = {width} does not divide the "
            f"{devices} devices (system.devices); choose widths whose product divides it, or set "
            f"system.devices={width}."
        )
    if plan.interleave > 1 and plan.pp == 1:
        raise PhazecError(
            f"plan.interleave={plan.interleave} needs plan.pp > 1: it splits each pipeline stage into model "
            "chunks, and at pp 1 there is no pipeline (Megatron-LM refuses it too); set plan.interleave=1 "
            "or plan.pp > 1."
        )
    if global_batch % plan.microbatch:
        raise PhazecError(
            f"plan.microbatch={plan.microbatch} does not divide the global batch {global_batch} "
            "(system.global_batch); choose a divisor of it."
        )
    microbatches = global_batch // plan.microbatch
    if microbatches % plan.dp:
        raise PhazecError(
            f"plan.dp={plan.dp} does not divide the {microbatches} microbatches of a batch (global batch "
            f"{global_batch} / microbatch {plan.microbatch}): Megatron-LM gives every replica the same "
            f"number; choose a dp that divides {microbatches}, or a global batch divisible by microbatch "
            f"x dp = {plan.microbatch * plan.dp}."
        )


def check_one_design(space: HwSpace) -> None:
    """The space is one design (every knob one value), or PhazecError naming the knobs that vary."""
    several = {knob: len(values) for knob in KNOBS if len(values := getattr(space, knob) or ()) > 1}
    if several:
        varied = ", ".join(f"hw.{knob} ({count} values)" for knob, count in several.items())
        raise PhazecError(
            f"hw={space.name} spans more than one design ({varied}); phazec-plan times one: use a preset "
            "with one value per knob (hw=a100, hw=h100, hw=tpuv4) or pin each knob, e.g. hw.num_tc=[8] "
            "(hw.num_tc={pow2:[8,8]} on a range preset such as tpu_area)."
        )


def plan_knobs(cfg: DictConfig) -> Knobs:
    """The evaluator's knobs for the one plan: its settings, the largest HBM size."""
    plan = cfg.plan
    return Knobs(
        microbatches=(int(plan.microbatch),),
        recompute=(recompute_mode(str(plan.recompute)),),
        hbm_bytes=(round(max(float(g) for g in cfg.system.hbm_gb) * 1e9),),
        optimizer=str(cfg.train.optimizer),
        interleave=(int(plan.interleave),),
        distributed_optimizer=(bool(plan.distributed_optimizer),),
        sequence_parallel=(bool(plan.sequence_parallel),),
        last_stage_recomputes=bool(plan.last_stage_recomputes),
        overlap_grad_reduce=bool(plan.overlap_grad_reduce),
        overlap_param_gather=bool(plan.overlap_param_gather),
        pipeline_sends_masks=bool(plan.pipeline_sends_masks),
        optimizer_step=bool(plan.optimizer_step),
    )


def predict_plan(cfg: DictConfig) -> PlanReport:
    """Time the plan of `cfg.plan` on the one design of `cfg.hw`.

    Raises:
        PhazecError: bad plan values, a design space of more than one design, or (with
            `plan.require_fit`) a plan that does not fit in HBM.
    """
    plan = cfg.plan
    system = system_from_config(cfg.system)
    check_plan(plan, system.devices, system.global_batch)
    check_one_design(hw_space_from_config(cfg.hw))
    if plan.sequence_parallel and plan.tp == 1:
        log.warning("plan.sequence_parallel=true splits nothing at plan.tp=1; timed without it.")
        plan.sequence_parallel = False  # as Megatron-LM turns it off
    job = setup(cfg, plan_knobs(cfg), widths=[int(plan.tp)])
    report = time_plan(cfg, job.evaluator, job.designs)
    if report.warning is not None:
        if plan.require_fit:
            raise PhazecError(report.warning + " (plan.require_fit=true makes this an error.)")
        log.warning("%s", report.warning)
    return report


PLAN_JSON = "plan.json"


def plan_config(cfg: DictConfig, out_dir: Path) -> tuple[dict[str, Any], PlanReport]:
    """Time the configured plan and write `out_dir/plan.json`; returns its content and the report."""
    report = predict_plan(cfg)
    content = {**dataclasses.asdict(report), "config": OmegaConf.to_container(cfg, resolve=True)}
    atomic.write_json(out_dir / PLAN_JSON, content)
    return content, report
