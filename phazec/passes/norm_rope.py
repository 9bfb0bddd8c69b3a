"""Kernels the exporter wrote out step by step: RMSNorm and the rotary embedding, one kernel each.

Hugging Face writes RMSNorm and the rotary position embedding (Llama, Mistral, Qwen, ...) as
arithmetic, so the exported graph holds each step as its own operator. Priced op by op (the template's,
`fused=False`), every step reads and writes a tensor and pays a kernel's fixed cost. A GPU runs each
as one kernel (Transformer Engine's fused RMSNorm and fused RoPE, which Megatron-Core uses), as the
exporter already gives a LayerNorm. With `fused`:

- RMSNorm: an optional cast to fp32, the square, the mean over the last axis, the epsilon added, the
  square root and its reciprocal, the product with the input, an optional cast back and the product
  with the weight (or, as GPT-OSS writes it, the product with the weight cast to fp32 and then the
  cast back) become one `RMSNormalization` op (ONNX's, opset 23: the input and the scale,
  normalised over the last axis), priced as a LayerNorm; its backward reads the input and the weight,
  as a LayerNorm's does.
- Rotary embedding: x cos + rotate_half(x) sin, where rotate_half swaps the two halves of the last
  axis and negates the second (two slices, a negation and a concatenation), becomes one
  `RotaryEmbedding` op (ONNX's, opset 23) reading x and the cos and sin tables; its backward reads
  the tables.

A chain is fused only when nothing outside it reads its intermediate tensors and none leaves the layer.
Ops left without a reader (the mean's axes, the slices' bounds) are removed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.ir.core import Graph, Model, Op, OpKind
from phazec.passes.attention import live
from phazec.passes.base import PassResult, rewrite_forward_graphs

RMS_NORM = "RMSNormalization"
ROTARY = "RotaryEmbedding"

ORIGIN_TYPES = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Identity"})
"""Ops that carry a value to another type or shape: the exporter puts them between a slice's bound and
its constant."""

NORM_STEPS = ("Add", "Sqrt", "Reciprocal", "Mul")
"""An RMSNorm's ops after the mean of the squares, each the sole reader of the one before: + epsilon,
square root, reciprocal, times the input."""


@dataclass(frozen=True, slots=True)
class NormRope:
    """Run each RMSNorm and rotary-embedding chain as one op (switchable; run before autodiff)."""

    name: ClassVar[str] = "norm-rope"
    fused: bool = False
    """False leaves the chains as exported."""

    def __call__(self, model: Model) -> PassResult:
        """Fuse the chains of every class's forward graph."""
        if not self.fused:
            return PassResult(model, False)
        return rewrite_forward_graphs(model, norm_rope_graph)


@dataclass(frozen=True, slots=True)
class Chain:
    """The ops of one chain, in graph order, and the op that replaces them."""

    ops: list[Op]
    fused: Op


class Lookup:
    """A graph with its producer and reader maps, and the questions the matchers ask of it."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()

    def scalar(self, name: str) -> bool:
        """Whether a tensor holds one element (an exponent, an epsilon)."""
        return bool(name) and self.graph.tensors[name].numel() == 1

    def made_by(self, name: str, op_type: str) -> Op | None:
        """The op writing `name`, if it is of `op_type`."""
        op = self.producers.get(name)
        return op if op is not None and op.op_type == op_type else None

    def sole_reader(self, name: str, op_type: str) -> Op | None:
        """The one op reading `name`, if it is of `op_type` and `name` does not leave the layer."""
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or readers[0].op_type != op_type or name in self.graph.outputs:
            return None
        return readers[0]

    def private(self, name: str, readers: list[Op]) -> bool:
        """Whether `readers` are all the ops reading `name` and it does not leave the layer."""
        found = {op.name for op in self.consumers.get(name, [])}
        return name not in self.graph.outputs and found == {op.name for op in readers}

    def origin(self, name: str) -> str:
        """The tensor `name` is a cast or reshape of, followed back to where it starts (a constant)."""
        op = self.producers.get(name)
        while op is not None and op.op_type in ORIGIN_TYPES:
            name = op.inputs[0]
            op = self.producers.get(name)
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape."""
        return self.graph.tensors[name].shape


def other(op: Op, name: str) -> str | None:
    """The input of a binary op that is not `name`, or None if the op does not read `name` once."""
    rest = [i for i in op.inputs if i != name]
    return rest[0] if len(rest) == 1 and len(op.inputs) == 2 else None


