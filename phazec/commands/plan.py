"""`phazec-plan`: time one training plan as Megatron-LM runs it (`predict_plan(cfg) -> PlanReport`).

The plan (`plan.*`: tp, pp, dp, microbatch, recompute, sequence_parallel, interleave, ...) is checked,
then timed on the one design of the `hw` preset by `phazec.predict.plan_report.time_plan`, with the same
model of time and memory the search uses, so `phazec` prints the same time for the same fixed plan. A
plan that does not fit in HBM is still timed, with a warning (an error with `plan.require_fit=true`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from phazec.commands.settings import Settings
from phazec.commands.setup import Job, setup
from phazec.errors import PhazecError
from phazec.hw.designs import KNOBS
from phazec.hw.space import HwSpace
from phazec.hw.validation import band, validation
from phazec.predict.evaluator import Candidate
from phazec.predict.megatron import check_runs
from phazec.predict.plan_report import Plan, PlanReport, explain, plan_report, plan_stages
from phazec.predict.training import Knobs
from phazec.report.plan import plan_summary
from phazec.report.trace import write_plan_trace
from phazec.util import atomic
from phazec.util.progress import stage

log = logging.getLogger(__name__)


def check_plan(plan: Plan, devices: int, global_batch: int) -> None:
    """The plan against the system: what Megatron-LM runs (`phazec.predict.megatron.check_runs`) and its
    interleaving; raises PhazecError naming the bad value (`phazec.config.settings` checked each value
    on its own)."""
    training = plan.training
    check_runs(
        "plan", (plan.tp, plan.pp, plan.dp), training.microbatch, devices=devices, global_batch=global_batch,
        microbatch_key="plan.microbatch", cp=training.cp,
    )  # fmt: skip
    stage = plan.tp * plan.dp * training.cp
    if stage % training.ep:
        raise PhazecError(
            f"plan.ep={training.ep} does not divide the {stage} devices of a pipeline stage "
            f"(plan.tp * plan.dp * plan.cp = {plan.tp} * {plan.dp} * {training.cp}): the expert-parallel "
            "groups tile each stage's devices; choose an ep that divides them, or a dp that ep divides."
        )
    if training.interleave > 1 and plan.pp == 1:
        raise PhazecError(
            f"plan.interleave={training.interleave} needs plan.pp > 1: it splits each pipeline stage into "
            "model chunks, and at pp 1 there is no pipeline (Megatron-LM refuses it too); set "
            "plan.interleave=1 or plan.pp > 1."
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


def as_megatron_runs(plan: Plan) -> Plan:
    """The plan with sequence parallelism off at tp 1, where it splits nothing and Megatron-LM turns it
    off (with a warning)."""
    if not (plan.training.sequence_parallel and plan.tp == 1):
        return plan
    log.warning("plan.sequence_parallel=true splits nothing at plan.tp=1; timed without it.")
    return replace(plan, training=replace(plan.training, sequence_parallel=False))


def predict_plan(settings: Settings) -> PlanReport:
    """Time the plan of `plan.*` on the one design of `hw` (`timed_plan`'s report)."""
    return timed_plan(settings)[0]


def timed_plan(settings: Settings) -> tuple[PlanReport, Job, Candidate]:
    """Time the plan of `plan.*` on the one design of `hw`, with the band its chip's held-out
    validation residuals put around the time (`phazec.hw.validation`); returns the report, the job
    that timed it and the plan as a search's candidate.

    Raises:
        PhazecError: a plan the system cannot run, a design space of more than one design, or (with
            `plan.require_fit`) a plan that does not fit in HBM.
    """
    plan = as_megatron_runs(settings.plan)
    check_plan(plan, settings.system.devices, settings.system.global_batch)
    check_one_design(settings.hw)
    knobs = Knobs.single(plan.training, round(max(settings.system.hbm_bytes)))
    job = setup(settings, knobs, widths=[plan.tp])
    stages = plan_stages(job.evaluator.graphs[plan.tp], plan)
    widths = (plan.tp, plan.dp, job.evaluator.knobs.hbm_bytes[0])
    with stage("timing") as timing:  # the layers' schedules (the first time, the most of a plan's time)
        figures = explain(job.evaluator, job.designs, plan.training, widths, stages)
        report = plan_report(plan, job.evaluator, job.designs, stages, figures)
        counts = job.evaluator.timings
        timing.note = f"{counts.ilp_solves} layer schedules solved, {counts.ilp_cache_hits} from the cache"
    report = replace(report, band=band(report.time_per_batch_s, validation(settings.config["hw"])))
    if report.warning is not None:
        if plan.require_fit:
            raise PhazecError(report.warning + " (plan.require_fit=true makes this an error.)")
        log.warning("%s", report.warning)
    return report, job, Candidate(0, plan.training, figures.placement)


PLAN_JSON = "plan.json"


def plan(settings: Settings, out_dir: Path) -> tuple[dict[str, Any], PlanReport]:
    """Time the plan of `plan.*` and write `out_dir/plan.json` (and with `plan.trace`, `trace.json`);
    returns its content and the report."""
    report, job, candidate = timed_plan(settings)
    timed = {"sequence_parallel": report.plan.training.sequence_parallel}  # as `as_megatron_runs` ran it
    content = {**report.plain(), "config": {**settings.config, "plan": {**settings.config["plan"], **timed}}}
    atomic.write_json(out_dir / PLAN_JSON, content)
    if report.plan.trace:
        title = f"{report.model}: {plan_summary(report)}"
        write_plan_trace(job.evaluator, job.designs, candidate, out_dir, title=title, band=content["band"])
    return content, report
