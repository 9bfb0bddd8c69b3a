"""The docs site builds with `mkdocs build --strict` (a broken link or anchor fails), and its
configuration reference, generated from the schemas, shows the keys with their docstrings."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KEYS = {
    "search.strategy": "`phaze` (area bins, largest first, early stop)",
    "hw.device.attention": "The attention kernel:",
    "plan.tp": "Tensor-parallel width",
    "train.microbatch": "Microbatch size (samples)",
    "plan.microbatch": "Microbatch size (samples)",
    "system.tiers[].group_size": "Largest group of devices this tier connects",
}
"""Keys the reference must list, each with words of its field's docstring in the schema."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module with the same Python's mkdocs."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def rows(page: Path) -> dict[str, str]:
    """The text of each table row of a built page, keyed by its first cell."""
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page.read_text(), flags=re.S):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td>(.*?)</td>", row, flags=re.S)
        ]
        if cells:
            found[cells[0]] = " | ".join(cells)
    return found


def test_the_configuration_reference_lists_keys_with_their_docstrings(site: Path) -> None:
    table = rows(site / "reference" / "configuration" / "index.html")
    for key, words in KEYS.items():
        assert key in table, f"{key} is not in the configuration reference"
        assert words.replace("`", "") in table[key], table[key]
    assert "flash" in table["hw.device.attention"]  # the docstring names the kernels
    assert table["train.microbatch"].split(" | ")[1:3] == ["list[int]", "[1, 2, 4, 8]"]  # a search's list
    assert table["plan.microbatch"].split(" | ")[1:3] == ["int", "1"]  # one plan's value, same knob
    assert table["train.last_stage_recomputes"].split(" | ")[2] == "false"  # PHAZE's rule for a search
    assert table["plan.last_stage_recomputes"].split(" | ")[2] == "true"  # Megatron-LM's for a plan


def test_the_api_page_is_rendered_from_the_docstrings(site: Path) -> None:
    page = (site / "api" / "index.html").read_text()
    for name in ("lower", "search", "plan", "composed"):
        assert f'id="phazec.api.{name}"' in page
