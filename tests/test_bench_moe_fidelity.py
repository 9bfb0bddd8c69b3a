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
    ],
)
def test_a_layout_folds_its_virtual_stages_round_the_stages(
    layout: str, pp: int, blocks: tuple[int, ...]
) -> None:
    assert moe.stage_layout(layout, pp) == blocks
    assert sum(blocks) == 61


def test_a_layout_of_virtual_stages_the_stages_do_not_share_evenly_is_refused() -> None:
    with pytest.raises(ValueError, match="16 virtual stages over pp 3"):
        moe.stage_layout("Et*4|(t*4|)*14tL", 3)


def test_the_rows_that_train_an_mtp_module_are_those_whose_layout_places_one() -> None:
    assert {row for row, layout in moe.LAYOUTS.items() if "m" in layout} == moe.MTP_ROWS
