"""What a terminal shows while phazec works: one line per stage with its time, and progress bars that
count only what will really be done (a bar with an ETA when the amount of work is known, a counter
otherwise)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tqdm import tqdm

log = logging.getLogger(__name__)

COUNTER_FORMAT = "{desc}: {n_fmt} {unit}s done [{elapsed}, {rate_fmt}{postfix}]"
"""A progress line without a total: what is done, the time so far and the rate; no ETA."""


@dataclass
class Elapsed:
    """What a stage took: wall seconds, and CPU seconds of this process and of the worker processes
    that ended during it (`os.times`: a pool's workers count once they have exited)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    note: str = ""
    """Said after the time on the stage's line."""


def cpu_s() -> float:
    """CPU seconds of this process and its ended children so far."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@contextmanager
def stage(name: str) -> Iterator[Elapsed]:
    """Log `<name>: <seconds> s[, <note>]` when the stage ends (nothing if it raises); the record
    carries `stage`, `wall_s` and `cpu_s` for a script that times the stages (bench/bench_default.py)."""
    elapsed = Elapsed()
    start_wall_s, start_cpu_s = time.perf_counter(), cpu_s()
    yield elapsed
    elapsed.wall_s, elapsed.cpu_s = time.perf_counter() - start_wall_s, cpu_s() - start_cpu_s
    note = f", {elapsed.note}" if elapsed.note else ""
    extra = {"stage": name, "wall_s": elapsed.wall_s, "cpu_s": elapsed.cpu_s}
    log.info("%s: %.1f s%s", name, elapsed.wall_s, note, extra=extra)


def progress(desc: str, total: int | None, unit: str) -> tqdm:
    """A bar on stderr, only on a terminal: with `total`, a bar with its ETA; without, a counter and
    rate (the work ends early by a rule the bar cannot foresee, so no ETA would be true)."""
    bar_format = None if total is not None else COUNTER_FORMAT
    return tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, bar_format=bar_format)
