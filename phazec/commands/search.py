"""`phazec`: one model's co-search. Lower the model, derive its training graphs, search the hardware
space with the configured strategy (`phazec.search.driver`), compare.

A search over the template's spaces reports the TPUv4 design with optimal placement and with the
model's fixed Megatron-style plan, and the found design with that fixed plan. A search of one GPU
design (`hw=a100`, `hw=h100`, ...) reports instead the chip's own Megatron-style default plan and the
model's fixed plan on it: the TPUv4 says nothing about the best plan for a given GPU cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from phazec.commands.settings import Settings
from phazec.commands.setup import Job, setup
from phazec.errors import PhazecError
from phazec.frontend.schema import ModelConfig
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel, is_template
from phazec.hw.space import HwSpace, design_count, enumerate_designs, size_statement
from phazec.hw.validation import validation
from phazec.predict.bottleneck import bottleneck_block
from phazec.predict.evaluator import Candidate, Timings, best, least_memory
from phazec.predict.usage import USAGE_KEYS, Usage
from phazec.report.gantt import write_bottleneck_gantt
from phazec.report.records import explored_csv, outcome, search_record, speedup, with_bands
from phazec.report.trace import write_plan_trace
from phazec.search.driver import search
from phazec.search.loop import Found
from phazec.search.state import SearchState, onnx_digest, state_key
from phazec.solvers.placement.problem import NoFeasiblePlacement
from phazec.util import atomic
from phazec.util.atomic import writable_dir
from phazec.util.progress import stage

log = logging.getLogger(__name__)


def no_plan_error(candidates: list[Candidate], hbm_bytes: tuple[int, ...]) -> PhazecError:
    """The error when no design and no knob setting fits: how much memory the best plan would need."""
    least = least_memory(candidates)
    detail = ""
    if least is not None:
        need = least.result
        assert isinstance(need, NoFeasiblePlacement)
        detail = (
            f" The plan needing the least memory needs {need.min_memory_bytes / 1e9:.1f} GB per device "
            f"(t={need.t}, recompute={least.training.recompute}), dominated by {need.dominant}."
        )
    return PhazecError(
        f"no training plan fits in HBM of [{', '.join(f'{h / 1e9:g}' for h in hbm_bytes)}] GB on any "
        f"design.{detail} "
        "Add a larger size to system.hbm_gb, allow recompute (train.recompute=[false,true]) or more "
        "tensor-parallel widths (model.tp_widths)."
    )


def tpuv4_baseline(tpuv4_space: HwSpace, searched: DeviceModel) -> Designs:
    """The TPUv4-like design as the baselines price it: with the searched space's device model when
    that is of the template's kind (`is_template`), so that a change to the template's model, in a
    preset or on the command line (`hw.device.hbm_shared=true`), prices both sides alike; with its
    preset's own otherwise (a GPU's tiles and shared cores are not a TPU's)."""
    tpuv4 = enumerate_designs(tpuv4_space)
    return replace(tpuv4, device=searched) if is_template(searched) else tpuv4


def search_state(settings: Settings, part: str = "") -> SearchState:
    """The on-disk state of the search with these settings (`part`: a named sub-state of it)."""
    key = state_key(settings.config, onnx_digest(settings.model))
    directory = settings.cache_dir / "search" / key
    return SearchState(directory / part if part else directory, settings.search.resume)


def own_chip(job: Job) -> bool:
    """Whether the search prices one GPU design (a GPU preset, not the template's kind of chip, with
    one design): its result compares with the chip's own plans, not with the TPUv4 design."""
    return not is_template(job.designs.device) and len(job.designs) == 1


