"""The co-search: lower the model, derive its training graphs, search the hardware space, compare.

The strategies (`phaze`, `exhaustive`, `bounded`) live in `phazec.search.explore`. Every result
reports the TPUv4 design with optimal placement and with the model's fixed Megatron-style plan, and
the found design with that fixed plan.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from phazec import atomic
from phazec.config import validate_search, validate_train
from phazec.cost.model import latency_model_from_config
from phazec.errors import PhazecError
from phazec.frontend import default_cache_dir, load_model
from phazec.frontend.schema import ModelConfig
from phazec.hw.designs import Designs
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import Model
from phazec.passes.training import training_pipeline
from phazec.report.bottleneck import write_bottleneck_gantt
from phazec.search.evaluate import Candidate, Evaluator, Knobs, best, least_memory
from phazec.search.explore import Found, search
from phazec.search.state import SearchState, state_key
from phazec.solvers.placement import NoFeasiblePlacement, Placement
from phazec.solvers.schedule import ScheduleCache
from phazec.solvers.schema import SolverConfig

log = logging.getLogger(__name__)

TPUV4_PRESET = "tpuv4"
"""The `conf/hw/` preset holding the TPUv4-like design every result compares against."""


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
    return Knobs(
        microbatches=tuple(int(m) for m in cfg.train.microbatch),
        recompute=tuple(bool(r) for r in cfg.train.recompute),
        hbm_bytes=tuple(round(g * 1e9) for g in hbm),
        optimizer=str(cfg.train.optimizer),
    )


def training_graphs(
    model: Model, widths: list[int], optimizer: str, vocab_parallel: bool
) -> dict[int, Model]:
    """The per-device training graph of the model at each allowed tensor-parallel width."""
    return {
        t: training_pipeline(t, optimizer=optimizer, vocab_parallel=vocab_parallel).run(model)[0]
        for t in sorted(set(widths))
    }


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
        "tp": placement.t,
        "pp": placement.stage_count,
        "dp": placement.d,
        "stages": [{"layers": list(s.layers), "devices": s.devices} for s in placement.stages],
    }


def outcome(designs: Designs, candidate: Candidate | None) -> dict[str, Any]:
    """Design, plan and throughput of a candidate (None: nothing fits)."""
    if candidate is None:
        return {"design": None, "plan": None, "throughput_samples_per_s": 0.0, "time_per_batch_s": None}
    placement = candidate.result
    assert isinstance(placement, Placement)
    return {
        "design": design_record(designs, candidate.design, placement.hbm_bytes),
        "plan": plan_record(candidate),
        "throughput_samples_per_s": placement.throughput_samples_per_s,
        "time_per_batch_s": placement.time_per_batch_s,
    }


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
        f"no training plan fits in HBM of {[round(h / 1e9, 1) for h in hbm_bytes]} GB on any design.{detail} "
        "Add a larger size to system.hbm_gb, allow recompute (train.recompute=[false,true]) or more "
        "tensor-parallel widths (model.tp_widths)."
    )


def explored_csv(found: Found) -> str:
    """One row per evaluated (design, microbatch, t, recompute, HBM)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([
        "design", "num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes", "area_mm2",
        "microbatch", "tp", "recompute", "hbm_bytes", "feasible", "pp", "dp", "time_per_batch_s",
        "throughput_samples_per_s", "min_memory_bytes",
    ])  # fmt: skip
    d = found.designs
    for c in found.candidates:
        r = c.result
        knobs = [int(d.num_tc[c.design]), int(d.tc_width[c.design]), int(d.tc_depth[c.design]),
                 int(d.num_vc[c.design]), int(d.vc_width[c.design]), int(d.glb_bytes[c.design])]  # fmt: skip
        row = [c.design, *knobs, f"{d.area_mm2[c.design]:.6f}", c.microbatch, r.t, r.recompute, r.hbm_bytes]
        if isinstance(r, Placement):
            row += [True, r.stage_count, r.d, repr(r.time_per_batch_s), repr(r.throughput_samples_per_s), ""]
        else:
            row += [False, "", "", "", "", r.min_memory_bytes]
        writer.writerow(row)
    return out.getvalue()


