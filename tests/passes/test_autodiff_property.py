"""Autodiff's GEMM gradients against numpy: run the backward graph's ops and compare with the chain rule.

The reference is the textbook rule written out by hand (dA = dY B^T, dB = A^T dY, transposes undone,
broadcast batch axes summed); the backward graph is evaluated op by op by a small numpy interpreter.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from phazec.ir.core import Graph, Layer, LayerClass, LayerKind, Model, Op, OpKind, Tensor
from phazec.ir.ops import gemm_dims
from phazec.passes.autodiff import Autodiff
from tests.examples import examples

Array = NDArray[np.float64]


def evaluate(graph: Graph, values: dict[str, Array]) -> dict[str, Array]:
    """Run a backward graph's GEMM, data and sum ops in numpy."""
    for op in graph.ops:
        args = [values[i] for i in op.inputs]
        out = graph.tensors[op.outputs[0]].shape
        if op.op_type == "Gemm":
            a = args[0].T if op.attrs.get("transA", 0) else args[0]
            b = args[1].T if op.attrs.get("transB", 0) else args[1]
            result = a @ b
        elif op.op_type == "MatMul":
            result = args[0] @ args[1]
        elif op.op_type == "Transpose":
            perm = op.attrs["perm"]
            assert isinstance(perm, tuple)
            result = args[0].transpose(tuple(int(p) for p in perm))
        elif op.op_type == "ReduceSum":
            result = args[0].reshape(-1, *out).sum(axis=0)
        else:
            assert op.op_type == "Reshape", op.op_type
            result = args[0].reshape(out)
        assert result.shape == out, op.name
        values[op.outputs[0]] = result
    return values


def one_op_model(tensors: list[Tensor], op: Op, inputs: list[str], weights: list[str]) -> Model:
    graph = Graph({t.name: t for t in tensors}, [op], inputs, weights, [], [op.outputs[0]])
    return Model("gemm", [Layer(0, "block.0", LayerKind.BLOCK, 0)], [], [LayerClass(graph, (0,))], 0, 1)


def backward_of(model: Model, rng: np.random.Generator) -> tuple[Graph, dict[str, Array]]:
    """The backward graph and its evaluated values, from random forward values and output gradient."""
    cls = Autodiff()(model).model.classes[0]
    assert cls.backward is not None
    values = {name: rng.standard_normal(t.shape) for name, t in cls.graph.tensors.items()}
    values["d.y"] = rng.standard_normal(cls.graph.tensors["y"].shape)
    return cls.backward, evaluate(cls.backward, values)


dims = st.integers(1, 4)


@settings(max_examples=examples(60), deadline=None)
@given(m=dims, k=dims, n=dims, trans_a=st.booleans(), trans_b=st.booleans(), bias=st.booleans())
def test_gemm_gradients(*, m: int, k: int, n: int, trans_a: bool, trans_b: bool, bias: bool) -> None:
    rng = np.random.default_rng(0)
    a = Tensor("a", (k, m) if trans_a else (m, k), "float32", 1 if trans_a else 0)
    b = Tensor("b", (n, k) if trans_b else (k, n), "float32")
    c = Tensor("c", (n,), "float32")
    y = Tensor("y", (m, n), "float32", 0)
    operands = ("a", "b", "c") if bias else ("a", "b")
    op = Op("gemm", "Gemm", OpKind.GEMM, operands, ("y",), {"transA": int(trans_a), "transB": int(trans_b)})
    model = one_op_model([a, b, c, y], op, ["a"], list(operands[1:]))
    backward, v = backward_of(model, rng)
    a_, b_ = (v["a"].T if trans_a else v["a"]), (v["b"].T if trans_b else v["b"])
    da, db = v["d.y"] @ b_.T, a_.T @ v["d.y"]
    np.testing.assert_allclose(v["d.a"], da.T if trans_a else da)
    np.testing.assert_allclose(v["d.b"], db.T if trans_b else db)
    if bias:
        np.testing.assert_allclose(v["d.c"], v["d.y"].sum(axis=0))
    forward = gemm_dims(op, model.classes[0].graph).flops
    assert [gemm_dims(g, backward).flops for g in backward.ops if g.kind is OpKind.GEMM] == [forward, forward]


@settings(max_examples=examples(60), deadline=None)
@given(batch=st.lists(dims, min_size=1, max_size=2), m=dims, k=dims, n=dims, weight_free=st.booleans())
def test_matmul_gradients(batch: list[int], m: int, k: int, n: int, weight_free: bool) -> None:
    rng = np.random.default_rng(1)
    lead = tuple(batch)
    a = Tensor("a", (*lead, m, k), "float32", 0)
    b = Tensor("b", (*lead, k, n) if weight_free else (k, n), "float32", 0 if weight_free else None)
    y = Tensor("y", (*lead, m, n), "float32", 0)
    op = Op("mm", "MatMul", OpKind.GEMM, ("a", "b"), ("y",))
    model = one_op_model([a, b, y], op, ["a", "b"] if weight_free else ["a"], [] if weight_free else ["b"])
    backward, v = backward_of(model, rng)
    np.testing.assert_allclose(v["d.a"], v["d.y"] @ np.swapaxes(v["b"], -1, -2))
    db = np.swapaxes(v["a"], -1, -2) @ v["d.y"]
    np.testing.assert_allclose(v["d.b"], db if weight_free else db.reshape(-1, k, n).sum(axis=0))
    roles = sorted(str(g.attrs["grad"]) for g in backward.ops if g.kind is OpKind.GEMM)
    assert roles == (["input", "input"] if weight_free else ["input", "weight"])
    forward = gemm_dims(op, model.classes[0].graph).flops
    assert sum(gemm_dims(g, backward).flops for g in backward.ops if g.kind is OpKind.GEMM) == 2 * forward
