"""`phazec-plan` on every Megatron-LM row of ../shared/validation/public-runs.csv: fits, and activations
against Korthikanti et al. 2022 (arXiv 2205.05198) section 4.

Rows: Megatron-LM's own runs (NAR21-T1-*, NAR21-T2-PTD-*, MEG20-*, MEG24-*; the ZeRO-3 rows ran
DeepSpeed). Each row's plan is timed by `phazec.predict.plan_report.time_plan`, the function
`phazec-plan` runs after lowering, on the row's model exported with two blocks and repeated to its depth
(`bench_fidelity.prepare`: the row's chip, system and HBM, mixed-precision Adam, Megatron's stages,
full recompute in every stage, the last included, for the Megatron-LM rows; selective for the
Megatron-Core rows, whose flash attention keeps no s x s scores and recomputes them in the backward
pass: selective recompute's bytes and work). Prints per row: the plan, whether it fits, the fullest
stage's bytes per device, its activation bytes (stash of the microbatches in flight plus the
recompute working set) with the row's attention kernel and with the unfused core section 4 describes,
section 4's bytes for the same stage and mode (`section4_bytes`) and their difference from the
unfused bytes, and the predicted seconds per iteration beside the measured ones. The difference
is what phazec's lowered graph keeps beyond section 4's tensors: the 2-byte attention scale each
block stashes (per layer kept or rebuilt) and the int64 labels the loss reads (8sb per microbatch,
where the head's stash is counted), which section 4 leaves out.

    .venv/bin/python bench/megatron_rows.py
"""

import csv
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity

from phazec.predict.plan_report import PlanReport, time_plan

MEGATRON = ("NAR21-T1-", "NAR21-T2-PTD-", "MEG20-", "MEG24-")
"""Source ids of the runs Megatron-LM made."""


def section4_bytes(run: bench_fidelity.Run, report: PlanReport) -> int:
    """Section 4's activation bytes of the report's fullest stage, per device.

    Per transformer layer and microbatch (2-byte activations, 1-byte dropout masks; sp = t with
    sequence parallelism, else 1): stash sbh (10/sp + 24/t) + 5as^2b/t; selective recompute drops the
    attention core 5as^2b/t; full recompute keeps the layer input 2sbh/sp. The first stage also keeps
    the embedding's dropout mask sbh/sp (its input under full recompute is token ids: no activations);
    the last keeps the final LayerNorm's and output GEMM's inputs 4sbh/sp and the fp32 logits 4sbv/t
    (their input 2sbh/sp under full recompute). A stage keeps `in_flight` microbatches over its
    `interleave` model chunks, ceil(kept * in_flight / interleave), and rebuilds one layer's attention
    core (selective) or one layer's full stash (full) at a time.
    """
    s, b, h, a, t, v = run.seq_len, run.microbatch, run.hidden, run.heads, run.tp, run.vocab
    sp = t if run.sequence_parallel else 1
    core = 5 * a * s * s * b // t
    block = -(-10 * s * b * h // sp) + 24 * s * b * h // t + core
    embedding = -(-s * b * h // sp)
    head = -(-4 * s * b * h // sp) + 4 * s * b * v // t
    layer_input = -(-2 * s * b * h // sp)
    memory = report.memory
    first, last = memory.stage == 0, memory.stage == run.pp - 1
    blocks = run.layers // run.pp
    stashes = [block] * blocks + [embedding] * first + [head] * last
    kept = {
        "none": sum(stashes),
        "selective": sum(stashes) - blocks * core,
        "full": blocks * layer_input + last * layer_input,
    }[report.plan.training.recompute]
    working = {"none": 0, "selective": core, "full": max(stashes)}[report.plan.training.recompute]
    return -(-kept * memory.in_flight // run.interleave) + working


def main(path: Path) -> None:
    """One line per Megatron-LM row; the rows phazec cannot express are listed with the reason."""
    start = time.perf_counter()
    print(f"{'row':24s} {'plan':34s} {'fits':5s} {'stage GB':>9s} {'activations B':>14s} "
          f"{'unfused B':>14s} {'section 4 B':>14s} {'diff B':>7s} "
          f"{'pred s':>8s} {'meas s':>8s}")  # fmt: skip
    with path.open() as f:
        rows = [row for row in csv.DictReader(f) if row["source_id"].startswith(MEGATRON)]
    for row in rows:
        run = bench_fidelity.expressible(row)
        if isinstance(run, str):
            print(f"{row['source_id']:24s} skipped: {run}")
            continue
        report = timed(run)
        unfused = report if run.attention == "unfused" else timed(replace(run, attention="unfused"))
        memory = unfused.memory
        formula = section4_bytes(run, unfused)
        p, k = report.plan, report.plan.training
        plan = (f"t{p.tp} p{p.pp} d{p.dp} mb{k.microbatch} v{k.interleave} "
                f"{k.recompute}{' sp' if k.sequence_parallel else ''}"
                f"{' dopt' if k.zero_stage else ''}")  # fmt: skip
        print(f"{run.row_id:24s} {plan:34s} {report.fits!s:5s} {report.memory.total_bytes / 1e9:9.2f} "
              f"{report.memory.activation_bytes:14d} {memory.activation_bytes:14d} {formula:14d} "
              f"{memory.activation_bytes - formula:7d} {report.time_per_batch_s:8.3f} "
              f"{run.measured_s:8.3f}", flush=True)  # fmt: skip
    print(f"total: {time.perf_counter() - start:.0f} s")


def timed(run: bench_fidelity.Run) -> PlanReport:
    """The row's plan as `phazec-plan` times it."""
    prepared = bench_fidelity.prepare(run)
    return time_plan(prepared.plan, prepared.evaluator, prepared.designs)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else bench_fidelity.RUNS)
