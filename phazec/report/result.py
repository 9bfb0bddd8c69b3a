"""Reading a result.json: the figure a result is ranked by, for one model or several."""

from __future__ import annotations

from typing import Any


def is_multi(result: dict[str, Any]) -> bool:
    """Whether `result` is a `model=[a,b,...]` result (figures keyed by model)."""
    return isinstance(result["model"], list)


def headline_throughput(result: dict[str, Any]) -> float:
    """The throughput a result is ranked by: its own, or for several models their mean on the
    common design (a model with no plan counts 0)."""
    throughput = result["throughput_samples_per_s"]
    values = list(throughput.values()) if is_multi(result) else [throughput]
    return float(sum(values) / len(values))
