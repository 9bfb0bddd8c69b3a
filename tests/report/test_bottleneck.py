"""The Gantt chart of the bottleneck block: written by a real search, and really the bottleneck."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import phazec.commands.search
from phazec.config.settings import settings_from_config, tpuv4_space
from phazec.hw.designs import Designs
from phazec.predict import bottleneck
from phazec.predict.bottleneck import bottleneck_block
from phazec.predict.evaluator import Candidate, Evaluator
from phazec.report.gantt import BOTTLENECK_PNG
from phazec.solvers.placement.problem import Placement
from tests.conftest import compose_config
from tests.search.test_search import QUICK, RESULT_KEYS


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG, from its IHDR chunk (after checking the signature)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_search_writes_the_bottleneck_gantt(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    real = bottleneck.bottleneck_block

    def spy(evaluator: Evaluator, designs: Designs, candidate: Candidate) -> bottleneck.BottleneckBlock:
        solves = evaluator.timings.ilp_solves
        block = real(evaluator, designs, candidate)
        new_solves = evaluator.timings.ilp_solves - solves
        seen.update(evaluator=evaluator, designs=designs, candidate=candidate, new_solves=new_solves)
        return block

    monkeypatch.setattr(phazec.commands.search, "bottleneck_block", spy)
    cfg = compose_config(*QUICK, f"cache_dir={cache_dir}", "model=bert_large", "hw=tpuv4")
    phazec.commands.search.run_search(settings_from_config(cfg), tmp_path, tpuv4_space())

    result = json.loads((tmp_path / "result.json").read_text())
    assert set(result) == RESULT_KEYS
    width, height = png_size(tmp_path / BOTTLENECK_PNG)
    assert 1000 <= width <= 2000 and 150 <= height <= 10000
    assert (tmp_path / BOTTLENECK_PNG).stat().st_size > 10_000
    # Every schedule was already solved by the search: the chart is drawn from cache hits.
    assert seen["new_solves"] == 0

    evaluator: Evaluator = seen["evaluator"]
    designs: Designs = seen["designs"]
    candidate: Candidate = seen["candidate"]
    placement = candidate.result
    assert isinstance(placement, Placement)
    assert [list(s.layers) for s in placement.stages] == [s["layers"] for s in result["plan"]["stages"]]

    # The bottleneck, worked out from the evaluator's per-layer latencies on the found design.
    chosen = designs.take(np.array([candidate.design]))
    latencies = evaluator.layer_latencies_s(chosen, candidate.training)[placement.t][0]
    loads = [s.load_s for s in placement.stages]
    stage = loads.index(max(loads))
    layers = list(placement.stages[stage].layers)
    slowest = float(latencies[:, layers].max())
    assert slowest > 0

    block = bottleneck_block(evaluator, designs, candidate)
    assert block.stage == stage
    assert block.layer in layers
    assert block.latency_s == slowest
    assert latencies[("forward", "backward").index(block.direction), block.layer] == slowest
    assert block.schedule.makespan_s == slowest
    # Ties (identical blocks) go to the first layer of the stage.
    assert block.layer == next(i for i in layers if latencies[:, i].max() == slowest)
    name = evaluator.graphs[placement.t].layers[block.layer].name
    parts = (
        "bert_large",
        f"layer {block.layer} ({name}",
        block.direction,
        "microbatch 8",
        f"stage {stage} of {len(loads)}",
    )
    for part in parts:
        assert part in block.title
