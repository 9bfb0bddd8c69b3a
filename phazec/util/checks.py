"""Checks of single configured values: each returns the value or raises a one-paragraph PhazecError
naming it and what would be valid."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from phazec.errors import PhazecError


def integer_at_least(name: str, value: Any, minimum: int) -> int:
    """`value` as an int if it is an integer (not a bool) >= `minimum`; `name` is the key for the message."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        valid = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise PhazecError(f"{name} = {value!r} is not valid: it must be {valid}.")
    return int(value)


def non_negative(name: str, value: Any) -> float:
    """`value` as a float if it is a finite number (not a bool) >= 0; `name` is the key for the message."""
    if not _finite(value) or value < 0:
        raise PhazecError(f"{name} = {value!r} is not valid: it must be a finite number >= 0.")
    return float(value)


def positive(name: str, value: Any) -> float:
    """`value` as a float if it is a finite number (not a bool) > 0; `name` is the key for the message."""
    if not _finite(value) or value <= 0:
        raise PhazecError(f"{name} = {value!r} is not valid: it must be a finite number greater than 0.")
    return float(value)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
