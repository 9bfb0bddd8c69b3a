"""The progress display counts only what a strategy will evaluate: an ETA only when that is known;
and a worker's first HiGHS solve prints no banner."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from tqdm import tqdm

from phazec.search.strategies.bounded import Bounded
from phazec.search.strategies.exhaustive import Exhaustive
from phazec.search.strategies.phaze import Phaze
from phazec.util.progress import COUNTER_FORMAT

BINS = [np.arange(2, dtype=np.int64), np.arange(2, 5, dtype=np.int64), np.arange(5, 6, dtype=np.int64)]


def test_phaze_shows_the_bin_and_the_patience_left() -> None:
    phaze = Phaze(BINS, patience=2)
    phaze.record(improved=True)
    assert phaze.status() == "bin 1 of 3, patience 2 of 2"
    phaze.record(improved=False)
    assert phaze.status() == "bin 2 of 3, patience 1 of 2"
    phaze.record(improved=False)
    assert phaze.status() == "bin 3 of 3, patience 0 of 2"
    assert not phaze.wanted(3, 1.0)


def test_only_strategies_that_evaluate_every_batch_get_an_eta() -> None:
    bounded = Bounded(BINS, [0.0] * 3, dominated=0)
    assert (Exhaustive(BINS).ends_early, Phaze(BINS, 5).ends_early, bounded.ends_early) == (False, True, True)
    counter = tqdm.format_meter(n=3, total=None, elapsed=2.0, prefix="phaze", unit="design",
                                bar_format=COUNTER_FORMAT, postfix="best 12 samples/s")  # fmt: skip
    assert counter == "phaze: 3 designs done [00:02,  1.50design/s, best 12 samples/s]"


def test_a_new_process_solves_with_highs_without_its_banner() -> None:
    code = (
        "import highspy\n"
        "from phazec.solvers.schedule.backends import _silence_highs_banner\n"
        "_silence_highs_banner()\n"
        "highspy.Highs()\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "done\n"  # without the call, HiGHS's two banner lines come first
