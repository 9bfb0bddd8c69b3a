"""Fuzz: random config overrides, ONNX metadata and cache damage end in a correct result or in one
paragraph of PhazecError (the CLI's exit 2), never in another exception or a different answer.

CI draws a few examples (`PHAZEC_FUZZ_EXAMPLES`, default 6 per test); `make fuzz` draws many more.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phazec.api import composed
from phazec.cli import config_dir_searchpath
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.frontend.lower import lower_onnx
from tests.conftest import sharing
from tests.test_robust import answer, run, write_onnx

EXAMPLES = int(os.environ.get("PHAZEC_FUZZ_EXAMPLES", "6"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

KEYS = (
    "search.bin_mm2",
    "search.patience",
    "search.batch_designs",
    "search.workers",
    "search.trials",
    "train.microbatch",
    "train.recompute",
    "system.hbm_gb",
    "system.devices",
    "system.global_batch",
    "model.tp_widths",
    "model.baseline.pp",
    "model.baseline.dp",
    "hw.area_floor",
    "solver.mip_gap",
    "solver.time_limit_s",
    "hw.hbm_bytes_per_s",
    "hw.clock_hz",
    "hw.power_budget_w",
    "model.name",
    "system.name",
    "search.max_designs",
) + (
    ("model.seq_len", "model.hf_config.hidden_size", "model.hf_config.num_attention_heads")
    if EXAMPLES > 6
    else ()
)
"""Keys to override; with more examples than CI's, also model dimensions (a valid one costs an export)."""
VALUES = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "0", "1", "3", "1e300", "1000000000", "[]", "[0]", "[-1]", "[nan]",
     "abc", "true", "null", "[1,2]", "0.5", "../../trav", "/abs/path", "a\\\\b", "..", "2e9"]
)  # fmt: skip


def one_paragraph(error: PhazecError) -> None:
    text = str(error)
    assert text and "\n\n" not in text and "Traceback" not in text


@FUZZ
@given(overrides=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3))
def test_random_overrides(
    tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, overrides: list[Any]
) -> None:
    out = tmp_path_factory.mktemp("fuzz")
    args = [f"{k}={v}" for k, v in overrides]
    try:
        result = run(out, cache_dir, *args)
    except PhazecError as error:
        one_paragraph(error)
        return
    except Exception as error:  # a composition error is Hydra's own one-paragraph message
        from omegaconf.errors import OmegaConfBaseException

        assert isinstance(error, OmegaConfBaseException) or type(error).__module__.startswith("hydra"), error
        return
    assert result["throughput_samples_per_s"] > 0


TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["[", "[1]", "{}", "None", "['a', 1]", "1009", "-5"]))


@FUZZ
@given(
    scope=st.one_of(st.none(), TEXT), sentinel=st.one_of(st.none(), TEXT), params=st.one_of(st.none(), TEXT)
)
def test_random_onnx_metadata(
    tmp_path_factory: pytest.TempPathFactory, scope: str | None, sentinel: str | None, params: str | None
) -> None:
    props = {}
    if sentinel is not None:
        props["phazec.batch_sentinel"] = sentinel
    if params is not None:
        props |= {"phazec.parameters": params, "phazec.data_inputs": "[]"}
    path = write_onnx(tmp_path_factory.mktemp("onnx") / "m.onnx", 8, props, scope)
    try:
        model = lower_onnx(path, "m")
    except PhazecError as error:
        one_paragraph(error)
        return
    assert model.layers


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """A finished search's cache and its answer."""
    cache = sharing(tmp_path_factory.mktemp("truth-cache"), cache_dir)
    return cache, answer(run(tmp_path_factory.mktemp("truth"), cache))


@FUZZ
@given(data=st.data())
def test_random_cache_damage(
    tmp_path_factory: pytest.TempPathFactory, truth: tuple[Path, dict[str, Any]], data: st.DataObject
) -> None:
    source, expected = truth
    cache = tmp_path_factory.mktemp("damaged")
    shutil.copytree(source, cache, dirs_exist_ok=True, symlinks=True)
    files = sorted(p for p in cache.rglob("*.json") if "onnx" not in p.parts)
    for path in data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=3, unique=True)):
        raw = path.read_bytes()
        cut = data.draw(st.integers(0, len(raw)))
        junk = data.draw(st.binary(max_size=8))
        path.write_bytes(raw[:cut] + junk + raw[cut + len(junk) :])
    got = answer(run(tmp_path_factory.mktemp("out"), cache))
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


USER_PRESET = (Path(__file__).parent.parent / "conf" / "hw" / "tpu_small.yaml").read_text()
"""A preset to damage: the text of `hw=tpu_small`, given as the user's `hw=mine`."""


@FUZZ
@given(data=st.data())
def test_random_user_preset_damage(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """A user preset cut, spliced with junk or given other values ends in settings or one paragraph
    (naming the file where the file is at fault), never in a traceback."""
    root = tmp_path_factory.mktemp("presets")
    (root / "hw").mkdir()
    cut = data.draw(st.integers(0, len(USER_PRESET)))
    junk = data.draw(
        st.one_of(st.text(max_size=12), st.sampled_from(["[", ": :", "\n  - ", "\t", "clock_hz: 1e300\n"]))
    )
    (root / "hw" / "mine.yaml").write_text(USER_PRESET[:cut] + junk + USER_PRESET[cut + len(junk) :])
    try:
        settings_from_config(
            composed("config", [*config_dir_searchpath(str(root)), "hw=mine", "model=bert_large"])
        )
    except PhazecError as error:
        one_paragraph(error)
