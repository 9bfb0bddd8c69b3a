"""Bounded and closed (issue 42): names that become paths stay plain names, a search's size is
stated and bounded before work, user presets fail in one paragraph naming file and line, physical
ranges, and baselines Megatron-LM cannot run reported "not applicable"."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from phazec import api
from phazec.commands.search import search_size
from phazec.config.settings import settings_from_config, typed
from phazec.errors import PhazecError
from phazec.hw import space as hw_space
from phazec.hw.schema import HwConfig
from phazec.hw.space import design_count, enumerate_designs, hw_space_from_config
from tests.conftest import compose_config
from tests.test_robust import run

# --- Names that become paths ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../trav", "/tmp/abs", "a/b", "a\\b", "..", ".", "", "x..y", "a\0b"])
@pytest.mark.parametrize("key", ["model.name", "hw.name", "system.name"])
def test_a_name_that_would_leave_its_directory_is_refused(tmp_path: Path, key: str, name: str) -> None:
    cfg = compose_config("model=bert_large", f"cache_dir={tmp_path}")
    cfg[key.partition(".")[0]].name = name
    with pytest.raises(PhazecError, match=f"^{key}=.* is not valid: it becomes part of a file name"):
        settings_from_config(cfg)
    assert list(tmp_path.iterdir()) == []  # nothing exported, inside the cache or beside it


def test_a_plain_name_is_kept(tmp_path: Path) -> None:
    cfg = compose_config("model=bert_large", "model.name=my-bert.v2_1", f"cache_dir={tmp_path}")
    assert settings_from_config(cfg).model.name == "my-bert.v2_1"


def test_a_model_list_names_result_directories_by_plain_names(tmp_path: Path) -> None:
    cfg = compose_config("model=bert_large", f"cache_dir={tmp_path}")
    with pytest.raises(PhazecError, match=r"^model='\.\./model/bert_large' is not valid"):
        api.models_settings(cfg, ["opt_350m", "../model/bert_large"])


# --- A search's size, bounded before work ---------------------------------------------------------

BIG = {
    "name": "big",
    "num_tc": list(range(1, 33)),
    "num_vc": list(range(1, 33)),
    "tc_width": [8 * n for n in range(1, 33)],
    "tc_depth": [8 * n for n in range(1, 33)],
    "vc_width": [8 * n for n in range(1, 33)],
    "glb_bytes": [2**21 + 2**22 * n for n in range(32)],
    "sram_interpolation": True,
}
"""A user's space of 32^6 = 1,073,741,824 candidate designs (`bench/bench_space.py` times its refusal)."""


def test_a_space_of_a_billion_designs_is_refused_naming_the_knobs(tmp_path: Path) -> None:
    cfg = compose_config("model=bert_large", "hw=tpu_small", f"cache_dir={tmp_path}")
    cfg.hw = OmegaConf.merge(cfg.hw, BIG)
    with pytest.raises(PhazecError) as error:
        settings_from_config(cfg)
    assert str(error.value) == (
        "hw space 'big' has 1,073,741,824 candidate designs (hw.num_tc 32 x hw.tc_width 32 x hw.tc_depth 32 "
        "x hw.num_vc 32 x hw.vc_width 32 x hw.glb_bytes 32 values), more than search.max_designs=1,000,000: "
        "enumerating and searching it would take hours and many GB. Give the knobs with the most values "
        "fewer (a shorter list, or a narrower {pow2: [lo, hi]}), or raise search.max_designs to at least "
        "1073741824 to search it anyway (enumeration then keeps only the designs within the budgets in "
        "memory)."
    )


@pytest.mark.parametrize(("limit", "refused"), [(75711, True), (75712, False)])
def test_the_limit_is_the_product_of_the_knobs_value_counts(
    tmp_path: Path, limit: int, refused: bool
) -> None:
    # tpu_area: num_tc 13 x tc_width 8 x tc_depth 8 x num_vc 13 x glb_bytes 7 = 75,712 (vc_width tied).
    cfg = compose_config(
        "model=bert_large", "hw=tpu_area", f"search.max_designs={limit}", f"cache_dir={tmp_path}"
    )
    if refused:
        counted = (
            r"^hw space 'tpu_area' has 75,712 candidate designs \(hw.num_tc 13 x hw.num_vc 13 x "
            r"hw.tc_width 8 x hw.tc_depth 8 x hw.glb_bytes 7 values\), more than search.max_designs=75,711:"
        )
        with pytest.raises(PhazecError, match=counted):
            settings_from_config(cfg)
    else:
        assert design_count(settings_from_config(cfg).hw) == 75712


def test_a_search_states_its_size_before_work(tmp_path: Path) -> None:
    cfg = compose_config("model=bert_large", "hw=tpu_small", "system.hbm_gb=[32,80]", f"cache_dir={tmp_path}")
    assert search_size(settings_from_config(cfg)) == (
        "hw space 'tpu_small' has 48 candidate designs (hw.num_tc 3 x hw.tc_width 2 x hw.tc_depth 2 x "
        "hw.num_vc 2 x hw.glb_bytes 2 values) before the area and power budgets, each tried with 2 HBM "
        "sizes (system.hbm_gb): at most 96 design and memory pairs to evaluate"
    )


def test_a_search_logs_its_size_first(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        run(tmp_path, cache_dir)
    messages = [record.getMessage() for record in caplog.records]
    stated = messages.index(
        "hw space 'tpuv4' has 1 candidate designs (every knob fixed) before the area and power budgets, each "
        "tried with 1 HBM sizes (system.hbm_gb): at most 1 design and memory pairs to evaluate"
    )
    assert stated < next(i for i, m in enumerate(messages) if m.startswith("lowering:"))


def test_enumeration_a_chunk_at_a_time_is_enumeration_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    space = hw_space_from_config(typed(HwConfig, compose_config("hw=tpu_area").hw, "hw"))
    whole = enumerate_designs(space)
    monkeypatch.setattr(hw_space, "CHUNK", 1000)  # 75,712 grid points: 76 chunks, the last one short
    chunked = enumerate_designs(space)
    for name in (
        "num_tc",
        "tc_width",
        "tc_depth",
        "num_vc",
        "vc_width",
        "glb_bytes",
        "area_mm2",
        "peak_power_w",
    ):
        assert np.array_equal(getattr(chunked, name), getattr(whole, name))
    assert len(whole) == 29360
