"""Pass infrastructure: a pass maps a model to a model; a pipeline runs passes and verifies between them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import ClassVar, Protocol

from phazec.ir.core import Model
from phazec.ir.verify import verify

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassResult:
    """A pass's output model and whether it changed anything."""

    model: Model
    modified: bool


class Pass(Protocol):
    """A transformation of the IR; it must not mutate its input (lowered models are shared)."""

    name: ClassVar[str]
    """Kebab-case name, shown in timings."""

    def __call__(self, model: Model) -> PassResult:
        """Run the pass."""
        ...


@dataclass(frozen=True, slots=True)
class PassTiming:
    """Wall time of one pass in a pipeline run."""

    name: str
    seconds: float
    modified: bool


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Passes run in order, with the verifier after each."""

    passes: tuple[Pass, ...]

    def run(self, model: Model) -> tuple[Model, list[PassTiming]]:
        """Run every pass; returns the final model and per-pass timings."""
        verify(model)
        timings = []
        for p in self.passes:
            start = time.perf_counter()
            result = p(model)
            verify(result.model)
            timings.append(PassTiming(p.name, time.perf_counter() - start, result.modified))
            log.debug("pass %s: %.3f s, modified=%s", p.name, timings[-1].seconds, result.modified)
            model = result.model
        return model, timings
