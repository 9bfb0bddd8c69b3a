"""`phazec model=[a,b,...]`: one common design for several models, beside each model's own best.

Each model first gets its own single-model search (`phazec.commands.search.run_job`), then the
common design is chosen over the union of the designs those searches evaluated (`run_multi`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from phazec.commands.search import run_job, search_state
from phazec.commands.settings import Settings
from phazec.commands.setup import Job
from phazec.errors import PhazecError
from phazec.hw.designs import KNOBS, Designs
from phazec.hw.space import HwSpace
from phazec.predict.evaluator import Candidate, Timings, best
from phazec.report.records import design_record, outcome, search_record, speedup
from phazec.search.executors.base import start_executor
from phazec.search.loop import Found, chunks, explore
from phazec.search.strategies.exhaustive import Exhaustive
from phazec.solvers.placement.problem import Placement
from phazec.util import atomic

Chip = tuple[int, int]
"""A design of the space with one HBM size: (design index, HBM bytes)."""


OUTCOME_KEYS = ("design", "plan", "time_per_batch_s", "throughput_samples_per_s")
"""The keys of an `outcome`."""


def evaluate_more(job: Job, indices: NDArray[np.int64], name: str) -> list[Candidate]:
    """Every candidate of the given designs (global indices, ascending), in batches of
    `search.batch_designs` on the search's executor; batches are saved and resumed like a
    search's, in a sub-state of the model's search."""
    if not len(indices):
        return []
    settings = job.settings
    config = settings.search
    batches = chunks(indices, config.batch_designs)
    tag = hashlib.sha256(json.dumps(indices.tolist()).encode()).hexdigest()[:16]
    cache_dir = str(settings.config["cache_dir"])
    with start_executor(job.evaluator, config, cache_dir, len(batches)) as workers:
        found = explore(
            Exhaustive(batches),
            job.designs,
            workers,
            search_state(settings, f"common_{tag}"),
            f"{name} (common)",
        )
    return found.candidates


def best_per_chip(candidates: list[Candidate]) -> dict[Chip, Candidate]:
    """The fastest feasible candidate of each (design, HBM size) (ties: the first)."""
    groups: dict[Chip, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.design, c.result.hbm_bytes), []).append(c)
    out = {}
    for chip, group in groups.items():
        top = best(group)
        if top is not None:
            out[chip] = top
    return out


def throughput(candidate: Candidate | None) -> float:
    """A candidate's throughput; 0 when no plan fits."""
    if candidate is None:
        return 0.0
    assert isinstance(candidate.result, Placement)
    return candidate.result.throughput_samples_per_s


def common_chip(chips: list[Chip], per_model: dict[str, dict[Chip, Candidate]]) -> tuple[Chip, float]:
    """The chip with the best mean throughput over the models (a model with no plan on a chip scores
    0 there), ties going to the first in `chips`; and that mean."""
    chosen, top = chips[0], -1.0
    for chip in chips:
        mean = sum(throughput(bests.get(chip)) for bests in per_model.values()) / len(per_model)
        if mean > top:
            chosen, top = chip, mean
    return chosen, top


def common_csv(designs: Designs, chips: list[Chip], per_model: dict[str, dict[Chip, Candidate]]) -> str:
    """One row per (design, HBM size) every model was evaluated on: each model's best throughput and
    the mean (0: no plan fits)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["design", *KNOBS, "area_mm2", "hbm_bytes", *per_model, "mean_throughput_samples_per_s"])
    for design, hbm in chips:
        knobs = [int(getattr(designs, knob)[design]) for knob in KNOBS]
        values = [throughput(bests.get((design, hbm))) for bests in per_model.values()]
        writer.writerow([design, *knobs, f"{designs.area_mm2[design]:.6f}", hbm,
                         *map(repr, values), repr(sum(values) / len(values))])  # fmt: skip
    return out.getvalue()


def run_multi(settings: Mapping[str, Settings], out_dir: Path, tpuv4: HwSpace) -> dict[str, Any]:
    """One common design for several models, beside each model's own best: `settings` by model name
    (`phazec model=[a,b,...]`: each the settings `model=<name>` composes).

    Each model gets its own single-model search (`run_job`: the same config, state and answer as
    `phazec model=<name>`), written to `out_dir/<name>/`: its own best
    design. The common design is then chosen over the union of the designs any of these searches
    evaluated, each at each HBM size of `system.hbm_gb`: every model is evaluated on the designs of
    the union its own search skipped, and the (design, HBM size) with the best mean over the models of
    each model's best throughput on it wins (a model with no plan on it scores 0; ties go to the
    lowest design index, then the first HBM size). With `search=exhaustive` that is the best mean
    over the whole space. Writes `out_dir/result.json` (the single-model keys, with `model` the list
    of names; `plan`, `time_per_batch_s`, `throughput_samples_per_s` and `speedup_vs_tpuv4` keyed by
    model for the common design; `baselines` keyed by model, with its own best and its TPUv4 design
    with optimal placement; `search` summed over the models, counting the designs of the union) and
    `out_dir/common.csv` (each model's best throughput on each design of the union).
    """
    start = time.perf_counter()
    names = list(settings)
    runs: dict[str, tuple[Job, Found, dict[str, Any]]] = {}
    for name, model_settings in settings.items():
        try:
            runs[name] = run_job(model_settings, out_dir / name, tpuv4)
        except PhazecError as err:
            raise PhazecError(f"model {name}: {err}") from err
    designs = runs[names[0]][0].designs
    union = np.array(sorted(set().union(*(found.evaluated for _, found, _ in runs.values()))), dtype=np.int64)
    per_model: dict[str, dict[Chip, Candidate]] = {}
    for name, (job, found, _) in runs.items():
        missing = np.setdiff1d(union, np.array(found.evaluated, dtype=np.int64))
        per_model[name] = best_per_chip(found.candidates + evaluate_more(job, missing, name))
    hbm_sizes = runs[names[0]][0].evaluator.knobs.hbm_bytes
    chips = [(int(d), hbm) for d in union for hbm in hbm_sizes]
    (design, hbm), _ = common_chip(chips, per_model)
    on_common = {name: outcome(designs, per_model[name].get((design, hbm))) for name in names}
    own = {name: result for name, (_, _, result) in runs.items()}
    timings = Timings()
    for job, _, _ in runs.values():
        timings.add(job.evaluator.timings)
    config = {**settings[names[0]].config, "model": {name: s.config["model"] for name, s in settings.items()}}
    result = {
        "model": list(names),
        "design": design_record(designs, design, hbm),
        "plan": {name: on_common[name]["plan"] for name in names},
        "time_per_batch_s": {name: on_common[name]["time_per_batch_s"] for name in names},
        "throughput_samples_per_s": {name: on_common[name]["throughput_samples_per_s"] for name in names},
        "baselines": {
            name: {
                "own_best_design": {key: own[name][key] for key in OUTCOME_KEYS},
                "tpuv4_optimal_placement": own[name]["baselines"]["tpuv4_optimal_placement"],
            }
            for name in names
        },
        "speedup_vs_tpuv4": {
            name: speedup(
                on_common[name]["throughput_samples_per_s"],
                own[name]["baselines"]["tpuv4_optimal_placement"]["throughput_samples_per_s"],
            )
            for name in names
        },
        "search": search_record(
            settings[names[0]].search.strategy, len(designs), len(union), timings, time.perf_counter() - start
        ),
        "config": config,
    }
    atomic.write_json(out_dir / "result.json", result)
    with atomic.after(out_dir / "result.json"):
        atomic.write_bytes(out_dir / "common.csv", common_csv(designs, chips, per_model).encode())
    return result
