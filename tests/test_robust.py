"""Nothing lost, nothing silently wrong: validation before the search, self-healing caches, durable
files, unique run directories, worker lifetime and clean interrupts (issue 16's audit cases)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from phazec import api
from phazec.cli import conf_dir
from phazec.commands.search import run_search, search_state
from phazec.config import command_line as validate
from phazec.config.rundir import unique_dir
from phazec.config.settings import settings_from_config, tpuv4_space, typed
from phazec.errors import PhazecError
from phazec.frontend.lower import lower_onnx
from phazec.hw.schema import DeviceConfig, HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.report.plots import write_plots
from phazec.search.executors.base import worker_count
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState
from phazec.solvers.schedule.solve import ScheduleCache
from phazec.util import atomic, sealed
from tests.conftest import compose_config, sharing

QUICK = ("train.microbatch=[8]", "train.recompute=[false]", "system.hbm_gb=[32]", "tracking=none")
BERT2 = ("model=bert_large",)
TINY = (*BERT2, "hw=tpuv4", *QUICK)
"""BERT-large (exported once per session) on the one TPUv4 design: a search in a few seconds."""


def run(tmp_path: Path, cache: Path, *overrides: str) -> dict[str, Any]:
    """Run a search in `tmp_path` (BERT-large unless `overrides` names another model)."""
    model = () if any(o.startswith("model=") for o in overrides) else BERT2
    cfg = compose_config(*model, "hw=tpuv4", *QUICK, f"cache_dir={cache}", *overrides)
    run_search(settings_from_config(cfg), tmp_path, tpuv4_space())
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


def answer(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its timings and config."""
    return {k: v for k, v in result.items() if k not in ("search", "config")}


# --- Files: umask, fsync, atomic plots ------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_files_get_the_users_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        atomic.write_bytes(tmp_path / "a" / "f.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "f.json").stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["f.json"]  # no temporary file left


def test_plots_are_written_atomically_with_the_umask(tmp_path: Path, cache_dir: Path) -> None:
    result = run(tmp_path, cache_dir)
    old = os.umask(0o022)
    try:
        paths = write_plots(result, tmp_path)
    finally:
        os.umask(old)
    for path in paths:
        assert path.read_bytes().startswith(b"\x89PNG")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".*.tmp"))


# --- Caches that heal -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: b"",  # empty (a power loss before fsync)
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: b"\x00junk\xff" * 10,  # junk
        lambda raw: raw.replace(b"1.5", b"9.5"),  # edited payload
        lambda raw: raw.replace(b'"format": 1', b'"format": 0'),  # another format
    ],
)
def test_a_damaged_entry_is_logged_once_deleted_and_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    path = tmp_path / "entry.json"
    sealed.write(path, "inputs", {"x": 1.5})
    assert sealed.read(path, "inputs") == {"x": 1.5}
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="phazec.util.sealed"):
        assert sealed.read(path, "inputs") is None
        assert sealed.read(path, "inputs") is None
    assert not path.exists()
    assert len(caplog.records) == 1
    assert "computing it again" in caplog.records[0].getMessage()


