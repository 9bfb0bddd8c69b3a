"""Backward operators: one backward graph per layer class, derived from the forward graph by rule tables.

Every GEMM gives an input-gradient and a weight-gradient GEMM (a weight-free batched product gives two
input-gradient products), each with exactly the forward product's FLOPs. A vector op gives backward ops
of its own type (the cost model prices them at backward cycles per element) with the element count of
the gradient. Data ops give data ops. A forward all-reduce (after a row-parallel GEMM) passes the
gradient through; the gradient reaching the input of column-parallel GEMMs is all-reduced; an
all-gather's gradient is reduce-scattered. Gradients
that meet at a tensor read by several ops are summed (Add), disjoint slices are concatenated.

What the backward ops read is the activation stash. A GEMM's operands and the outputs of non-elementwise
ops (softmax, dropout) are stored. An elementwise op's backward reads the chain's full-size input
instead of the chain's intermediates, which it recomputes (a fused GELU, SwiGLU or RMSNorm kernel, as in
Megatron); smaller broadcast operands (norm statistics) are read as they are. Dropout keeps a 1-byte
mask, added to the forward graph as the Dropout op's second output.

Gradients flow from the layer's outputs to its weights and to its per-sample floating inputs
(activations); per-batch inputs (rotary tables, masks) and integer inputs get none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

from phazec.errors import PhazecError
from phazec.ir.core import FLOAT_DTYPES, AttrValue, Graph, LayerClass, Model, Op, OpKind, Tensor
from phazec.ir.ops import BROADCAST_TYPES, ELEMENTWISE_TYPES, GEMM_TYPES
from phazec.passes.base import PassResult
from phazec.passes.tensor_parallel import fresh_name, weight_of


@dataclass(frozen=True, slots=True)
class GradRule:
    """One backward op of a forward op: which input gradients it computes and what it reads."""

    wrt: tuple[int, ...] = ()
    """Input positions whose gradient the op computes (empty: every input)."""
    reads: tuple[str, ...] = ()
    """Forward values it reads: `x<i>` is input i, `y<i>` output i (absent ones are skipped)."""
    pass_through: bool = False
    """The gradient is the output gradient itself (a ReduceSum over broadcast axes if shapes differ)."""
    op_type: str | None = None
    """The backward op's type (None: the forward op's)."""


PASS = GradRule((0,), pass_through=True)
"""The gradient of input 0 is the output gradient."""

GRAD_RULES: dict[str, tuple[GradRule, ...]] = {
    "Add": (GradRule((0, 1), pass_through=True),),
    "Sub": (GradRule((0,), pass_through=True), GradRule((1,))),
    "Mul": (GradRule((0,), ("x1",)), GradRule((1,), ("x0",))),
    "Div": (GradRule((0,), ("x1",)), GradRule((1,), ("x1", "y0"))),
    "Pow": (GradRule((0,), ("x0", "x1")),),
    **dict.fromkeys(("Sqrt", "Reciprocal", "Exp", "Tanh", "Sigmoid", "Relu"), (GradRule((0,), ("y0",)),)),
    **dict.fromkeys(("Log", "Abs", "Erf", "Gelu", "Sin", "Cos", "Clip"), (GradRule((0,), ("x0",)),)),
    **dict.fromkeys(("Neg", "Cast", "ReduceMean", "ReduceSum", "CumSum", "Permute"), (GradRule((0,)),)),
    **dict.fromkeys(("Max", "Min"), (GradRule((0, 1), ("x0", "x1")),)),
    **dict.fromkeys(("ReduceMax", "ReduceMin"), (GradRule((0,), ("x0", "y0")),)),
    "Where": (GradRule((1, 2), ("x0",)),),
    **dict.fromkeys(("Softmax", "LogSoftmax", "ScaleMaskSoftmax"), (GradRule((0,), ("y0",)),)),
    "FlashAttention": (GradRule((0, 1, 2), ("x0", "x1", "x2", "y0"), op_type="FlashAttentionGrad"),),
    "LayerNormalization": (GradRule((0, 1, 2), ("x0", "x1", "y1", "y2")),),
    "RMSNormalization": (GradRule((0, 1), ("x0", "x1")),),
    "RotaryEmbedding": (GradRule((0,), ("x1", "x2")),),
    "Dropout": (GradRule((0,), ("y1",)),),
    "SoftmaxCrossEntropyLoss": (GradRule((0,), ("x0", "x1", "y1")),),
    "NegativeLogLikelihoodLoss": (GradRule((0,), ("x1",)),),
    **dict.fromkeys(
        ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "CastLike", "Transpose", "Expand",
         "Slice", "SequenceAt", "Split", "Gather", "GatherElements", "GatherND", "Pad", "Tile", "TopK"),
        (PASS,),
    ),
    "Concat": (GradRule(),),
    "AllReduce": (PASS,),
    "AllToAll": (GradRule((0,)),),
    "AllGather": (GradRule((0,), op_type="ReduceScatter"),),
    "ReduceScatter": (GradRule((0,), op_type="AllGather"),),
}  # fmt: skip
"""Backward ops of each differentiable forward op type. Data ops give data ops of their own type (a
slice's gradient is placed into the input's shape); broadcasts give a ReduceSum; an expert-parallel
all-to-all gives the all-to-all back; an all-gather gives a reduce-scatter of its gradient, and back."""

IDENTITY_GRAD_TYPES = frozenset({"AllReduce"})
"""Op types whose backward is the identity (no backward op): the all-reduce after a row-parallel GEMM."""

SLICING_TYPES = frozenset({"Slice", "SequenceAt", "Split", "Gather", "GatherElements", "GatherND", "TopK"})
"""Data ops whose gradients fill disjoint parts of their input: they meet by concatenation, not sums."""

UPDATE_TYPES: dict[str, str] = {"sgd": "SGDUpdate", "adam": "AdamUpdate"}
"""Optimizer name -> the op type of its parameter update."""


@dataclass(frozen=True, slots=True)
class Autodiff:
    """Attach a backward graph (and optionally an optimizer update) to every layer class."""

    name: ClassVar[str] = "autodiff"
    optimizer: str | None = None
    """Add a per-layer optimizer update (`sgd` or `adam`) run once per batch, or None for none."""

    def __call__(self, model: Model) -> PassResult:
        """Derive each class's backward graph; the forward graphs gain dropout masks."""
        if self.optimizer is not None and self.optimizer not in UPDATE_TYPES:
            raise PhazecError(
                f"optimizer {self.optimizer!r} has no update rule; valid optimizers: {sorted(UPDATE_TYPES)}."
            )
        classes = [self._differentiate(model, cls) for cls in model.classes]
        return PassResult(replace(model, classes=classes), True)

    def _differentiate(self, model: Model, cls: LayerClass) -> LayerClass:
        where = f"model {model.name!r}, layer {model.layers[cls.members[0]].name}"
        forward = with_dropout_masks(cls.graph)
        backward = Backward(forward, model.tp_width, where).build()
        update = None if self.optimizer is None else update_graph(forward, self.optimizer)
        return replace(cls, graph=forward, backward=backward, update=update)


