"""Several models, one common design (`model=[a,b,...]`): the best mean throughput, beside each
model's own best design."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from phazec.api import models_settings
from phazec.commands.common import best_per_chip, common_chip, evaluate_more, run_multi
from phazec.commands.search import run_search
from phazec.commands.setup import setup
from phazec.config.command_line import model_config, model_list
from phazec.config.settings import settings_from_config, tpuv4_space
from phazec.errors import PhazecError
from phazec.predict.evaluator import Candidate
from phazec.predict.training import Training
from phazec.predict.usage import USAGE_KEYS
from phazec.report.sweep import SweepJob, best_job, comparison_row
from phazec.solvers.placement.problem import Placement
from tests.conftest import compose_config, sharing
from tests.search.test_search import QUICK, RESULT_KEYS, answer

MODELS = ["bert_large", "opt_350m"]
SPACE = ("hw=tpu_small", "hw.glb_bytes=[33554432]", "hw.num_tc=[8,16]", "search.batch_designs=4")
"""14 designs around TPUv4."""
KNOBS = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes")


def multi(tmp_path: Path, cache_dir: Path, *overrides: str) -> dict[str, Any]:
    """Run the multi-model search as `model=[bert_large,opt_350m]` composes it; returns result.json."""
    cfg = compose_config(*QUICK, f"cache_dir={cache_dir}", f"model=[{','.join(MODELS)}]", *overrides)
    run_multi(models_settings(cfg, MODELS), tmp_path, tpuv4_space())
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


def throughputs_from_csv(explored: Path) -> dict[tuple[int, int], float]:
    """From a model's explored.csv: per (design, HBM bytes), the best feasible throughput."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for row in csv.DictReader(explored.open()):
        if row["feasible"] == "True":
            chip = (int(row["design"]), int(row["hbm_bytes"]))
            out[chip] = max(out[chip], float(row["throughput_samples_per_s"]))
    return out


def test_each_model_gets_its_preset_alone() -> None:
    merged = compose_config("model=[bert_large,opt_350m]", "hw=tpuv4", "model.tp_widths=[1,2]")
    for name in MODELS:
        alone = compose_config(f"model={name}", "hw=tpuv4", "model.tp_widths=[1,2]")
        own = model_config(merged, name, ("model.tp_widths=[1,2]",))
        assert OmegaConf.to_container(own) == OmegaConf.to_container(alone)


def test_exhaustive_common_design_is_the_best_mean(tmp_path: Path, cache_dir: Path) -> None:
    result = multi(tmp_path, cache_dir, *SPACE, "search=exhaustive")
    # Plan figures and the band are in each model's own result; a common design compares with each model's
    # own best, never with one GPU's default plan.
    assert set(result) == RESULT_KEYS - {"objective", "band", "speedup_vs_megatron_default", *USAGE_KEYS}
    assert result["model"] == MODELS
    assert result["search"]["designs_evaluated"] == result["search"]["designs_total"] == 14
    # Each model's own search is the single-model search, written to its own directory.
    for name in MODELS:
        own = json.loads((tmp_path / name / "result.json").read_text())
        single = run_search(
            settings_from_config(
                compose_config(*QUICK, f"cache_dir={cache_dir}", f"model={name}", *SPACE, "search=exhaustive")
            ),
            tmp_path / f"single_{name}",
            tpuv4_space(),
        )
        assert answer(own) == answer(single)
        for key in ("design", "plan", "time_per_batch_s", "throughput_samples_per_s"):
            assert result["baselines"][name]["own_best_design"][key] == own[key]
        tpuv4 = own["baselines"]["tpuv4_optimal_placement"]
        assert result["baselines"][name]["tpuv4_optimal_placement"] == tpuv4
    # The common design, computed independently from each model's explored.csv.
    per_model = {name: throughputs_from_csv(tmp_path / name / "explored.csv") for name in MODELS}
    chips = sorted(set().union(*per_model.values()))
    means = {chip: sum(per_model[name].get(chip, 0.0) for name in MODELS) / len(MODELS) for chip in chips}
    top = max(means.values())
    chosen = min(chip for chip in chips if means[chip] == top)
    rows = {int(r["design"]): r for r in csv.DictReader((tmp_path / MODELS[0] / "explored.csv").open())}
    design = result["design"]
    assert (design["hbm_bytes"], *(design[k] for k in KNOBS)) == (
        chosen[1], *(int(rows[chosen[0]][k]) for k in KNOBS)
    )  # fmt: skip
    for name in MODELS:
        assert result["throughput_samples_per_s"][name] == per_model[name][chosen]
        assert (
            result["throughput_samples_per_s"][name]
            <= result["baselines"][name]["own_best_design"]["throughput_samples_per_s"]
        )
        tpu = result["baselines"][name]["tpuv4_optimal_placement"]["throughput_samples_per_s"]
        found = result["throughput_samples_per_s"][name]
        assert result["speedup_vs_tpuv4"][name] == pytest.approx(found / tpu)
    assert set(result["config"]["model"]) == set(MODELS)
    common = list(csv.DictReader((tmp_path / "common.csv").open()))
    assert len(common) == 14
    assert max(float(r["mean_throughput_samples_per_s"]) for r in common) == pytest.approx(top)


