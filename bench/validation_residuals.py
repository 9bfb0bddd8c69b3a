"""The held-out residuals each chip's device model carries (issue 43): `phazec/hw/validation.json`.

    .venv/bin/python bench/validation_residuals.py      # rewrites phazec/hw/validation.json

Every held-out row of the two fidelity benches is predicted as they predict it (a modern row that does
not state its recompute at the least that fits), with the hw presets' own device values (no refit: the
values `phazec-plan` uses), and its measured and predicted seconds per iteration are written under its
chip's hw preset, with the file it comes from:

- `../shared/validation/public-runs.csv` (`bench_fidelity.py`): every expressible row not in its chip's
  `bench_fidelity.CALIBRATION` (A100, H100, V100);
- `../shared/validation/modern-runs.csv` (`bench_fidelity_modern.py`): every expressible dense row not in
  its family's `bench_fidelity_modern.CALIBRATION`, whose chip family is an hw preset (B200, GB200, the
  DGX H100, H200, Meta's 500 W H100s as `h100_500w`).

`phazec.hw.validation` turns the rows into the band `phazec-plan` prints (docs/guide/plan.md, Error
bands). Run it again after changing a device preset or the model of time: the figures are the model's
at the commit named in the file.
"""

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity
import bench_fidelity_modern
from hydra import compose, initialize_config_dir

from phazec.cli import conf_dir
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.hw.validation import VALIDATION_FILE
from phazec.predict.plan_report import PlanReport, plan_stages


def rows(path: Path) -> list[dict[str, str]]:
    """The csv's rows."""
    with path.open() as f:
        return list(csv.DictReader(f))


def held_out() -> dict[str, list[dict[str, object]]]:
    """Per hw preset, each held-out row: its id, file, measured and predicted seconds."""
    found: dict[str, list[dict[str, object]]] = {}
    start = time.perf_counter()

    def add(chip: str, source: Path, prepared: bench_fidelity.Prepared, report: PlanReport) -> None:
        found.setdefault(chip, []).append({
            "row": prepared.run.row_id,
            "file": source.name,
            "measured_s": prepared.run.measured_s,
            "predicted_s": report.time_per_batch_s,
        })  # fmt: skip
        error = report.time_per_batch_s / prepared.run.measured_s - 1
        print(
            f"{chip:6s} {prepared.run.row_id:34s} {error:+7.1%}  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )

    for row in rows(bench_fidelity.RUNS):
        run = bench_fidelity.expressible(row)
        if isinstance(run, str) or run.row_id in bench_fidelity.CALIBRATION[run.chip]:
            continue
        prepared = bench_fidelity.prepare(run)
        add(run.chip, bench_fidelity.RUNS, prepared, bench_fidelity.predict(prepared))
    knobs = bench_fidelity_modern.training_knobs()
    for row in rows(bench_fidelity_modern.RUNS):
        modern = bench_fidelity_modern.expressible(row, knobs)
        if isinstance(modern, str) or modern.family != modern.run.chip:
            continue
        if modern.run.row_id in bench_fidelity_modern.CALIBRATION.get(modern.family, ()):
            continue
        try:
            lowered = bench_fidelity.prepare(
                modern.run, modern.overrides(knobs), bench_fidelity_modern.LLAMA_PRESET, modern.dims()
            )
            plan_stages(lowered.evaluator.graphs[modern.run.tp], lowered.plan)
        except PhazecError:
            continue  # refused by phazec: the modern bench lists it
        report, _ = bench_fidelity_modern.least_recompute_that_fits(modern, lowered, None)
        add(modern.run.chip, bench_fidelity_modern.RUNS, lowered, report)
    return found


def preset_hw(chip: str) -> dict[str, object]:
    """The hw preset's config as `phazec-plan` holds it (`Settings.config["hw"]`): what a plan must be
    timed with for the rows to speak for it."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose("plan", overrides=[f"hw={chip}", "model=gpt2_xl", "tracking=none"])
    hw = settings_from_config(cfg).config["hw"]
    assert isinstance(hw, dict)
    return hw


def main() -> None:
    """Predict every held-out row and write the file."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    )
    chips = {
        chip: {
            "source": f"bench/validation_residuals.py at {commit.stdout.strip()}: held-out rows of "
            f"{', '.join(sorted({str(r['file']) for r in found}))}, the {chip} preset's device values",
            "hw": preset_hw(chip),
            "rows": found,
        }
        for chip, found in sorted(held_out().items())
    }
    VALIDATION_FILE.write_text(json.dumps(chips, indent=1) + "\n")
    print(
        f"wrote {VALIDATION_FILE}: " + ", ".join(f"{chip} {len(c['rows'])} rows" for chip, c in chips.items())
    )


if __name__ == "__main__":
    main()
