"""The co-search: lower the model, derive its training graphs, search the hardware space, compare.

The strategies (`phaze`, `exhaustive`, `bounded`) live in `phazec.search.loop`. Every result
reports the TPUv4 design with optimal placement and with the model's fixed Megatron-style plan, and
the found design with that fixed plan.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from phazec.commands.setup import Job, setup
from phazec.config import command_line as validate
from phazec.errors import PhazecError
from phazec.frontend import default_cache_dir
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel, is_template
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.predict.bottleneck import bottleneck_block
from phazec.predict.evaluator import Candidate, Timings, best, least_memory
from phazec.predict.usage import USAGE_COLUMNS, USAGE_KEYS, Usage, usage_cells
from phazec.report.gantt import write_bottleneck_gantt
from phazec.search.driver import search
from phazec.search.loop import Found
from phazec.search.state import SearchState, state_key
from phazec.solvers.placement.model import NoFeasiblePlacement, Placement
from phazec.util import atomic
from phazec.util.progress import stage

log = logging.getLogger(__name__)

TPUV4_PRESET = "tpuv4"
"""The `conf/hw/` preset holding the TPUv4-like design every result compares against."""


def design_record(designs: Designs, i: int, hbm_bytes: int) -> dict[str, Any]:
    """The `design` entry of result.json."""
    return {
        "num_tc": int(designs.num_tc[i]),
        "tc_width": int(designs.tc_width[i]),
        "tc_depth": int(designs.tc_depth[i]),
        "num_vc": int(designs.num_vc[i]),
        "vc_width": int(designs.vc_width[i]),
        "glb_bytes": int(designs.glb_bytes[i]),
        "hbm_bytes": hbm_bytes,
        "area_mm2": float(designs.area_mm2[i]),
    }


def plan_record(candidate: Candidate) -> dict[str, Any]:
    """The `plan` entry of result.json."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    return {
        "microbatch": candidate.microbatch,
        "recompute": placement.recompute,
        "sequence_parallel": placement.sequence_parallel,
        "interleave": placement.interleave,
        "distributed_optimizer": placement.distributed_optimizer,
        "tp": placement.t,
        "pp": placement.stage_count,
        "dp": placement.d,
        "stages": [{"layers": list(s.layers), "devices": s.devices} for s in placement.stages],
    }


def outcome(designs: Designs, candidate: Candidate | None, usage: Usage | None = None) -> dict[str, Any]:
    """Design, plan and throughput of a candidate (None: nothing fits); with `usage` (on the same
    designs), also its peak power, throughput per watt, core utilisation and energy."""
    if candidate is None:
        return {"design": None, "plan": None, "throughput_samples_per_s": 0.0, "time_per_batch_s": None}
    placement = candidate.result
    assert isinstance(placement, Placement)
    out = {
        "design": design_record(designs, candidate.design, placement.hbm_bytes),
        "plan": plan_record(candidate),
        "throughput_samples_per_s": placement.throughput_samples_per_s,
        "time_per_batch_s": placement.time_per_batch_s,
    }
    if usage is not None:
        power_w = float(designs.peak_power_w[candidate.design])
        out |= {
            "peak_power_w": power_w,
            "throughput_per_watt": placement.throughput_samples_per_s / power_w,
            **usage(candidate),
        }
    return out


def no_plan_error(candidates: list[Candidate], hbm_bytes: tuple[int, ...]) -> PhazecError:
    """The error when no design and no knob setting fits: how much memory the best plan would need."""
    need = least_memory(candidates)
    detail = ""
    if isinstance(need, NoFeasiblePlacement):
        detail = (
            f" The plan needing the least memory needs {need.min_memory_bytes / 1e9:.1f} GB per device "
            f"(t={need.t}, recompute={need.recompute}), dominated by {need.dominant}."
        )
    return PhazecError(
        f"no training plan fits in HBM of [{', '.join(f'{h / 1e9:g}' for h in hbm_bytes)}] GB on any "
        f"design.{detail} "
        "Add a larger size to system.hbm_gb, allow recompute (train.recompute=[false,true]) or more "
        "tensor-parallel widths (model.tp_widths)."
    )


