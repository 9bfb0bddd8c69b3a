"""The fidelity bench's helper `bench_fidelity.stage_blocks` (uneven pipeline stages)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_fidelity


def test_uneven_stages_follow_megatron_deepspeeds_partition() -> None:
    """BLOOM: 70 blocks over 12 stages, the embedding and the head counted as a layer each (72 / 12 = 6
    per stage): 5 blocks on the first and last stage, 6 on the others."""
    assert bench_fidelity.stage_blocks(70, 12) == (5, *[6] * 10, 5)
    assert sum(bench_fidelity.stage_blocks(70, 12) or ()) == 70
    assert bench_fidelity.stage_blocks(96, 8) is None
    assert not bench_fidelity.splittable(71, 12)
