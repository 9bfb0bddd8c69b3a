"""The default co-search on GPT-3 175B: `phazec model=gpt3_175b hw=tpu_area` (search=phaze, default knobs).

Target (issue 7): at most 15 minutes on this 2-core machine. The run starts from an empty schedule
cache (in a temporary cache directory, so the ONNX export is timed too) and runs the `phazec` command
in a fresh process, as a user would. Prints the wall time, the stage times and the answer.

Run: .venv/bin/python bench/bench_search_gpt3.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 15 * 60


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        command = [
            str(Path(sys.executable).with_name("phazec")),
            "model=gpt3_175b",
            "hw=tpu_area",
            "tracking=none",
            f"cache_dir={tmp}/cache",
            f"hydra.run.dir={out}",
        ]
        begin = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        wall_s = time.perf_counter() - begin
        result = json.loads((out / "result.json").read_text())
    search = result["search"]
    ratio = wall_s / TARGET_S
    print(f"phazec model=gpt3_175b hw=tpu_area: {wall_s:.0f} s wall (target {TARGET_S} s, {ratio:.2f}x)")
    print(
        f"designs evaluated {search['designs_evaluated']} of {search['designs_total']}; "
        f"cost {search['cost_s']:.0f} s, ILP {search['ilp_s']:.0f} s, DP {search['dp_s']:.0f} s, "
        f"ILP cache hits {search['ilp_cache_hits']}"
    )
    print(
        f"found {result['design']}, {result['throughput_samples_per_s']:.3f} samples/s, "
        f"{result['speedup_vs_tpuv4']:.3f}x TPUv4 with its optimal plan"
    )


if __name__ == "__main__":
    main()
