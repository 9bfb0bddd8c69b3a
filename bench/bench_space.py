"""A search's size, bounded before work: refusing a 10^9-design space, and enumerating a large one
with the limit raised in bounded memory (issue 42).

1. `phazec --config-dir D hw=big` with a user preset of 32^6 (about 10^9) candidate designs, as a
   user runs it: prints the wall
   time of the refusal (target < 5 s), its exit status and its one paragraph.
2. `enumerate_designs` over spaces of 10^6, 10^7 and 10^8 candidate designs (the limit raised), each
   in a fresh process: prints the designs kept within the budgets, the wall time, the peak resident
   memory, and what the whole grid would hold as arrays (what enumeration held before it went a chunk
   at a time). Peak memory grows with the designs kept, not with the grid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIG_PRESET = """\
defaults:
  - tpu_small
  - _self_
name: big
num_tc: [{counts}]
num_vc: [{counts}]
tc_width: [{widths}]
tc_depth: [{widths}]
vc_width: [{widths}]
glb_bytes: [{glb}]
sram_interpolation: true
"""
"""A user's space of 32^6 = 1,073,741,824 candidate designs: six knobs of 32 values each (the issue's
audit had 31 values per knob)."""


def big_preset() -> str:
    """The text of the 10^9-design preset."""
    return BIG_PRESET.format(
        counts=", ".join(str(n) for n in range(1, 33)),
        widths=", ".join(str(8 * n) for n in range(1, 33)),
        glb=", ".join(str(2**21 + 2**22 * n) for n in range(32)),
    )


ENUMERATE = """\
import resource, sys, time
from hydra import compose, initialize_config_dir
from phazec.cli import conf_dir
from phazec.config.settings import typed
from phazec.hw.schema import HwConfig
from phazec.hw.space import design_count, enumerate_designs, hw_space_from_config
with initialize_config_dir(config_dir=conf_dir(), version_base=None):
    cfg = compose("config", overrides=["hw=tpu_small"])
n = int(sys.argv[1])
cfg.hw.num_tc = list(range(1, n + 1))
cfg.hw.num_vc = list(range(1, 101))
cfg.hw.glb_bytes = list(range(2**21, 2**21 + 100 * 4096, 4096))
cfg.hw.tc_width = [128]
cfg.hw.tc_depth = [128]
cfg.hw.sram_interpolation = True
space = hw_space_from_config(typed(HwConfig, cfg.hw, "hw"))
start = time.perf_counter()
designs = enumerate_designs(space)
seconds = time.perf_counter() - start
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(design_count(space), len(designs.num_tc), f"{seconds:.1f}", f"{rss_mb:.0f}")
"""
GRID_ARRAYS = 9
"""int64/float64 arrays the whole grid held at once before (six knobs, area, power, mask and order)."""


def refusal() -> None:
    """Part 1: the 10^9-design preset refused by the command line."""
    with tempfile.TemporaryDirectory(prefix="phazec-space-") as tmp:
        root = Path(tmp)
        (root / "hw").mkdir()
        (root / "hw" / "big.yaml").write_text(big_preset())
        phazec = Path(sys.executable).with_name("phazec")
        start = time.perf_counter()
        done = subprocess.run(
            [
                str(phazec),
                "--config-dir",
                str(root),
                "hw=big",
                "tracking=none",
                f"hydra.run.dir={root / 'run'}",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=root,
        )
        seconds = time.perf_counter() - start
    print(f"refusal of 32^6 designs: {seconds:.1f} s (target < 5 s), exit status {done.returncode}")
    print(f"  {done.stderr.strip()}")


def bounded_memory() -> None:
    """Part 2: enumeration with the limit raised, each size in a fresh process."""
    print("grid designs | kept | seconds | peak RSS MB | whole grid as arrays MB")
    for n in (100, 1000, 10000):  # num_tc values: 10^6, 10^7, 10^8 designs
        out = subprocess.run(
            [sys.executable, "-c", ENUMERATE, str(n)], capture_output=True, text=True, check=True
        ).stdout.split()
        grid, kept, seconds, rss_mb = int(out[0]), int(out[1]), out[2], out[3]
        print(
            f"{grid:>12,} | {kept:>9,} | {seconds:>7} | {rss_mb:>11} | {grid * GRID_ARRAYS * 8 / 1e6:>10,.0f}"
        )


def main() -> None:
    os.environ.setdefault("PHAZEC_CACHE_DIR", tempfile.gettempdir())
    refusal()
    bounded_memory()


if __name__ == "__main__":
    main()