def test_an_entry_of_other_inputs_is_not_believed(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    sealed.write(path, "key-a", [1, 2])
    assert sealed.read(path, "key-b") is None
    assert not path.exists()


def cache_files(cache: Path, pattern: str) -> list[Path]:
    return sorted(cache.glob(pattern))


def test_edited_schedule_and_state_files_are_recomputed(tmp_path: Path, cache_dir: Path) -> None:
    """The audit's cases: an edited schedule-cache file changed the answer, an edited search-state
    file made TPUv4 100x faster; now both are recomputed and the answer is the true one."""
    cache = sharing(tmp_path / "cache", cache_dir)
    truth = run(tmp_path / "first", cache)
    schedules = cache_files(cache, "schedules/*.json")
    batches = cache_files(cache, "search/*/batch_*.json")
    assert schedules and batches
    for path in schedules:  # every layer 100x faster
        header, body = path.read_bytes().split(b"\n", 1)
        data = json.loads(body)
        data["makespan_s"] /= 100
        path.write_bytes(header + b"\n" + json.dumps(data).encode())
    for path in batches:
        header, body = path.read_bytes().split(b"\n", 1)
        data = json.loads(body)
        for c in data["candidates"]:
            if "placement" in c:
                c["placement"]["throughput_samples_per_s"] *= 100
        path.write_bytes(header + b"\n" + json.dumps(data).encode())
    again = run(tmp_path / "again", cache)
    assert answer(again) == answer(truth)
    # A truncated and an empty file heal too (and are rewritten whole).
    schedules[0].write_bytes(schedules[0].read_bytes()[:10])
    batches[0].write_bytes(b"")
    assert answer(run(tmp_path / "third", cache)) == answer(truth)
    assert sealed.read(batches[0], json.loads(batches[0].read_bytes().split(b"\n")[0])["inputs"])


def test_schedule_cache_heals_a_junk_entry(tmp_path: Path) -> None:
    cache = ScheduleCache(tmp_path)
    (tmp_path / "abc.json").write_text("{not json")
    assert cache.get("abc") is None
    assert not (tmp_path / "abc.json").exists()


def test_search_state_ignores_a_batch_of_other_designs(tmp_path: Path) -> None:
    state = SearchState(tmp_path, resume=True)
    state.put_bounds(0, np.array([1, 2]), np.array([0.5, 0.25]))
    assert state.bounds(0, np.array([1, 2])).tolist() == [0.5, 0.25]  # type: ignore[union-attr]
    assert state.bounds(0, np.array([1, 3])) is None


def write_onnx(path: Path, width: int, props: dict[str, str] | None = None, scope: str | None = None) -> Path:
    """A one-MatMul ONNX model (x[4,width] @ w[width,width]) with optional metadata."""
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="/layers.0/mm")
    if scope is not None:
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", scope
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])],
        [helper.make_tensor("w", TensorProto.FLOAT, [width, width], np.zeros(width * width).tolist())],
    )
    model = helper.make_model(graph)
    if props:
        helper.set_model_props(model, props)
    onnx.save(model, str(path))
    return path