def test_common_design_covers_every_models_evaluated_designs(tmp_path: Path, cache_dir: Path) -> None:
    # bounded evaluates few designs per model; the common design is chosen over their union, each
    # model evaluated on the designs its own search skipped.
    result = multi(tmp_path, cache_dir, *SPACE, "search=bounded", "search.batch_designs=1")
    evaluated = [json.loads((tmp_path / n / "result.json").read_text())["search"] for n in MODELS]
    assert result["search"]["designs_evaluated"] >= max(s["designs_evaluated"] for s in evaluated)
    assert result["search"]["designs_pruned"] == 14 - result["search"]["designs_evaluated"]
    common = {int(r["design"]): r for r in csv.DictReader((tmp_path / "common.csv").open())}
    assert len(common) == result["search"]["designs_evaluated"]
    mean = sum(result["throughput_samples_per_s"].values()) / len(MODELS)
    assert mean == pytest.approx(max(float(r["mean_throughput_samples_per_s"]) for r in common.values()))
    for row in common.values():  # every model was evaluated on every design of the union
        assert all(float(row[name]) > 0 for name in MODELS)


EIGHT = Training(microbatch=8)
"""The settings of the stand-in candidates."""


def placement(throughput: float, hbm_bytes: int = 32) -> Placement:
    """A stand-in plan with the given throughput."""
    return Placement((), 1, 1, hbm_bytes, 1, 1.0 / throughput, throughput, True)


def test_common_chip_is_the_best_mean_with_zero_for_no_plan_and_ties_to_the_first() -> None:
    x = [Candidate(d, EIGHT, placement(t)) for d, t in ((0, 28.0), (0, 20.0), (1, 20.0), (2, 10.0))]
    per_model = {
        "x": best_per_chip(x),
        # y has no plan on design 0 (scores 0 there) and equal throughput on designs 1 and 2.
        "y": best_per_chip([Candidate(1, EIGHT, placement(10.0)), Candidate(2, EIGHT, placement(20.0))]),
    }
    assert per_model["x"][0, 32] is x[0]
    assert common_chip([(0, 32), (1, 32), (2, 32)], per_model) == ((1, 32), 15.0)
    assert common_chip([(0, 32), (2, 32), (1, 32)], per_model) == ((2, 32), 15.0)


