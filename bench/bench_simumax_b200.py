"""SimuMax's whole B200 table, time and memory: phazec against the 43 Megatron-LM runs SimuMax measured on
one B200 node, and SimuMax's own predictions of them beside.

Data: `bench/data/simumax_b200_runs.csv`, the table of MooreThreads/SimuMax@4dcaae5
`docs/b200/b200_release_v1.2_summary.md` (Apache-2.0; its "real ms", "real alloc GiB", "perf ms" and "perf
alloc GiB" columns, read into figures): each run's measured step time and peak allocated memory on the
busiest rank, and SimuMax's predictions of both from its measured kernel table. The runs are Llama 3 70B
cut to 12 blocks and 405B cut to 4 (tp 1-8, pp 1-2, dp, at 4,096 tokens; and with context parallelism
by all-to-all at 32K and 128K tokens) and DeepSeek-V2 and V3 cut to 4 blocks (ep 4 or 8), microbatch 1,
4 to 32 microbatches, bf16, the distributed optimizer, fp32 gradients
(`--accumulate-allreduce-grads-in-fp32`), no recompute, every overlap off (the scripts and settings the
csv rows cite).

16 of them are rows of `modern-runs.csv` (their source names the case): they run as
`bench_fidelity_modern.py` (dense) and `bench_moe_fidelity.py` (MoE) run them, and the two B200
calibration rows keep that split. The other 27 (dense runs without context parallelism, and two MoE
microbatch counts) run as the csv row of the same model and parallel layout does, with the case's widths,
microbatch count and measured time: all held out, as the csv's other rows.

Printed per run: measured and predicted seconds and peak GiB, phazec's error and SimuMax's; then the mean
and max absolute error of each, per group (calibration, held-out csv rows, the other runs), for time
and for memory.

    .venv/bin/python bench/bench_simumax_b200.py
"""

import csv
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity
import bench_fidelity_modern
import bench_moe_fidelity

TABLE = Path(__file__).resolve().parent / "data" / "simumax_b200_runs.csv"
TEMPLATES = {
    "llama3_70b": "SIMUMAX-B200-L70L12-TP1CP8-32K",
    "llama3_405b": "SIMUMAX-B200-L405L4-TP2CP4-32K",
    "deepseekv3_ep8": "SIMUMAX-B200-DSV3L4-EP8PP1-MBC4",
    "deepseekv3_ep4": "SIMUMAX-B200-DSV3L4-EP4PP2-MBC4",
    "deepseekv2_ep8": "SIMUMAX-B200-DSV2L4-EP8PP1-MBC4",
    "deepseekv2_ep4": "SIMUMAX-B200-DSV2L4-EP4PP2-MBC4",
}
"""Per model (and, for MoE, expert-parallel width), the csv row whose model, settings and source a run
outside the csv takes; its widths, microbatches and measured time are the run's own."""
GIB = 2**30


@dataclass(frozen=True)
class Case:
    """One run of SimuMax's table."""

    name: str
    measured_s: float
    measured_gib: float
    simumax_s: float
    simumax_gib: float

    def width(self, key: str, default: int = 1) -> int:
        """The case name's `key<n>` (tp, pp, dp, cp, ep, seq, mbc), or `default`."""
        found = re.search(rf"(?:^|_){key}(\d+)(?:_|$)", self.name)
        return int(found.group(1)) if found else default

    @property
    def template(self) -> str:
        """The `TEMPLATES` key of the case's model."""
        model = re.match(r"(llama3_\d+b|deepseekv\d)", self.name)
        assert model is not None, self.name
        return model.group(1) + (f"_ep{self.width('ep')}" if model.group(1).startswith("deepseek") else "")


def cases() -> list[Case]:
    """The table's runs, in its order."""
    with TABLE.open() as f:
        return [
            Case(r["case"], float(r["measured_ms"]) / 1e3, float(r["measured_alloc_gib"]),
                 float(r["simumax_ms"]) / 1e3, float(r["simumax_alloc_gib"]))
            for r in csv.DictReader(f)
        ]  # fmt: skip