def test_state_key_covers_the_onnx_contents_not_the_baseline(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    write_onnx(path, 8)
    common = ("model=onnx", f"model.path={path}", "hw=tpu_small")
    key = search_state(settings_from_config(compose_config(*common))).directory.name
    write_onnx(path, 16)  # another model at the same path
    assert search_state(settings_from_config(compose_config(*common))).directory.name != key
    assert (
        search_state(settings_from_config(compose_config(*common, "model.baseline.pp=1000"))).directory.name
        == search_state(settings_from_config(compose_config(*common))).directory.name
    )


def test_a_damaged_cached_export_is_exported_again(tmp_path: Path, cache_dir: Path) -> None:
    from phazec.frontend.export import exported_onnx
    from tests.conftest import model_config

    cfg = dataclasses.replace(model_config("bert_large"), seq_len=16)
    cfg.hf_config["num_hidden_layers"] = 1
    first = exported_onnx(cfg, tmp_path)
    good = first.read_bytes()
    first.write_bytes(good[: len(good) // 3])
    again = exported_onnx(cfg, tmp_path)
    assert again == first
    assert again.read_bytes() == good


# --- Validation before the search ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("search.bin_mm2=nan",), r"search.bin_mm2=nan is not a finite number"),
        (("search.bin_mm2=inf",), r"search.bin_mm2=inf is not a finite number"),
        (("system.hbm_gb=[32,inf]",), r"system.hbm_gb\[1\] = inf is not valid: it must be a finite number"),
        (
            ("train.recompute=[]",),
            r"train.recompute=\[\] is not valid: list at least one setting to search, e.g. \[False, True\]",
        ),
        (
            ("system.global_batch=1000", "train.microbatch=[64]"),
            r"\[64\] do not divide the global batch 1000",
        ),
        (("model.hf_config.hidden_size=-1",), r"model.hf_config.hidden_size=-1 is not valid"),
        (("model.hf_config.num_attention_heads=0",), r"num_attention_heads=0 is not valid"),
        (("model.hf_config.num_hidden_layers=0",), r"num_hidden_layers=0 is not valid"),
        (("model.hf_config.hidden_size=1000",), r"cannot be built from model.hf_config=.*hidden_size"),
        (("model.seq_len=1000000000",), r"model.seq_len=1000000000 is not valid"),
        (("model=onnx",), r"model.path is not set: give model.path=/abs/path/model.onnx"),
        (("model=onnx", "model.path=/"), r"model.path='/' is a directory: give the .onnx file inside it"),
        (("model=onnx", "model.path=/nonexistent.onnx"), r"'/nonexistent.onnx' does not exist; give"),
    ],
)
def test_bad_config_fails_before_the_search(
    tmp_path: Path, cache_dir: Path, overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(PhazecError, match=message):
        run(tmp_path, cache_dir, *overrides)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("plan.sequence_parallel=2", r"^plan.sequence_parallel=2 is not valid: .* give true or false\.$"),
        ("hw.device.shared_cores=0", r"^hw.device.shared_cores=0 is not valid: .* give true or false\.$"),
        ("train.sequence_parallel=[false,1]", r"^train.sequence_parallel=\[false,1\] .* for each element\.$"),
    ],
)
def test_a_switch_is_true_or_false(override: str, message: str) -> None:
    """OmegaConf reads any integer as a boolean; phazec takes only true and false (its API here; the
    command line in `test_cli_bad_command_lines_exit_2`)."""
    with pytest.raises(PhazecError, match=message):
        api.plan("model=bert_large", "hw=a100", override)
    assert api.composed("plan", ["hw=a100", "plan.sequence_parallel=true"]).plan.sequence_parallel is True


@pytest.mark.parametrize("where", ["file", "proc", "read-only"])
def test_unwritable_cache_dir(tmp_path: Path, where: str) -> None:
    if where == "file":
        cache = tmp_path / "a-file"
        cache.write_text("")
    elif where == "proc":
        cache = Path("/proc/phazec-cache")
    elif os.geteuid() == 0:  # root writes into any mode-0500 directory, not into sysfs's
        cache = Path("/sys/fs")
    else:
        cache = tmp_path / "ro"
        cache.mkdir(mode=0o500)
    with pytest.raises(PhazecError, match=r"cache_dir .* is not a writable directory"):
        run(tmp_path / "out", cache)
    with pytest.raises(PhazecError, match=r"cache_dir .* is not a writable directory"):
        api.lower(f"cache_dir={cache}")  # phazec-ir's


