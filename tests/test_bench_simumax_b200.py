"""The SimuMax B200 bench's reading of its table (`bench/bench_simumax_b200.py`): which run is a row of
modern-runs.csv and which takes its model's row with its own plan, and the fp32 gradients its runs keep."""

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_fidelity_modern as modern
import bench_simumax_b200 as simumax


def test_every_run_of_the_table_is_a_csv_row_or_its_models_row_with_its_own_plan() -> None:
    with modern.RUNS.open() as f:
        rows = list(csv.DictReader(f))
    cases = simumax.cases()
    assert len(cases) == 43
    in_csv = 0
    for case in cases:
        row, from_csv = simumax.csv_row(case, rows)
        in_csv += from_csv
        widths = [int(row[key] or 1) for key in ("tp", "pp", "dp", "cp")]
        assert widths[0] * widths[1] * widths[2] * widths[3] == int(row["gpus"]) == 8, case.name
        assert row["source_id"].startswith(modern.FP32_GRADIENT_ROWS)
        assert float(row["measured_s_per_iter"]) == pytest.approx(case.measured_s, rel=1e-12)
        if not from_csv:
            assert int(row["global_batch"]) == case.width("mbc") * widths[2]
            assert case.name in row["source"]
    assert in_csv == 16
    # The names put their widths in either order: "llama3_70b_tp2_pp1_dp4_l12_mbc4_cef".
    case = next(c for c in cases if c.name == "llama3_70b_tp2_pp1_dp4_l12_mbc4_cef")
    assert [case.width(key) for key in ("tp", "pp", "dp", "cp", "mbc")] == [2, 1, 4, 1, 4]
    assert (case.template, case.width("seq", 4096)) == ("llama3_70b", 4096)


def test_simumax_rows_keep_fp32_gradients_and_fuse_their_accumulation_and_others_do_not() -> None:
    knobs = modern.training_knobs()
    with modern.RUNS.open() as f:
        rows = {row["source_id"]: row for row in csv.DictReader(f)}
    simumax_row = modern.expressible(rows["SIMUMAX-B200-L70L12-TP1CP8-32K"], knobs)
    nvidia_row = modern.expressible(rows["MB2511-L8B-GB200-8-FP8"], knobs)
    assert isinstance(simumax_row, modern.ModernRun) and isinstance(nvidia_row, modern.ModernRun)
    assert "plan.grad_reduce_in_fp32=true" in simumax_row.overrides(knobs)
    assert "plan.grad_reduce_in_fp32=false" in nvidia_row.overrides(knobs)
    assert "plan.gradient_accumulation_fusion=true" in simumax_row.overrides(knobs)
    assert "plan.gradient_accumulation_fusion=false" in nvidia_row.overrides(knobs)