def rms_norm(g: Lookup, mean: Op) -> Chain | None:
    """The RMSNorm chain around the ReduceMean `mean`: [cast,] square, mean, + epsilon, sqrt,
    reciprocal, x times it, [cast,] weight times it; or None. The square is a power by a scalar (the IR
    keeps no constant's value); the cast to fp32 is part of the chain when nothing else reads its
    result."""
    square = g.made_by(mean.inputs[0], "Pow") if mean.op_type == "ReduceMean" else None
    if square is None or not g.scalar(square.inputs[1]):
        return None
    x = square.inputs[0]
    if g.shape(mean.outputs[0]) != (*g.shape(x)[:-1], 1):
        return None  # not a mean over the last axis alone, dimensions kept
    chain = [square, mean]
    for op_type in NORM_STEPS:
        step = g.sole_reader(chain[-1].outputs[0], op_type)
        if step is None:
            return None
        chain.append(step)
    add, product = chain[2], chain[-1]
    epsilon = other(add, mean.outputs[0])
    if epsilon is None or not g.scalar(epsilon) or other(product, chain[-2].outputs[0]) != x:
        return None
    cast_in = g.made_by(x, "Cast")
    if cast_in is not None and g.private(x, [square, product]):
        chain.insert(0, cast_in)
    cast_out = g.sole_reader(product.outputs[0], "Cast")
    if cast_out is not None:
        chain.append(cast_out)
    scale = g.sole_reader(chain[-1].outputs[0], "Mul")
    weight = None if scale is None else other(scale, chain[-1].outputs[0])
    if scale is None or weight is None:
        return None
    weight_cast = g.made_by(weight, "Cast")  # GPT-OSS scales in fp32, casting the weight up
    if weight_cast is not None and g.private(weight, [scale]):
        chain.append(weight_cast)
        weight = weight_cast.inputs[0]
    if weight not in g.graph.weights or g.shape(weight) != g.shape(x)[-1:]:
        return None
    chain.append(scale)
    cast_back = None if cast_out is not None else g.sole_reader(scale.outputs[0], "Cast")
    if cast_back is not None:  # ... and casting the product back
        chain.append(cast_back)
    inputs = (chain[0].inputs[0], weight)
    fused = Op(f"{scale.name}.rms_norm", RMS_NORM, OpKind.VECTOR, inputs, chain[-1].outputs, {"axis": -1})
    return Chain(sorted(chain, key=g.graph.ops.index), fused)


def rotary(g: Lookup, add: Op) -> Chain | None:
    """The rotary-embedding chain ending at the Add `add`: x cos + concat(-x2, x1) sin, where x1 and x2
    are the halves of x's last axis; or None."""
    if add.op_type != "Add" or len(add.inputs) != 2:
        return None
    products = [p for i in add.inputs if (p := g.made_by(i, "Mul")) is not None and g.private(i, [add])]
    for direct, turned in itertools.permutations(products) if len(products) == 2 else ():
        for halves in turned.inputs:
            concat = g.made_by(halves, "Concat")
            found = None if concat is None else rotate_half(g, concat, turned)
            if found is None:
                continue
            x, ops = found
            cos, sin = other(direct, x), other(turned, halves)
            if cos is None or sin is None:
                continue
            chain = sorted([direct, *ops, turned, add], key=g.graph.ops.index)
            return Chain(chain, Op(f"{add.name}.rotary", ROTARY, OpKind.VECTOR, (x, cos, sin), add.outputs))
    return None


def rotate_half(g: Lookup, concat: Op, reader: Op) -> tuple[str, list[Op]] | None:
    """(x, the ops) if `concat` is concat(-x2, x1) of the halves of x's last axis, read by `reader`
    alone; else None. The halves are told apart by their bounds: x1 ends where x2 starts (the same
    constant, through casts and reshapes)."""
    if len(concat.inputs) != 2 or not g.private(concat.outputs[0], [reader]):
        return None
    neg, lower = g.made_by(concat.inputs[0], "Neg"), g.made_by(concat.inputs[1], "Slice")
    upper = None if neg is None else g.made_by(neg.inputs[0], "Slice")
    if neg is None or lower is None or upper is None or lower.inputs[0] != upper.inputs[0]:
        return None
    x = lower.inputs[0]
    half = (*g.shape(x)[:-1], g.shape(x)[-1] // 2)
    if (
        g.shape(lower.outputs[0]) != half
        or g.shape(upper.outputs[0]) != half
        or len(lower.inputs) < 3
        or g.origin(lower.inputs[2]) != g.origin(upper.inputs[1])
        or not g.private(neg.outputs[0], [concat])
        or not g.private(lower.outputs[0], [concat])
        or not g.private(upper.outputs[0], [neg])
    ):
        return None
    return x, [lower, upper, neg, concat]


def norm_rope_graph(graph: Graph) -> Graph:
    """`graph` with every RMSNorm and rotary-embedding chain as one op, in the place of its last op."""
    g = Lookup(graph)
    chains = [chain for op in graph.ops if (chain := rms_norm(g, op) or rotary(g, op)) is not None]
    if not chains:
        return graph
    replaced = {chain.ops[-1].name: chain.fused for chain in chains}
    dropped = {op.name for chain in chains for op in chain.ops[:-1]}
    ops = [replaced.get(op.name, op) for op in graph.ops if op.name not in dropped]
    return live(replace(graph, ops=ops))
