"""The modern fidelity bench's reading of modern-runs.csv rows (`bench/bench_fidelity_modern.py`): which
rows are expressible with which training knobs, and the plan each becomes, on rows written here."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_fidelity_modern as modern

ROW = {
    "source_id": "MB-L405B-GB200-256", "model": "Llama 3.1 405B", "layers": "126", "hidden": "16384",
    "ffn": "53248", "heads": "128", "vocab": "128256", "seq_len": "8192", "global_batch": "1536",
    "microbatch": "1", "tp": "4", "pp": "8", "dp": "4", "interleave": "", "recompute": "not stated",
    "seq_parallel": "yes", "gpu": "GB200 (DGX-GB200, NVL72)", "gpus": "256", "measured_s_per_iter": "",
    "measured_tokens_per_s": "800", "kv_heads": "8", "experts": "", "cp": "2", "precision": "mxfp8",
    "zero_stage": "1 (distributed optimizer)", "source": "NVIDIA-NeMo/Megatron-Bridge@067f987 perf summary",
}  # fmt: skip
"""A Megatron-Bridge-like 405B row on 256 GB200s in MXFP8 with context parallelism 2."""

TODAY = frozenset({"microbatch", "recompute", "interleave", "zero_stage"})
LATER = TODAY | {"precision", "cp"}


def test_a_row_waits_for_the_knobs_it_needs_then_plans_with_them() -> None:
    assert modern.expressible(ROW, TODAY) == "needs the plan knobs precision (mxfp8), cp (2)"
    assert modern.expressible(ROW, TODAY | {"cp"}) == "needs the plan knobs precision (mxfp8)"
    run = modern.expressible(ROW, LATER)
    assert isinstance(run, modern.ModernRun)
    assert (run.family, run.run.chip, run.run.system) == ("gb200", "gb200", "gb200_nvl72")
    assert run.features == ("FP8", "CP")
    # 256 GPUs of GB200: four racks of 64 (Slurm segments of 16 trays), not aligned 72-GPU domains.
    assert run.gpus_per_domain == 64
    expected = ("plan.precision=mxfp8", "plan.cp=2", "system.tiers.0.group_size=64")
    assert run.overrides(LATER) == expected
    # A Megatron-Bridge row runs Transformer Engine's fused cross entropy, once phazec has the knob.
    assert run.fused_cross_entropy
    assert "plan.fused_cross_entropy=true" in run.overrides(LATER | {"fused_cross_entropy"})
    assert run.run.zero_stage == 1  # bench_fidelity.run_config sets plan.zero_stage
    assert (run.run.recompute, run.run.sequence_parallel, run.run.interleave) == ("none", True, 1)
    # 126 blocks on 8 stages: the embedding and the loss count as a layer each, 128 / 8 = 16 a stage.
    assert run.run.layers_per_stage == (15, 16, 16, 16, 16, 16, 16, 15)
    # 1536 x 8192 tokens at 800 tokens/s on each of 256 GPUs.
    assert run.run.measured_s == 1536 * 8192 / (800 * 256)
    assert (run.dims()["num_key_value_heads"], run.dims()["num_hidden_layers"]) == (8, 126)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"experts": "256"}, "MoE (issue 39)"),
        ({"microbatch": ""}, "microbatch not stated"),
        ({"interleave": "yes (value not stated)"}, "interleave not stated"),
        ({"zero_stage": "not stated"}, "zero stage not stated"),
        ({"recompute": "full, block"}, "recompute of some blocks, how many not stated (full, block)"),
        ({"gpu": "MI300X"}, "GPU 'MI300X' has no preset"),
    ],
)
def test_rows_phazec_cannot_express_say_why(change: dict[str, str], reason: str) -> None:
    assert modern.expressible({**ROW, **change}, LATER) == reason


def test_a_block_recompute_row_runs_megatron_cores_block_method() -> None:
    run = modern.expressible(
        {**ROW, "recompute": "full, block, 5 layers (per HEAD H100 fp8cs recipe)"}, LATER
    )
    assert isinstance(run, modern.ModernRun)
    assert (run.run.recompute, run.recompute_layers) == ("block", 5)
    assert "plan.recompute_layers=5" in run.overrides(LATER | {"recompute_layers"})


def test_chip_families() -> None:
    """B200 is not GB200's suffix match; Meta's 500 W H100s are their own family with 96 GB; FSDP rows."""
    b200 = modern.expressible({**ROW, "gpu": "B200 (DGX-B200)", "gpus": "128", "dp": "2"}, LATER)
    assert isinstance(b200, modern.ModernRun)
    assert (b200.family, b200.run.system, b200.gpus_per_domain) == ("b200", "dgx_b200", None)
    teton = {**ROW, "gpu": "H100 SXM 96GB HBM2e, 500 W power limit (Meta Grand Teton)", "precision": "bf16",
             "zero_stage": "3 (FSDP2)", "cp": "1", "recompute": "selective"}  # fmt: skip
    run = modern.expressible(teton, LATER)
    assert isinstance(run, modern.ModernRun)
    assert (run.family, run.features, run.run.recompute) == ("h100_500w", ("FSDP",), "selective")
    assert run.overrides(LATER) == ("plan.precision=bf16", "plan.cp=1", "system.hbm_gb=[96]")
    assert run.overrides(TODAY) == ("system.hbm_gb=[96]",)
    assert run.run.zero_stage == 3
    assert modern.expressible(teton, TODAY - {"zero_stage"}) == "needs the plan knobs zero_stage (3)"


def test_fsdp_gathers_fp8_weights_where_the_row_says_so() -> None:
    """torchtitan's 2025 H200 rows state an FP8 FSDP all-gather: `plan.fp8_param_gather=true`; an FSDP
    row in FP8 that does not say so gathers bf16."""
    precision = "fp8 (torchao float8 tensorwise, FP8 FSDP all-gather)"
    fsdp = {**ROW, "gpu": "H200 (WhiteFiber, Trainy)", "zero_stage": "3 (FSDP2)", "cp": "1",
            "recompute": "selective", "precision": precision}  # fmt: skip
    knobs = modern.training_knobs()
    gathered = modern.expressible(fsdp, knobs)
    assert isinstance(gathered, modern.ModernRun) and gathered.fp8_param_gather
    assert "plan.fp8_param_gather=true" in gathered.overrides(knobs)
    plain = modern.expressible({**fsdp, "precision": "fp8 (torchao float8, tensorwise)"}, knobs)
    assert isinstance(plain, modern.ModernRun) and not plain.fp8_param_gather
    assert "plan.fp8_param_gather=false" in plain.overrides(knobs)


def test_a_torchtitan_pipeline_row_runs_its_default_microbatches_and_fsdp_once_a_step() -> None:
    """torchtitan's 405B rows state no microbatch: a rank's local batch of 256 / 8 = 32 splits into as
    many microbatches as the 8 stages, 4 samples each (1 for the 8-sample local batch at 32K tokens);
    FSDP2 in a pipeline gathers and reduce-scatters once a step, run as zero stage 1, still an FSDP row.
    Without a pipeline a row's own zero stage and stated microbatch stand."""
    titan = {**ROW, "source_id": "TT24-L405B-H100-512", "microbatch": "", "global_batch": "256", "tp": "8",
             "pp": "8", "dp": "8", "cp": "1", "gpus": "512", "zero_stage": "3 (FSDP2)", "precision": "fp8",
             "gpu": "H100 SXM 96GB HBM2e, 500 W power limit (Meta Grand Teton)"}  # fmt: skip
    knobs = LATER | {"zero_stage"}
    run = modern.expressible(titan, knobs)
    assert isinstance(run, modern.ModernRun)
    assert (run.run.microbatch, run.run.zero_stage, run.zero_stage, run.features) == (
        4,
        1,
        3,
        ("FP8", "FSDP"),
    )
    long = modern.expressible({**titan, "global_batch": "64", "seq_len": "32768"}, knobs)
    assert isinstance(long, modern.ModernRun) and long.run.microbatch == 1
    assert (
        modern.expressible({**titan, "global_batch": "32"}, knobs) == "microbatch not stated"
    )  # 4 < 8 stages
    flat = modern.expressible({**titan, "pp": "1", "dp": "64", "microbatch": "2"}, knobs)
    assert isinstance(flat, modern.ModernRun) and (flat.run.microbatch, flat.run.zero_stage) == (2, 3)
    assert modern.expressible({**titan, "source_id": "MB-L405B"}, knobs) == "microbatch not stated"
    fp8_copies = modern.expressible({**titan, "precision": f"fp8 ({modern.FP8_WEIGHT_GATHER})"}, knobs)
    assert isinstance(fp8_copies, modern.ModernRun) and not fp8_copies.fp8_param_gather  # gathered once
