"""ONNX -> phazec IR: typed tensors, ops grouped into layers, identical blocks found by structure.

Layers come from the exporter's module scopes: the module list with the most numbered children holds
the transformer blocks. Ops outside every block go to the embedding layer when nothing they read comes
from a block, and to the head otherwise; the ops of a multi-token-prediction module (`phazec.frontend.mtp`)
form a layer of their own after the blocks. Blocks whose operator graphs are identical up to tensor names
form one class with one representative graph.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from phazec.errors import PhazecError
from phazec.frontend.mtp import MTP_SCOPE
from phazec.ir.core import Edge, Graph, Layer, LayerClass, LayerKind, Model, Op, Routing, Tensor
from phazec.ir.ops import kind_of, known_op_types

ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    16: "bfloat16",
}
"""ONNX TensorProto element types the IR accepts."""

SCOPE_KEY = "pkg.torch.onnx.name_scopes"
LayerKey = tuple[LayerKind, int]
"""A layer by kind and number: a block's, a multi-token-prediction module's depth, 0 for the embedding
and head."""
NUMBERED = re.compile(r"^(.*)\.(\d+)$")
T = TypeVar("T")


@dataclass
class _Onnx:
    """The parts of an ONNX graph the lowering reads, in plain Python."""

    tensors: dict[str, Tensor]
    nodes: list[Any]
    constants: dict[str, bytes]
    """Constant tensors and a digest of their value."""
    parameters: set[str]
    data_inputs: set[str]
    outputs: list[str]
    scopes: list[list[str]] = field(default_factory=list)
    routing: Routing | None = None
    """The routing assumption of a Mixture-of-Experts export (`phazec.frontend.moe`)."""


def lower_onnx(path: Path, name: str, seq_len: int = 0) -> Model:
    """Lower an ONNX file with static shapes to a Model; bad files raise PhazecError. A `seq_len` of 0
    is read from the graph (`scores_length`)."""
    proto = load_proto(path)
    graph = read_graph(proto, path)
    layer_of = assign_layers(graph)
    return build_model(graph, layer_of, name, seq_len)


def load_proto(path: Path) -> Any:
    """Read an ONNX file without external data, or say why it cannot be read."""
    import onnx

    if not path.is_file():
        raise PhazecError(
            f"ONNX file {str(path)!r} does not exist; give model.path=<an existing .onnx file>."
        )
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as err:
        raise PhazecError(
            f"ONNX file {str(path)!r} could not be read as an ONNX model ({type(err).__name__}: {err}); "
            "give a file written by onnx.save or torch.onnx.export."
        ) from err
    if not proto.graph.node:
        raise PhazecError(
            f"ONNX file {str(path)!r} holds no operators ({path.stat().st_size} bytes): it is empty or "
            "not an ONNX model; give a file written by onnx.save or torch.onnx.export."
        )
    return proto


def parse_metadata(path: Path, key: str, text: str, parse: Callable[[str], T], expected: str) -> T:
    """A metadata value of the ONNX file parsed by `parse`, or a PhazecError naming the bad value."""
    try:
        value = parse(text)
        valid = _is(value, expected)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        valid = False
    if not valid:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise PhazecError(
            f"ONNX file {str(path)!r} has malformed metadata {key}={shown!r}: it must be {expected}; "
            "re-export the file, or remove that metadata entry."
        )
    return value


def _is(value: Any, expected: str) -> bool:
    """Whether a parsed metadata value has the shape `expected` names."""
    if expected == LIST_OF_STRINGS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, int) and value >= 0


LIST_OF_STRINGS = "a list of strings"
NON_NEGATIVE_INT = "a non-negative integer"


def read_graph(proto: Any, path: Path) -> _Onnx:
    """Types of every tensor (batch axis found from the export's batch sentinel), nodes and roles."""
    import onnx

    check_op_types(proto, path)
    props = {p.key: p.value for p in proto.metadata_props}
    key = "phazec.batch_sentinel"
    sentinel = parse_metadata(path, key, props.get(key, "0"), int, NON_NEGATIVE_INT)
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    if "phazec.parameters" in props:
        listed = {
            key: set(parse_metadata(path, key, props.get(key, ""), json.loads, LIST_OF_STRINGS))
            for key in ("phazec.parameters", "phazec.data_inputs")
        }
        parameters = listed["phazec.parameters"] & {i.name for i in graph.input}
        data_inputs = listed["phazec.data_inputs"]
    else:
        float_types = {1, 10, 11, 16}
        parameters = {t.name for t in graph.initializer if t.data_type in float_types}
        data_inputs = {i.name for i in graph.input} - initializers
    proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)  # types the shape arithmetic too
    graph = proto.graph
    constants, tensors = constant_tensors(graph.node)
    dynamic: list[str] = []
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = None if value.name in constants else tensor_of(value, sentinel, dynamic)
        if tensor is not None:
            tensors[tensor.name] = tensor
    if dynamic:
        raise PhazecError(
            f"ONNX file {str(path)!r} has dynamic shapes (e.g. {', '.join(dynamic[:5])}); phazec needs "
            "every dimension static: export with fixed batch and sequence sizes."
        )
    for init in graph.initializer:
        if init.name not in tensors:
            tensors[init.name] = make_tensor(init.name, tuple(init.dims), init.data_type, sentinel)
    for name in initializers - parameters:
        constants.setdefault(name, b"initializer")
    buffers = {i.name for i in graph.input} - parameters - data_inputs - initializers
    for name in buffers:
        constants.setdefault(name, b"buffer")
    nodes = [n for n in graph.node if n.op_type not in ("Constant", "SplitToSequence")]
    nodes = rewrite_sequences(graph.node, nodes)
    scopes = node_scopes(nodes, path)
    return _Onnx(
        tensors=tensors,
        nodes=nodes,
        constants=constants,
        parameters=parameters,
        data_inputs=data_inputs,
        outputs=[o.name for o in graph.output],
        scopes=scopes,
        routing=routing_metadata(path, props),
    )


