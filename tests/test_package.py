"""The wheel on its own: built from the repository, installed into a fresh venv outside it, and run.

A fresh venv outside the repository gets the wheel alone (`--no-deps`); its dependencies (torch and
the rest) are the suite's own, seen through a `.pth` file naming this interpreter's site-packages, so
CI does not spend minutes installing torch again. `.pth` lines only append to `sys.path`, so the
wheel's `phazec` comes first and the repository's editable install (a hook in a `.pth` of its own,
which is not read from an appended directory) is never seen; the commands run from a directory
outside the repository, so they can only find the config tree packaged inside the wheel.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import sharing

ROOT = Path(__file__).resolve().parents[1]
UMASK = 0o027
"""An unusual umask, so a directory created with a fixed mode (0700, 0777) cannot pass for one
created with the user's."""


def run(*command: str | Path, cwd: Path, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    """A command that must succeed; its output is shown if it does not."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, check=False,
        preexec_fn=None if umask is None else lambda: os.umask(umask),
    )  # fmt: skip
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_repository(tmp_path: Path, cache_dir: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", dist, ROOT,
        cwd=tmp_path)  # fmt: skip
    (wheel,) = dist.glob("phazec-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name for name in archive.namelist() if name.startswith("phazec/conf/")}
        plugin = "hydra_plugins/phazec_sweeper/sweeper.py" in archive.namelist()
    presets = {f"phazec/conf/{p.relative_to(ROOT / 'conf')}" for p in (ROOT / "conf").rglob("*.yaml")}
    assert presets and packaged == presets
    assert plugin  # phazec's sweeper, which Hydra finds only in the hydra_plugins package

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = (
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--no-compile",
        "--disable-pip-version-check",
    )
    site = run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=tmp_path).stdout.strip()  # fmt: skip
    (Path(site) / "phazec_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(*pip, "--no-deps", wheel, cwd=tmp_path)
    assert run(venv / "bin" / "python", "-c", "import torch; print(torch.__version__)", cwd=tmp_path).stdout
    where = run(
        venv / "bin" / "python",
        "-c",
        "from phazec.config.presets import conf_dir; print(conf_dir())",
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv)

    helped = run(venv / "bin" / "phazec-ir", "--help", cwd=tmp_path)
    assert helped.stdout.startswith("phazec-ir: lower a model")

    # A search of one design, with the session's ONNX exports and a fresh cache for everything else.
    cache = sharing(tmp_path / "cache", cache_dir)
    command = ["model=bert_large", "hw=tpuv4", "tracking=none"]  # the README's promise, as written
    searched = run(venv / "bin" / "phazec", *command, f"cache_dir={cache}", "hydra.run.dir=run",
                   cwd=tmp_path, umask=UMASK)  # fmt: skip
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["search"]["designs_evaluated"] == 1
    assert f"{result['throughput_samples_per_s']:.4g}" in searched.stdout
    created = [p for p in cache.rglob("*") if p.is_dir() and not p.is_symlink() and p != cache / "onnx"]
    assert {p.relative_to(cache).parts[0] for p in created} == {"schedules", "search"}
    assert {stat.S_IMODE(p.stat().st_mode) for p in created} == {0o777 & ~UMASK}
    assert not (tmp_path / "phazec.db").exists()

    # A multirun: Hydra finds phazec's sweeper (the configs' default) in the installed wheel.
    run(venv / "bin" / "phazec-ir", "-m", "model=bert_large", "parallel.tp=1,2", f"cache_dir={cache}",
        "hydra.sweep.dir=sweep", cwd=tmp_path)  # fmt: skip
    summary = (tmp_path / "sweep" / "sweep_comparison.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in summary[1:]] == [["0", "ok"], ["1", "ok"]]