def baselines(job: Job, found_best: Candidate, tpuv4_space: HwSpace) -> dict[str, dict[str, Any]]:
    """The TPUv4 design with optimal placement and with the model's fixed Megatron-style plan, and the
    found design with that fixed plan. On one GPU design (`own_chip`), the chip's own Megatron-style
    default plan (`default_outcome`) and the fixed plan on it; the TPUv4 entries are then not applicable
    and not solved. A fixed plan that cannot run on the system is reported as not applicable, with the
    reason, and never fails the finished search. The TPUv4 is priced as `tpuv4_baseline` says."""
    evaluator = job.evaluator
    tpuv4 = tpuv4_baseline(tpuv4_space, job.designs.device)
    chosen = job.designs.take(np.array([found_best.design]))
    missing = sorted(set(evaluator.knobs.tried("precision")) - set(tpuv4.device.precisions()))
    reason = None
    if own_chip(job):
        reason = "a search of one GPU design compares with the chip's own Megatron-style default plan"
    elif missing:
        reason = (
            f"the TPUv4-like design has no tensor cores for precision {', '.join(missing)} "
            "(hw.device.fp8_rate of the tpuv4 preset is 0)"
        )
    if reason is not None:
        tpu = {**outcome(tpuv4, None), "not_applicable": reason}
        own = {"megatron_default_plan": default_outcome(job, chosen)} if own_chip(job) else {}
        return {
            "tpuv4_optimal_placement": tpu,
            "tpuv4_megatron_plan": tpu,
            "found_design_megatron_plan": fixed_outcome(job, chosen),
            **own,
        }
    tpu_optimal = best(evaluator.evaluate(tpuv4))
    return {
        "tpuv4_optimal_placement": outcome(tpuv4, tpu_optimal, Usage(evaluator, tpuv4)),
        "tpuv4_megatron_plan": fixed_outcome(job, tpuv4),
        "found_design_megatron_plan": fixed_outcome(job, chosen),
    }


def default_widths(job: Job) -> tuple[int, list[int]]:
    """The chip's Megatron-style default widths: tensor parallelism over the largest of the model's
    widths that fits in a node (the first network tier's group, as Megatron-LM's and NeMo's recipes
    keep it) and divides the devices, and the pipeline depths to try, fewest first (the divisors of
    the devices left)."""
    devices = job.settings.system.devices
    node = job.evaluator.system.tiers[0].group_size
    widths = sorted(job.evaluator.graphs)
    fitting = [w for w in widths if w <= node and devices % w == 0]
    tp = max(fitting) if fitting else widths[0]
    rest = devices // tp
    return tp, [pp for pp in range(1, rest + 1) if rest % pp == 0]


