"""Benchmark: the placement DP on GPT-3 175B, all 12 variants in one call.

Target (issue 6): the GPT-3 175B layer graph (98 nodes: the embedding feeding all 96 blocks and
the head), 1024 devices, t in {4, 8}, 1024 microbatches, recompute off and on, HBM 32/64/80 GB:
all 12 variants in one `solve_placements` call in at most 0.5 s (median of 7 runs) and at most
300 MB peak resident memory of this process (resource.getrusage; the script is a fresh process).
Target (issue 41): the same call in at most 0.016 CPU seconds (median of the 7 runs), what it took at
main fad1c32, before the model grew (each stage's own DP sync, ZeRO stages, interleaving).

`gpt3_problem()` builds the layer graph from analytic per-layer figures, so the figure is the DP's
alone, whatever the cost passes do: 24 s h^2 + 4 s^2 h forward FLOPs per block (split over t)
at ANALYTIC_FLOP_PER_S, backward twice the forward, two ring all-reduces of the block output per
direction inside a node, Korthikanti et al. (2022) activation bytes s b h (10 + 24/t + 5 a s/(h t)),
a causal mask (s^2 bytes) from the embedding to every block and the labels to the head.

Then each kind of variant the search solves (recompute modes, interleave, ZeRO stages, overlapped DP
syncs; `KINDS`) is timed on its own, 6 variants (t x HBM) in one call, in CPU seconds.

Run: .venv/bin/python bench/bench_placement.py
"""

import resource
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from phazec.hw.system import NetworkTier
from phazec.predict.training import Training, core_settings
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.problem import NoFeasiblePlacement, Placement, PlacementProblem, Variant

HIDDEN = 12288
HEADS = 96
BLOCKS = 96
VOCAB = 50257
SEQ = 2048
MICROBATCH = 4
MICROBATCHES = 1024
DEVICES = 1024
T_VALUES = (4, 8)
BYTES_PER_ELEMENT = 2
ID_BYTES = 8
ANALYTIC_FLOP_PER_S = 0.5 * 312e12
"""A100 dense bf16 peak at 50 % utilisation."""
HBM_BYTES_PER_S = 2.0e12
TIERS = (NetworkTier(8, 300e9, 2e-6), NetworkTier(1024, 25e9, 5e-6))
"""DGX A100: NVLink inside a node of 8, InfiniBand between nodes."""
HBM_SIZES_BYTES = (32 * 10**9, 64 * 10**9, 80 * 10**9)
RECOMPUTE = ("none", "full")
TARGET_TIME_S = 0.5
TARGET_CPU_S = 0.016
TARGET_PEAK_MB = 300.0
RUNS = 7


def layer_figures(t: int) -> dict[str, list[float]]:
    """Per-layer figures at width t (embedding, 96 blocks, head), per device and microbatch."""
    tokens = MICROBATCH * SEQ
    hidden_bytes = tokens * HIDDEN * BYTES_PER_ELEMENT
    allreduce_s = 2 * (t - 1) / t * hidden_bytes / TIERS[0].bandwidth_bytes_per_s
    block_s = (24 * tokens * HIDDEN**2 + 4 * MICROBATCH * SEQ**2 * HIDDEN) / t / ANALYTIC_FLOP_PER_S
    head_s = 2 * tokens * HIDDEN * VOCAB / t / ANALYTIC_FLOP_PER_S
    embedding_s = hidden_bytes / HBM_BYTES_PER_S
    block_activation = tokens * HIDDEN * (10 + 24 / t + 5 * HEADS * SEQ / (HIDDEN * t))
    return {
        "forward": [embedding_s] + [block_s + 2 * allreduce_s] * BLOCKS + [head_s],
        "backward": [2 * embedding_s] + [2 * block_s + 2 * allreduce_s] * BLOCKS + [2 * head_s],
        "params": [(VOCAB + SEQ) * HIDDEN * BYTES_PER_ELEMENT / t]
        + [12 * HIDDEN**2 * BYTES_PER_ELEMENT / t] * BLOCKS
        + [VOCAB * HIDDEN * BYTES_PER_ELEMENT / t],
        "activations": [hidden_bytes] + [block_activation] * BLOCKS + [tokens * VOCAB * 4 / t],
        "inputs": [tokens * ID_BYTES] + [0.0] * BLOCKS + [tokens * ID_BYTES],
    }