def with_dropout_masks(graph: Graph) -> Graph:
    """The graph with a 1-byte mask output on every Dropout op that has none."""
    tensors = dict(graph.tensors)
    ops = []
    for op in graph.ops:
        if op.op_type == "Dropout" and (len(op.outputs) < 2 or not op.outputs[1]):
            out = tensors[op.outputs[0]]
            mask = fresh_name(tensors, f"{out.name}.mask")
            tensors[mask] = replace(out, name=mask, dtype="bool")
            ops.append(replace(op, outputs=(out.name, mask)))
        else:
            ops.append(op)
    return replace(graph, tensors=tensors, ops=ops)


def gradient_tensors(graph: Graph) -> set[str]:
    """Forward tensors that get a gradient: they depend on a trainable value and reach an output."""
    depends = set(graph.weights) | {
        name for name in graph.inputs
        if graph.tensors[name].dtype in FLOAT_DTYPES and graph.tensors[name].batch_axis is not None
    }  # fmt: skip
    for op in graph.ops:
        if depends.intersection(differentiable_inputs(op)):
            depends.update(o for o in op.outputs if o and graph.tensors[o].dtype in FLOAT_DTYPES)
    reaches = depends.intersection(graph.outputs)
    for op in reversed(graph.ops):
        if reaches.intersection(op.outputs):
            reaches.update(i for i in differentiable_inputs(op) if i in depends)
    return reaches


def differentiable_inputs(op: Op) -> list[str]:
    """The inputs a gradient can flow to (a GEMM's operands, the positions its rules list)."""
    if op.kind is OpKind.GEMM:
        return [i for i in op.inputs if i]
    positions = {i for rule in GRAD_RULES.get(op.op_type, ()) for i in rule.wrt or range(len(op.inputs))}
    if op.op_type not in GRAD_RULES:
        positions = set(range(len(op.inputs)))
    return [name for i, name in enumerate(op.inputs) if name and i in positions]


