"""Memory of every Megatron-LM row of ../shared/validation/public-runs.csv under phazec's model.

For each Megatron-LM run (source NAR21-T1-*, NAR21-T2-PTD-* and MEG20-*; the ZeRO-3 rows ran
DeepSpeed, not Megatron-LM) it builds the placement problem of the GPT model at the run's tensor-
parallel width from the per-layer bytes of Korthikanti et al. 2022, section 4 (which equal the bytes
phazec's memory pass derives from a lowered GPT block: tests/test_plan.py), splits the layers as
Megatron does and evaluates the run's plan with `explain_plan` (the model the search and
`phazec-plan` use), mixed-precision Adam, on the run's HBM (80 GB; 32 GB for the DGX-2 V100 rows).
Lowering these models at full width is out of reach (the ONNX export allocates every weight).
Latencies are placeholders (1 s per layer): only memory is read. Prints one row per run: whether
it fits, the fullest stage's bytes, and its activation bytes beside the section-4 formula.

    .venv/bin/python bench/megatron_rows.py [path/to/public-runs.csv]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from phazec.hw.system import NetworkTier
from phazec.solvers.placement import PlacementProblem, Recompute, Variant, explain_plan

CSV = Path("/work/shared/validation/public-runs.csv")


def gpt_problem(row: dict[str, str], blocks: int, hbm_bytes: int) -> PlacementProblem:
    """Embedding, blocks and head of a Megatron GPT at the row's widths: per device, per microbatch."""
    h, ffn, a, v = (int(row[k]) for k in ("hidden", "ffn", "heads", "vocab"))
    s, b, t = int(row["seq_len"]), int(row["microbatch"]), int(row["tp"])
    sp = row["seq_parallel"] == "yes"
    split = t if sp else 1
    block_params = 2 * ((4 * h * h + 3 * h + 2 * h * ffn + ffn) // t + 6 * h)  # bytes of 2-byte weights
    stash = s * b * h * 10 // split + s * b * h * 24 // t + 5 * a * s * s * b // t
    selective = stash - 5 * a * s * s * b // t
    checkpoint = 2 * s * b * h // split
    embed_params = 2 * (v * h // t + s * h)
    head_params = 2 * (v * h // t + 2 * h)
    embed_stash = s * b * h // split  # the embedding dropout's mask
    head_stash = 4 * s * b * h // split + 4 * s * b * v // t  # final LayerNorm and GEMM inputs, fp32 logits
    n = blocks + 2

    def per_layer(embed: int, block: int, head: int) -> np.ndarray:
        return np.array([[embed] + [block] * blocks + [head]], dtype=np.int64)

    return PlacementProblem(
        t_values=np.array([t]),
        forward_latency_s=np.ones((1, n)),
        backward_latency_s=np.ones((1, n)),
        param_bytes=per_layer(embed_params, block_params, head_params),
        activation_bytes=per_layer(embed_stash, stash, head_stash),
        stash_bytes=per_layer(embed_stash, stash, head_stash),
        input_bytes=per_layer(0, checkpoint, checkpoint),
        selective_stash_bytes=per_layer(embed_stash, selective, head_stash),
        tensor_parallel=np.ones((1, n), dtype=bool),
        edges=np.array([(i, i + 1) for i in range(n - 1)]),
        edge_bytes=np.full(n - 1, 2 * s * b * h),
        device_count=t * int(row["pp"]) * int(row["dp"]),
        microbatch_count=int(row["global_batch"]) // b,
        samples_per_microbatch=b,
        tiers=(NetworkTier(t * int(row["pp"]) * int(row["dp"]), 1e11, 0.0),),
        hbm_bytes=hbm_bytes,
        optimizer="adam",
        last_stage_recomputes=True,
    )


def main(path: Path) -> None:
    seen = set()
    print("source_id  tp pp dp mb v  recompute  fits  fullest_GB  activations_GB  section4_GB")
    for row in csv.DictReader(path.open()):
        rid = row["source_id"]
        if rid in seen or not rid.startswith(("NAR21-T1-", "NAR21-T2-PTD-", "MEG20-")):
            continue
        seen.add(rid)
        blocks, pp = int(row["layers"]), int(row["pp"])
        v = int(row["interleave"] or 1)
        mode: Recompute = "full"  # every Megatron row ran full recompute (the PTD rows and MEG20 state none)
        hbm = 32 * 10**9 if "V100" in row["gpu"] else 80 * 10**9
        counts = [blocks // pp + (1 if i < blocks % pp else 0) for i in range(pp)]
        stages, first = [], 1
        for count in counts:
            stages.append(list(range(first, first + count)))
            first += count
        stages[0].insert(0, 0)
        stages[-1].append(blocks + 1)
        problem = gpt_problem(row, blocks, hbm)
        figures = explain_plan(Variant(int(row["tp"]), mode, hbm, v, False).applied(problem), stages,
                               int(row["tp"]), int(row["dp"]))  # fmt: skip
        top = max(range(pp), key=lambda i: figures.memories[i].total_bytes)
        memory = figures.memories[top]
        s, b, h, a, t = (int(row[k]) for k in ("seq_len", "microbatch", "hidden", "heads", "tp"))
        # Section 4, full recompute: each layer's input 2sbh per microbatch in flight (its blocks),
        # plus one layer's activations sbh(10 + 24/t + 5as/(ht)) rebuilt while it recomputes.
        stage_blocks = counts[top]
        formula = -(-2 * s * b * h * stage_blocks * memory.in_flight // v) + (
            s * b * h * 10 + s * b * h * 24 // t + 5 * a * s * s * b // t
        )
        activations = memory.stash_bytes + memory.working_bytes
        print(f"{rid:24s} {t:2d} {pp:2d} {int(row['dp']):4d} {b:2d} {v} {mode:9s} "
              f"{memory.total_bytes <= hbm!s:5s} {memory.total_bytes / 1e9:10.2f} "
              f"{activations / 1e9:14.3f} {formula / 1e9:12.3f}")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else CSV)