def test_evaluate_more_gives_the_evaluators_candidates(cache_dir: Path, tmp_path: Path) -> None:
    cfg = compose_config(*QUICK, f"cache_dir={tmp_path}", "model=bert_large", *SPACE, "search.workers=1")
    sharing(tmp_path, cache_dir)  # a cache of its own, sharing the exported models
    job = setup(settings_from_config(cfg))
    indices = np.array([3, 5, 11], dtype=np.int64)
    more = evaluate_more(job, indices, "bert_large")
    direct = job.evaluator.evaluate(job.designs.take(indices))
    assert more == [Candidate(int(indices[c.design]), c.training, c.result) for c in direct]
    assert evaluate_more(job, indices, "bert_large") == more  # read back from the saved state


def test_bad_model_lists(tmp_path: Path, cache_dir: Path) -> None:
    cfg = compose_config(*QUICK, f"cache_dir={cache_dir}", "hw=tpuv4")
    unknown = r"Could not find 'model/nope'\. Available options in 'model': bert_large, .*opt_350m"
    with pytest.raises(PhazecError, match=unknown):
        models_settings(cfg, ["bert_large", "nope"])
    with pytest.raises(PhazecError, match=r"give a list of distinct model presets"):
        models_settings(cfg, ["bert_large", "bert_large"])


def test_model_list_reads_the_overrides() -> None:
    names, keys = model_list(["model=[a,b]", "hw=tpuv4", "model.tp_widths=[1,2]"])
    assert (names, keys) == (["a", "b"], ("model.tp_widths=[1,2]",))
    assert model_list(["model=bert_large"]) == (None, ())
    with pytest.raises(PhazecError, match="cannot be combined"):
        model_list(["model=[a,b]", "~model.path"])


def phazec(tmp_path: Path, cache_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """Run the `phazec` command in a subprocess."""
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *QUICK, *overrides]
    return subprocess.run(
        [*command, f"cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_command_line(tmp_path: Path, cache_dir: Path) -> None:
    done = phazec(tmp_path / "run", cache_dir, "model=[bert_large,opt_350m]", "hw=tpuv4")
    assert done.returncode == 0, done.stderr
    for name in MODELS:
        assert json.loads((tmp_path / "run" / name / "result.json").read_text())["model"] == name
        assert (tmp_path / "run" / name / "throughput_vs_area.png").exists()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["model"] == MODELS
    assert "common design with mean throughput" in done.stdout
    assert "own best design" in done.stdout
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "common design with mean throughput" in line)
    table = [line for line in lines[start + 1 :] if not line.startswith(("[", "results in "))]
    assert table[0].startswith("common design: ") and max(len(line) for line in table) <= 120

    bad = phazec(tmp_path / "bad", cache_dir, "model=[bert_large,nope]", "hw=tpuv4")
    assert bad.returncode == 2
    assert "Could not load 'model/nope'" in bad.stderr
    assert "Traceback" not in bad.stderr
    empty = phazec(tmp_path / "empty", cache_dir, "model=[]", "hw=tpuv4")
    assert empty.returncode == 2
    assert "model=[]: give a list of distinct model presets" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_sweep_ranks_several_model_jobs_by_their_mean(tmp_path: Path) -> None:
    design = {"area_mm2": 400.0, "hbm_bytes": 32 * 10**9}

    def job(num: int, throughputs: dict[str, float]) -> SweepJob:
        result = {"model": list(throughputs), "design": design, "throughput_samples_per_s": throughputs}
        return SweepJob(num, [f"train.microbatch=[{num}]"], tmp_path / str(num), result)

    jobs = [job(0, {"a": 3.0, "b": 1.0}), job(1, {"a": 1.0, "b": 4.0}), job(2, {"a": 4.0, "b": 1.0})]
    assert best_job(jobs) == jobs[1]  # means 2.0, 2.5, 2.5: the first of the best
    row = comparison_row(jobs[0], set())
    assert (row["status"], row["throughput_samples_per_s"], row["area_mm2"]) == ("ok", 2.0, 400.0)
    assert row["microbatch"] == row["time_per_batch_s"] == ""  # they differ by model
