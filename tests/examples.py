"""How many examples each property test draws: the count CI draws, times `PHAZEC_PROPERTY_SCALE`.

CI draws the same examples on every run (the `repeatable` profile, `tests/conftest.py`). `make stress`
sets the scale to 8 and draws afresh, from `--hypothesis-seed` where one is given (`make stress
SEED=7`), so a rare failing case can turn up and be replayed; brute-force checks at a few hundred
examples found two bugs of the placement DP that 60 examples had missed (CHANGELOG, Unreleased,
Fixed).
"""

from __future__ import annotations

import os

import pytest

SCALE_VARIABLE = "PHAZEC_PROPERTY_SCALE"


def scale() -> int:
    """The factor on every property test's examples (1, CI's, when `SCALE_VARIABLE` is unset).

    Raises:
        pytest.UsageError: the variable is not a whole number >= 1 (`conftest.pytest_configure` asks
            first, so the session stops with the one line before collecting anything).
    """
    text = os.environ.get(SCALE_VARIABLE, "1")
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(
            f"{SCALE_VARIABLE}={text!r} is not valid: give a whole number >= 1 of times CI's examples "
            "each property test draws (1 is CI's count; make stress sets 8)."
        )
    return int(text)


def examples(ci: int) -> int:
    """The examples a property test draws: `ci`, its count in CI, times `scale()`."""
    return ci * scale()
