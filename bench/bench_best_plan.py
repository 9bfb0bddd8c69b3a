"""Benchmark: the best plan for the cluster you have, the whole search, on GPT-3 175B and a 1T GPT.

`phazec model=gpt3_175b hw=a100 system=dgx_a100 system.devices=N` with Megatron-LM's knobs as lists
(issue 41): tp 1-8, microbatch 1-8, the three recompute modes, sequence parallelism off and on,
interleave 1-12 (the divisors that Megatron's schedules take), ZeRO stage 0 or 1 (the distributed
optimizer), Adam with its step timed, Megatron's last-stage rule: 1,344 plan classes of one A100 design.
Cases: GPT-3 175B on 64, 512 and 4,096 A100s, and the 1T GPT of Narayanan et al. (2021: 128 layers,
hidden 25,600, 160 heads, vocabulary 51,200) on 4,096, as GPT-3's preset with that HF config. Each
runs as `phazec` does, through `phazec.api.search` (no MLflow run), in a cache directory
that shares the exported ONNX files and, with `--warm`, the schedule cache (default: an empty one,
so the per-layer schedules are solved and timed too). Prints per case the plan, its time per
iteration, the classes feasible and out of memory (explored.csv's rows), the search's split of its
work, and the wall and CPU seconds (this process and its ended workers: `os.times`).

Targets (issue 41, 2 quiet cores): each case <= 10 s of wall with the model and the schedules cached
(`--warm`), <= 60 s with an empty schedule cache.

Run: .venv/bin/python bench/bench_best_plan.py [--warm] [--cases 64,512] [override ...]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

from phazec import api
from phazec.frontend import default_cache_dir
from phazec.util.progress import cpu_s

KNOBS = (
    "model.tp_widths=[1,2,4,8]",
    "train.microbatch=[1,2,4,8]",
    "train.recompute=[none,selective,full]",
    "train.sequence_parallel=[false,true]",
    "train.interleave=[1,2,3,4,6,8,12]",
    "train.zero_stage=[0,1]",
    "train.optimizer=adam",
    "train.optimizer_step=true",
    "train.last_stage_recomputes=true",
    "system.hbm_gb=[80]",
    "tracking=none",
)
"""Megatron-LM's knobs as the search's lists: 4 x 4 x 3 x 2 x 7 x 2 = 1,344 plan classes."""
CASES = {
    "64": ("model=gpt3_175b", "system.devices=64"),
    "512": ("model=gpt3_175b", "system.devices=512"),
    "4096": (
        "model=gpt3_175b",
        "system.devices=4096",
        "system.tiers.1.group_size=4096",
        "system.global_batch=8192",
    ),
    "1t": (
        "model=gpt3_175b",
        "model.name=gpt_1t",
        "model.hf_config.n_embd=25600",
        "model.hf_config.n_layer=128",
        "model.hf_config.n_head=160",
        "model.hf_config.vocab_size=51200",
        "system.devices=4096",
        "system.tiers.1.group_size=4096",
        "system.global_batch=8192",
    ),
}
"""Case name -> the model and the cluster (DGX A100 nodes of 8)."""
TARGET_WARM_S = 10.0
TARGET_COLD_S = 60.0


def run(case: tuple[str, ...], overrides: list[str], warm: bool) -> None:
    """One case from a cache sharing the exported ONNX files (and the schedules if `warm`)."""
    with tempfile.TemporaryDirectory(prefix="phazec-bench-") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        for part in ("onnx", "schedules") if warm else ("onnx",):
            shared = default_cache_dir() / part
            shared.mkdir(parents=True, exist_ok=True)
            (cache / part).symlink_to(shared, target_is_directory=True)
        out = Path(tmp) / "run"
        arguments = ["hw=a100", "system=dgx_a100", *KNOBS, *case, *overrides, f"cache_dir={cache}"]
        start_wall_s, start_cpu_s = time.perf_counter(), cpu_s()
        result = api.search(*arguments, out_dir=out)
        wall_s, job_cpu_s = time.perf_counter() - start_wall_s, cpu_s() - start_cpu_s
        rows = list(csv.DictReader((out / "explored.csv").open()))
    plan = result["plan"]
    feasible = sum(row["feasible"] == "True" for row in rows)
    searched = result["search"]
    target_s = TARGET_WARM_S if warm else TARGET_COLD_S
    print(" ".join(case))
    print(
        f"  plan: tp {plan['tp']}, pp {plan['pp']}, dp {plan['dp']}, microbatch {plan['microbatch']}, "
        f"recompute {plan['recompute']}, sequence parallel {plan['sequence_parallel']}, interleave "
        f"{plan['interleave']}, zero stage {plan['zero_stage']}: {result['time_per_batch_s']:.3f} s per "
        f"iteration, {result['throughput_samples_per_s']:.4g} samples/s"
    )
    default = result["baselines"].get("megatron_default_plan", {})
    if default.get("plan"):
        d = default["plan"]
        print(
            f"  chip's default plan (tp {d['tp']}, pp {d['pp']}, dp {d['dp']}): "
            f"{default['time_per_batch_s']:.3f} s per iteration; found plan "
            f"{result['speedup_vs_megatron_default']:.3f}x"
        )
    print(
        f"  plan classes: {len(rows)} solved, {feasible} feasible, {len(rows) - feasible} out of memory; "
        f"search work: costing {searched['cost_s']:.1f} s, schedules {searched['ilp_s']:.1f} s, "
        f"placement {searched['dp_s']:.1f} s"
    )
    verdict = "met" if wall_s <= target_s else "NOT met"
    print(f"  {wall_s:.1f} s wall, {job_cpu_s:.1f} CPU s (target <= {target_s:.0f} s wall: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="share the schedule cache too")
    parser.add_argument("--cases", default="64,512,4096,1t", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("overrides", nargs="*", help="more phazec overrides, for every case")
    args = parser.parse_args()
    for name in args.cases.split(","):
        run(CASES[name], args.overrides, args.warm)


if __name__ == "__main__":
    main()