def csv_row(case: Case, rows: list[dict[str, str]]) -> tuple[dict[str, str], bool]:
    """The modern-runs.csv row of the case (True), or its template's with the case's plan (False)."""
    for row in rows:
        if re.search(rf"case {re.escape(case.name)}\b", row["source"]):
            return row, True
    template = next(row for row in rows if row["source_id"] == TEMPLATES[case.template])
    named = re.search(r"case (\w+)", template["source"])
    assert named is not None, template["source_id"]
    tp, pp, dp, cp = (case.width(key) for key in ("tp", "pp", "dp", "cp"))
    own = {
        "source_id": f"SIMUMAX-B200-{case.name}",
        "tp": str(tp), "pp": str(pp), "dp": str(dp), "cp": str(cp),
        "seq_len": str(case.width("seq", 4096)),
        "global_batch": str(case.width("mbc") * dp * int(template["microbatch"])),
        "gpus": str(tp * pp * dp * cp),
        "measured_s_per_iter": f"{case.measured_s}",
        "seq_parallel": "yes" if tp > 1 else template["seq_parallel"],
        "source": template["source"].replace(named.group(1), case.name),
    }  # fmt: skip
    return {**template, **own}, False


def predict(row: dict[str, str]) -> tuple[float, float]:
    """phazec's seconds per iteration and peak GiB a device of the row's plan, as its bench times it."""
    if row["experts"] and int(row["experts"]) > 0:
        run = bench_moe_fidelity.expressible(row)
        assert not isinstance(run, str), run
        report = bench_moe_fidelity.predict(run)
    else:
        knobs = bench_fidelity_modern.training_knobs()
        modern = bench_fidelity_modern.expressible(row, knobs)
        assert not isinstance(modern, str), modern
        prepared = bench_fidelity.prepare(
            modern.run, modern.overrides(knobs), bench_fidelity_modern.LLAMA_PRESET, modern.dims()
        )
        report, _ = bench_fidelity_modern.least_recompute_that_fits(modern, prepared, None)
    return report.time_per_batch_s, report.memory.total_bytes / GIB


def main() -> None:
    start = time.perf_counter()
    with bench_fidelity_modern.RUNS.open() as f:
        rows = list(csv.DictReader(f))
    calibration = bench_fidelity_modern.CALIBRATION["b200"]
    errors: dict[str, list[tuple[float, float, float, float]]] = {}
    print(f"{'run':52s} {'group':11s} {'meas s':>7s} {'pred s':>7s} {'error':>7s} {'SimuMax':>7s} "
          f"{'meas GiB':>8s} {'pred GiB':>8s} {'error':>7s} {'SimuMax':>7s}")  # fmt: skip
    for case in cases():
        row, in_csv = csv_row(case, rows)
        group = "calibration" if row["source_id"] in calibration else ("csv" if in_csv else "other")
        time_s, memory_gib = predict(row)
        figures = (
            time_s / case.measured_s - 1.0,
            case.simumax_s / case.measured_s - 1.0,
            memory_gib / case.measured_gib - 1.0,
            case.simumax_gib / case.measured_gib - 1.0,
        )
        errors.setdefault(group, []).append(figures)
        print(f"{case.name:52s} {group:11s} {case.measured_s:7.3f} {time_s:7.3f} {figures[0]:+7.1%} "
              f"{figures[1]:+7.1%} {case.measured_gib:8.2f} {memory_gib:8.2f} {figures[2]:+7.1%} "
              f"{figures[3]:+7.1%}", flush=True)  # fmt: skip
    print("\nmean and max absolute error per group (phazec; SimuMax's own):")
    for group in ("calibration", "csv", "other"):
        table = np.abs(np.array(errors[group]))
        means, maxima = table.mean(axis=0), table.max(axis=0)
        print(f"  {group:11s} {len(table):2d} runs  time {means[0]:5.1%} / {maxima[0]:5.1%} "
              f"(SimuMax {means[1]:5.1%} / {maxima[1]:5.1%})  memory {means[2]:5.1%} / {maxima[2]:5.1%} "
              f"(SimuMax {means[3]:5.1%} / {maxima[3]:5.1%})")  # fmt: skip
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
