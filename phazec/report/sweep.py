"""The summary of a multirun sweep: every job's outcome, the overall best, a comparison table.

A job is a directory of the sweep holding `.hydra/overrides.yaml`; it succeeded iff it holds its
command's output: `result.json` (`phazec`), `plan.json` (`phazec-plan`) or `ir.json` (`phazec-ir`).
The best job has the highest throughput (the first such job on ties), so a search sweep's best
equals one run searching the union of the jobs' knob lists. A job searching several models
(`model=[a,b,...]`) is ranked by its mean throughput on its common design; a plan by its own, if it
fits in HBM; a lowering is not ranked. A failed job's directory holds `error.txt`, its error's one-line
message first (`phazec.track.sweep`).
"""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phazec.hw.validation import overlap
from phazec.report.result import headline_throughput, is_multi
from phazec.report.table import render
from phazec.util import atomic

log = logging.getLogger(__name__)

BEST_JSON = "sweep_best.json"
COMPARISON_CSV = "sweep_comparison.csv"
COMPARISON_TXT = "sweep_comparison.txt"
ERROR_TXT = "error.txt"
KINDS = {"config": "search", "plan": "plan", "ir": "ir"}
"""The kind of job each command's config (Hydra's `hydra.job.config_name`) runs."""
OUTPUTS = {"search": "result.json", "plan": "plan.json", "ir": "ir.json"}
"""The file each kind of job writes when it succeeds."""
FIGURES = {
    "search": ("throughput_samples_per_s", "time_per_batch_s", "within_model_error", "area_mm2",
               "speedup_vs_tpuv4", "microbatch", "recompute", "tp", "pp", "dp", "devices", "hbm_bytes"),
    "plan": ("throughput_samples_per_s", "time_per_batch_s", "within_model_error", "mfu", "microbatch",
             "recompute", "tp", "pp", "dp", "devices", "memory_bytes", "hbm_bytes"),
    "ir": ("parameters", "seq_len", "layers", "forward_flops_per_sample"),
}  # fmt: skip
"""The figures the comparison table shows for each kind of sweep (`devices`: those the plan uses,
tp x pp x dp; sizes in bytes, in GB in the text table; `within_model_error`: the job's band overlaps
the best job's, `WITHIN_ERROR` in the text table, empty when either has no band)."""

WITHIN_ERROR = "~"
"""The text table's mark of a job within the model's error of the best one."""


TEXT_HEADERS = {
    "throughput_samples_per_s": "samples/s",
    "time_per_batch_s": "s/batch",
    "speedup_vs_tpuv4": "vs TPUv4",
    "within_model_error": "in error",
    "microbatch": "mb",
    "forward_flops_per_sample": "fwd FLOPs/sample",
}
"""The text table's shorter headers of the CSV's columns, so that it stays narrow."""


def columns(kind: str) -> tuple[str, ...]:
    """The comparison table's columns for a sweep of jobs of one kind (a key of `OUTPUTS`)."""
    return ("job", "status", "overrides", *FIGURES[kind], "dir", "error")


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
    error: str = ""
    """A failed job's one-line error (the first line of its `error.txt`; empty if it wrote none)."""

    @property
    def band(self) -> dict[str, Any] | None:
        """The band of its time (`phazec.hw.validation.band_record`), None for a failed job, a lowering,
        a several-model search and a result written before bands."""
        r = self.result
        return None if r is None or self.kind == "ir" else r.get("band")

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
        job = yaml.safe_load((overrides_path.parent / "hydra.yaml").read_text())["hydra"]["job"]
        overrides = yaml.safe_load(overrides_path.read_text())
        assert isinstance(overrides, list)
        kind = KINDS.get(str(job["config_name"]), "search")
        output = job_dir / OUTPUTS[kind]
        result = json.loads(output.read_text()) if output.is_file() else None
        num = int(job["num"])
        error_path = job_dir / ERROR_TXT
        error = error_path.read_text().partition("\n")[0] if result is None and error_path.is_file() else ""
        jobs.append(SweepJob(num, [str(o) for o in overrides], job_dir, result, kind, error))
    return sorted(jobs, key=lambda j: j.num)


def best_job(jobs: list[SweepJob]) -> SweepJob | None:
    """The ranked job (`SweepJob.throughput`) with the highest throughput, the first one on ties."""
    ranked = [(j.throughput, j) for j in jobs if j.throughput is not None]
    return max(ranked, key=lambda pair: pair[0], default=(0.0, None))[1]


def shared_overrides(jobs: list[SweepJob]) -> set[str]:
    """The overrides every job of a sweep has."""
    return set.intersection(*(set(j.overrides) for j in jobs))


def own_overrides(job: SweepJob, shared: set[str]) -> str:
    """The job's overrides except the `shared` ones (those of every job), space-separated."""
    return " ".join(o for o in job.overrides if o not in shared)


