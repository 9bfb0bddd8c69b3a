"""`search=wham`, `search.objective` and the utilisation and energy fields, end to end on real models."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.predict.evaluator import Candidate
from phazec.report.table import result_table
from phazec.search.strategies.wham import LocalSearch, StageWork, stage_works
from phazec.solvers.placement.problem import Placement, Stage
from tests.conftest import compose_config
from tests.search.test_search import SMALL, answer, search

WHAM_FRACTION = 1.0
"""wham's throughput on tpu_small with BERT-large (one knob setting), as a fraction of the exhaustive
optimum (measured: it finds the optimum, evaluating 5 of the 37 designs)."""


def test_wham_is_repeatable_and_never_beats_exhaustive(tmp_path: Path, cache_dir: Path) -> None:
    exhaustive = search(tmp_path / "exhaustive", cache_dir, *SMALL, "search=exhaustive")
    runs = [
        search(tmp_path / str(i), cache_dir, *SMALL, "search=wham", "search.resume=false") for i in range(2)
    ]
    assert answer(runs[0]) == answer(runs[1])
    assert (tmp_path / "0" / "explored.csv").read_bytes() == (tmp_path / "1" / "explored.csv").read_bytes()
    wham = runs[0]
    evaluated, pruned = wham["search"]["designs_evaluated"], wham["search"]["designs_pruned"]
    assert evaluated + pruned == 37
    assert wham["search"]["designs_pruned_by"] == {"not_chosen": pruned}
    assert evaluated < exhaustive["search"]["designs_evaluated"] == 37
    optimum = exhaustive["throughput_samples_per_s"]
    assert WHAM_FRACTION * optimum <= wham["throughput_samples_per_s"] <= optimum
    # bounded under the per-watt objective: the best throughput per watt of every row exhaustive
    # evaluated (brute force over its explored.csv), evaluating fewer designs.
    per_watt = search(
        tmp_path / "per_watt", cache_dir, *SMALL, "search=bounded", "search.objective=throughput_per_watt"
    )
    rows = list(csv.DictReader((tmp_path / "exhaustive" / "explored.csv").open()))
    top = max((r for r in rows if r["feasible"] == "True"), key=lambda r: float(r["throughput_per_watt"]))
    assert per_watt["throughput_per_watt"] == float(top["throughput_per_watt"])
    assert (per_watt["design"]["num_tc"], per_watt["design"]["glb_bytes"]) == (
        int(top["num_tc"]),
        int(top["glb_bytes"]),
    )
    assert per_watt["search"]["designs_evaluated"] < 37


def test_a_selective_stage_repeats_its_attention_cores_and_the_last_stage_does_not(cache_dir: Path) -> None:
    job = setup(
        settings_from_config(
            compose_config("model=bert_large", "hw=tpuv4", f"cache_dir={cache_dir}", "tracking=none")
        )
    )
    classes = [layer.cls for layer in job.evaluator.graphs[1].layers]
    assert classes == [0] + [1] * 24 + [2]  # embedding, 24 blocks, head
    placement = Placement(
        stages=(Stage(tuple(range(13)), 1, 1.0, 0), Stage(tuple(range(13, 26)), 1, 1.0, 0)),
        t=1, d=1, hbm_bytes=10**10, microbatches_per_pipeline=1,
        time_per_batch_s=1.0, throughput_samples_per_s=1.0, fits_hbm=True,
    )  # fmt: skip
    selective = replace(job.evaluator.knobs.fixed, microbatch=1, recompute="selective")
    first, last = stage_works(job.evaluator, job.designs, Candidate(0, selective, placement))
    assert first.runs == ((0, 1.0, 1.0), (1, 12.0, 12.0)) and first.core_runs == ((0, 1.0), (1, 12.0))
    assert last.runs == ((1, 12.0, 12.0), (2, 1.0, 1.0)) and last.core_runs == ()  # PHAZE's rule


def test_the_local_search_grows_what_shortens_the_repeated_attention_cores(cache_dir: Path) -> None:
    """A stage whose only work is selective recompute's repeated attention cores: growing from the
    smallest design must find designs that run those cores faster (with no critical operators to
    read, only the cores' own gain can pick the neighbours)."""
    job = setup(settings_from_config(compose_config(*SMALL, f"cache_dir={cache_dir}", "tracking=none")))
    local = LocalSearch(job.evaluator, job.designs, microbatch=1, t=1, top_k=4, weight=None)
    stage = StageWork(runs=(), core_runs=((1, 12.0),))
    start = len(job.designs) - 1
    picked = np.array(range(len(job.designs)))
    core_s = local.core_s(stage, local.stage_costs(stage, picked), len(picked))
    top = local.run(stage, start)
    assert len(local.scheduled) > 1 and len(top) == 4
    assert min(core_s[top]) < core_s[start]
    by_core_s = sorted(local.scheduled, key=lambda d: (core_s[d], d))
    assert sorted(top, key=lambda d: (core_s[d], d)) == by_core_s[:4]


def test_throughput_per_watt_picks_another_design(tmp_path: Path, cache_dir: Path) -> None:
    # Two designs of tpu_small: 4 or 16 tensor cores of 128 x 128 (4 vector cores, 32 MiB), 141.2 W or
    # 450.9 W of peak power. 16 cores train faster, but far less than 3.19 times faster (compute is
    # at most 4 times faster, vector work and traffic not at all): per watt the small design must win.
    space = (*SMALL, "hw.num_tc=[4,16]", "hw.tc_width=[128]", "hw.tc_depth=[128]", "hw.num_vc=[4]",
             "hw.glb_bytes=[33554432]")  # fmt: skip
    runs = {
        objective: search(
            tmp_path / objective, cache_dir, *space, "search=exhaustive", f"search.objective={objective}"
        )
        for objective in ("throughput", "throughput_per_watt")
    }
    fast, frugal = runs["throughput"], runs["throughput_per_watt"]
    assert (fast["design"]["num_tc"], frugal["design"]["num_tc"]) == (16, 4)
    assert fast["throughput_samples_per_s"] > frugal["throughput_samples_per_s"]
    assert frugal["throughput_per_watt"] > fast["throughput_per_watt"]
    assert frugal["objective"] == "throughput_per_watt"
    assert "(exhaustive, best throughput_per_watt) in" in result_table(frugal).splitlines()[0]
    assert "(exhaustive) in" in result_table(fast).splitlines()[0]
    # Brute force over explored.csv: each answer is the best row under its own objective.
    rows = list(csv.DictReader((tmp_path / "throughput" / "explored.csv").open()))
    feasible = [r for r in rows if r["feasible"] == "True"]
    by_watt = max(feasible, key=lambda r: float(r["throughput_per_watt"]))
    by_speed = max(feasible, key=lambda r: float(r["throughput_samples_per_s"]))
    assert (int(by_speed["num_tc"]), int(by_watt["num_tc"])) == (16, 4)
    assert float(by_watt["throughput_per_watt"]) == frugal["throughput_per_watt"]


def test_every_result_reports_utilisation_and_energy(tmp_path: Path, cache_dir: Path) -> None:
    result = search(tmp_path, cache_dir, "model=bert_large", "hw=tpuv4")
    for entry in (result, *result["baselines"].values()):
        for core in ("tensor_core", "vector_core"):
            mean, bottleneck = entry[f"{core}_utilisation_mean"], entry[f"{core}_utilisation_bottleneck"]
            assert 0 < mean <= 1 and 0 < bottleneck <= 1
        energy = entry["energy_per_iteration_j"]
        assert energy["total"] == pytest.approx(
            sum(energy[p] for p in ("compute", "buffers", "hbm", "network"))
        )
        assert min(energy.values()) > 0
        assert entry["energy_per_sample_j"]["total"] == pytest.approx(energy["total"] / 4096, rel=1e-15)
    # The TPUv4 design: 8 x 128 x 128 MACs at 1.5 pJ and 2 x 128 lanes at 1 pJ, at 1.05 GHz, plus HBM at
    # 1.2 TB/s and 31.2 pJ a byte.
    power_w = (8 * 128 * 128 * 1.5e-12 + 2 * 128 * 1e-12) * 1.05e9 + 1.2e12 * 31.2e-12
    assert result["peak_power_w"] == pytest.approx(power_w, rel=1e-12)
    assert result["throughput_per_watt"] == result["throughput_samples_per_s"] / result["peak_power_w"]
    rows = list(csv.DictReader((tmp_path / "explored.csv").open()))
    best = min((r for r in rows if r["feasible"] == "True"), key=lambda r: float(r["time_per_batch_s"]))
    assert float(best["energy_per_sample_j"]) == result["energy_per_sample_j"]["total"]
    assert float(best["tensor_core_utilisation_mean"]) == result["tensor_core_utilisation_mean"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("search.objective=speed",), r"search.objective='speed' is not an objective; valid: \['throughput'"),
        (("search=wham", "search.top_k=0"), r"search.top_k=0 is not valid: it must be positive"),
        (
            ("hw.power_budget_w=1.0",),
            r"No design of hw space .tpu_small. fits its budgets \(area 278.827 mm\^2 with floor 0.3, "
            r"power 1 W\).*raise the budgets",
        ),
    ],
)
def test_bad_input(tmp_path: Path, cache_dir: Path, overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        search(tmp_path, cache_dir, *SMALL, *overrides)