def gpt3_problem() -> PlacementProblem:
    """GPT-3 175B's layer graph (98 nodes) with analytic figures at t = 4 and 8."""
    n = BLOCKS + 2
    hidden_bytes = MICROBATCH * SEQ * HIDDEN * BYTES_PER_ELEMENT
    mask_bytes = SEQ * SEQ
    edges = [(v, v + 1, hidden_bytes) for v in range(n - 1)]
    edges += [(0, v, mask_bytes) for v in range(2, n - 1)] + [(0, n - 1, MICROBATCH * SEQ * ID_BYTES)]
    edges[0] = (0, 1, hidden_bytes + mask_bytes)
    figures = [layer_figures(t) for t in T_VALUES]

    def table(key: str, dtype: type[np.generic]) -> np.ndarray:
        return np.array([f[key] for f in figures]).astype(dtype)

    return PlacementProblem(
        t_values=np.array(T_VALUES),
        forward_latency_s=table("forward", np.float64),
        backward_latency_s=table("backward", np.float64),
        param_bytes=table("params", np.int64),
        activation_bytes=table("activations", np.int64),
        stash_bytes=table("activations", np.int64),
        input_bytes=table("inputs", np.int64),
        tensor_parallel=np.ones((len(T_VALUES), n), dtype=bool),
        edges=np.array([(u, v) for u, v, _ in edges]),
        edge_bytes=np.array([b for _, _, b in edges]),
        device_count=DEVICES,
        microbatch_count=MICROBATCHES,
        samples_per_microbatch=MICROBATCH,
        tiers=TIERS,
    )


KINDS: dict[str, dict[str, Any]] = {
    "plain (recompute none)": {},
    "recompute selective": {"recompute": "selective"},
    "recompute full": {"recompute": "full"},
    "recompute full, Megatron's last stage": {"recompute": "full", "last_stage_recomputes": True},
    "interleave 2": {"interleave": 2},
    "interleave 6": {"interleave": 6},
    "zero stage 1 (distributed optimizer)": {"zero_stage": 1},
    "zero stage 3": {"zero_stage": 3},
    "interleave 6, zero stage 1": {"interleave": 6, "zero_stage": 1},
    "overlapped DP sync, zero stage 1": {
        "zero_stage": 1,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
    },
}
"""The variant kinds the search solves, each timed on its own: Training's knobs that the compiled model
reads. Sequence parallelism changes the layers' figures (the problem), not the DP's work."""


def print_kinds(problem: PlacementProblem) -> None:
    """Each kind of variant at t 4 and 8 and the three HBM sizes (6 variants in one call): median CPU
    seconds of 3 runs."""
    for name, knobs in KINDS.items():
        training = replace(Training(last_stage_recomputes=False), **knobs)
        variants = [Variant(t, hbm, core_settings(training)) for t in T_VALUES for hbm in HBM_SIZES_BYTES]
        cpu_s = []
        for _ in range(3):
            start = time.process_time()
            results = solve_placements(problem, variants)
            cpu_s.append(time.process_time() - start)
        fits = sum(isinstance(r, Placement) for r in results)
        print(f"{name:<40} 6 variants ({fits} fit): {statistics.median(cpu_s):.3f} CPU s")


def main() -> None:
    problem = gpt3_problem()
    # The settings a search passes, under PHAZE's rule (the last stage does not recompute).
    labelled = [
        (mode, Variant(t, hbm, core_settings(Training(recompute=mode, last_stage_recomputes=False))))
        for t in T_VALUES
        for mode in RECOMPUTE
        for hbm in HBM_SIZES_BYTES
    ]
    variants = [v for _, v in labelled]
    times_s, cpu_s = [], []
    for _ in range(RUNS):
        start, start_cpu = time.perf_counter(), time.process_time()
        results = solve_placements(problem, variants)
        times_s.append(time.perf_counter() - start)
        cpu_s.append(time.process_time() - start_cpu)
    for (mode, v), r in zip(labelled, results, strict=True):
        label = f"t={v.t} recompute={mode:4} hbm={v.hbm_bytes / 1e9:.0f} GB"
        if isinstance(r, NoFeasiblePlacement):
            print(f"{label}: no plan fits; needs {r.min_memory_bytes / 1e9:.1f} GB ({r.dominant} dominate)")
        else:
            peak_gb = max(s.memory_bytes for s in r.stages) / 1e9
            print(
                f"{label}: {r.stage_count} stages x d={r.d}, {r.time_per_batch_s:.2f} s/batch, "
                f"{r.throughput_samples_per_s:.1f} samples/s, peak {peak_gb:.1f} GB"
            )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median_s = statistics.median(times_s)
    median_cpu_s = statistics.median(cpu_s)
    print_kinds(problem)
    print(
        f"12 variants in one call: median {median_s:.3f} s, max {max(times_s):.3f} s over {RUNS} runs "
        f"(target <= {TARGET_TIME_S} s)"
    )
    print(
        f"12 variants in one call: median {median_cpu_s:.4f} CPU s over {RUNS} runs "
        f"(target <= {TARGET_CPU_S} CPU s, fad1c32's)"
    )
    print(f"peak resident memory: {peak_mb:.0f} MB (target <= {TARGET_PEAK_MB:.0f} MB)")
    passed = median_s <= TARGET_TIME_S and median_cpu_s <= TARGET_CPU_S and peak_mb <= TARGET_PEAK_MB
    print("PASS" if passed else "FAIL")


if __name__ == "__main__":
    main()
