"""Benchmark: the strategies side by side on one space and two models.

For each model, `bounded` (the exact optimum), `wham`, `phaze` and `bo` search `hw=tpu_small` (37
designs around TPUv4) with microbatch 8, recompute off and on and HBM 32 and 80 GB (`--all-knobs`:
every default knob, several times longer), each from an empty schedule cache (the same helper as
`bench/bench_search.py`), so their wall times compare. Printed per strategy: designs evaluated with
the placement, wall time, and its best throughput as a fraction of bounded's optimum (1 is optimal).

Run: .venv/bin/python bench/bench_strategies.py [--models bert_large opt_350m] [--workers N] [--all-knobs]
"""

import argparse
import json
from pathlib import Path
from typing import Any

from bench_search import search

STRATEGIES = ("bounded", "wham", "phaze", "bo")
"""`bounded` first: the others are measured against its optimum."""
KNOBS = ("train.microbatch=[8]", "train.recompute=[false,true]", "system.hbm_gb=[32,80]")
"""The default knobs of the benchmark: one microbatch size, so each design needs one set of schedules."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert_large", "opt_350m"], help="model presets")
    parser.add_argument("--workers", type=int, help="search.workers (default: one per core)")
    parser.add_argument("--all-knobs", action="store_true", help="every default training knob")
    parser.add_argument("--json", type=Path, help="also write each result.json, by model and strategy")
    args = parser.parse_args()
    workers = [] if args.workers is None else [f"search.workers={args.workers}"]
    knobs = [] if args.all_knobs else list(KNOBS)
    print(f"hw=tpu_small (37 designs), {' '.join(knobs) or 'every default knob'}")
    print("fraction = best throughput / bounded's optimum")
    print(f"{'model':>12} {'strategy':>9} {'evaluated':>9} {'wall_s':>8} {'samples/s':>11} {'fraction':>8}")
    results: dict[str, dict[str, Any]] = {}
    for model in args.models:
        overrides = [f"model={model}", "hw=tpu_small", "tracking=none", *knobs, *workers]
        optimum = 0.0
        for strategy in STRATEGIES:
            result = search(strategy, overrides)
            results.setdefault(model, {})[strategy] = result
            throughput = result["throughput_samples_per_s"]
            optimum = optimum or throughput
            s = result["search"]
            print(
                f"{model:>12} {strategy:>9} {s['designs_evaluated']:>5} / {s['designs_total']:<2} "
                f"{s['wall_s']:>8.1f} {throughput:>11.5g} {throughput / optimum:>8.4f}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