def routing_metadata(path: Path, props: dict[str, str]) -> Routing | None:
    """The routing assumption an export of phazec's recorded (`phazec.routing`), or None."""
    text = props.get("phazec.routing")
    if text is None:
        return None
    try:
        fields = json.loads(text)
        return Routing(**{**fields, "expert_parameters": tuple(fields["expert_parameters"])})
    except (ValueError, TypeError, KeyError) as err:
        raise PhazecError(
            f"ONNX file {str(path)!r} has malformed metadata phazec.routing ({type(err).__name__}: "
            f"{err}); re-export the file, or remove that metadata entry."
        ) from err


def constant_tensors(nodes: Any) -> tuple[dict[str, bytes], dict[str, Tensor]]:
    """The outputs of Constant nodes: a digest of each value, and its tensor."""
    digests: dict[str, bytes] = {}
    tensors: dict[str, Tensor] = {}
    for node in nodes:
        if node.op_type == "Constant":
            value = constant_value(node)
            name = node.output[0]
            described = f"{value.dtype.str}{value.shape}".encode() + value.tobytes()
            digests[name] = hashlib.sha256(described).digest()
            tensors[name] = Tensor(name, tuple(value.shape), dtype_name(value.dtype.name))
    return digests, tensors


def constant_value(node: Any) -> Any:
    """The numpy value of a Constant node, whichever `value*` attribute holds it."""
    import numpy as np
    import onnx

    attr = node.attribute[0]
    raw = onnx.helper.get_attribute_value(attr)
    return onnx.numpy_helper.to_array(raw) if attr.name == "value" else np.array(raw)


def check_op_types(proto: Any, path: Path) -> None:
    """Reject a file with op types the IR cannot lower, listing them all."""
    structural = {"Constant", "SplitToSequence"}
    unknown = Counter(
        n.op_type for n in proto.graph.node if n.op_type not in structural and kind_of(n.op_type) is None
    )
    if unknown:
        listed = ", ".join(f"{op} (x{count})" for op, count in sorted(unknown.items()))
        raise PhazecError(
            f"ONNX file {str(path)!r} uses operators phazec cannot lower: {listed}. The lowering knows: "
            f"{', '.join(known_op_types())}."
        )


