"""Run directories no two runs share: `${phazec.unique:<path>}` in `hydra.run.dir` and `hydra.sweep.dir`.

Hydra names a run's directory after the second it started, so two runs started in the same second
from the same directory would write into one. The resolver claims the directory with an atomic
`mkdir`: the first run gets `<path>`, a later one `<path>-1`, `<path>-2`, ... OmegaConf caches the
answer, so every later read of the run directory (and every job of a sweep, whose config copies the
cache) sees the same one. A directory named on the command line instead is created by `make_dir`
(called by `phazec.cli.UserErrorExit`), so a bad one is one paragraph too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

RESOLVER = "phazec.unique"


def unique_dir(path: str) -> str:
    """Create and return `path`, or the first of `path-1`, `path-2`, ... that no one has created."""
    base = Path(path)
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        for n in range(1_000_000):
            claimed = base if n == 0 else base.with_name(f"{base.name}-{n}")
            try:
                claimed.mkdir()
            except FileExistsError:
                continue
            return str(claimed)
    except OSError as err:
        cannot_create(path, err)
    return cannot_create(path, "every numbered suffix is taken")


def make_dir(path: str) -> None:
    """Create `path`, a run or sweep directory named on the command line, or end with one paragraph
    (Hydra would create it itself and print a traceback)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        cannot_create(path, err)


def cannot_create(path: str, why: OSError | str) -> NoReturn:
    """Say why the run directory `path` cannot be created, and exit 2.

    Hydra makes the run directory before the job starts, where it would print a traceback for an
    exception: this is the one place that reports bad input itself.
    """
    reason = why if isinstance(why, str) else why.strerror or str(why)
    print(
        f"phazec: error: cannot create the run directory {path!r} ({reason}); start phazec from a "
        "directory you can write to, or set hydra.run.dir (hydra.sweep.dir for -m) to one.",
        file=sys.stderr,
    )
    sys.exit(2)


def register_resolver() -> None:
    """Register `${phazec.unique:...}` (once per process)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, unique_dir, use_cache=True)


def results_line(directory: Path | str, cwd: Path | str) -> str:
    """A command's last line: where its results are (relative to `cwd`, where it started, when inside
    it) and the files there (hidden ones, Hydra's `.hydra/`, left out)."""
    path = Path(directory)
    shown = path.relative_to(cwd) if path.is_relative_to(cwd) else path
    files = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir() if not p.name.startswith("."))
    return f"results in {shown}/ ({', '.join(files)})"
