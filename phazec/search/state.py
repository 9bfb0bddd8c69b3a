"""A search's saved state, so that a killed search started again with the same config resumes.

The state lives in `<cache_dir>/search/<key>/`, where the key hashes the resolved config without
the settings that cannot change the answer (`search.workers`, `search.resume`, `search.executor`,
`search.ray`, `tracking`, `cache_dir`, `model.baseline`), together with the content of an ONNX file
given by `model.path` and phazec's code (its Python sources and the compiled core), so a state
never outlives a change that could change an answer. Each finished batch of designs is one sealed
JSON file (`phazec.util.sealed`: written atomically and fsynced, checked when read back, a bad one deleted
and evaluated again), so a kill or a power loss leaves whole files only and an edited file is never
believed. Floats are written with `repr`, which reads back to the same bits."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

import phazec
from phazec.frontend.schema import ModelConfig
from phazec.predict.evaluator import Candidate
from phazec.predict.training import Training
from phazec.solvers import core
from phazec.solvers.placement.problem import NoFeasiblePlacement, Placement, PlacementResult, Stage
from phazec.util import sealed

STATE_VERSION = 4
"""Bumped whenever the files change layout."""
IGNORED = (
    ("search", "workers"),
    ("search", "resume"),
    ("search", "executor"),
    ("search", "ray"),
    ("tracking",),
    ("cache_dir",),
    ("model", "baseline"),
)
"""Config paths that do not change a search's answer, left out of the state key (the baseline plan
only changes the comparison, computed after the search)."""


def state_key(config: dict[str, Any], onnx: str) -> str:
    """The hash naming the state of a search with this resolved config (plain data) and ONNX file
    digest (`onnx_digest`)."""
    plain = copy.deepcopy(config)
    for path in IGNORED:
        node = plain
        for part in path[:-1]:
            node = node.get(part, {})
        node.pop(path[-1], None)
    keyed = {"state": STATE_VERSION, "code": code_digest(), "config": plain, "onnx": onnx}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def onnx_digest(model: ModelConfig) -> str:
    """The SHA-256 of the ONNX file of `model.path` (empty for Hugging Face presets, whose export is
    fully named by the config)."""
    if model.source != "onnx":
        return ""
    return sealed.digest(Path(model.path).expanduser().read_bytes())


def code_digest() -> str:
    """A hash of phazec's Python sources and its compiled core (`phazec.solvers.core`)."""
    package = Path(phazec.__file__).parent
    files = {str(path.relative_to(package)): path for path in package.rglob("*.py")}
    extension = core.extension_path()
    files[extension.name] = extension
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode())
        digest.update(files[name].read_bytes())
    return digest.hexdigest()


class SearchState:
    """Finished batches of one search on disk; `resume=False` ignores (and overwrites) old ones."""

    def __init__(self, directory: Path, resume: bool) -> None:
        self.directory = directory
        self.resume = resume

    def bounds(self, index: int, designs: NDArray[np.int64]) -> NDArray[np.float64] | None:
        """The saved lower bounds of batch `index` of the bound pass, if it holds these designs."""
        data = self._read(f"bounds_{index:06d}.json", designs)
        return None if data is None else np.array(data["bounds_s"], dtype=np.float64)

    def put_bounds(self, index: int, designs: NDArray[np.int64], bounds_s: NDArray[np.float64]) -> None:
        """Save the lower bounds of batch `index` of the bound pass."""
        self._write(f"bounds_{index:06d}.json", designs, {"bounds_s": [float(b) for b in bounds_s]})

    def candidates(self, index: int, designs: NDArray[np.int64]) -> list[Candidate] | None:
        """The saved candidates of evaluated batch `index`, if it holds these designs."""
        data = self._read(f"batch_{index:06d}.json", designs)
        return None if data is None else [candidate_from_json(c) for c in data["candidates"]]

    def unproven(self, index: int, designs: NDArray[np.int64]) -> dict[str, tuple[float, float]]:
        """The unproven schedules saved with evaluated batch `index` (key: makespan, bound)."""
        data = self._read(f"batch_{index:06d}.json", designs)
        return {} if data is None else {k: (m, b) for k, (m, b) in data["unproven"].items()}

    def put_candidates(
        self,
        index: int,
        designs: NDArray[np.int64],
        candidates: list[Candidate],
        unproven: dict[str, tuple[float, float]],
    ) -> None:
        """Save the candidates (global design indices) of evaluated batch `index`, with the unproven
        schedules its evaluation used, so that a search resuming it still lists them."""
        self._write(
            f"batch_{index:06d}.json",
            designs,
            {
                "candidates": [candidate_json(c) for c in candidates],
                "unproven": {k: list(v) for k, v in sorted(unproven.items())},
            },
        )

    def _read(self, name: str, designs: NDArray[np.int64]) -> dict[str, Any] | None:
        if not self.resume:
            return None
        data: dict[str, Any] | None = sealed.read(self.directory / name, _inputs(name, designs))
        return data

    def _write(self, name: str, designs: NDArray[np.int64], data: dict[str, Any]) -> None:
        sealed.write(self.directory / name, _inputs(name, designs), data)


def _inputs(name: str, designs: NDArray[np.int64]) -> str:
    """What a saved batch is derived from: the layout version, its file and its designs."""
    return f"state-{STATE_VERSION}:{name}:{json.dumps(designs.tolist(), separators=(',', ':'))}"


def candidate_json(candidate: Candidate) -> dict[str, Any]:
    """A candidate as plain JSON data."""
    kind = "placement" if isinstance(candidate.result, Placement) else "infeasible"
    training = asdict(candidate.training)
    return {"design": candidate.design, "training": training, kind: asdict(candidate.result)}


def candidate_from_json(data: dict[str, Any]) -> Candidate:
    """The candidate `candidate_json` wrote."""
    result: PlacementResult
    if "placement" in data:
        fields = data["placement"]
        stages = tuple(Stage(**{**s, "layers": tuple(s["layers"])}) for s in fields["stages"])
        result = Placement(**{**fields, "stages": stages})
    else:
        result = NoFeasiblePlacement(**data["infeasible"])
    return Candidate(data["design"], Training(**data["training"]), result)