def dtype_name(numpy_name: str) -> str:
    """The IR's name of a numpy dtype (numpy has no bfloat16, so constants never are)."""
    return {"bool_": "bool"}.get(numpy_name, numpy_name)


def make_tensor(name: str, dims: tuple[int, ...], elem_type: int, sentinel: int) -> Tensor:
    """A tensor with its batch axis divided out (the one axis divisible by the sentinel)."""
    if elem_type not in ONNX_DTYPES:
        raise PhazecError(
            f"tensor {name!r} has ONNX element type {elem_type}, which phazec does not model; valid "
            f"types: {sorted(ONNX_DTYPES.values())}."
        )
    axes = [i for i, d in enumerate(dims) if sentinel and d and d % sentinel == 0]
    if len(axes) > 1:
        raise PhazecError(
            f"tensor {name!r} of shape {list(dims)} has several axes that scale with the batch; "
            "phazec cannot tell which one is the microbatch."
        )
    shape = list(dims)
    if axes:
        shape[axes[0]] //= sentinel
    return Tensor(name, tuple(shape), ONNX_DTYPES[elem_type], axes[0] if axes else None)


def tensor_of(value: Any, sentinel: int, dynamic: list[str]) -> Tensor | None:
    """The tensor of an ONNX ValueInfo, or None for non-tensor values (sequences)."""
    if not value.type.HasField("tensor_type"):
        return None
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape") or any(not d.HasField("dim_value") for d in tensor_type.shape.dim):
        dynamic.append(value.name)
        return None
    dims = tuple(d.dim_value for d in tensor_type.shape.dim)
    return make_tensor(value.name, dims, tensor_type.elem_type, sentinel)


def rewrite_sequences(all_nodes: Any, nodes: list[Any]) -> list[Any]:
    """Make each SequenceAt read the tensor its SplitToSequence split, so no sequence value remains."""
    import onnx

    split_input = {n.output[0]: n.input[0] for n in all_nodes if n.op_type == "SplitToSequence"}
    return [
        onnx.helper.make_node(
            "SequenceAt", [split_input[n.input[0]], n.input[1]], list(n.output), name=n.name
        )
        if n.op_type == "SequenceAt"
        else n
        for n in nodes
    ]


def scopes_of(node: Any, path: Path) -> list[str]:
    """Module scopes of a node: the exporter's metadata, else the prefixes of a `/a/b/op` name."""
    for prop in node.metadata_props:
        if prop.key == SCOPE_KEY:
            return parse_metadata(
                path, f"{node.name}:{SCOPE_KEY}", prop.value, ast.literal_eval, LIST_OF_STRINGS
            )
    parts = [p for p in node.name.split("/")[:-1] if p]
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def node_scopes(nodes: list[Any], path: Path) -> list[list[str]]:
    """Scopes of every node; a node without any takes those of the producer of its first input."""
    scopes: list[list[str]] = []
    by_output: dict[str, list[str]] = {}
    for node in nodes:
        own = scopes_of(node, path)
        if not own and node.input:
            own = by_output.get(node.input[0], [])
        scopes.append(own)
        by_output.update(dict.fromkeys(node.output, own))
    return scopes


def block_container(scopes: list[list[str]]) -> str | None:
    """The module list holding the blocks: the scope prefix with the most numbered children."""
    children: dict[str, set[int]] = {}
    for node_scopes in scopes:
        for scope in node_scopes:
            match = NUMBERED.match(scope)
            if match:
                children.setdefault(match.group(1), set()).add(int(match.group(2)))
    if not children:
        return None
    return max(sorted(children), key=lambda prefix: len(children[prefix]))


