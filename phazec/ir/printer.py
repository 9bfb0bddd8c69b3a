"""A stable text form of the IR, for golden tests and for reading."""

from __future__ import annotations

from phazec.ir.core import Graph, Model, Op, Tensor
from phazec.ir.ops import flops

DTYPE_SHORT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64"}


def format_tensor(tensor: Tensor) -> str:
    """`%name: bf16[B*4096,4096]`: `B` marks the microbatch factor of the batch axis."""
    dims = [str(d) for d in tensor.shape]
    if tensor.batch_axis is not None:
        base = tensor.shape[tensor.batch_axis]
        dims[tensor.batch_axis] = "B" if base == 1 else f"B*{base}"
    return f"%{tensor.name}: {DTYPE_SHORT.get(tensor.dtype, tensor.dtype)}[{','.join(dims)}]"


def format_op(op: Op, graph: Graph) -> str:
    """One line per op: outputs, type, inputs, attributes, kind and FLOPs at microbatch 1."""
    outs = ", ".join(format_tensor(graph.tensors[o]) for o in op.outputs)
    args = ", ".join(f"%{i}" if i else "_" for i in op.inputs)
    attrs = "".join(f" {k}={v!r}" for k, v in sorted(op.attrs.items()))
    return f"{outs} = {op.op_type}({args}){attrs}  # {op.kind} flops={flops(op, graph)}"


def format_graph(graph: Graph, indent: str = "  ") -> str:
    """A graph's inputs, weights, constants, ops and outputs, one per line."""
    groups = (("input", graph.inputs), ("weight", graph.weights), ("const", graph.constants))
    lines = [f"{indent}{label} {format_tensor(graph.tensors[n])}" for label, names in groups for n in names]
    lines += [f"{indent}{format_op(op, graph)}" for op in graph.ops]
    lines += [f"{indent}output %{name}" for name in graph.outputs]
    return "\n".join(lines)


def format_model(model: Model) -> str:
    """The whole model: header, layers, edges and each class's graph."""
    lines = [
        f"model {model.name} seq_len={model.seq_len} parameters={model.parameter_count} "
        f"layers={len(model.layers)} classes={len(model.classes)}"
    ]
    lines += [f"layer {layer.index} {layer.name} {layer.kind} class={layer.cls}" for layer in model.layers]
    lines += [
        f"edge {e.src} -> {e.dst} bytes={e.fixed_bytes}+{e.per_sample_bytes}*B"
        f" built={e.built_fixed_bytes}+{e.built_per_sample_bytes}*B"
        for e in model.edges
    ]
    for c, cls in enumerate(model.classes):
        lines.append(f"class {c} x{cls.count} layers={list(cls.members)}")
        lines.append(format_graph(cls.graph))
    return "\n".join(lines) + "\n"
