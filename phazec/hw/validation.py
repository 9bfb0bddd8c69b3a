"""How far to trust a chip's predictions: its device model's held-out validation residuals and the band
they put around a predicted time.

`validation.json` (beside this module) holds, per hw preset, every held-out row of the fidelity benches
with its measured and predicted seconds per iteration and where it comes from; it is written by
`bench/validation_residuals.py`, never by hand, with the preset's hw config the rows were predicted
with. A row's residual is predicted / measured - 1. The rows hold for that device model only: a design
or device model other than the preset's (`hw.num_tc=[64]`, `hw.device.gemm_utilisation=0.5`) has no
validation data, and says which value differs. The software's knobs the benches set per row
(`ROW_KNOBS`: the attention kernel, TP overlap, collectives on the cores) are free: the rows ran
each setting.

The band (`band`): the real time of a prediction p is p x measured / predicted of a row, so the rows'
ratios measured / predicted, each applied to p, are where the real time fell on the chip's held-out
runs. The band is their central 90 % by the empirical quantiles of the nearest rank (numpy's
`inverted_cdf`: the ceil(0.05 n)-th and ceil(0.95 n)-th smallest ratio of n rows), which makes no
assumption on the errors' shape. With 20 rows or fewer these are the smallest and the largest ratio:
the band is the range of every row, as wide as few rows can honestly make it. A chip with no rows has
no band ("no validation data").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

VALIDATION_FILE = Path(__file__).with_name("validation.json")
"""Per hw preset, its held-out rows and their source (`bench/validation_residuals.py` writes it)."""

LEVEL = 0.9
"""The share of held-out rows the band's quantiles keep (the central 90 %)."""


@dataclass(frozen=True)
class ValidationRow:
    """One held-out run: what it measured and what the chip's preset predicts for it."""

    row: str
    """Its id in `file`."""
    file: str
    measured_s: float
    predicted_s: float

    @property
    def residual(self) -> float:
        """predicted / measured - 1: positive when the model is slow."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class Validation:
    """A chip's held-out rows and where they come from."""

    chip: str
    """The hw preset."""
    source: str
    hw: dict[str, Any]
    """The preset's hw config (`hw.*`, as `phazec.commands.settings.Settings.config` holds it) the rows
    were predicted with."""
    rows: tuple[ValidationRow, ...]


@dataclass(frozen=True)
class Band:
    """Where the real time of a prediction likely falls, from the chip's held-out residuals."""

    low_s: float
    high_s: float
    chip: str
    rows: int
    """Held-out rows behind it."""
    level: float
    """The share of rows the quantiles keep (`LEVEL`)."""
    source: str

    @property
    def label(self) -> str:
        """How it was made, e.g. "a100 held-out residuals (21 rows), 90%"."""
        return f"{self.chip} held-out residuals ({self.rows} rows), {self.level:.0%}"


ROW_KNOBS = ("attention", "collectives_hold_cores", "tp_comm_overlap")
"""The `hw.device` knobs the fidelity benches set per row as its software ran (`bench_fidelity.run_config`):
a plan may set them as it likes and keep the chip's rows."""

NO_VALIDATION = "no validation data"
"""What a prediction on a chip without held-out rows says instead of a band."""


@cache
def _stored() -> dict[str, Validation]:
    data = json.loads(VALIDATION_FILE.read_text())
    return {
        chip: Validation(
            chip, entry["source"], entry["hw"], tuple(ValidationRow(**row) for row in entry["rows"])
        )
        for chip, entry in data.items()
    }


def _differences(ours: Mapping[str, Any], theirs: Mapping[str, Any], prefix: str = "hw.") -> list[str]:
    """The keys (dotted) whose values differ between two hw configs."""
    found = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key}")
    return found


def validation(hw: Mapping[str, Any]) -> Validation | str:
    """The held-out rows of the device model of the hw config `hw` (`Settings.config["hw"]`), or why
    there are none: no rows for its preset, or a value that differs from the preset's the rows
    were predicted with."""
    found = _stored().get(str(hw["name"]))
    if found is None or not found.rows:
        return NO_VALIDATION
    differ = [key for key in _differences(hw, found.hw) if key.removeprefix("hw.device.") not in ROW_KNOBS]
    if differ:
        return (
            f"{NO_VALIDATION} for this device model ({', '.join(differ)} not the {found.chip} preset's, "
            "which its held-out rows validate)"
        )
    return found


def ratio_range(rows: tuple[ValidationRow, ...], level: float = LEVEL) -> tuple[float, float]:
    """The central `level` of the rows' measured / predicted ratios, by nearest rank: the
    ceil((1 - level) / 2 x n)-th and ceil((1 + level) / 2 x n)-th smallest of n."""
    ratios = sorted(r.measured_s / r.predicted_s for r in rows)
    n = len(ratios)
    low_rank = max(1, math.ceil(round((1.0 - level) / 2.0 * n, 9)))
    high_rank = min(n, math.ceil(round((1.0 + level) / 2.0 * n, 9)))
    return ratios[low_rank - 1], ratios[high_rank - 1]


def band(time_s: float, found: Validation | str) -> Band | str:
    """The band around `time_s` from a chip's held-out rows (`validation`); the reason when it has
    none."""
    if isinstance(found, str):
        return found
    low, high = ratio_range(found.rows)
    return Band(time_s * low, time_s * high, found.chip, len(found.rows), LEVEL, found.source)


def band_record(found: Band | str) -> dict[str, Any]:
    """A band as plan.json and result.json carry it: its ends, how it was made and its source; with no
    validation data the ends are null and `basis` says why."""
    if isinstance(found, str):
        return {"low_s": None, "high_s": None, "basis": found, "source": None}
    return {"low_s": found.low_s, "high_s": found.high_s, "basis": found.label, "source": found.source}


def band_text(time_s: float, record: dict[str, Any]) -> str:
    """A time with its band (`band_record`), e.g. "12.19 s, likely 11.7-12.8 s: a100 held-out
    residuals (21 rows), 90%", or with why it has none ("no validation data")."""
    if record["low_s"] is None:
        return f"{time_s:.4g} s ({record['basis']})"
    return f"{time_s:.4g} s, likely {record['low_s']:.3g}-{record['high_s']:.3g} s: {record['basis']}"


def overlap(record: dict[str, Any], other: dict[str, Any]) -> bool | None:
    """Whether two bands as `band_record` writes them share a time; None when either has none."""
    if record["low_s"] is None or other["low_s"] is None:
        return None
    return bool(record["low_s"] <= other["high_s"] and other["low_s"] <= record["high_s"])
