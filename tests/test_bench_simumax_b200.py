"""The SimuMax B200 bench's reading of its table (`bench/bench_simumax_b200.py`): which run is a row of
modern-runs.csv and which takes its model's row with its own plan, and the fp32 gradients and fused
gradient accumulation its runs keep, on rows written here (CI has no modern-runs.csv)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_fidelity_modern as modern
import bench_simumax_b200 as simumax

OWN_CASES = {
    "SIMUMAX-B200-L70L12-TP1CP8-32K": ("llama3_70b_l12_tp1_cp8_pp1_dp1_seq32768_mbc4_cef", 1, 1, 1, 8, 32768),
    "SIMUMAX-B200-L405L4-TP2CP4-32K": ("llama3_405b_l4_tp2_cp4_pp1_dp1_seq32768_mbc4_cef", 2, 1, 1, 4, 32768),
    "SIMUMAX-B200-DSV3L4-EP8PP1-MBC4": ("deepseekv3_l4_tp1_ep8_pp1_dp8_mbc4_cef", 1, 1, 8, 1, 4096),
    "SIMUMAX-B200-DSV3L4-EP4PP2-MBC4": ("deepseekv3_l4_tp1_ep4_pp2_dp4_mbc4_cef", 1, 2, 4, 1, 4096),
    "SIMUMAX-B200-DSV2L4-EP8PP1-MBC4": ("deepseekv2_tp1_ep8_pp1_dp8_l4_mbc4_cef", 1, 1, 8, 1, 4096),
    "SIMUMAX-B200-DSV2L4-EP4PP2-MBC4": ("deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef", 1, 2, 4, 1, 4096),
}
"""The bench's template rows, as modern-runs.csv has them: each its own case of SimuMax's table, tp, pp,
dp, cp and sequence length (microbatch 1, 4 microbatches)."""


def template_rows() -> list[dict[str, str]]:
    """The template rows with the fields the bench reads and changes."""
    return [
        {
            "source_id": row_id, "tp": str(tp), "pp": str(pp), "dp": str(dp), "cp": str(cp),
            "seq_len": str(seq), "global_batch": str(4 * dp), "microbatch": "1", "gpus": "8",
            "seq_parallel": "yes (flag set, TP=1)", "measured_s_per_iter": "1.0",
            "source": f"MooreThreads/SimuMax@4dcaae5 (the B200 summary); case {case}; TE 2.11",
        }
        for row_id, (case, tp, pp, dp, cp, seq) in OWN_CASES.items()
    ]  # fmt: skip


def test_every_run_of_the_table_is_a_csv_row_or_its_models_row_with_its_own_plan() -> None:
    rows = template_rows()
    cases = simumax.cases()
    assert len(cases) == 43
    in_csv = 0
    for case in cases:
        row, from_csv = simumax.csv_row(case, rows)
        in_csv += from_csv
        widths = [int(row[key]) for key in ("tp", "pp", "dp", "cp")]
        assert widths[0] * widths[1] * widths[2] * widths[3] == int(row["gpus"]) == 8, case.name
        assert row["source_id"].startswith(modern.FP32_GRADIENT_ROWS)
        assert f"case {case.name};" in row["source"]
        if not from_csv:
            assert float(row["measured_s_per_iter"]) == pytest.approx(case.measured_s, rel=1e-12)
            assert int(row["global_batch"]) == case.width("mbc") * widths[2]
            assert int(row["seq_len"]) == case.width("seq", 4096)
    assert in_csv == len(OWN_CASES)
    # The names put their widths in either order: "llama3_70b_tp2_pp1_dp4_l12_mbc4_cef".
    case = next(c for c in cases if c.name == "llama3_70b_tp2_pp1_dp4_l12_mbc4_cef")
    assert [case.width(key) for key in ("tp", "pp", "dp", "cp", "mbc")] == [2, 1, 4, 1, 4]
    assert (case.template, case.width("seq", 4096)) == ("llama3_70b", 4096)
    row, _ = simumax.csv_row(case, rows)
    assert (row["source_id"], row["seq_parallel"]) == (
        "SIMUMAX-B200-llama3_70b_tp2_pp1_dp4_l12_mbc4_cef",
        "yes",
    )


ROW = {
    "source_id": "SIMUMAX-B200-L70L12-TP2CP4-32K", "model": "Llama 3 70B truncated to 12 layers",
    "layers": "12", "hidden": "8192", "ffn": "28672", "heads": "64", "vocab": "128256", "seq_len": "32768",
    "global_batch": "4", "microbatch": "1", "tp": "2", "pp": "1", "dp": "1", "interleave": "",
    "recompute": "none",
    "seq_parallel": "yes", "gpu": "B200 (single 8-GPU node)", "gpus": "8", "measured_s_per_iter": "1.758",
    "measured_tokens_per_s": "", "kv_heads": "8", "experts": "", "cp": "4", "precision": "bf16",
    "zero_stage": "1 (distributed optimizer)",
    "source": "SimuMax@4dcaae5; case llama3_70b_l12_tp2_cp4_pp1_dp1_seq32768_mbc4_cef; CP comm type a2a",
}  # fmt: skip
"""A SimuMax B200 row as modern-runs.csv writes it."""


def test_simumax_rows_keep_fp32_gradients_and_fuse_their_accumulation_and_others_do_not() -> None:
    knobs = modern.training_knobs()
    simumax_row = modern.expressible(ROW, knobs)
    other_row = modern.expressible({**ROW, "source_id": "MB-L70B-B200-8"}, knobs)
    assert isinstance(simumax_row, modern.ModernRun) and isinstance(other_row, modern.ModernRun)
    assert {"plan.grad_reduce_in_fp32=true", "plan.gradient_accumulation_fusion=true"} <= set(
        simumax_row.overrides(knobs)
    )
    assert {"plan.grad_reduce_in_fp32=false", "plan.gradient_accumulation_fusion=false"} <= set(
        other_row.overrides(knobs)
    )
    assert "plan.cp_comm_type=a2a" in simumax_row.overrides(knobs)
