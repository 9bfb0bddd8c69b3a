"""What a terminal shows while phazec works: one line per stage with its time, and progress bars that
count only what will really be done (a bar with an ETA when the amount of work is known, a counter
otherwise)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

log = logging.getLogger(__name__)

COUNTER_FORMAT = "{desc}: {n_fmt} {unit}s done [{elapsed}, {rate_fmt}{postfix}]"
"""A progress line without a total: what is done, the time so far and the rate; no ETA."""


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Log `<name>: <seconds> s` when the stage ends (nothing if it raises)."""
    start = time.perf_counter()
    yield
    log.info("%s: %.1f s", name, time.perf_counter() - start)


def progress(desc: str, total: int | None, unit: str) -> tqdm:
    """A bar on stderr, only on a terminal: with `total`, a bar with its ETA; without, a counter and
    rate (the work ends early by a rule the bar cannot foresee, so no ETA would be true)."""
    bar_format = None if total is not None else COUNTER_FORMAT
    return tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, bar_format=bar_format)
