"""Benchmark: the exact co-search (`search=bounded`) of PHAZE's WHOLE space, and its answer checked.

Targets (issue 20): `phazec model=gpt3_175b hw=tpu_area search=bounded` with every default knob in at
most 15 minutes on 2 cores from an empty schedule cache, BERT-large in at most 5 minutes. For each
model the bench prints the designs dominated (dropped before bounding), bounded out and evaluated,
the schedules left unproven by a node limit, and the wall time. Then, on a slice of the space,
`exhaustive` and `bounded` must give the same design, plan and time per batch.

Every search starts from an empty schedule cache (a fresh cache directory that shares only the
exported ONNX files) and uses every core.

Run: .venv/bin/python bench/bench_search.py [--models bert_large gpt3_175b] [--slice-model bert_large]
"""

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from phazec.cli import conf_dir
from phazec.commands.search import run_search
from phazec.config.settings import settings_from_config, tpuv4_space
from phazec.frontend import default_cache_dir

TARGET_S = {"bert_large": 5 * 60, "gpt3_175b": 15 * 60}
SLICE = (
    "hw.glb_bytes={pow2:[33554432,33554432]}",
    "hw.tc_width={pow2:[128,128]}",
    "hw.tc_depth={pow2:[64,128]}",
    "hw.num_tc={pow2:[4,16]}",
    "hw.num_vc={pow2:[2,4]}",
)
"""A slice of PHAZE's space (10 designs around TPUv4) exhaustive searches in minutes on a shared machine."""


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
                "config",
                overrides=[*overrides, "tracking=none", f"search.strategy={strategy}", f"cache_dir={cache}"],
            )
        run_search(settings_from_config(cfg), Path(tmp), tpuv4_space())
        result: dict[str, Any] = json.loads((Path(tmp) / "result.json").read_text())
    return result


def report(name: str, result: dict[str, Any]) -> str:
    """One line: throughput, designs by fate, unproven schedules, wall time."""
    s = result["search"]
    by = s["designs_pruned_by"]
    return (
        f"{name}: {result['throughput_samples_per_s']:.6g} samples/s; of {s['designs_total']} designs "
        f"{by.get('dominated', 0)} dominated, {by.get('bound', 0)} bounded out, {s['designs_evaluated']} "
        f"evaluated; {len(s['schedules_unproven'])} schedules unproven; {s['wall_s']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(TARGET_S), help="whole-space bounded searches")
    parser.add_argument("--slice-model", default="bert_large", help="model of the exhaustive check")
    args = parser.parse_args()
    for model in args.models:
        result = search("bounded", [f"model={model}", "hw=tpu_area"])
        target = TARGET_S.get(model)
        verdict = "" if target is None else f" (target <= {target} s: "
        verdict += "" if target is None else ("PASS)" if result["search"]["wall_s"] <= target else "FAIL)")
        print(f"{report(f'bounded {model}, whole tpu_area', result)}{verdict}", flush=True)
    overrides = [f"model={args.slice_model}", "hw=tpu_area", *SLICE]
    results = {strategy: search(strategy, overrides) for strategy in ("exhaustive", "bounded")}
    for strategy, result in results.items():
        print(report(f"{strategy} {args.slice_model}, slice", result), flush=True)
    same = all(
        results["exhaustive"][k] == results["bounded"][k] for k in ("design", "plan", "time_per_batch_s")
    )
    print(f"slice: same design, plan and time per batch: {'PASS' if same else 'FAIL'}")


if __name__ == "__main__":
    main()
