"""Error bands from the held-out validation residuals (issue 43): a band by hand from a chip's rows, a
chip (or a device model) without rows, and the "within the model's error" marks of a search's result
and of a sweep's comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phazec.config.settings import settings_from_config
from phazec.hw.validation import (
    NO_VALIDATION,
    Band,
    Validation,
    ValidationRow,
    band,
    band_record,
    band_text,
    ratio_range,
    validation,
)
from phazec.report.records import with_bands
from phazec.report.sweep import SweepJob, comparison_row, comparison_text
from phazec.report.table import result_table
from tests.conftest import compose_config


def hw_config(*overrides: str) -> dict[str, Any]:
    """The plain `hw` config of a composed plan config, as `phazec-plan` holds it."""
    cfg = compose_config(*overrides, "model=gpt2_xl", "tracking=none")
    hw = settings_from_config(cfg).config["hw"]
    assert isinstance(hw, dict)
    return hw


def rows(*ratios: float) -> tuple[ValidationRow, ...]:
    """Rows whose measured / predicted ratios are `ratios` (predicted 1 s)."""
    return tuple(ValidationRow(f"r{i}", "toy.csv", ratio, 1.0) for i, ratio in enumerate(ratios))


def test_a_few_rows_give_their_whole_range_and_many_drop_the_extremes() -> None:
    # Nearest rank at 90 %: ranks ceil(0.05 n) and ceil(0.95 n). n = 4: ranks 1 and 4 (the range);
    # n = 20: ceil(1.0) = 1 and ceil(19.0) = 19; n = 21: ceil(1.05) = 2 and ceil(19.95) = 20.
    assert ratio_range(rows(1.25, 0.8, 1.1, 0.9)) == (0.8, 1.25)
    twenty = rows(*(i / 10 for i in range(20, 0, -1)))
    assert ratio_range(twenty) == (0.1, 1.9)
    twenty_one = rows(*(i / 10 for i in range(21, 0, -1)))
    assert ratio_range(twenty_one) == (0.2, 2.0)
    assert ratio_range(rows(1.5)) == (1.5, 1.5)


def test_the_a100_band_by_hand_from_its_held_out_residuals() -> None:
    found = validation(hw_config("hw=a100", "system=dgx_a100"))
    assert isinstance(found, Validation)
    by_row = {r.row: r for r in found.rows}
    assert len(by_row) == 21  # docs/devices.md: A100 held-out, 21 rows
    # The residuals (bench/validation_residuals.py), largest first: MEG20-DP-A100-8B +6.8 %,
    # NAR21-T2-PTD-175B-1536 +1.4 %, ...; smallest: BLOOM176B-GBS2048 -11.9 %, NAR21-T2-PTD-530B-560
    # -5.7 %. Of 21 rows the band keeps the 2nd to the 20th ratio measured / predicted: the low end
    # comes from the second-largest residual, the high end from the second-smallest.
    slow, fast = by_row["NAR21-T2-PTD-175B-1536"], by_row["NAR21-T2-PTD-530B-560"]
    assert round(slow.residual, 3) == 0.014 and round(fast.residual, 3) == -0.057
    assert round(by_row["MEG20-DP-A100-8B"].residual, 3) == 0.068
    assert round(by_row["BLOOM176B-GBS2048"].residual, 3) == -0.119
    assert sorted(by_row.values(), key=lambda r: r.residual)[-2] == slow
    assert sorted(by_row.values(), key=lambda r: r.residual)[1] == fast
    got = band(12.0, found)
    assert isinstance(got, Band)
    assert got.low_s == 12.0 * (slow.measured_s / slow.predicted_s)
    assert got.high_s == 12.0 * (fast.measured_s / fast.predicted_s)
    assert (round(got.low_s, 2), round(got.high_s, 2)) == (11.83, 12.73)
    assert (
        band_text(12.0, band_record(got))
        == "12 s, likely 11.8-12.7 s: a100 held-out residuals (21 rows), 90%"
    )
    assert "public-runs.csv" in got.source


def test_a_chip_of_few_rows_gets_their_range() -> None:
    # The H100's 8 rows: the band spans all of them, from MEG24-H100-32B (+12.8 %, the model slow) to
    # AM-L70B-H100-64-BF16-CP2 (-36.7 %, NeMo Automodel's FSDP2 run, the model fast).
    found = validation(hw_config("hw=h100", "system=dgx_h100"))
    assert isinstance(found, Validation) and len(found.rows) == 8
    by_row = {r.row: r for r in found.rows}
    low, high = by_row["MEG24-H100-32B"], by_row["AM-L70B-H100-64-BF16-CP2"]
    got = band(1.0, found)
    assert isinstance(got, Band)
    assert (got.low_s, got.high_s) == (low.measured_s / low.predicted_s, high.measured_s / high.predicted_s)
    assert {r.file for r in found.rows} == {"public-runs.csv", "modern-runs.csv"}


def test_no_validation_data() -> None:
    assert validation(hw_config("hw=tpuv4", "system=dgx_a100")) == NO_VALIDATION
    record = band_record(band(3.0, validation(hw_config("hw=tpu_area", "system=dgx_a100"))))
    assert record == {"low_s": None, "high_s": None, "basis": "no validation data", "source": None}
    assert band_text(3.0, record) == "3 s (no validation data)"
    # Another device model under the preset's name is not the one the rows validate ...
    other = validation(hw_config("hw=a100", "system=dgx_a100", "hw.device.gemm_utilisation=0.5"))
    assert other == (
        "no validation data for this device model (hw.device.gemm_utilisation not the a100 preset's, which "
        "its held-out rows validate)"
    )
    assert isinstance(validation(hw_config("hw=a100", "system=dgx_a100", "hw.num_tc=[64]")), str)
    # ... but the software's knobs the benches set per row keep them.
    kept = validation(hw_config("hw=a100", "system=dgx_a100", "hw.device.tp_comm_overlap=true"))
    assert isinstance(kept, Validation)


# --- The marks on a toy space ------------------------------------------------------------------------
# Two designs: A (the found one, a chip with rows whose ratios measured / predicted are 0.9 and 1.2)
# and B (no rows). The found plan takes 10 s on A: band 9-12 s. Another plan on A at 13 s: 11.7-15.6 s,
# overlapping (11.7 <= 12): within the model's error. At 14 s: 12.6-16.8 s, not. On B: no band.
TOY = Validation("toy_chip", "by hand", {}, rows(0.9, 1.2))
DESIGN_A = {"num_tc": 1, "tc_width": 4, "tc_depth": 4, "num_vc": 1, "vc_width": 8, "glb_bytes": 1024}
DESIGN_B = {**DESIGN_A, "num_tc": 2}


def entry(design: dict[str, int], time_s: float) -> dict[str, Any]:
    """A result entry (`phazec.report.records.outcome`) with just what the bands read."""
    return {"design": {**design, "hbm_bytes": 1, "area_mm2": 1.0}, "time_per_batch_s": time_s}


def test_the_search_marks_the_plans_within_the_models_error() -> None:
    found = entry(DESIGN_A, 10.0)
    others = {"near": entry(DESIGN_A, 13.0), "far": entry(DESIGN_A, 14.0), "elsewhere": entry(DESIGN_B, 10.0)}
    others["none"] = {"design": None, "plan": None, "time_per_batch_s": None}
    with_bands(found, others, TOY)
    assert (found["band"]["low_s"], found["band"]["high_s"]) == (9.0, 12.0)
    assert found["band"]["basis"] == "toy_chip held-out residuals (2 rows), 90%"
    assert others["near"]["band"]["low_s"] == pytest.approx(11.7, rel=1e-15)
    assert [others[name]["within_model_error"] for name in others] == [True, False, None, None]
    assert others["elsewhere"]["band"]["basis"] == NO_VALIDATION
    # Without rows for the searched chip nothing is marked.
    plain = entry(DESIGN_A, 10.0)
    with_bands(plain, (alone := {"near": entry(DESIGN_A, 13.0)}), NO_VALIDATION)
    assert alone["near"]["within_model_error"] is None and plain["band"]["low_s"] is None


def test_the_result_table_shows_the_band_and_the_marks() -> None:
    found = {**entry(DESIGN_A, 10.0), "plan": None, "throughput_samples_per_s": 1.0}
    names = ("tpuv4_optimal_placement", "tpuv4_megatron_plan", "found_design_megatron_plan")
    baselines = {
        name: {**entry(DESIGN_B, 10.0), "plan": None, "throughput_samples_per_s": 1.0} for name in names
    }
    baselines["found_design_megatron_plan"] = {
        **entry(DESIGN_A, 13.0),
        "plan": None,
        "throughput_samples_per_s": 0.8,
    }
    with_bands(found, baselines, TOY)
    design = {**DESIGN_A, "hbm_bytes": 10**9, "area_mm2": 1.0}
    result = {
        **found, "design": design, "model": "toy", "objective": "throughput", "baselines": baselines,
        "config": {"system": {"devices": 1}}, "search": {"designs_evaluated": 1, "designs_total": 1,
        "strategy": "exhaustive", "wall_s": 0.0},
    }  # fmt: skip
    baselines["tpuv4_optimal_placement"]["design"] = design
    text = result_table(result).splitlines()
    assert any(line.startswith("found design megatron plan") and " 0.8~ " in line for line in text)
    assert "found plan: 10 s, likely 9-12 s: toy_chip held-out residuals (2 rows), 90%." in text
    assert any(line.startswith("~: within the model's error of the found plan") for line in text)


def test_the_sweep_comparison_marks_the_jobs_within_the_models_error(tmp_path: Path) -> None:
    def job(num: int, time_s: float, chip: Validation | str) -> SweepJob:
        result = {
            "samples_per_s": 1 / time_s, "time_per_batch_s": time_s, "fits": True, "mfu": 0.5,
            "memory": {"total_bytes": 1, "hbm_bytes": 2}, "microbatch": 1, "recompute": "none", "tp": 1,
            "pp": 1, "dp": 1, "devices": 1, "band": band_record(band(time_s, chip)),
        }  # fmt: skip
        return SweepJob(num, [f"plan.tp={num}"], tmp_path / str(num), result, "plan")

    jobs = [job(0, 13.0, TOY), job(1, 10.0, TOY), job(2, 14.0, TOY), job(3, 11.0, NO_VALIDATION)]
    best = jobs[1]
    rows = [comparison_row(j, set(), best) for j in jobs]
    assert [r["within_model_error"] for r in rows] == [True, True, False, ""]
    text = comparison_text(rows, best).splitlines()
    assert text[0].split()[:7] == ["job", "status", "overrides", "samples/s", "s/batch", "in", "error"]
    assert [line.split()[0] for line in text[2:6]] == ["0", "1*", "2", "3"]
    assert [line.split()[5] for line in text[2:4]] == ["~", "~"]
    assert text[6].startswith("~: within the model's error of the best job (*)")
