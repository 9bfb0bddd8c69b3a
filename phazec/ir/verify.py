"""The IR verifier: structural invariants every pass must keep."""

from __future__ import annotations

from phazec.ir.core import DTYPE_BYTES, Graph, Model
from phazec.ir.graph import find_cycle


class VerifyError(Exception):
    """The IR breaks an invariant; a bug in a pass or the frontend, not bad user input."""


def verify_graph(graph: Graph, where: str) -> None:
    """Check one operator graph: every tensor defined once, before use, with a valid type and shape."""
    for name, tensor in graph.tensors.items():
        if name != tensor.name:
            raise VerifyError(f"{where}: tensor key {name!r} holds tensor {tensor.name!r}")
        if tensor.dtype not in DTYPE_BYTES:
            raise VerifyError(f"{where}: tensor {name!r} has unknown dtype {tensor.dtype!r}")
        if any(d < 0 for d in tensor.shape):
            raise VerifyError(f"{where}: tensor {name!r} has shape {tensor.shape}")
        if tensor.batch_axis is not None and not 0 <= tensor.batch_axis < len(tensor.shape):
            raise VerifyError(f"{where}: tensor {name!r} has batch axis {tensor.batch_axis}")
    defined = set(graph.inputs) | set(graph.weights) | set(graph.constants)
    for op in graph.ops:
        for name in op.inputs:
            if name and name not in defined:
                raise VerifyError(f"{where}: op {op.name!r} reads {name!r} before it is defined")
        for name in op.outputs:
            if name in defined:
                raise VerifyError(f"{where}: op {op.name!r} redefines {name!r}")
            if name not in graph.tensors:
                raise VerifyError(f"{where}: op {op.name!r} writes {name!r}, which has no type")
            defined.add(name)
    for name in graph.outputs:
        if name not in defined:
            raise VerifyError(f"{where}: output {name!r} is never defined")


def verify(model: Model) -> None:
    """Check the whole model: layer indices, classes, edges (acyclic) and every class graph."""
    for i, layer in enumerate(model.layers):
        if layer.index != i:
            raise VerifyError(f"layer {layer.name!r} has index {layer.index}, expected {i}")
        if not 0 <= layer.cls < len(model.classes):
            raise VerifyError(f"layer {layer.name!r} names class {layer.cls}")
    members = sorted(m for cls in model.classes for m in cls.members)
    if members != list(range(len(model.layers))):
        raise VerifyError("the classes do not partition the layers")
    for c, cls in enumerate(model.classes):
        if any(model.layers[m].cls != c for m in cls.members):
            raise VerifyError(f"class {c} lists a layer of another class")
        where = f"class {c} ({model.layers[cls.members[0]].name})"
        verify_graph(cls.graph, where)
        for label, extra in (("backward", cls.backward), ("update", cls.update)):
            if extra is not None:
                verify_graph(extra, f"{where} {label}")
    pairs = [(e.src, e.dst) for e in model.edges]
    if len(set(pairs)) != len(pairs):
        raise VerifyError("the layer graph repeats an edge")
    try:
        cycle = find_cycle(len(model.layers), pairs)
    except ValueError as err:
        raise VerifyError(f"bad layer graph edge: {err}") from err
    if cycle:
        raise VerifyError(f"the layer graph has a cycle: {[model.layers[i].name for i in cycle]}")