@dataclass
class Backward:
    """Builds one backward graph: forward ops in reverse, gradient contributions summed per tensor."""

    forward: Graph
    width: int
    where: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    parts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Forward tensor -> its gradient contributions (name, tag: `column`, `slice` or ``)."""
    read: dict[str, None] = field(default_factory=dict)
    """Forward tensors the backward ops read, in order of first use."""
    roots: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Memo of `recompute_roots`."""
    producers: dict[str, Op] = field(default_factory=dict)

    def build(self) -> Graph:
        """The backward graph: inputs are output gradients then stashed activations."""
        fwd = self.forward
        self.tensors = dict(fwd.tensors)
        self.producers = fwd.producers()
        needs = gradient_tensors(fwd)
        grad_outputs = [o for o in fwd.outputs if o in needs]
        for name in grad_outputs:
            self.parts[name] = [(self.grad_tensor(name), "")]
        seeds = [part for name in grad_outputs for part, _ in self.parts[name]]
        for op in reversed(fwd.ops):
            outs = [o for o in op.outputs if o in needs]
            if outs:
                grads = {o: self.total(o) for o in outs}
                self.differentiate(op, grads, needs)
        outputs = [self.total(n) for n in [*fwd.inputs, *fwd.weights] if n in needs and n in self.parts]
        activations = [n for n in self.read if n not in fwd.weights and n not in fwd.constants]
        used = {n for op in self.ops for n in (*op.inputs, *op.outputs) if n} | set(seeds) | set(outputs)
        return Graph(
            tensors={n: t for n, t in self.tensors.items() if n in used},
            ops=self.ops,
            inputs=[*seeds, *activations],
            weights=[n for n in self.read if n in fwd.weights],
            constants=[n for n in self.read if n in fwd.constants],
            outputs=outputs,
        )

    def grad_tensor(self, of: str) -> str:
        """A new gradient tensor shaped like forward tensor `of`."""
        name = fresh_name(self.tensors, f"d.{of}")
        self.tensors[name] = replace(self.forward.tensors[of], name=name)
        return name

    def emit(
        self,
        name: str,
        op_type: str,
        kind: OpKind,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        *,
        attrs: dict[str, AttrValue] | None = None,
    ) -> None:
        self.ops.append(Op(name, op_type, kind, inputs, outputs, dict(attrs or {})))

    def total(self, of: str) -> str:
        """The gradient of `of`: its contributions all-reduced (column-parallel), joined and summed."""
        parts = self.parts.pop(of, [])
        column = [p for p, tag in parts if tag == "column"]
        slices = [p for p, tag in parts if tag == "slice"]
        rest = [p for p, tag in parts if tag == ""]
        if column:
            summed = self.sum(of, column)
            reduced = self.grad_tensor(of)
            attrs: dict[str, AttrValue] = {"group": self.width, "bytes": self.tensors[reduced].nbytes()}
            self.emit(
                f"{reduced}.allreduce", "AllReduce", OpKind.COLLECTIVE, (summed,), (reduced,), attrs=attrs
            )
            rest.append(reduced)
        if len(slices) > 1:
            joined = self.grad_tensor(of)
            self.emit(f"{joined}.concat", "Concat", OpKind.DATA, tuple(slices), (joined,))
            rest.append(joined)
        elif slices:
            rest.append(slices[0])
        total = self.sum(of, rest)
        self.parts[of] = [(total, "")]
        return total

    def sum(self, of: str, names: list[str]) -> str:
        """Add gradient contributions pairwise, in order."""
        assert names, f"{self.where}: no gradient contribution for {of!r}"
        total = names[0]
        for other in names[1:]:
            out = self.grad_tensor(of)
            self.emit(f"{out}.add", "Add", OpKind.VECTOR, (total, other), (out,))
            total = out
        return total

    def contribute(self, of: str, name: str, tag: str = "") -> None:
        self.parts.setdefault(of, []).append((name, tag))

    def reading(self, names: list[str]) -> tuple[str, ...]:
        """Record forward tensors a backward op reads; views of weights are re-created, not stashed."""
        for name in names:
            if name not in self.forward.weights and weight_of(self.forward, name) is not None:
                self.view_of_weight(name)
            else:
                self.read[name] = None
        return tuple(names)

    def view_of_weight(self, name: str) -> None:
        """Re-create the data ops that view a weight (e.g. a transpose) in the backward graph."""
        if any(name in op.outputs for op in self.ops):
            return
        op = self.producers[name]
        self.reading(list(op.inputs))
        self.emit(f"{op.name}.view", op.op_type, op.kind, op.inputs, op.outputs, attrs=op.attrs)

    def differentiate(self, op: Op, grads: dict[str, str], needs: set[str]) -> None:
        """Emit the backward ops of one forward op."""
        if op.kind is OpKind.GEMM and op.op_type in GEMM_TYPES:
            self.gemm(op, grads[op.outputs[0]], needs)
            return
        rules = GRAD_RULES.get(op.op_type)
        if rules is None:
            raise PhazecError(
                f"{self.where}: autodiff has no gradient rule for op type {op.op_type!r} (op {op.name!r}); "
                f"differentiable types: {', '.join(sorted(GRAD_RULES))}."
            )
        d_outs = tuple(grads.values())
        for k, rule in enumerate(rules):
            wrt = rule.wrt or tuple(range(len(op.inputs)))
            targets = [op.inputs[i] for i in wrt if i < len(op.inputs) and op.inputs[i] in needs]
            if not targets:
                continue
            if rule.pass_through:
                self.pass_through(op, d_outs[0], targets)
                continue
            reads = self.reading(self.rule_reads(op, rule))
            outs = tuple(self.grad_tensor(t) for t in targets)
            attrs = inverse_perm(op.attrs) if op.op_type == "Transpose" else op.attrs
            op_type = rule.op_type or op.op_type
            self.emit(f"{op.name}.grad{k}", op_type, op.kind, (*d_outs, *reads), outs, attrs=attrs)
            tag = "slice" if op.op_type in SLICING_TYPES else ""
            for target, out in zip(targets, outs, strict=True):
                self.contribute(target, out, tag)

    def pass_through(self, op: Op, d_out: str, targets: list[str]) -> None:
        """The output gradient flows to each target; a data op or a broadcast gets its own op."""
        for target in targets:
            same_shape = self.tensors[target].shape == self.tensors[d_out].shape
            if op.op_type in IDENTITY_GRAD_TYPES or (same_shape and op.kind is not OpKind.DATA):
                self.contribute(target, d_out)
                continue
            out = self.grad_tensor(target)
            if op.kind is OpKind.DATA and op.op_type not in BROADCAST_TYPES:
                attrs = inverse_perm(op.attrs) if op.op_type == "Transpose" else op.attrs
                self.emit(f"{op.name}.grad", op.op_type, OpKind.DATA, (d_out,), (out,), attrs=attrs)
                self.contribute(target, out, "slice" if op.op_type in SLICING_TYPES else "")
            else:
                self.emit(f"{op.name}.grad.{target}", "ReduceSum", OpKind.VECTOR, (d_out,), (out,))
                self.contribute(target, out)

    def rule_reads(self, op: Op, rule: GradRule) -> list[str]:
        """The forward tensors a backward op reads; an elementwise op reads recompute roots instead."""
        values = {f"x{i}": n for i, n in enumerate(op.inputs)} | {
            f"y{i}": n for i, n in enumerate(op.outputs)
        }
        names = [values[r] for r in rule.reads if values.get(r)]
        if op.op_type not in ELEMENTWISE_TYPES:
            return names
        return list(dict.fromkeys(r for n in names for r in self.recompute_roots(n)))

    def recompute_roots(self, name: str) -> tuple[str, ...]:
        """What an elementwise chain's backward reads to recompute `name`: the chain's inputs, if at
        most one of them is as large as `name` (else `name` itself is stored)."""
        if name in self.roots:
            return self.roots[name]
        fwd = self.forward
        op = self.producers.get(name)
        result: tuple[str, ...] = (name,)
        if op is not None and op.op_type in ELEMENTWISE_TYPES and op.op_type != "Dropout":
            sources = [i for i in op.inputs if i and i not in fwd.weights and i not in fwd.constants]
            roots = tuple(dict.fromkeys(r for s in sources for r in self.recompute_roots(s)))
            full = [r for r in roots if fwd.tensors[r].numel() >= fwd.tensors[name].numel()]
            if len(full) <= 1:
                result = roots
        self.roots[name] = result
        return result

    def gemm(self, op: Op, d_out: str, needs: set[str]) -> None:
        """Input- and weight-gradient products of a MatMul or Gemm."""
        a, b = op.inputs[0], op.inputs[1]
        role = {n: "weight" if weight_of(self.forward, n) is not None else "input" for n in (a, b)}
        tag = "column" if op.attrs.get("tp") == "column" else ""
        if op.op_type == "Gemm":
            self.gemm_2d(op, d_out, needs, role, tag)
        else:
            self.matmul(op, d_out, needs, role, tag)

    def gemm_2d(self, op: Op, d_out: str, needs: set[str], role: dict[str, str], tag: str) -> None:
        a, b = op.inputs[0], op.inputs[1]
        trans_a, trans_b = (1 if op.attrs.get(key, 0) else 0 for key in ("transA", "transB"))
        if a in needs:
            self.reading([b])
            da = self.grad_tensor(a)
            operands, attrs = (
                ((b, d_out), {"transA": trans_b, "transB": 1})
                if trans_a
                else ((d_out, b), {"transA": 0, "transB": 1 - trans_b})
            )
            self.emit(
                f"{op.name}.grad_a", "Gemm", OpKind.GEMM, operands, (da,), attrs={**attrs, "grad": role[a]}
            )
            self.contribute(a, da, tag if role[a] == "input" else "")
        if b in needs:
            self.reading([a])
            db = self.grad_tensor(b)
            operands, attrs = (
                ((d_out, a), {"transA": 1, "transB": trans_a})
                if trans_b
                else ((a, d_out), {"transA": 1 - trans_a, "transB": 0})
            )
            self.emit(
                f"{op.name}.grad_b", "Gemm", OpKind.GEMM, operands, (db,), attrs={**attrs, "grad": role[b]}
            )
            self.contribute(b, db)
        if len(op.inputs) > 2 and op.inputs[2] in needs:
            self.pass_through(op, d_out, [op.inputs[2]])

    def matmul(self, op: Op, d_out: str, needs: set[str], role: dict[str, str], tag: str) -> None:
        a, b = op.inputs[0], op.inputs[1]
        rank_a, rank_b = len(self.tensors[a].shape), len(self.tensors[b].shape)
        if min(rank_a, rank_b) < 2 or rank_a < rank_b:
            raise PhazecError(
                f"{self.where}: autodiff handles MatMul of two matrices or of a batch by a matrix; op "
                f"{op.name!r} multiplies shapes {list(self.tensors[a].shape)} and "
                f"{list(self.tensors[b].shape)}."
            )
        if a in needs:
            da = self.grad_tensor(a)
            bt = self.transposed(self.reading([b])[0])
            self.emit(f"{op.name}.grad_a", "MatMul", OpKind.GEMM, (d_out, bt), (da,), attrs={"grad": role[a]})
            self.contribute(a, da, tag if role[a] == "input" else "")
        if b in needs:
            db = self.grad_tensor(b)
            a_read, g_read = self.reading([a])[0], d_out
            if rank_b < rank_a:
                a_read, g_read = self.flattened(a_read), self.flattened(d_out)
            self.emit(
                f"{op.name}.grad_b",
                "MatMul",
                OpKind.GEMM,
                (self.transposed(a_read), g_read),
                (db,),
                attrs={"grad": role[b]},
            )
            self.contribute(b, db)

    def transposed(self, name: str) -> str:
        """A view of `name` with its last two axes swapped."""
        src = self.tensors[name]
        rank = len(src.shape)
        perm = (*range(rank - 2), rank - 1, rank - 2)
        out = fresh_name(self.tensors, f"{name}.T")
        axis = None if src.batch_axis is None else perm.index(src.batch_axis)
        self.tensors[out] = Tensor(out, tuple(src.shape[p] for p in perm), src.dtype, axis)
        self.emit(f"{out}.transpose", "Transpose", OpKind.DATA, (name,), (out,), attrs={"perm": perm})
        return out

    def flattened(self, name: str) -> str:
        """A view of `name` as a matrix: every leading axis folded into the rows."""
        src = self.tensors[name]
        out = fresh_name(self.tensors, f"{name}.2d")
        axis = None if src.batch_axis is None else 0
        self.tensors[out] = Tensor(out, (math.prod(src.shape[:-1]), src.shape[-1]), src.dtype, axis)
        self.emit(f"{out}.reshape", "Reshape", OpKind.DATA, (name,), (out,))
        return out


def inverse_perm(attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    """A Transpose's attributes with the inverse permutation."""
    perm = attrs["perm"]
    assert isinstance(perm, tuple)
    inverse = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
    return {**attrs, "perm": inverse}


def update_graph(forward: Graph, optimizer: str) -> Graph:
    """One optimizer update over the layer's parameters, viewed as one flat buffer (as Megatron does)."""
    count = forward.parameter_count()
    dtype = forward.tensors[forward.weights[0]].dtype if forward.weights else "bfloat16"
    tensors = {n: Tensor(n, (count,), dtype) for n in ("params", "grads", "params.updated")}
    op = Op("optimizer", UPDATE_TYPES[optimizer], OpKind.VECTOR, ("params", "grads"), ("params.updated",))
    return Graph(tensors, [op], ["grads"], ["params"], [], ["params.updated"])
