"""What a pass is: a map from a model to a model (`Pass`), and what it returns (`PassResult`).

Passes run in a `phazec.passes.pipeline.Pipeline`, which verifies the IR between them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

from phazec.ir.core import Graph, Model


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


def rewrite_forward_graphs(model: Model, rewrite: Callable[[Graph], Graph]) -> PassResult:
    """`model` with `rewrite` applied to every layer class's forward graph, and whether any changed."""
    classes = [replace(cls, graph=rewrite(cls.graph)) for cls in model.classes]
    modified = any(new != old for new, old in zip(classes, model.classes, strict=True))
    return PassResult(replace(model, classes=classes), modified)