def test_run_directory_below_a_file(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(PhazecError, match=r"the run directory .* is not a writable directory"):
        run(tmp_path / "file" / "run", cache_dir)


@pytest.mark.parametrize(
    ("props", "scope", "message"),
    [
        ({}, "not a literal [", r"malformed metadata /layers.0/mm:pkg.torch.onnx.name_scopes"),
        ({}, "{'a': 1}", r"must be a list of strings"),
        ({}, "[" * 100_000 + "]" * 100_000, r"malformed metadata"),
        ({"phazec.batch_sentinel": "abc"}, None, r"phazec.batch_sentinel='abc': it must be a non-negative"),
        ({"phazec.parameters": "[oops", "phazec.data_inputs": "[]"}, None, r"phazec.parameters='\[oops'"),
        ({"phazec.parameters": "[]", "phazec.data_inputs": "7"}, None, r"phazec.data_inputs='7'"),
    ],
)
def test_malformed_onnx_metadata(
    tmp_path: Path, props: dict[str, str], scope: str | None, message: str
) -> None:
    path = write_onnx(tmp_path / "m.onnx", 8, props, scope)
    with pytest.raises(PhazecError, match=message):
        lower_onnx(path, "m")


def test_an_empty_onnx_file(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(PhazecError, match=r"holds no operators \(0 bytes\)"):
        lower_onnx(path, "m")
    with pytest.raises(PhazecError, match=r"holds no operators"):
        run(tmp_path / "out", cache_dir, "model=onnx", f"model.path={path}")


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (("model.baseline.pp=1000",), "pp=1000 dp=128 tp=1 cannot run at any microbatch"),
        (
            ("system.devices=512",),
            "pp=8 dp=128 tp=1 cannot run at any microbatch (microbatch 8: model.baseline.tp * "
            "model.baseline.pp * model.baseline.dp = 1 * 8 * 128 = 1024 does not divide the 512 devices",
        ),
        (
            ("system.global_batch=1000",),
            "pp=8 dp=128 tp=1 cannot run at any microbatch (microbatch 8: model.baseline.dp=128 does not "
            "divide the 125 microbatches of a batch (global batch 1000 / microbatch 8)",
        ),
        (
            ("system.global_batch=1000", "train.microbatch=[1]"),
            "pp=8 dp=128 tp=1 cannot run at any microbatch (microbatch 1: model.baseline.dp=128 does not "
            "divide the 1000 microbatches of a batch (global batch 1000 / microbatch 1): Megatron-LM gives "
            "every replica the same number",
        ),
    ],
    ids=["pp=1000", "devices=512", "global_batch=1000", "uneven microbatches"],
)
def test_a_baseline_that_cannot_run_is_not_applicable(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture, overrides: tuple[str, ...], why: str
) -> None:
    """The audit's cases: the preset's Megatron plan (dp=128) on 512 devices, or with 1000 samples a
    batch (125 microbatches of 8 for 128 replicas; 1000 microbatches of 1, which 128 replicas cannot
    share evenly: timed before, though `phazec-plan` refuses it, as Megatron-LM does), or with 1000
    pipeline stages. The rule is `phazec-plan`'s (`phazec.predict.megatron.check_runs`). The search's answer
    is kept; the baseline is "not applicable" with the reason (warned before the search where the
    plan needs more devices than the system has)."""
    with caplog.at_level(logging.WARNING, logger="phazec.commands.search"):
        result = run(tmp_path, cache_dir, *overrides)
    assert ("cannot run" in caplog.text) == ("global_batch" not in overrides[0])
    for name in ("tpuv4_megatron_plan", "found_design_megatron_plan"):
        entry = result["baselines"][name]
        assert entry["plan"] is None
        assert entry["not_applicable"].startswith(f"the plan {why}")
    assert result["design"] is not None and result["throughput_samples_per_s"] > 0
    from phazec.report.table import result_table

    table = result_table(result)
    assert "not applicable (below)" in table and "0.00x" not in table  # no throughput to compare
    assert f"tpuv4 megatron plan and found design megatron plan: not applicable: the plan {why[:20]}" in table


def test_workers_above_the_core_count_are_capped(caplog: pytest.LogCaptureFixture) -> None:
    cfg = compose_config(*TINY, "search.workers=1000")
    with caplog.at_level(logging.WARNING, logger="phazec.search.executors.base"):
        assert worker_count(typed(SearchConfig, cfg.search, "search"), 10**6) == os.cpu_count()
    assert f"search.workers=1000 is more than the {os.cpu_count()} cores" in caplog.text


# --- Unique run directories -----------------------------------------------------------------------