def comparison_row(job: SweepJob, shared: set[str], best: SweepJob | None = None) -> dict[str, Any]:
    """One row of the comparison table: the job's overrides except the `shared` ones, and its figures
    (`FIGURES`; empty for a failed job; `within_model_error` against the `best` job's band; for several
    models, the mean throughput and the common design's
    area and HBM, the per-model figures being in its result.json; for a plan, "over HBM" when it does
    not fit; for a lowering, the whole model's parameters and forward FLOPs per sample)."""
    row: dict[str, Any] = dict.fromkeys(columns(job.kind), "")
    row.update(
        job=job.num, status="failed", overrides=own_overrides(job, shared), dir=str(job.dir), error=job.error
    )
    r = job.result
    theirs = best.band if best is not None and job.throughput is not None else None
    if "within_model_error" in row and job.band is not None and theirs is not None:
        within = overlap(job.band, theirs)
        row["within_model_error"] = "" if within is None else within
    if r is not None and job.kind == "ir":
        row.update(
            status="ok",
            parameters=r["parameters"],
            seq_len=r["seq_len"],
            layers=len(r["layers"]),
            forward_flops_per_sample=sum(layer["forward_flops_per_sample"] for layer in r["layers"]),
        )
    elif r is not None and job.kind == "plan":
        row.update(
            status="ok" if r["fits"] else "over HBM",
            throughput_samples_per_s=r["samples_per_s"],
            time_per_batch_s=r["time_per_batch_s"],
            mfu=r["mfu"],
            memory_bytes=r["memory"]["total_bytes"],
            hbm_bytes=r["memory"]["hbm_bytes"],
            **{key: r[key] for key in ("microbatch", "recompute", "tp", "pp", "dp", "devices")},
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
            devices=plan["tp"] * plan["pp"] * plan["dp"],
            hbm_bytes=r["design"]["hbm_bytes"],
        )
    return row


def comparison_csv(rows: list[dict[str, Any]]) -> str:
    """The rows (of one kind of job, at least one) as CSV with a header, floats at full precision."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: repr(v) if isinstance(v, float) else v for k, v in row.items()} for row in rows)
    return out.getvalue()


def comparison_text(rows: list[dict[str, Any]], best: SweepJob | None) -> str:
    """The rows (of one kind of job, at least one) as an aligned text table without directories, short
    headers (`TEXT_HEADERS`), sizes in GB (`memory GB`, `hbm GB`), the best job marked with `*`; under
    it, each failed job's error."""
    shown = [c for c in rows[0] if c not in ("dir", "error")]

    def cell(column: str, value: Any) -> str:
        if column == "within_model_error":
            return WITHIN_ERROR if value is True else ""
        if column.endswith("_bytes") and isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value / 1e9:.1f}"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    body = [
        [
            f"{row['job']}{'*' if best is not None and row['job'] == best.num else ''}",
            *(cell(c, row[c]) for c in shown[1:]),
        ]
        for row in rows
    ]
    in_gb = {c: c.removesuffix("_bytes") + " GB" for c in shown if c.endswith("_bytes")}
    header = [TEXT_HEADERS.get(c, in_gb.get(c, c)) for c in shown]
    errors = [f"job {row['job']} failed: {row['error']}" for row in rows if row["status"] == "failed"]
    if any(row.get("within_model_error") is True for row in rows):
        errors.append(
            f"{WITHIN_ERROR}: within the model's error of the best job (*): their bands, from the chip's "
            "held-out validation residuals, overlap"
        )
    return render(header, body) + "\n" + "".join(f"{line}\n" for line in errors)


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
    shared = shared_overrides(jobs)
    rows = [comparison_row(j, shared, best) for j in jobs]
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


FAILURES_LISTED = 10
"""At most this many failed jobs are named in `failure_message`; the comparison table lists them all."""


def failure_message(summary: Summary) -> str | None:
    """How a sweep with failed jobs ends: how many failed, where its summary is, and each failed job's
    own overrides and error (the first `FAILURES_LISTED`); None when no job failed."""
    failed = [j for j in summary.jobs if j.result is None]
    if not failed:
        return None
    shared = shared_overrides(summary.jobs)
    lines = [
        f"{len(failed)} of {len(summary.jobs)} jobs of the sweep failed; every job's outcome is in "
        f"{summary.paths[2]}, each failed job's error in {ERROR_TXT} in its directory."
    ]
    lines += [
        f"  job {j.num} ({own_overrides(j, shared) or 'the shared overrides only'}): "
        f"{j.error or 'it wrote no ' + ERROR_TXT}"
        for j in failed[:FAILURES_LISTED]
    ]
    if len(failed) > FAILURES_LISTED:
        lines.append(f"  and {len(failed) - FAILURES_LISTED} more")
    return "\n".join(lines)
