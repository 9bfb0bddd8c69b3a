"""The summary of a multirun sweep: every job's outcome, the overall best, a comparison table.

A job is a directory of the sweep holding `.hydra/overrides.yaml`; it succeeded iff it holds its
command's output: `result.json` (`phazec`), `plan.json` (`phazec-plan`) or `ir.json` (`phazec-ir`).
The best job has the highest throughput (the first such job on ties), so a search sweep's best
equals one run searching the union of the jobs' knob lists. A job searching several models
(`model=[a,b,...]`) is ranked by its mean throughput on its common design; a plan by its own, if it
fits in HBM; a lowering is not ranked.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from phazec import atomic
from phazec.report.result import headline_throughput, is_multi
from phazec.report.table import render

log = logging.getLogger(__name__)

BEST_JSON = "sweep_best.json"
COMPARISON_CSV = "sweep_comparison.csv"
COMPARISON_TXT = "sweep_comparison.txt"
OUTPUTS = {"search": "result.json", "plan": "plan.json", "ir": "ir.json"}
"""The file each kind of job writes when it succeeds."""
COLUMNS = (
    "job", "status", "overrides", "throughput_samples_per_s", "time_per_batch_s", "area_mm2",
    "speedup_vs_tpuv4", "microbatch", "recompute", "tp", "pp", "dp", "hbm_bytes", "dir",
)  # fmt: skip


@dataclass(frozen=True)
class SweepJob:
    """One job of a sweep."""

    num: int
    """Hydra's job number."""
    overrides: list[str]
    """The job's command-line overrides."""
    dir: Path
    result: dict[str, Any] | None
    """Its output (`OUTPUTS`); None when the job failed."""
    kind: str = "search"
    """Which command's output `result` is: a key of `OUTPUTS`."""

    @property
    def throughput(self) -> float | None:
        """What the job is ranked by: a search's headline throughput, a plan's samples per second if it
        fits in HBM; None for a failed job, a plan that does not fit and a lowering."""
        r = self.result
        if r is None or self.kind == "ir" or (self.kind == "plan" and not r["fits"]):
            return None
        return float(r["samples_per_s"]) if self.kind == "plan" else headline_throughput(r)


@dataclass(frozen=True)
class Summary:
    """A sweep's jobs in job order and the files the summary wrote."""

    jobs: list[SweepJob]
    best: SweepJob | None
    """The succeeded job with the highest throughput; None if every job failed."""
    paths: list[Path]


def gather(sweep_dir: Path) -> list[SweepJob]:
    """Every job under `sweep_dir`, in job-number order."""
    jobs = []
    for overrides_path in sweep_dir.rglob(".hydra/overrides.yaml"):
        job_dir = overrides_path.parent.parent
        hydra_cfg = OmegaConf.load(overrides_path.parent / "hydra.yaml")
        overrides = OmegaConf.to_container(OmegaConf.load(overrides_path))
        assert isinstance(overrides, list)
        kind = next((k for k, name in OUTPUTS.items() if (job_dir / name).is_file()), "search")
        output = job_dir / OUTPUTS[kind]
        result = json.loads(output.read_text()) if output.is_file() else None
        num = int(hydra_cfg.hydra.job.num)
        jobs.append(SweepJob(num, [str(o) for o in overrides], job_dir, result, kind))
    return sorted(jobs, key=lambda j: j.num)


def best_job(jobs: list[SweepJob]) -> SweepJob | None:
    """The ranked job (`SweepJob.throughput`) with the highest throughput, the first one on ties."""
    ranked = [(j.throughput, j) for j in jobs if j.throughput is not None]
    return max(ranked, key=lambda pair: pair[0], default=(0.0, None))[1]


def comparison_row(job: SweepJob, shared: set[str]) -> dict[str, Any]:
    """One row of the comparison table: the job's overrides except the `shared` ones, and its figures
    (empty for a failed job; for several models, the mean throughput and the common design's area
    and HBM, the per-model figures being in its result.json; for a plan, its figures and "over HBM"
    when it does not fit; for a lowering, none)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS, "")
    own = " ".join(o for o in job.overrides if o not in shared)
    row.update(job=job.num, status="failed", overrides=own, dir=str(job.dir))
    r = job.result
    if r is not None and job.kind == "ir":
        row.update(status="ok")
    elif r is not None and job.kind == "plan":
        row.update(
            status="ok" if r["fits"] else "over HBM",
            throughput_samples_per_s=r["samples_per_s"],
            time_per_batch_s=r["time_per_batch_s"],
            **{key: r[key] for key in ("microbatch", "recompute", "tp", "pp", "dp")},
        )
    elif r is not None and is_multi(r):
        row.update(
            status="ok",
            throughput_samples_per_s=headline_throughput(r),
            area_mm2=r["design"]["area_mm2"],
            hbm_bytes=r["design"]["hbm_bytes"],
        )
    elif r is not None:
        plan = r["plan"]
        row.update(
            status="ok",
            throughput_samples_per_s=r["throughput_samples_per_s"],
            time_per_batch_s=r["time_per_batch_s"],
            area_mm2=r["design"]["area_mm2"],
            speedup_vs_tpuv4=r["speedup_vs_tpuv4"],
            microbatch=plan["microbatch"],
            recompute=plan["recompute"],
            tp=plan["tp"],
            pp=plan["pp"],
            dp=plan["dp"],
            hbm_bytes=r["design"]["hbm_bytes"],
        )
    return row


def comparison_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV with a header, floats at full precision."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: repr(v) if isinstance(v, float) else v for k, v in row.items()} for row in rows)
    return out.getvalue()


def comparison_text(rows: list[dict[str, Any]], best: SweepJob | None) -> str:
    """The rows as an aligned text table, the best job marked with `*`."""
    shown = [c for c in COLUMNS if c != "dir"]
    body = [
        [
            f"{row['job']}{'*' if best is not None and row['job'] == best.num else ''}",
            *(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in shown[1:]),
        ]
        for row in rows
    ]
    return render(shown, body) + "\n"


def write_summary(sweep_dir: Path) -> Summary:
    """Gather the jobs of `sweep_dir` and write the best job and the comparison table beside them.

    Writes `sweep_best.json` (the best job's number, overrides, directory and result; null if every
    job failed), `sweep_comparison.csv` and `sweep_comparison.txt`; nothing when no job ran.
    """
    jobs = gather(sweep_dir)
    if not jobs:
        log.info("no job of the sweep ran, so %s has no summary", sweep_dir)
        return Summary([], None, [])
    best = best_job(jobs)
    shared = set.intersection(*(set(j.overrides) for j in jobs))
    rows = [comparison_row(j, shared) for j in jobs]
    best_record = None
    if best is not None:
        best_record = {
            "job": best.num,
            "overrides": best.overrides,
            "dir": str(best.dir),
            "result": best.result,
        }
    paths = [sweep_dir / BEST_JSON, sweep_dir / COMPARISON_CSV, sweep_dir / COMPARISON_TXT]
    atomic.write_json(paths[0], best_record)
    atomic.write_bytes(paths[1], comparison_csv(rows).encode())
    atomic.write_bytes(paths[2], comparison_text(rows, best).encode())
    failed = sum(j.result is None for j in jobs)
    log.info("sweep of %d jobs (%d failed) summarised in %s", len(jobs), failed, sweep_dir)
    return Summary(jobs, best, paths)
