"""Operator descriptors: ONNX rules, the cycles table and OpTable construction."""

import numpy as np
import pytest

from phazec.cost.ops import CYCLES_PER_ELEMENT, OpKind, OpTable, OpWork, VectorClass, op_rule, vector_class
from phazec.errors import PhazecError


@pytest.mark.parametrize(
    ("op_type", "kind", "cls", "forward", "backward"),
    [
        ("MatMul", OpKind.GEMM, VectorClass.NONE, 0, 0),
        ("Gemm", OpKind.GEMM, VectorClass.NONE, 0, 0),
        ("Reshape", OpKind.FREE, VectorClass.NONE, 0, 0),
        ("Transpose", OpKind.FREE, VectorClass.NONE, 0, 0),
        ("Gather", OpKind.FREE, VectorClass.NONE, 0, 0),
        ("LayerNormalization", OpKind.VECTOR, VectorClass.LAYERNORM, 1, 1),
        ("Add", OpKind.VECTOR, VectorClass.ARITHMETIC, 1, 1),
        ("Mul", OpKind.VECTOR, VectorClass.ARITHMETIC, 1, 1),
        ("Where", OpKind.VECTOR, VectorClass.ARITHMETIC, 1, 1),
        ("Neg", OpKind.VECTOR, VectorClass.ARITHMETIC, 1, 1),
        ("Div", OpKind.VECTOR, VectorClass.DIVIDE, 10, 10),
        ("Reciprocal", OpKind.VECTOR, VectorClass.DIVIDE, 10, 10),
        ("Softmax", OpKind.VECTOR, VectorClass.SOFTMAX, 10, 2),
        ("SoftmaxCrossEntropyLoss", OpKind.VECTOR, VectorClass.LOG_SOFTMAX, 13, 2),
        ("Tanh", OpKind.VECTOR, VectorClass.TANH, 27, 2),
        ("Sigmoid", OpKind.VECTOR, VectorClass.SIGMOID, 12, 22),
        ("Pow", OpKind.VECTOR, VectorClass.TRANSCENDENTAL, 15, 16),
        ("Sqrt", OpKind.VECTOR, VectorClass.TRANSCENDENTAL, 15, 16),
        ("Exp", OpKind.VECTOR, VectorClass.TRANSCENDENTAL, 15, 16),
        ("ReduceMean", OpKind.VECTOR, VectorClass.MEAN, 10, 10),
        ("Dropout", OpKind.VECTOR, VectorClass.DROPOUT, 2, 1),
        ("Erf", OpKind.VECTOR, VectorClass.ERF, 15, 15),
        ("Sin", OpKind.VECTOR, VectorClass.TRIGONOMETRIC, 13, 2),
    ],
)
def test_onnx_rules_follow_phaze_facts(
    op_type: str, kind: OpKind, cls: VectorClass, forward: int, backward: int
) -> None:
    assert op_rule(op_type) == (kind, cls)
    assert vector_class(op_type) == cls
    assert CYCLES_PER_ELEMENT[cls].tolist() == [forward, backward]


def test_unknown_op_type_is_a_clear_error() -> None:
    with pytest.raises(
        PhazecError, match=r"ONNX op type 'Conv' has no cost rule; known op types are .*MatMul"
    ):
        op_rule("Conv")


def test_from_rows_keeps_order_and_values() -> None:
    rows = [
        OpWork(OpKind.GEMM, batch=12, m=2048, k=128, n=2048, bytes_read=10, bytes_written=20),
        OpWork(OpKind.VECTOR, VectorClass.SIGMOID, backward=True, vector_elements=7),
        OpWork(OpKind.ALL_REDUCE, collective_bytes=1 << 40, group_size=8),
    ]
    table = OpTable.from_rows(rows)
    assert len(table) == 3
    assert table.kind.tolist() == [1, 2, 4]
    assert table.batch.tolist() == [12, 1, 1]
    assert table.m.tolist() == [2048, 0, 0]
    assert table.collective_bytes.tolist() == [0, 0, 2**40]
    assert table.group_size.tolist() == [1, 1, 8]
    assert table.cycles_per_element().tolist() == [0, 22, 0]
    assert table.take(np.array([2, 0])).kind.tolist() == [4, 1]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            OpWork(OpKind.VECTOR, vector_elements=-1),
            r"Operator 0 has vector_elements = -1: counts must be >= 0",
        ),
        (OpWork(OpKind.GEMM, m=4, k=0, n=4), r"GEMM operator 0 has batch=1, m=4, k=0, n=4"),
        (OpWork(OpKind.ALL_REDUCE, collective_bytes=8, group_size=0), r"Operator 0 has group_size = 0"),
    ],
)
def test_bad_rows_are_clear_errors(row: OpWork, message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        OpTable.from_rows([row])