def explored_csv(found: Found, usage: Usage) -> str:
    """One row per evaluated (design, microbatch, t, recompute, sequence parallelism, interleave,
    distributed optimizer, HBM), with a plan's power, utilisation and energy (`phazec.predict.usage`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([
        "design", "num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes", "area_mm2",
        "microbatch", "tp", "recompute", "sequence_parallel", "interleave", "distributed_optimizer",
        "hbm_bytes", "feasible", "pp", "dp", "time_per_batch_s", "throughput_samples_per_s",
        "min_memory_bytes", *USAGE_COLUMNS,
    ])  # fmt: skip
    d = found.designs
    for c in found.candidates:
        r = c.result
        knobs = [int(d.num_tc[c.design]), int(d.tc_width[c.design]), int(d.tc_depth[c.design]),
                 int(d.num_vc[c.design]), int(d.vc_width[c.design]), int(d.glb_bytes[c.design])]  # fmt: skip
        row: list[object] = [c.design, *knobs, f"{d.area_mm2[c.design]:.6f}", c.microbatch, r.t, r.recompute]
        row += [r.sequence_parallel, r.interleave, r.distributed_optimizer, r.hbm_bytes]
        if isinstance(r, Placement):
            row += [True, r.stage_count, r.d, repr(r.time_per_batch_s), repr(r.throughput_samples_per_s), ""]
            row += usage_cells(outcome(d, c, usage))
        else:
            row += [False, "", "", "", "", r.min_memory_bytes] + [""] * len(USAGE_COLUMNS)
        writer.writerow(row)
    return out.getvalue()


def tpuv4_designs(conf_dir: Path) -> Designs:
    """The TPUv4-like design, read from its preset."""
    return enumerate_designs(hw_space_from_config(OmegaConf.load(conf_dir / "hw" / f"{TPUV4_PRESET}.yaml")))


def tpuv4_baseline(conf_dir: Path, searched: DeviceModel) -> Designs:
    """The TPUv4-like design as the baselines price it: with the searched space's device model when
    that is of the template's kind (`is_template`), so that a change to the template's model, in a
    preset or on the command line (`hw.device.hbm_shared=true`), prices both sides alike; with its
    preset's own otherwise (a GPU's tiles and shared cores are not a TPU's)."""
    tpuv4 = tpuv4_designs(conf_dir)
    return replace(tpuv4, device=searched) if is_template(searched) else tpuv4


def search_state(cfg: DictConfig, part: str = "") -> SearchState:
    """The on-disk state of the search with this config (`part`: a named sub-state of it)."""
    directory = default_cache_dir(cfg.cache_dir) / "search" / state_key(cfg)
    return SearchState(directory / part if part else directory, cfg.search.resume)


def baselines(job: Job, found_best: Candidate, conf_dir: Path) -> dict[str, dict[str, Any]]:
    """The TPUv4 design with optimal placement and with the model's fixed Megatron-style plan, and the
    found design with that fixed plan. A fixed plan that cannot run on the system is reported as not
    applicable, with the reason, and never fails the finished search. The TPUv4 is priced as
    `tpuv4_baseline` says."""
    evaluator = job.evaluator
    tpuv4 = tpuv4_baseline(conf_dir, job.designs.device)
    tpu_optimal = best(evaluator.evaluate(tpuv4))
    chosen = job.designs.take(np.array([found_best.design]))
    return {
        "tpuv4_optimal_placement": outcome(tpuv4, tpu_optimal, Usage(evaluator, tpuv4)),
        "tpuv4_megatron_plan": fixed_outcome(job, tpuv4),
        "found_design_megatron_plan": fixed_outcome(job, chosen),
    }


