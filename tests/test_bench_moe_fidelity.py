"""The MoE fidelity bench's reading of Megatron-Core pipeline layouts (`bench/bench_moe_fidelity.py`)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_moe_fidelity as moe


@pytest.mark.parametrize(
    ("layout", "pp", "blocks"),
    [
        # Megatron-Bridge's DeepSeek-V3 pp 4 x vp 4: virtual stages 0, 4, 8, 12 (the embedding and 4
        # blocks, then 4, 4, 4) on stage 0; 3, 7, 11 and 15 (4, 4, 4, a block and the loss) on stage 3.
        ("Et*4|(t*4|)*14tL", 4, (16, 16, 16, 13)),
        # The same 16 virtual stages at pp 8 x vp 2: stage 7 holds virtual stages 7 and 15.
        ("Et*4|(t*4|)*14tL", 8, (8, 8, 8, 8, 8, 8, 8, 5)),
        # Its H100 layout (pp 8 x vp 4): the embedding and a block, 30 of two, the MTP layer and loss.
        ("Et|(tt|)*30mL", 8, (7, 8, 8, 8, 8, 8, 8, 6)),
        # With the MTP layer before the loss, at pp 2 x vp 8 (8 virtual stages of 4 on stage 0; 7 of 4
        # and the last block on stage 1) and pp 16 (a stage a virtual stage).
        ("Et*4|(t*4|)*14tmL", 2, (32, 29)),
        ("Et*4|(t*4|)*14tmL", 16, (4,) * 15 + (1,)),
        # Qwen3-235B-A22B's 94 blocks with the embedding and the loss as a layer each, pp 8 x vp 4: 32
        # virtual stages of 3, stage 0 holding virtual stages 0, 8, 16, 24 (2 + 3 + 3 + 3 blocks).
        ("Ett|(ttt|)*30ttL", 8, (11, 12, 12, 12, 12, 12, 12, 11)),
    ],
)
def test_a_layout_folds_its_virtual_stages_round_the_stages(
    layout: str, pp: int, blocks: tuple[int, ...]
) -> None:
    assert moe.stage_layout(layout, pp) == blocks


def test_a_layout_of_virtual_stages_the_stages_do_not_share_evenly_is_refused() -> None:
    with pytest.raises(ValueError, match="16 virtual stages over pp 3"):
        moe.stage_layout("Et*4|(t*4|)*14tL", 3)


def test_the_rows_that_train_an_mtp_module_are_those_whose_layout_places_one() -> None:
    assert {row for row, layout in moe.LAYOUTS.items() if "m" in layout} == moe.MTP_ROWS


QWEN3_235B_H100 = {
    "source_id": "MB2604-Q235B-H100-256-FP8", "gpu": "H100 (DGX-H100)", "hf_config": "Qwen/Qwen3-235B-A22B",
    "zero_stage": "1 (distributed optimizer)", "layers": "94", "moe_layers": "94", "seq_len": "4096",
    "global_batch": "8192", "microbatch": "1", "tp": "2", "pp": "8", "dp": "16", "interleave": "4",
    "ep": "32", "cp": "1", "recompute": "not stated (recipe default)", "seq_parallel": "yes",
    "gpus": "256", "measured_s_per_iter": "", "measured_tokens_per_s": "1712",
    "precision": "fp8 (current scaling)",
}  # fmt: skip
"""The csv's row (`modern-runs.csv`), the fields the bench reads."""


def test_the_qwen3_235b_h100_row_runs_its_recipes_layout_with_sequence_parallelism() -> None:
    """tp 2, pp 8, vp 4, ep 32 with sequence parallelism, its 94 blocks as `LAYOUTS` folds them; measured
    8192 x 4096 tokens / (1712 tokens/s x 256 GPUs) = 76.56 s."""
    run = moe.expressible(QWEN3_235B_H100)
    assert not isinstance(run, str)
    assert (run.tp, run.pp, run.interleave, run.ep, run.sequence_parallel) == (2, 8, 4, 32, True)
    assert run.layers_per_stage == (11, 12, 12, 12, 12, 12, 12, 11)
    assert run.measured_s == 8192 * 4096 / (1712 * 256)
