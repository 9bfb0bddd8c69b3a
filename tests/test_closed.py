"""Bounded and closed (issue 42): names that become paths stay plain names, a search's size is
stated and bounded before work, user presets fail in one paragraph naming file and line, physical
ranges, and baselines Megatron-LM cannot run reported "not applicable"."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from phazec import api
from phazec.cli import check_command_line, conf_dir
from phazec.commands.search import search_size
from phazec.config.settings import settings_from_config, typed
from phazec.errors import PhazecError
from phazec.hw import space as hw_space
from phazec.hw.ranges import RANGES
from phazec.hw.schema import HwConfig, SystemConfig
from phazec.hw.space import design_count, enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.util import sealed
from tests.conftest import compose_config
from tests.store_guard import HERE as GUARD_DIR
from tests.test_robust import TINY, run

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


# --- A bad user preset: one paragraph naming its file and line ------------------------------------


BAD_PRESETS = {
    "not YAML": (
        "hw",
        "defaults:\n  - tpuv4\n  - _self_\nname: mine\nnum_tc: [8\n",
        "{file}, line 6, column 1, is not valid YAML: expected ',' or ']', but got '<stream end>' (while "
        "parsing a flow sequence from line 5, column 9). Fix the file: close every [ and {{, quote a value "
        "holding ': ', and indent nested keys by the same amount.",
    ),
    "no devices": (
        "system",
        "name: mine\nglobal_batch: 1024\ntiers: []\n",
        "{file} (system=mine) does not set system.devices, which has no default: set it in the file or on "
        "the command line (the shipped presets of conf/system/ show each key).",
    ),
    "wrong type": (
        "hw",
        "defaults:\n  - tpuv4\n  - _self_\nname: mine\ndevice:\n  attention: flash\n  gemm_utilisation: x\n",
        "{file}, line 7: hw.device.gemm_utilisation is not valid: Value 'x' of type 'str' could not be "
        "converted to Float; give a value of the type its schema has.",
    ),
}
"""A user preset `mine` that Hydra reported with a traceback (YAML), without its file (a wrong type) or
not at all until read (a mandatory key): its group, text and the message after `The preset `."""


@pytest.mark.parametrize("case", list(BAD_PRESETS))
def test_a_bad_user_preset_is_one_paragraph_naming_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    group, text, message = BAD_PRESETS[case]
    root = (tmp_path / "presets").resolve()
    (root / group).mkdir(parents=True)
    (root / group / "mine.yaml").write_text(text)
    with pytest.raises(SystemExit) as exit_:
        check_command_line("config", ["--config-dir", str(root), f"{group}=mine"])
    assert exit_.value.code == 2
    expected = message.format(file=root / group / "mine.yaml")
    assert capsys.readouterr().err == f"phazec: error: The preset {expected}\n"


# --- Interrupts from the first import, and a failed write after result.json -----------------------

LAUNCH = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL); from phazec.launch import main; main()"
"""What the console script `phazec` runs (pyproject's [project.scripts]), as a terminal's foreground job
(whose Ctrl-C is not ignored, as a background job's is)."""


def unguarded() -> dict[str, str]:
    """This process's environment without the store guard's `sitecustomize` (tests/store_guard): its
    audit hook runs Python code at every event, and a signal handler that runs inside an audit hook
    has its `SystemExit` printed and dropped by the interpreter, so the command would go on. The
    command writes no store (tracking=none) and phazec installs no audit hook of its own."""
    env = {key: value for key, value in os.environ.items() if key != "PHAZEC_STORE_GUARD"}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != GUARD_DIR]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGTERM (Python's own start-up installs none)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & 1 << (signal.SIGTERM - 1))


@pytest.mark.parametrize("after_s", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_at_start_up_is_one_line_and_130_or_143(tmp_path: Path, signum: int, after_s: float) -> None:
    """From the moment `phazec.launch` runs (the interpreter's own start-up before it is Python's), while
    the commands are imported (matplotlib, MLflow, Hydra), the command line is checked or the run
    starts: a Ctrl-C was a KeyboardInterrupt traceback, a SIGTERM an exit without a word."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LAUNCH,
            "model=bert_large",
            "hw=tpuv4",
            "tracking=none",
            f"cache_dir={tmp_path}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=unguarded(),
    )
    while not catches_sigterm(process.pid):
        time.sleep(0.001)
    time.sleep(after_s)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr
    assert stderr.rstrip().endswith("phazec: interrupted; rerun the same command to resume")
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


@pytest.mark.parametrize("blocked", ["explored.csv", "throughput_vs_area.png"])
def test_a_write_failing_after_result_json_names_what_was_saved(
    tmp_path: Path, cache_dir: Path, blocked: str
) -> None:
    out = tmp_path / "run"
    (out / blocked).mkdir(parents=True)  # a directory in the way: the write fails as on a full disk
    with pytest.raises(PhazecError) as error:
        api.search(*TINY, f"cache_dir={cache_dir}", out_dir=out)
    assert str(error.value) == (
        f"{out / 'result.json'} was saved, with the whole result, but writing {out / blocked} failed (Is a "
        "directory); make room (or move what is in the way) and rerun the same command: it resumes from its "
        "cache and writes every file."
    )
    assert json.loads((out / "result.json").read_text())["throughput_samples_per_s"] > 0


# --- Physical ranges ------------------------------------------------------------------------------

LISTS = ("hw.num_tc", "hw.num_vc", "system.hbm_gb")
"""Ranged values given as lists (a tier's are set in the first tier)."""
COUNTS = ("hw.num_tc", "hw.num_vc", "hw.device.collective_sms", "system.devices", "system.global_batch")
"""Ranged values that are integers."""


def with_value(key: str, value: float, *overrides: str) -> Any:
    """The config of BERT-large on tpuv4 and phaze_1024 with the ranged value `key` set to `value`."""
    cfg = compose_config("model=bert_large", "hw=tpuv4", "hw.power_budget_w=500", *overrides)
    given = int(value) if key in COUNTS else value
    OmegaConf.update(cfg, key.replace("system.tiers.", "system.tiers.0."), [given] if key in LISTS else given)
    return cfg


@pytest.mark.parametrize("key", list(RANGES))
def test_a_value_outside_its_physical_range_is_refused(tmp_path: Path, key: str) -> None:
    bounds = RANGES[key]
    shown = {
        "hw.num_tc": "hw.num_tc (largest)",
        "hw.num_vc": "hw.num_vc (largest)",
        "system.hbm_gb": "system.hbm_gb[0]",
    }
    name = shown.get(key, key.replace("system.tiers.", "system.tiers[0]."))
    value = bounds.hi * 10
    with pytest.raises(PhazecError) as error:
        settings_from_config(with_value(key, value, f"cache_dir={tmp_path}"))
    assert str(error.value) == (
        f"{name}={value:g} {bounds.unit} is outside the physical range {bounds.lo:g} to {bounds.hi:g} "
        f"{bounds.unit} ({bounds.source}); give a value within it."
    )


def test_an_hbm_bandwidth_of_1e300_is_refused(tmp_path: Path) -> None:
    """The audit's case: it ran to the end and reported a peak power of 3.1e289 W."""
    cfg = compose_config(
        "model=bert_large", "hw=tpuv4", "hw.hbm_bytes_per_s=1.0e300", f"cache_dir={tmp_path}"
    )
    with pytest.raises(
        PhazecError,
        match=r"^hw.hbm_bytes_per_s=1e\+300 bytes/s is outside the physical range 1e\+08 to 1e\+15 bytes/s",
    ):
        settings_from_config(cfg)


def test_a_value_beyond_todays_hardware_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = compose_config("model=bert_large", "hw=tpuv4", "hw.clock_hz=8e9", f"cache_dir={tmp_path}")
    with caplog.at_level(logging.WARNING, logger="phazec.hw.ranges"):
        assert settings_from_config(cfg).hw.clock_hz == 8e9
    assert [record.getMessage() for record in caplog.records] == [
        "hw.clock_hz=8e+09 Hz is outside what hardware has today, 1e+08 to 5e+09 Hz (TPUv4 1.05 GHz, A100 "
        "1.41 GHz, H100 SXM 1.98 GHz boost (vendor data sheets)); using it as given"
    ]


def test_every_range_is_documented() -> None:
    page = (Path(conf_dir()).parent / "docs" / "devices.md").read_text()
    for key, bounds in RANGES.items():
        assert f"| `{key}` | {bounds.lo:g} to {bounds.hi:g} {bounds.unit} | {bounds.usual_lo:g} to " in page


def test_every_shipped_preset_is_within_todays_ranges(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="phazec.hw.ranges"):
        for hw in sorted(p.stem for p in (Path(conf_dir()) / "hw").glob("*.yaml")):
            hw_space_from_config(typed(HwConfig, compose_config(f"hw={hw}").hw, "hw"))
        for system in sorted(p.stem for p in (Path(conf_dir()) / "system").glob("*.yaml")):
            system_from_config(typed(SystemConfig, compose_config(f"system={system}").system, "system"))
    assert caplog.records == []


# --- What a cache's checksum promises -------------------------------------------------------------


@pytest.mark.parametrize(("mode", "warned"), [(0o755, False), (0o775, True), (0o777, True)])
def test_a_cache_others_can_write_is_named_as_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: bool
) -> None:
    """A checksum catches damage, not an edit by someone who can write the cache (an entry edited with
    its SHA-256 recomputed is believed): a cache_dir others can write is said to be trusted."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="phazec.util.sealed"):
        settings_from_config(compose_config("model=bert_large", "hw=tpuv4", f"cache_dir={cache}"))
    expected = (
        f"cache_dir {cache} can be written by other users (mode {mode:o}): a cache entry's checksum catches "
        "damage, not an edit by someone who can write the cache, so phazec believes what they write there; "
        "use a directory only you can write (chmod go-w) unless you trust them"
    )
    assert [record.getMessage() for record in caplog.records] == ([expected] if warned else [])


def test_an_entry_edited_with_its_checksum_recomputed_is_believed(tmp_path: Path) -> None:
    """The limit the docs state (docs/guide/search.md, Resume): the checksum has no key."""
    path = tmp_path / "entry.json"
    sealed.write(path, "inputs", {"time_s": 1.0})
    header, _, _ = path.read_bytes().partition(b"\n")
    forged = b'{"time_s":0.01}'
    edited = json.loads(header) | {"sha256": sealed.digest(forged)}
    path.write_bytes(json.dumps(edited).encode() + b"\n" + forged)
    assert sealed.read(path, "inputs") == {"time_s": 0.01}
    page = (Path(conf_dir()).parent / "docs" / "guide" / "search.md").read_text()
    assert "The checksum catches damage, not a deliberate edit" in " ".join(page.split())