def assign_layers(graph: _Onnx) -> list[LayerKey]:
    """(kind, number) of every node: blocks and multi-token-prediction modules (`MTP_SCOPE`) from
    scopes, the rest before or after them."""
    container = block_container(graph.scopes)
    if container is None:  # no module structure: the whole graph is one block
        return [(LayerKind.BLOCK, 0)] * len(graph.nodes)
    pattern = re.compile(rf"^{re.escape(container)}\.(\d+)(\.|$)")
    after_blocks: set[str] = set()
    result = []
    for node, node_scopes in zip(graph.nodes, graph.scopes, strict=True):
        block = next((int(m.group(1)) for s in node_scopes if (m := pattern.match(s))), None)
        mtp = next((int(m.group(1)) for s in node_scopes if (m := MTP_SCOPE.search(s))), None)
        if mtp is not None:
            result.append((LayerKind.MTP, mtp))
            after_blocks.update(node.output)
        elif block is not None:
            result.append((LayerKind.BLOCK, block))
            after_blocks.update(node.output)
        elif any(i in after_blocks for i in node.input):
            result.append((LayerKind.HEAD, 0))
            after_blocks.update(node.output)
        else:
            result.append((LayerKind.EMBEDDING, 0))
    return move_head_only_work(graph.nodes, result)


def move_head_only_work(nodes: list[Any], layer_of: list[LayerKey]) -> list[LayerKey]:
    """Ops before the blocks that feed only the head (a tied weight's transpose, label shifts) join it."""
    feeds_blocks: set[str] = set()
    result = list(layer_of)
    for i in reversed(range(len(nodes))):
        kind = result[i][0]
        if kind is LayerKind.EMBEDDING and not any(o in feeds_blocks for o in nodes[i].output):
            result[i] = (LayerKind.HEAD, 0)
        elif kind is not LayerKind.HEAD:
            feeds_blocks.update(nodes[i].input)
    return result


def layer_names(layer_of: list[LayerKey]) -> list[LayerKey]:
    """The layers present, in order: embedding, blocks by number, MTP modules by depth, head."""
    order = {LayerKind.EMBEDDING: 0, LayerKind.BLOCK: 1, LayerKind.MTP: 2, LayerKind.HEAD: 3}
    return sorted(set(layer_of), key=lambda key: (order[key[0]], key[1]))


def build_model(graph: _Onnx, layer_of: list[LayerKey], name: str, seq_len: int) -> Model:
    """Per-layer graphs, classes of identical layers, and the edges between layers."""
    keys = layer_names(layer_of)
    index = {key: i for i, key in enumerate(keys)}
    node_layer = [index[key] for key in layer_of]
    producer_layer = {out: node_layer[i] for i, node in enumerate(graph.nodes) for out in node.output if out}
    readers: dict[str, set[int]] = {}
    for i, node in enumerate(graph.nodes):
        for tensor in node.input:
            if tensor:
                readers.setdefault(tensor, set()).add(node_layer[i])
    members: list[list[Any]] = [[] for _ in keys]
    for node, li in zip(graph.nodes, node_layer, strict=True):
        members[li].append(node)
    graphs = [layer_graph(graph, nodes, li, readers) for li, nodes in enumerate(members)]
    classes: list[LayerClass] = []
    class_of_signature: dict[bytes, int] = {}
    layers = []
    for li, (kind, number) in enumerate(keys):
        signature = graph_signature(graphs[li])
        if kind is not LayerKind.BLOCK:
            signature += kind.value.encode()
        cls = class_of_signature.setdefault(signature, len(classes))
        if cls == len(classes):
            classes.append(LayerClass(graphs[li], (li,)))
        else:
            classes[cls].members = (*classes[cls].members, li)
        label = f"{kind.value}.{number}" if kind in (LayerKind.BLOCK, LayerKind.MTP) else kind.value
        layers.append(Layer(li, label, kind, cls))
    edges = layer_edges(graph, producer_layer, readers)
    parameter_count = sum(graph.tensors[p].numel() for p in graph.parameters)
    seq_len = seq_len or scores_length([c.graph for c in classes])
    return Model(name, layers, edges, classes, parameter_count, seq_len, routing=graph.routing)


def scores_length(graphs: list[Graph]) -> int:
    """The sequence length s of the attention scores' products, [.., s, d] x [.., d, s] -> [.., s, s]
    with s > 1, when every such product in the graphs agrees on it; else 0."""
    lengths = set()
    for graph in graphs:
        for op in graph.ops:
            if op.op_type != "MatMul" or len(op.inputs) != 2:
                continue
            a, b = (graph.tensors[i].shape for i in op.inputs)
            out = graph.tensors[op.outputs[0]].shape
            if len(out) == len(a) == len(b) == 4 and out[-1] == out[-2] == a[-2] == b[-1] > 1:
                lengths.add(out[-1])
    return lengths.pop() if len(lengths) == 1 else 0


