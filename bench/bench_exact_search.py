"""Benchmark: the exact schedule search's speed on a first `phazec-plan` of a DeepSeek-V3-like model on a GPU.

On a GPU preset (`shared_cores`: the SMs run both tensor and vector work) the ILP leaves the schedules
of DeepSeek-V3's MLA, MoE and multi-token-prediction graphs unproven, so each one runs the exact search
(`ext/src/schedule_search.cpp`) to its node limit, and on graphs above `solver.ilp_max_ops` the search
alone. A user's first `phazec-plan` of such a model (an empty schedule cache) pays for all of them.

The plan: DeepSeek-V3 cut to a dense and a MoE block plus one MTP module, at 4,096 tokens, on 16 H100s
(tp 2 x pp 2 x dp 4 with sequence parallelism, ep 4, full recompute, the distributed optimizer), with
the solver's defaults. The script times every call of the search (CPU seconds of this process,
`time.process_time`, which a busy machine inflates less than wall time) and prints their count, nodes,
CPU seconds and microseconds per node, the whole plan's wall time on an empty schedule cache (the ONNX
export is cached first and timed apart), and the plan's iteration time: the same to the bit before and
after a change that only speeds the search up.

Figures: docs/model/scheduling.md, "Its speed" (2 cores; the machine is noisy, so compare runs made
one after the other).

Run: .venv/bin/python bench/bench_exact_search.py
"""

import tempfile
import time
from pathlib import Path
from typing import Any

from phazec.api import composed
from phazec.commands.plan import predict_plan
from phazec.config.settings import settings_from_config
from phazec.frontend import default_cache_dir
from phazec.solvers import core

PLAN = (
    "model=deepseek_v3", "model.hf_config.num_hidden_layers=2", "model.hf_config.first_k_dense_replace=1",
    "model.mtp_layers=1", "model.seq_len=4096", "hw=h100", "system=dgx_h100", "system.devices=16",
    "system.global_batch=32", "train.optimizer=adam", "tracking=none", "plan.tp=2", "plan.pp=2",
    "plan.dp=4", "plan.ep=4", "plan.microbatch=2", "plan.recompute=full", "plan.sequence_parallel=true",
    "plan.zero_stage=1",
)  # fmt: skip


def main() -> None:
    """Export (cached), then the plan on an empty schedule cache with every search call timed."""
    onnx_cache = default_cache_dir()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as warm:
        # the export alone, into the user's ONNX cache; the schedules go to a throwaway cache
        _link_onnx(onnx_cache, Path(warm))
        no_search = composed("plan", [*PLAN, "solver.search_node_limit=0", f"cache_dir={warm}"])
        predict_plan(settings_from_config(no_search))
    print(f"export and a plan without the exact search: {time.perf_counter() - start:.1f} s wall")

    calls: list[tuple[float, int, int]] = []
    search = core.search_schedule

    def timed(**kwargs: Any) -> Any:
        cpu = time.process_time()
        out = search(**kwargs)
        calls.append((time.process_time() - cpu, out.nodes, len(kwargs["modes"])))
        return out

    core.search_schedule = timed  # type: ignore[assignment]  # the same function, timed
    with tempfile.TemporaryDirectory() as cold:
        _link_onnx(onnx_cache, Path(cold))
        start = time.perf_counter()
        report = predict_plan(settings_from_config(composed("plan", [*PLAN, f"cache_dir={cold}"])))
        wall_s = time.perf_counter() - start
    core.search_schedule = search
    cpu_s = sum(c for c, _, _ in calls)
    nodes = sum(n for _, n, _ in calls)
    per_node_us = 1e6 * cpu_s / nodes
    print(f"exact searches: {len(calls)}, {nodes:,} nodes, {cpu_s:.2f} s CPU, {per_node_us:.2f} µs a node")
    for c, n, ops in sorted(calls, reverse=True)[:5]:
        print(f"  {ops:4d} ops  {n:9,d} nodes  {c:6.2f} s CPU  {1e6 * c / n:6.2f} µs a node")
    print(f"plan on an empty schedule cache: {wall_s:.1f} s wall; iteration {report.time_per_batch_s!r} s")


def _link_onnx(onnx_cache: Path, cache_dir: Path) -> None:
    """`cache_dir` with the user's ONNX exports (the schedules stay its own)."""
    (onnx_cache / "onnx").mkdir(parents=True, exist_ok=True)
    (cache_dir / "onnx").symlink_to(onnx_cache / "onnx", target_is_directory=True)


if __name__ == "__main__":
    main()
