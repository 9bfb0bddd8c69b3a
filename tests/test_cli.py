"""The commands as a newcomer meets them: their help, their exit status on bad input, what a terminal
shows during a search (phazec's own lines, one per stage with its time), and the docs' Python
example run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from phazec.cli import check_command_line
from phazec.config.presets import conf_dir

ROOT = Path(__file__).resolve().parents[1]
TINY = ("model=bert_large", "model.hf_config.num_hidden_layers=2", "model.baseline.pp=2",
        "model.baseline.dp=512", "hw=tpuv4", "tracking=none", "train.microbatch=[8]",
        "train.recompute=[false]", "system.hbm_gb=[32]")  # fmt: skip
"""A search of a two-block BERT (its Megatron baseline in 2 stages) on one design with one knob
setting: seconds, a cold export included."""
STAGES = (
    "export",
    "lowering",
    "training graphs",
    "search",
    "baselines",
    "bottleneck schedule",
    "trace",
    "plots",
)


def command(
    name: str, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`phazec` (name `main`), `phazec-ir` (`ir_main`) or `phazec-plan` (`plan_main`) in a fresh
    interpreter started in `cwd`."""
    code = f"from phazec.cli import {name}; {name}()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env={**os.environ, **(env or {})},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def test_help_says_what_each_command_does_and_names_every_group_and_preset(tmp_path: Path) -> None:
    search_help = command("main", "--help", cwd=tmp_path)
    ir_help = command("ir_main", "--help", cwd=tmp_path)
    plan_help = command("plan_main", "--help", cwd=tmp_path)
    assert search_help.returncode == ir_help.returncode == plan_help.returncode == 0
    assert search_help.stdout.startswith("phazec: co-search an accelerator design")
    assert ir_help.stdout.startswith("phazec-ir: lower a model")
    assert plan_help.stdout.startswith("phazec-plan: time ONE training plan")
    groups = sorted(p for p in Path(conf_dir()).iterdir() if p.is_dir() and p.name != "hydra")
    assert [g.name for g in groups] == ["cost", "hw", "model", "search", "solver", "sweep", "system",
                                        "tracking", "train"]  # fmt: skip
    for text in (search_help.stdout, ir_help.stdout, plan_help.stdout):
        for group in groups:
            (line,) = [line for line in text.splitlines() if line.startswith(f"{group.name}: ")]
            assert line.removeprefix(f"{group.name}: ").split(", ") == sorted(
                p.stem for p in group.glob("*.yaml")
            )
        assert text.count("\n  phazec") >= 3  # three examples
    assert not (tmp_path / "outputs").exists()


