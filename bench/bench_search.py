"""Benchmark: the bounded search finds exhaustive's answer and evaluates at most a third of the designs.

Target (issue 7): on PHAZE's space with the global buffer fixed at 32 MiB, bounded gives the same design
and plan as exhaustive and evaluates at most 1/3 of the designs. Both run every default knob
(microbatch 1, 2, 4, 8; recompute off and on; HBM 32, 64, 80 GB) with all cores, each from an empty
schedule cache (a fresh cache directory that shares only the exported ONNX files), so their wall times
compare.

The whole 32 MiB space holds 3,918 designs; exhaustive over it takes about 90 CPU-minutes with BERT-large
(some per-layer ILPs take seconds), so by default the space is also cut to TPUv4-like systolic arrays,
64 or 128 wide and deep (213 designs, a few minutes on 2 cores). `--full` runs the whole 32 MiB space.

Run: .venv/bin/python bench/bench_search.py [--full] [--model bert_large] [--workers N]
"""

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from phazec.cli import conf_dir
from phazec.frontend import default_cache_dir
from phazec.search.run import run_search

GLB_32_MIB = "hw.glb_bytes={pow2:[33554432,33554432]}"
TPUV4_ARRAYS = ("hw.tc_width={pow2:[64,128]}", "hw.tc_depth={pow2:[64,128]}")
TARGET_FRACTION = 1 / 3


def search(strategy: str, overrides: list[str]) -> dict[str, Any]:
    """One search from an empty schedule cache; returns result.json."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        onnx = default_cache_dir() / "onnx"
        onnx.mkdir(parents=True, exist_ok=True)
        (cache / "onnx").symlink_to(onnx, target_is_directory=True)
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            cfg = compose(
                "config", overrides=[*overrides, f"search.strategy={strategy}", f"cache_dir={cache}"]
            )
        run_search(cfg, Path(tmp), Path(conf_dir()))
        result: dict[str, Any] = json.loads((Path(tmp) / "result.json").read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the whole 32 MiB space (3,918 designs)")
    parser.add_argument("--model", default="bert_large", help="model preset (default bert_large)")
    parser.add_argument("--workers", type=int, help="search.workers (default: one per core)")
    args = parser.parse_args()
    space = [GLB_32_MIB] if args.full else [GLB_32_MIB, *TPUV4_ARRAYS]
    workers = [] if args.workers is None else [f"search.workers={args.workers}"]
    overrides = [f"model={args.model}", "hw=tpu_area", *space, "tracking=none", *workers]
    print(f"{args.model} on tpu_area with {' '.join(space)}, every default knob")
    results = {strategy: search(strategy, overrides) for strategy in ("exhaustive", "bounded")}
    for strategy, result in results.items():
        s = result["search"]
        print(
            f"{strategy:>10}: {result['throughput_samples_per_s']:.6g} samples/s, "
            f"{s['designs_evaluated']} of {s['designs_total']} designs evaluated, {s['wall_s']:.1f} s"
        )
    exhaustive, bounded = results["exhaustive"], results["bounded"]
    same = all(exhaustive[k] == bounded[k] for k in ("design", "plan", "time_per_batch_s"))
    fraction = bounded["search"]["designs_evaluated"] / bounded["search"]["designs_total"]
    print(f"same design, plan and time per batch: {same}")
    print(f"bounded evaluated {fraction:.3f} of the designs (target <= {TARGET_FRACTION:.3f}): "
          f"{'PASS' if same and fraction <= TARGET_FRACTION else 'FAIL'}")  # fmt: skip


if __name__ == "__main__":
    main()