def layer_graph(graph: _Onnx, nodes: list[Any], layer: int, readers: dict[str, set[int]]) -> Graph:
    """The operator graph of one layer."""
    ops = [
        Op(n.name, n.op_type, kind, tuple(n.input), tuple(n.output), attributes(n))
        for n in nodes
        if (kind := kind_of(n.op_type)) is not None
    ]
    read = list(dict.fromkeys(t for n in nodes for t in n.input if t))
    produced = {t for n in nodes for t in n.output if t}
    weights = [t for t in read if t in graph.parameters]
    constants = [t for t in read if t in graph.constants]
    inputs = [t for t in read if t not in produced and t not in graph.parameters and t not in graph.constants]
    graph_outputs = set(graph.outputs)
    produced_in_order = [t for n in nodes for t in n.output if t]
    outputs = [t for t in produced_in_order if readers.get(t, set()) - {layer} or t in graph_outputs]
    used = set(read) | produced
    missing = sorted(t for t in used if t not in graph.tensors)
    if missing:
        raise PhazecError(
            f"the ONNX graph gives no type for tensors {missing[:5]}; run shape inference on it."
        )
    tensors = {t: graph.tensors[t] for t in sorted(used)}
    return Graph(tensors, ops, inputs, weights, constants, outputs)


def attributes(node: Any) -> dict[str, Any]:
    """Scalar and list attributes of a node as plain Python values (tensors and graphs skipped)."""
    import onnx

    plain: dict[str, Any] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            plain[attr.name] = value.decode()
        elif isinstance(value, int | float):
            plain[attr.name] = value
        elif isinstance(value, list) and all(isinstance(v, int | float) for v in value):
            plain[attr.name] = tuple(value)
    return plain


def graph_signature(graph: Graph) -> bytes:
    """A digest of the graph up to tensor names: op types, attributes, wiring, types and constants."""
    local: dict[str, str] = {}

    def ref(name: str, role: str) -> str:
        if name not in local:
            tensor = graph.tensors[name]
            local[name] = f"{role}{len(local)}:{tensor.dtype}{tensor.shape}@{tensor.batch_axis}"
        return local[name]

    for role, names in (("i", graph.inputs), ("w", graph.weights), ("c", graph.constants)):
        for name in names:
            ref(name, role)
    parts = []
    for op in graph.ops:
        ins = ",".join(ref(i, "?") if i else "_" for i in op.inputs)
        outs = ",".join(ref(o, "t") for o in op.outputs)
        parts.append(f"{op.op_type}{sorted(op.attrs.items())}({ins})->{outs}")
    parts.append("out:" + ",".join(local[o] for o in graph.outputs))
    return hashlib.sha256("\n".join(parts).encode()).digest()


def layer_edges(graph: _Onnx, producer_layer: dict[str, int], readers: dict[str, set[int]]) -> list[Edge]:
    """For every ordered pair of layers, the bytes of the tensors one produces and the other reads:
    activations (`activations`) apart from tensors built from the inputs and constants alone."""
    moved = activations(graph)
    totals: dict[tuple[int, int], list[int]] = {}
    for tensor, layers in readers.items():
        src = producer_layer.get(tensor)
        if src is None:
            continue
        value = graph.tensors[tensor]
        slot = (0 if tensor in moved else 2) + (value.batch_axis is not None)
        for dst in layers - {src}:
            totals.setdefault((src, dst), [0, 0, 0, 0])[slot] += value.nbytes()
    return [Edge(src, dst, *sizes) for (src, dst), sizes in sorted(totals.items())]


def activations(graph: _Onnx) -> set[str]:
    """Tensors that depend on a trainable parameter. The others are built from the model's inputs and
    constants alone (an attention mask, rotary tables, position ids)."""
    found = set(graph.parameters)
    for node in graph.nodes:
        if found.intersection(node.input):
            found.update(o for o in node.output if o)
    return found
