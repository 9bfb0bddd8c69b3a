"""The records of a search's answer: result.json's `design`, `plan`, outcomes and `search` entries, and
explored.csv."""

from __future__ import annotations

import csv
import io
from typing import Any

from phazec.hw.designs import KNOBS, Designs
from phazec.hw.validation import NO_VALIDATION, Band, Validation, band, band_record, overlap
from phazec.predict.evaluator import Candidate, Timings
from phazec.predict.training import RECORDED, SEARCHED
from phazec.predict.usage import USAGE_COLUMNS, Usage, usage_cells
from phazec.search.loop import Found
from phazec.solvers.placement.problem import Placement


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
    """The `plan` entry of result.json: the settings of the knobs plan.json names (`RECORDED`: the
    searched ones, the optimizer, the expert-parallel width), the widths and the stages."""
    placement = candidate.result
    assert isinstance(placement, Placement)
    return {
        **{name: getattr(candidate.training, name) for name in RECORDED},
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


def with_bands(found: dict[str, Any], others: dict[str, dict[str, Any]], chip: Validation | str) -> None:
    """Put each entry's band in it (`band`, `phazec.hw.validation.band_record`) and mark the `others`
    whose band overlaps the `found` one's (`within_model_error`: the model cannot tell them apart;
    None when either has no band). An entry on the found design takes its chip's held-out residuals
    (`chip`, `phazec.hw.validation.validation` of the searched hw); one on another design (the
    TPUv4-like baseline) has no validation data."""
    found["band"] = band_record(_entry_band(found, found, chip))
    for entry in others.values():
        entry["band"] = band_record(_entry_band(entry, found, chip))
        entry["within_model_error"] = overlap(entry["band"], found["band"])


def _entry_band(entry: dict[str, Any], found: dict[str, Any], chip: Validation | str) -> Band | str:
    """An outcome's band: its chip's if it is on the found design, else none; none without a plan."""
    design = entry["design"]
    if entry["time_per_batch_s"] is None or design is None:
        return NO_VALIDATION
    same = all(design[knob] == found["design"][knob] for knob in KNOBS)
    return band(entry["time_per_batch_s"], chip) if same else NO_VALIDATION


def explored_csv(found: Found, usage: Usage) -> str:
    """One row per evaluated (design, microbatch, t, every other searched knob, HBM), with a plan's
    power, utilisation and energy (`phazec.predict.usage`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    first, *others = SEARCHED  # the microbatch, then the width, then the other searched knobs
    writer.writerow([
        "design", *KNOBS, "area_mm2", first, "tp", *others, "hbm_bytes", "feasible", "pp", "dp",
        "time_per_batch_s", "throughput_samples_per_s", "min_memory_bytes", *USAGE_COLUMNS,
    ])  # fmt: skip
    d = found.designs
    for c in found.candidates:
        r = c.result
        knobs = [int(getattr(d, knob)[c.design]) for knob in KNOBS]
        row: list[object] = [c.design, *knobs, f"{d.area_mm2[c.design]:.6f}", getattr(c.training, first), r.t]
        row += [*(getattr(c.training, name) for name in others), r.hbm_bytes]
        if isinstance(r, Placement):
            row += [True, r.stage_count, r.d, repr(r.time_per_batch_s), repr(r.throughput_samples_per_s), ""]
            row += usage_cells(outcome(d, c, usage))
        else:
            row += [False, "", "", "", "", r.min_memory_bytes] + [""] * len(USAGE_COLUMNS)
        writer.writerow(row)
    return out.getvalue()


def speedup(throughput: float, reference: float) -> float | None:
    """`throughput` over a reference throughput (None when the reference has no plan)."""
    return throughput / reference if reference else None


def search_record(
    strategy: str,
    designs_total: int,
    designs_evaluated: int,
    timings: Timings,
    wall_s: float,
    *,
    pruned_by: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The `search` entry of result.json (`pruned_by`: the designs not evaluated, by reason)."""
    return {
        "strategy": strategy,
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