def test_docs_config_dir_chip_is_a_preset(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "guide" / "presets.md").read_text()
    chip = page.split("# ~/chips/hw/my_chip.yaml", 1)[1].split("\n\n", 1)[0]
    (tmp_path / "chips" / "hw").mkdir(parents=True)
    (tmp_path / "chips" / "hw" / "my_chip.yaml").write_text(
        "\n".join(line[4:] for line in chip.splitlines()[1:])
    )
    shown = command("main", "--config-dir", "chips", "hw=my_chip", "--cfg", "job", "--resolve", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "  name: my_chip\n  num_tc:\n  - 4\n" in shown.stdout
    # A misspelled key in the chip, and a directory that is not there: one paragraph each, exit 2.
    misspelled = (tmp_path / "chips" / "hw" / "my_chip.yaml").read_text().replace("clock_hz:", "clock_hzz:")
    (tmp_path / "chips" / "hw" / "typo.yaml").write_text(misspelled)
    typo = command("plan_main", "--config-dir", "chips", "hw=typo", "model=bert_large", cwd=tmp_path)
    assert typo.returncode == 2
    typo_file = (tmp_path / "chips" / "hw" / "typo.yaml").resolve()
    line = (
        misspelled.splitlines().index(next(x for x in misspelled.splitlines() if x.startswith("clock_hzz:")))
        + 1
    )
    assert typo.stderr.startswith(
        f"phazec: error: The preset {typo_file}, line {line}: hw.clock_hzz is not a key of hw; valid keys: "
        "name, num_tc,"
    )
    # A multirun is checked before its first job with the user's presets beside the shipped ones: a
    # glob picks them, and a bad one among the swept presets is the same paragraph.
    check_command_line("config", ["-m", "--config-dir", str(tmp_path / "chips"), "hw=glob(my_*)"])
    for sweep in ("hw=my_chip,typo", "hw=glob(typ*)"):
        swept = command("main", "-m", "--config-dir", "chips", sweep, "model=bert_large", cwd=tmp_path)
        assert swept.returncode == 2
        assert swept.stderr == typo.stderr
    missing = command("main", "--config-dir", "chipz", "hw=my_chip", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == (
        "phazec: error: --config-dir 'chipz' is not a directory: give a directory of your own presets, "
        "laid out as the shipped ones are (hw/<name>.yaml, model/<name>.yaml, ...).\n"
    )
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("hw", sorted(p.stem for p in (Path(conf_dir()) / "hw").glob("*.yaml")))
def test_every_hw_preset_gets_the_declared_sweep_and_plans_and_lowerings_none(hw: str) -> None:
    """`phazec -m` runs conf/sweep/default.yaml on every hw preset; `phazec-plan -m` and `phazec-ir -m`
    sweep only their command lines."""
    declared = {"train.microbatch": "[1],[2],[4],[8]", "train.recompute": "[false],[true]"}
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        for name, params in (("config", declared), ("plan", None), ("ir", None)):
            cfg = compose(name, overrides=[f"hw={hw}"], return_hydra_config=True)
            assert cfg.hydra.sweeper.params == params, name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("search.strategy_typo=phaze",),
            "search.strategy_typo is not a key of search; valid keys: strategy, objective, top_k,",
        ),
        (("train.microbatch=[8",), "train.microbatch=[8 is not a valid override: no viable alternative at"),
        (("model=[bert_large,nope]",), "Could not load 'model/nope'. Available options in 'model': bert_"),
    ],
)
def test_hydra_errors_exit_2_with_one_paragraph(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    # More: tests/test_robust.py, tests/test_frontend_onnx.py (phazec-ir), tests/test_search_multi.py.
    done = command("main", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"phazec: error: {message}")
    assert done.stderr.count("\n") == 1


def test_a_search_shows_phazec_lines_only_one_per_stage_with_its_time(
    tmp_path: Path, cache_dir: Path
) -> None:
    # No other test exports this model, so the export runs and its libraries' chatter would show.
    done = command("main", *TINY, f"cache_dir={cache_dir}", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no bar off a terminal, no warnings
    logged = [line for line in done.stdout.splitlines() if re.match(r"\[\d\d:\d\d:\d\d\] ", line)]
    for name in STAGES:
        (line,) = [line for line in logged if line[11:].startswith(f"{name}: ")]
        assert re.fullmatch(rf"\[..:..:..\] {name}: \d+\.\d s(, .*)?", line)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    (search_line,) = [line for line in logged if line[11:].startswith("search: ")]
    assert "1 of 1 designs evaluated" in search_line
    assert f"{result['throughput_samples_per_s']:.4g}" in done.stdout
    # Everything else, third-party lines included, went to the run's log file.
    log = (tmp_path / "run" / "cli.log").read_text()
    assert all(line[11:] in log for line in logged)
    # The found-design tables fit 120 columns, say the devices each plan uses and what "vs TPUv4" is.
    lines = done.stdout.splitlines()
    table = lines[
        lines.index("found design: 8x TC 128x128, 2x VC 128, GLB 128 MiB, HBM 32 GB, 278.83 mm^2") : -1
    ]  # up to the last line, the run's files
    assert max(len(line) for line in table) <= 120
    found = r"found design, optimal plan  mb 8, stash, t=1 p=2 d=512  1024 of 1024  [\d.e+]+     1\.00x"
    assert re.fullmatch(found, table[5])
    assert "vs TPUv4: throughput over the TPUv4 design under its own optimal plan" in done.stdout
    # The last line names the run directory and its files.
    files = "bottleneck_gantt.png, cli.log, explored.csv, pipeline.png, result.json, throughput_vs_area.png"
    files += ", trace.json"
    assert lines[-1] == f"results in run/ ({files})"


def test_docs_python_example_runs_as_written(tmp_path: Path, cache_dir: Path) -> None:
    page = (ROOT / "docs" / "api.md").read_text()
    section = page.split("\n## The commands as functions\n", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / "example.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env={**os.environ, "PHAZEC_CACHE_DIR": str(cache_dir)},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "bert_large: layers 0 (embedding) to 25 (head)"
    design, plan = lines[1].split("; ")
    assert design.startswith("8 tensor cores, ") and plan.startswith("plan p=")
    assert [p.name for p in tmp_path.iterdir()] == ["example.py"]  # nothing left behind, no MLflow store


def test_phazec_plan_ends_naming_its_results(tmp_path: Path, cache_dir: Path) -> None:
    """A single run's last line names its run directory, a sweep's its sweep directory, each with the
    files there; `phazec-plan` alone times on its default hardware, an A100 design on DGX A100 nodes,
    and its default `plan.dp=auto` fills the devices."""
    model = (
        "model=bert_large",
        "model.hf_config.num_hidden_layers=2",
        "tracking=none",
        f"cache_dir={cache_dir}",
    )
    single = command("plan_main", *model, "hydra.run.dir=run", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    lines = single.stdout.splitlines()
    assert (
        "bert_large: tp 1 x pp 1 x dp 1024 = 1024 devices, microbatch 1, recompute none; layers per stage [4]"
        in lines
    )
    assert lines[-1] == "results in run/ (cli.log, plan.json)"
    # The stage that solves the layers' schedules says how many it solved and how many the cache held.
    (timing,) = [line for line in lines if line[11:].startswith("timing: ")]
    counts = re.fullmatch(
        r"\[..:..:..\] timing: \d+\.\d s, (\d+) layer schedules solved, (\d+) from the cache", timing
    )
    assert counts is not None and int(counts[1]) + int(counts[2]) > 0
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert (plan["config"]["hw"]["name"], plan["config"]["system"]["name"]) == ("a100", "dgx_a100")
    sweep = command("plan_main", "-m", *model, "plan.tp=1,2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    files = "0/, 1/, multirun.yaml, sweep_best.json, sweep_comparison.csv, sweep_comparison.txt"
    assert sweep.stdout.splitlines()[-1] == f"results in sweep/ ({files})"