def test_run_directories_started_at_once_are_distinct(tmp_path: Path) -> None:
    base = str(tmp_path / "outputs" / "2026-01-01" / "00-00-00")
    claimed: list[str] = []
    threads = [threading.Thread(target=lambda: claimed.append(unique_dir(base))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted([base, *(f"{base}-{n}" for n in range(1, 8))])


def test_a_run_directory_below_a_file_is_one_paragraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exit_:
        unique_dir(str(tmp_path / "file" / "outputs" / "x"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("phazec: error: cannot create the run directory") and err.count("\n") == 1
    assert "(Not a directory); start phazec from" in err


@pytest.mark.parametrize(("kind", "base"), [("run", "outputs"), ("sweep", "multirun")])
def test_hydra_run_directories_of_two_runs_in_one_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, base: str
) -> None:
    """Runs and sweeps alike: the default directory is claimed by `phazec.unique`, and two runs
    naming one directory in one second get two."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    monkeypatch.chdir(tmp_path)
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        default = compose("config", return_hydra_config=True)
    unresolved = OmegaConf.to_container(default.hydra[kind], resolve=False)
    assert isinstance(unresolved, dict) and unresolved["dir"].startswith(f"${{phazec.unique:{base}/${{now:")
    override = f"hydra.{kind}.dir=${{phazec.unique:{base}/same-second}}"
    dirs = []
    for _ in range(2):
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            cfg = compose("config", overrides=[override], return_hydra_config=True)
        dirs.append(cfg.hydra[kind].dir)
        assert cfg.hydra[kind].dir == dirs[-1]  # resolved once, then cached
    assert dirs == [f"{base}/same-second", f"{base}/same-second-1"]
    assert all((tmp_path / d).is_dir() for d in dirs)


def test_the_python_api_raises_what_hydra_cannot_compose_as_one_paragraph(tmp_path: Path) -> None:
    with pytest.raises(PhazecError, match=r"^hw.device.fuse is not a key of hw.device; valid keys: shared_"):
        api.search("hw.device.fuse=true", out_dir=tmp_path)
    hw = r"^Could not find 'hw/tpu'. Available options in 'hw': a100, b200, gb200, gb300, h100, h100_500w, "
    with pytest.raises(PhazecError, match=hw):
        api.plan("hw=tpu", out_dir=tmp_path)
    with pytest.raises(PhazecError, match=r"^model=\[\]: give a list of distinct model presets"):
        api.search("model=[]", out_dir=tmp_path)
    with pytest.raises(PhazecError, match=r"^Config group override must be a string or a list. Got NoneType"):
        api.search("model=null", out_dir=tmp_path)
    with pytest.raises(PhazecError, match=r"^hw.num_tc: Interpolation key 'oops' not found; an "):
        api.plan("hw=tpuv4", "hw.num_tc=${oops}", out_dir=tmp_path)
    # Hydra appends a key the schema lacks; nothing would read it.
    with pytest.raises(PhazecError, match=r"^hw.device.hbm_share is not a key of hw.device; valid keys: "):
        api.plan("+hw.device.hbm_share=true", out_dir=tmp_path)
    # A list for a range, a range for a list: Hydra merges an override into the node it replaces.
    with pytest.raises(PhazecError) as range_preset:
        api.search("hw=tpu_area", "hw.num_tc=[4]", out_dir=tmp_path)
    assert str(range_preset.value) == (
        "hw.num_tc=[4] cannot be applied: hw.num_tc holds a mapping here, and an override is merged into the "
        "value it replaces, so a list cannot replace it. This preset gives hw.num_tc as a range: give "
        "hw.num_tc={pow2:[lo,hi]}, or hw.num_tc={pow2:[v,v]} for one value v (a power of two)."
    )
    with pytest.raises(PhazecError, match=r"preset lists hw.glb_bytes's values: give a list, such as hw.glb"):
        api.search("hw=tpu_small", "hw.glb_bytes={pow2:[1,4]}", out_dir=tmp_path)
    with pytest.raises(PhazecError, match=r"a mapping cannot replace it. Give model.tp_widths as a list.$"):
        api.search("model.tp_widths={a:1}", out_dir=tmp_path)
    with pytest.raises(PhazecError) as scalar:
        api.search("train.microbatch=8", out_dir=tmp_path)
    assert str(scalar.value) == (
        "train.microbatch=8 is not valid: train.microbatch is a list of the values to search; give "
        "train.microbatch=[8] for that value alone."
    )
    sweeps = ["hw=tpuv4,tpu_small", "train.microbatch=[8,16]", "search.seed=range(3)", "model=glob(bert*)"]
    fixed = ["train.microbatch=[8,16]"]
    assert validate.sweep_command_lines(sweeps) == [
        fixed,
        [*fixed, "hw=tpuv4"],
        [*fixed, "hw=tpu_small"],
        [*fixed, "search.seed=0"],
        [*fixed, "model=bert_large"],
    ]
    hw = ", ".join(sorted(p.stem for p in (Path(conf_dir()) / "hw").glob("*.yaml")))
    with pytest.raises(PhazecError, match=rf"^hw=glob\(nope\*\) picks no preset of hw; its presets: {hw}.$"):
        validate.sweep_command_lines(["hw=glob(nope*)"])  # Hydra would launch no job and exit 0
    with pytest.raises(
        PhazecError, match=r"^search.seed=glob\(\*\) cannot be swept: glob\(\) picks presets of"
    ):
        validate.sweep_command_lines(["search.seed=glob(*)"])
    with pytest.raises(PhazecError, match=r"^train.microbatch=interval\(1,4\) cannot be swept: an interval "):
        validate.sweep_command_lines(["train.microbatch=interval(1,4)"])  # Hydra: a traceback
    for empty in ("range(0)", "range(5,1)", "range(0,3,0)"):  # Hydra: no job and exit 0, or a traceback
        with pytest.raises(PhazecError) as no_value:
            validate.sweep_command_lines([f"search.seed={empty}"])
        assert str(no_value.value).startswith(
            f"search.seed={empty} sweeps no value: range(start, stop, step) "
        )
    assert validate.sweep_command_lines(["search.seed=range(8,0,-2)", "solver.mip_gap=range(0,1,0.5)"]) == [
        [],
        ["search.seed=8"],
        ["solver.mip_gap=0.0"],
    ]
    assert validate.sweep_command_lines(["hydra/sweeper=optuna", "search.seed=interval(0,1)"]) == [
        ["hydra/sweeper=optuna"]
    ]
    assert not list(tmp_path.iterdir())


def test_an_interpolation_on_the_command_line_is_resolved_in_the_whole_config() -> None:
    # The hw node is read on its own, where ${hw.num_tc} would name nothing.
    cfg = api.composed("plan", ["hw=tpuv4", "hw.num_vc=${hw.num_tc}"])
    assert list(enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw"))).num_vc) == [8]


def test_cli_bad_command_lines_exit_2(tmp_path: Path) -> None:
    """An unknown preset, run directories below a file (the default one, one named by hydra.run.dir
    and a sweep's named by hydra.sweep.dir) and a switch set to 2 (the commands run at once)."""
    import subprocess
    import sys

    (tmp_path / "outputs").write_text("")  # the default run directory would be below a file
    commands = {
        "unknown": ("ir_main", "model=nope"),
        "default": ("ir_main", "model=onnx"),
        "run.dir": ("main", "hydra.run.dir=outputs/run"),
        "sweep.dir": ("main", "-m", "hydra.sweep.dir=outputs/sweep"),
        "switch": ("plan_main", "hydra.run.dir=plan", "plan.sequence_parallel=2"),
        "bool": ("main", "hw.device.fuse_elementwise=maybe"),
        "key": ("plan_main", "hw.device.fuse=true"),
        "grammar": ("main", "-m", "hw=tpuv4,tpu_small", "train.microbatch=[8]]"),
        "sweep": ("main", "-m", "hydra.sweep.dir=sweep", "hw=tpuv4,tpu_smal", "train.microbatch=[8],[16]"),
        "batch": (
            "ir_main",
            "-m",
            "hydra.sweep.dir=batch",
            "parallel.tp=1,2",
            "hydra.sweeper.max_batch_size=0",
        ),
    }
    started = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"from phazec.cli import {entry}; {entry}()", *args, "tracking=none"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (entry, *args) in commands.items()
    }
    ended = {name: (p.communicate(timeout=120)[1], p.returncode) for name, p in started.items()}
    # Hydra's errors as one paragraph: the bad override and what is valid.
    presets = ", ".join(sorted(p.stem for p in (Path(conf_dir()) / "model").glob("*.yaml")))
    assert ended["unknown"] == (
        f"phazec: error: Could not find 'model/nope'. Available options in 'model': {presets}.\n",
        2,
    )
    assert ended["bool"] == (
        "phazec: error: Error merging override hw.device.fuse_elementwise=maybe. Value 'maybe' is not a "
        "valid bool (type str).\n",
        2,
    )
    keys = ", ".join(field.name for field in dataclasses.fields(DeviceConfig))
    message = f"phazec: error: hw.device.fuse is not a key of hw.device; valid keys: {keys}.\n"
    assert ended["key"] == (message, 2)
    assert ended["grammar"][1] == 2
    assert ended["grammar"][0].startswith("phazec: error: train.microbatch=[8]] is not a valid override: ")
    assert ended["grammar"][0].count("\n") == 1
    # A bad value in a sweep fails before the first job runs.
    hw = ", ".join(sorted(p.stem for p in (Path(conf_dir()) / "hw").glob("*.yaml")))
    assert ended["sweep"] == (
        f"phazec: error: Could not find 'hw/tpu_smal'. Available options in 'hw': {hw}.\n",
        2,
    )
    assert not (tmp_path / "sweep").exists()
    assert ended["batch"] == (
        "phazec: error: hydra.sweeper.max_batch_size=0 is not valid: give the number of jobs to launch at "
        "once, at least 1, or null for all of them.\n",
        2,
    )
    assert not list((tmp_path / "b").glob("*/.hydra"))  # no job ran
    assert ended["switch"] == (
        "phazec: error: plan.sequence_parallel=2 is not valid: plan.sequence_parallel is a switch; give "
        "true or false.\n",
        2,
    )
    for name, directory in (
        ("default", "outputs/"),
        ("run.dir", "outputs/run"),
        ("sweep.dir", "outputs/sweep"),
    ):
        stderr, status = ended[name]
        assert status == 2, stderr
        assert stderr.startswith(f"phazec: error: cannot create the run directory '{directory}"), stderr
        assert stderr.count("\n") == 1 and "(Not a directory)" in stderr


def test_bytes_are_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of the system calls: the temporary file is fsynced holding the new bytes, then
    renamed over the target, then the directory is fsynced (so a power loss leaves the old file or
    the new one, never an empty one)."""
    calls: list[tuple[str, ...]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        path = Path(f"/proc/self/fd/{fd}").readlink()
        calls.append(("fsync", str(path), path.read_text() if path.is_file() else ""))
        fsync(fd)

    def recording_replace(src: Any, dst: Any) -> None:
        calls.append(("replace", str(src), str(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    target = tmp_path / "f.json"
    target.write_bytes(b"old")
    atomic.write_bytes(target, b"new")
    monkeypatch.undo()
    (_, tmp, data), replaced, synced_dir = calls
    assert Path(tmp).parent == tmp_path and data == "new"
    assert replaced == ("replace", tmp, str(target))
    assert synced_dir == ("fsync", str(tmp_path), "")
    assert target.read_bytes() == b"new"


def test_write_lp_writes_under_the_cache(tmp_path: Path, cache_dir: Path) -> None:
    cache = sharing(tmp_path / "cache", cache_dir)
    run(tmp_path / "out", cache, "solver.write_lp=true", "solver.search_node_limit=0")
    assert list((cache / "lp").glob("*.lp"))