def fixed_outcome(job: Job, designs: Designs) -> dict[str, Any]:
    """The model's fixed Megatron-style plan on the designs (its best), or "not applicable" with the
    reason when the plan cannot run on the system."""
    baseline = job.model_cfg.baseline
    try:
        fixed = best(job.evaluator.evaluate_fixed(designs, baseline.pp, baseline.dp, baseline.tp))
    except PhazecError as err:
        return {**outcome(designs, None), "not_applicable": str(err)}
    return outcome(designs, fixed, Usage(job.evaluator, designs))


def speedup(throughput: float, reference: float) -> float | None:
    """`throughput` over a reference throughput (None when the reference has no plan)."""
    return throughput / reference if reference else None


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


def search_record(
    cfg: DictConfig,
    designs_total: int,
    designs_evaluated: int,
    timings: Timings,
    wall_s: float,
    *,
    pruned_by: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The `search` entry of result.json (`pruned_by`: the designs not evaluated, by reason)."""
    return {
        "strategy": cfg.search.strategy,
        "designs_total": designs_total,
        "designs_evaluated": designs_evaluated,
        "designs_pruned": designs_total - designs_evaluated,
        "designs_pruned_by": pruned_by or {},
        "wall_s": wall_s,
        "cost_s": timings.cost_s,
        "ilp_s": timings.ilp_s,
        "dp_s": timings.dp_s,
        "ilp_cache_hits": timings.ilp_cache_hits,
        "schedules_unproven": timings.unproven_json(),
    }


def run_job(cfg: DictConfig, out_dir: Path, conf_dir: Path) -> tuple[Job, Found, dict[str, Any]]:
    """One model's whole co-search: writes result.json, explored.csv and the bottleneck Gantt to
    `out_dir`; returns the job, what the search found and the result."""
    start = time.perf_counter()
    validate.writable_dir(out_dir, "the run directory")
    validate.baseline_plan(cfg.model, int(cfg.system.devices))
    job = setup(cfg)
    searched = time.perf_counter()
    found = search(job.evaluator, job.designs, cfg.search, search_state(cfg), cfg.cache_dir)
    log.info(
        "search: %.1f s, %s", time.perf_counter() - searched, search_summary(found, job.evaluator.timings)
    )
    if found.best is None:
        raise no_plan_error(found.candidates, job.evaluator.knobs.hbm_bytes)
    usage = Usage(job.evaluator, job.designs)
    main = outcome(job.designs, found.best, usage)
    with stage("baselines"):
        compared = baselines(job, found.best, conf_dir)
    result = {
        "model": job.model_cfg.name,
        "design": main["design"],
        "plan": main["plan"],
        "time_per_batch_s": main["time_per_batch_s"],
        "throughput_samples_per_s": main["throughput_samples_per_s"],
        "objective": cfg.search.objective,
        **{key: main[key] for key in USAGE_KEYS},
        "baselines": compared,
        "speedup_vs_tpuv4": speedup(
            main["throughput_samples_per_s"], compared["tpuv4_optimal_placement"]["throughput_samples_per_s"]
        ),
        "search": search_record(
            cfg,
            len(job.designs),
            len(found.evaluated),
            job.evaluator.timings,
            time.perf_counter() - start,
            pruned_by=found.pruned_by,
        ),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    with stage("bottleneck schedule"):
        write_bottleneck_gantt(bottleneck_block(job.evaluator, job.designs, found.best), out_dir)
    atomic.write_json(out_dir / "result.json", result)
    atomic.write_bytes(out_dir / "explored.csv", explored_csv(found, usage).encode())
    return job, found, result


def run_search(cfg: DictConfig, out_dir: Path, conf_dir: Path) -> dict[str, Any]:
    """The whole co-search for one model; writes result.json and explored.csv to `out_dir`."""
    return run_job(cfg, out_dir, conf_dir)[2]
