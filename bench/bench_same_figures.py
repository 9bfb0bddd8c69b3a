"""Benchmark: every figure a user sees, recorded and compared bit for bit (issue 38's acceptance).

`record OUT.json` runs, through the installed commands and the benches, what a user sees of phazec:
- the default search (`phazec`, as `make run` runs it) and the docs' several-model search: their
  result.json;
- the docs' `phazec-plan` examples (and one with every overlap switch): their plan.json;
- the docs' `phazec-ir` examples: their ir.json;
- every row `bench/bench_fidelity.py` predicts (its `--json`): the whole plan report;
- `bench/bench_strategies.py` (its `--json`): each strategy's result.json on each model.
`compare BASE.json NEW.json` then says how many figures it compared and lists every one that differs,
leaving out only the seconds a run took (`search.wall_s`, `cost_s`, `ilp_s`, `dp_s`), the schedule
cache hits and the cache directory, which depend on the machine and the bench, not on the model.
explored.csv and common.csv are compared line by line. Exit status 1 on a difference.

Run: .venv/bin/python bench/bench_same_figures.py record after.json
     .venv/bin/python bench/bench_same_figures.py compare bench/figures_529c9d2.json after.json
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

SEARCHES = {
    "default": [],
    "multi": ["model=[bert_large,opt_350m]", "hw=tpu_small", "search=exhaustive"],
}
"""`phazec` command lines (besides tracking=none): `make run`'s, and the docs' several-model one."""

PLANS = {
    "gpt3_175b": [
        "model=gpt3_175b", "hw=a100", "system=dgx_a100", "train.optimizer=adam", "plan.tp=8", "plan.pp=8",
        "plan.dp=16", "plan.microbatch=1", "plan.recompute=selective", "plan.sequence_parallel=true",
        "plan.interleave=3",
    ],
    "gpt2_xl": [
        "model=gpt2_xl", "hw=a100", "system=dgx_a100", "system.devices=8", "system.global_batch=64",
        "train.optimizer=adam", "plan.pp=2", "plan.dp=4", "plan.microbatch=4", "plan.recompute=selective",
        "plan.interleave=2",
    ],
    "llama2_7b_h100": [
        "model=llama2_7b", "hw=h100", "system=dgx_h100", "system.devices=64", "system.global_batch=512",
        "train.optimizer=adam", "plan.tp=8", "plan.pp=1", "plan.dp=8", "plan.microbatch=1",
        "plan.recompute=selective", "plan.sequence_parallel=true",
    ],
    "gpt3_175b_overlaps": [
        "model=gpt3_175b", "hw=h100", "system=dgx_h100", "train.optimizer=adam", "plan.tp=8", "plan.pp=8",
        "plan.dp=16", "plan.microbatch=1", "plan.recompute=full", "plan.interleave=2",
        "plan.zero_stage=1", "plan.overlap_grad_reduce=true", "plan.overlap_param_gather=true",
        "plan.pipeline_sends_masks=true", "plan.last_stage_recomputes=false",
    ],
    "gpt2_xl_over_hbm": [
        "model=gpt2_xl", "hw=v100", "system=dgx2_v100", "system.devices=8", "system.global_batch=64",
        "train.optimizer=adam", "plan.dp=8", "plan.microbatch=8",
    ],
}  # fmt: skip
"""`phazec-plan` command lines: the docs' examples, every overlap switch, and a plan over HBM."""

IRS = {
    "default": [],
    "gpt2_xl_512": ["model=gpt2_xl", "model.seq_len=512"],
    "gpt3_175b_tp8": ["model=gpt3_175b", "parallel.tp=8"],
    "llama2_7b_h100_tp8": ["model=llama2_7b", "hw=h100", "parallel.tp=8"],
}
"""`phazec-ir` command lines of the docs."""

IGNORED = {"wall_s", "cost_s", "ilp_s", "dp_s", "ilp_cache_hits", "cache_dir"}
"""Keys whose values are seconds a run took, cache hits or the bench's temporary cache directory: the
machine's, not the model's."""


def command(name: str, overrides: list[str], json_name: str) -> Any:
    """Run an installed command with `overrides` in a fresh run directory; the JSON file it wrote, and
    the lines of every CSV file it wrote (by path in the run directory)."""
    with tempfile.TemporaryDirectory(prefix="phazec-figures-") as tmp:
        args = [str(BIN / name), *overrides, "tracking=none", f"hydra.run.dir={tmp}"]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        files = sorted(Path(tmp).rglob("*.csv"))
        tables = {str(p.relative_to(tmp)): p.read_text().splitlines() for p in files}
        return {"json": json.loads((Path(tmp) / json_name).read_text()), "csv": tables}


def bench(script: str, *args: str) -> Any:
    """Run a bench with `--json`; the JSON it wrote."""
    with tempfile.TemporaryDirectory(prefix="phazec-figures-") as tmp:
        out = Path(tmp) / "out.json"
        args = (sys.executable, str(BENCH / script), "--json", str(out), *args)
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def record(out: Path) -> None:
    """Every figure, written to `out`."""
    figures: dict[str, Any] = {}
    steps: list[tuple[str, str, list[str], str]] = [
        *((f"search/{k}", "phazec", v, "result.json") for k, v in SEARCHES.items()),
        *((f"plan/{k}", "phazec-plan", v, "plan.json") for k, v in PLANS.items()),
        *((f"ir/{k}", "phazec-ir", v, "ir.json") for k, v in IRS.items()),
    ]
    start = time.perf_counter()
    for name, program, overrides, json_name in steps:
        figures[name] = command(program, overrides, json_name)
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    figures["fidelity"] = bench("bench_fidelity.py")
    print(f"fidelity: {time.perf_counter() - start:.0f} s", flush=True)
    figures["strategies"] = bench("bench_strategies.py", "--workers", "2")
    print(f"strategies: {time.perf_counter() - start:.0f} s", flush=True)
    out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")


def leaves(node: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON tree by its path, without the `IGNORED` keys; a float as its repr."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key not in IGNORED:
                out |= leaves(value, f"{path}/{key}")
        return out
    if isinstance(node, list):
        out = {f"{path}#len": len(node)}
        for i, value in enumerate(node):
            out |= leaves(value, f"{path}[{i}]")
        return out
    return {path: repr(node) if isinstance(node, float) else node}


def compare(base: Path, new: Path) -> int:
    """Print how many figures were compared and every one that differs; the exit status."""
    before, after = leaves(json.loads(base.read_text())), leaves(json.loads(new.read_text()))
    absent = "<absent>"
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k, absent) != after.get(k, absent))
    for key in differ:
        print(f"{key}: {before.get(key, absent)} -> {after.get(key, absent)}")
    print(f"{len(before)} figures compared, {len(differ)} differ")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("base", type=Path)
    both.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.verb == "record":
        record(args.out)
    else:
        sys.exit(compare(args.base, args.new))


if __name__ == "__main__":
    main()