def default_outcome(job: Job, designs: Designs) -> dict[str, Any]:
    """The chip's own Megatron-style default plan on `designs` (`default_widths`): the fewest pipeline
    stages at which the plan, its layers split evenly, fits in HBM under some knob setting, the rest of
    the devices data-parallel; its best knob setting. Not applicable, with the reason, when no depth
    fits."""
    tp, depths = default_widths(job)
    devices = job.settings.system.devices
    reasons = []
    for pp in depths:
        try:
            fixed = best(job.evaluator.evaluate_fixed(designs, pp, devices // (tp * pp), tp))
        except PhazecError as err:
            reasons.append(str(err))
            continue
        if fixed is not None:
            return outcome(designs, fixed, Usage(job.evaluator, designs))
    why = f" ({reasons[-1]})" if reasons else ""
    return {
        **outcome(designs, None),
        "not_applicable": f"no pipeline depth of the default plan at tp={tp} fits in HBM{why}",
    }


def fixed_outcome(job: Job, designs: Designs) -> dict[str, Any]:
    """The model's fixed Megatron-style plan on the designs (its best), or "not applicable" with the
    reason when the plan cannot run on the system."""
    baseline = job.settings.model.baseline
    try:
        fixed = best(job.evaluator.evaluate_fixed(designs, baseline.pp, baseline.dp, baseline.tp))
    except PhazecError as err:
        return {**outcome(designs, None), "not_applicable": str(err)}
    return outcome(designs, fixed, Usage(job.evaluator, designs))


def search_summary(found: Found, timings: Timings) -> str:
    """How much a search evaluated and where its processes spent their time, in one phrase."""
    summary = (
        f"{len(found.evaluated)} of {len(found.designs)} designs evaluated; costing {timings.cost_s:.1f} s, "
        f"schedules {timings.ilp_s:.1f} s, placement {timings.dp_s:.1f} s (summed over processes)"
    )
    if not timings.unproven:
        return summary
    gap = max(1.0 - bound_s / makespan_s for makespan_s, bound_s in timings.unproven.values())
    return (
        f"{summary}; {len(timings.unproven)} schedules left unproven (node limit, or an ILP schedule "
        f"repaired to the HBM bandwidth), each within {gap:.1%} of its optimum (search.schedules_unproven "
        "in result.json)"
    )


def search_size(settings: Settings) -> str:
    """What a search will evaluate at most, stated before any work (computed, not enumerated)."""
    sizes = len(settings.train.hbm_bytes)
    return (
        f"{size_statement(settings.hw)} before the area and power budgets, each tried with {sizes} HBM "
        f"sizes (system.hbm_gb): at most {design_count(settings.hw) * sizes:,} design and memory pairs to "
        "evaluate"
    )


def check_microbatches(settings: Settings) -> None:
    """Every searched microbatch size divides the global batch."""
    global_batch = settings.system.global_batch
    bad = [m for m in settings.train.tried("microbatch") if global_batch % m]
    if bad:
        divisors = [d for d in (1, 2, 4, 8, 16, 32) if global_batch % d == 0]
        raise PhazecError(
            f"train.microbatch values {bad} do not divide the global batch {global_batch} "
            f"(system.global_batch); use divisors such as {divisors}."
        )


def baseline_plan(model: ModelConfig, devices: int) -> None:
    """Warn, before searching, when the model's fixed baseline plan cannot run on the system."""
    plan = model.baseline
    widths = list(model.tp_widths)
    reasons = []
    if plan.tp not in widths:
        reasons.append(f"tp={plan.tp} is not one of model.tp_widths {widths}")
    if min(plan.pp, plan.dp, plan.tp) < 1:
        reasons.append("pp, dp and tp must be at least 1")
    elif plan.pp * plan.dp * plan.tp > devices:
        reasons.append(
            f"pp*dp*tp = {plan.pp * plan.dp * plan.tp} devices, more than system.devices={devices}"
        )
    if reasons:
        log.warning(
            "the baseline plan model.baseline=%s cannot run: %s; it will be reported as not applicable",
            dataclasses.asdict(plan),
            "; ".join(reasons),
        )


def run_job(settings: Settings, out_dir: Path, tpuv4: HwSpace) -> tuple[Job, Found, dict[str, Any]]:
    """One model's whole co-search: writes result.json, explored.csv and the bottleneck Gantt to
    `out_dir`; returns the job, what the search found and the result. `tpuv4` is the TPUv4-like
    design the baselines use (`phazec.config.settings.tpuv4_space`)."""
    start = time.perf_counter()
    writable_dir(out_dir, "the run directory")
    check_microbatches(settings)
    baseline_plan(settings.model, settings.system.devices)
    log.info("%s", search_size(settings))
    job = setup(settings)
    state = search_state(settings)
    with stage("search") as searched:
        found = search(job.evaluator, job.designs, settings.search, state, str(settings.config["cache_dir"]))
        searched.note = search_summary(found, job.evaluator.timings)
    if found.best is None:
        raise no_plan_error(found.candidates, job.evaluator.knobs.hbm_bytes)
    usage = Usage(job.evaluator, job.designs)
    main = outcome(job.designs, found.best, usage)
    with stage("baselines"):
        compared = baselines(job, found.best, tpuv4)
    with_bands(main, compared, validation(settings.config["hw"]))
    result = {
        "model": settings.model.name,
        "design": main["design"],
        "plan": main["plan"],
        "time_per_batch_s": main["time_per_batch_s"],
        "throughput_samples_per_s": main["throughput_samples_per_s"],
        "band": main["band"],
        "objective": settings.search.objective,
        **{key: main[key] for key in USAGE_KEYS},
        "baselines": compared,
        "speedup_vs_tpuv4": speedup(
            main["throughput_samples_per_s"], compared["tpuv4_optimal_placement"]["throughput_samples_per_s"]
        ),
        "speedup_vs_megatron_default": speedup(
            main["throughput_samples_per_s"],
            compared.get("megatron_default_plan", {}).get("throughput_samples_per_s", 0.0),
        ),
        "search": search_record(
            settings.search.strategy,
            len(job.designs),
            len(found.evaluated),
            job.evaluator.timings,
            time.perf_counter() - start,
            pruned_by=found.pruned_by,
        ),
        "config": settings.config,
    }
    with stage("bottleneck schedule"):
        write_bottleneck_gantt(bottleneck_block(job.evaluator, job.designs, found.best), out_dir)
    atomic.write_json(out_dir / "result.json", result)
    with atomic.after(out_dir / "result.json"):
        atomic.write_bytes(out_dir / "explored.csv", explored_csv(found, usage).encode())
        with stage("trace"):
            p = main["plan"]
            widths = f"tp {p['tp']} x pp {p['pp']} x dp {p['dp']}"
            title = f"{settings.model.name}: the found plan, {widths}, microbatch {p['microbatch']}"
            write_plan_trace(job.evaluator, job.designs, found.best, out_dir, title=title, band=main["band"])
    return job, found, result


def run_search(settings: Settings, out_dir: Path, tpuv4: HwSpace) -> dict[str, Any]:
    """The whole co-search for one model, compared with the TPUv4-like design `tpuv4`; writes
    result.json and explored.csv to `out_dir`."""
    return run_job(settings, out_dir, tpuv4)[2]