def tpuv4_designs(conf_dir: Path) -> Designs:
    """The TPUv4-like design, read from its preset."""
    return enumerate_designs(hw_space_from_config(OmegaConf.load(conf_dir / "hw" / f"{TPUV4_PRESET}.yaml")))


def run_search(cfg: DictConfig, out_dir: Path, conf_dir: Path) -> dict[str, Any]:
    """The whole co-search for one model; writes result.json and explored.csv to `out_dir`."""
    start = time.perf_counter()
    validate_search(cfg.search)
    system = system_from_config(cfg.system)
    knobs = check_knobs(cfg, system.global_batch)
    model_cfg = OmegaConf.to_object(cfg.model)
    assert isinstance(model_cfg, ModelConfig)
    designs = enumerate_designs(hw_space_from_config(cfg.hw))
    model = load_model(model_cfg, default_cache_dir(cfg.cache_dir))
    solver = OmegaConf.to_object(cfg.solver)
    assert isinstance(solver, SolverConfig)
    evaluator = Evaluator(
        graphs=training_graphs(
            model, list(model_cfg.tp_widths), knobs.optimizer, cfg.parallel.vocab_parallel
        ),
        system=system,
        latency_model=latency_model_from_config(cfg.cost),
        solver=solver,
        knobs=knobs,
        cache=ScheduleCache(default_cache_dir(cfg.cache_dir) / "schedules"),
    )
    state = SearchState(default_cache_dir(cfg.cache_dir) / "search" / state_key(cfg), cfg.search.resume)
    found = search(evaluator, designs, cfg.search, state)
    if found.best is None:
        raise no_plan_error(found.candidates, knobs.hbm_bytes)
    tpuv4 = tpuv4_designs(conf_dir)
    baseline = model_cfg.baseline
    tpu_optimal = best(evaluator.evaluate(tpuv4))
    tpu_fixed = best(evaluator.evaluate_fixed(tpuv4, baseline.pp, baseline.dp, baseline.tp))
    chosen = designs.take(np.array([found.best.design]))
    found_fixed = best(evaluator.evaluate_fixed(chosen, baseline.pp, baseline.dp, baseline.tp))
    if found_fixed is not None:
        found_fixed = Candidate(found.best.design, found_fixed.microbatch, found_fixed.result)
    main = outcome(designs, found.best)
    baselines = {
        "tpuv4_optimal_placement": outcome(tpuv4, tpu_optimal),
        "tpuv4_megatron_plan": outcome(tpuv4, tpu_fixed),
        "found_design_megatron_plan": outcome(designs, found_fixed),
    }
    tpu_throughput = baselines["tpuv4_optimal_placement"]["throughput_samples_per_s"]
    result = {
        "model": model_cfg.name,
        "design": main["design"],
        "plan": main["plan"],
        "time_per_batch_s": main["time_per_batch_s"],
        "throughput_samples_per_s": main["throughput_samples_per_s"],
        "baselines": baselines,
        "speedup_vs_tpuv4": main["throughput_samples_per_s"] / tpu_throughput if tpu_throughput else None,
        "search": {
            "strategy": cfg.search.strategy,
            "designs_total": len(designs),
            "designs_evaluated": len(found.evaluated),
            "designs_pruned": found.pruned,
            "wall_s": time.perf_counter() - start,
            "cost_s": evaluator.timings.cost_s,
            "ilp_s": evaluator.timings.ilp_s,
            "dp_s": evaluator.timings.dp_s,
            "ilp_cache_hits": evaluator.timings.ilp_cache_hits,
        },
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_bottleneck_gantt(evaluator, designs, found.best, out_dir)
    atomic.write_json(out_dir / "result.json", result)
    atomic.write_bytes(out_dir / "explored.csv", explored_csv(found).encode())
    return result
