"""Benchmark: cost one GPT-3 175B block (t = 8, forward and backward) on all 29,360 `tpu_area` designs.

Target: at most 3 s on the 2-core CI machine for the default `tiled` model. Prints the median of 5 runs
and its ratio to the target for both latency models.
"""

import statistics
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from phazec.config import register
from phazec.cost.model import MODELS, op_costs
from phazec.cost.ops import OpKind, OpTable, OpWork, VectorClass
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config

TARGET_S = 3.0
RUNS = 5
BYTES = 2  # bf16
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def _gemm(batch: int, m: int, k: int, n: int, backward: bool = False) -> OpWork:
    return OpWork(
        OpKind.GEMM,
        backward=backward,
        batch=batch,
        m=m,
        k=k,
        n=n,
        bytes_read=BYTES * batch * (m * k + k * n),
        bytes_written=BYTES * batch * m * n,
    )


def _vector(cls: VectorClass, elements: int, operands: int = 1, backward: bool = False) -> OpWork:
    return OpWork(
        OpKind.VECTOR,
        vector_class=cls,
        backward=backward,
        vector_elements=elements,
        bytes_read=BYTES * elements * operands,
        bytes_written=BYTES * elements,
    )


def _all_reduce(size: int, group: int) -> OpWork:
    return OpWork(OpKind.ALL_REDUCE, collective_bytes=BYTES * size, group_size=group)


def gpt3_block_ops_analytic(b: int = 1, s: int = 2048, h: int = 12288, a: int = 96, t: int = 8) -> OpTable:
    """One GPT-3 175B block's operators on one of t tensor-parallel devices, from the analytic shapes.

    Stands in for the IR's operator list until the training-graph IR exists. Forward: layer norm, QKV,
    scores, softmax, attention dropout, context, output projection, all-reduce, dropout, residual add,
    layer norm, MLP up, GELU, MLP down, all-reduce, dropout, residual add. Backward: each GEMM as its dX
    and dW GEMMs, each vector op with its backward cycles, and the two all-reduces of the block input's
    gradients (Megatron's f operator).
    """
    rows, heads, head_dim, ffn = b * s, a // t, h // a, 4 * h // t
    tokens = rows * h
    gemms = [  # (batch, m, k, n) of the forward GEMMs
        (1, rows, h, 3 * h // t),  # QKV
        (b * heads, s, head_dim, s),  # scores = Q K^T
        (b * heads, s, s, head_dim),  # context = P V
        (1, rows, h // t, h),  # output projection
        (1, rows, h, ffn),  # MLP up
        (1, rows, ffn, h),  # MLP down
    ]
    vectors = [  # (class, elements, operands)
        (VectorClass.LAYERNORM, tokens, 1),
        (VectorClass.SOFTMAX, b * heads * s * s, 1),
        (VectorClass.DROPOUT, b * heads * s * s, 1),
        (VectorClass.DROPOUT, tokens, 1),
        (VectorClass.ARITHMETIC, tokens, 2),  # residual add
        (VectorClass.LAYERNORM, tokens, 1),
        (VectorClass.ACTIVATION, rows * ffn, 1),  # GELU
        (VectorClass.DROPOUT, tokens, 1),
        (VectorClass.ARITHMETIC, tokens, 2),  # residual add
    ]
    forward = [_gemm(*g) for g in gemms] + [_vector(*v) for v in vectors] + [_all_reduce(tokens, t)] * 2
    backward = (
        [_gemm(batch, m, n, k, backward=True) for batch, m, k, n in gemms]  # dX = dY W^T
        + [_gemm(batch, k, m, n, backward=True) for batch, m, k, n in gemms]  # dW = X^T dY
        + [_vector(cls, elements, operands + 1, backward=True) for cls, elements, operands in vectors]
        + [_all_reduce(tokens, t)] * 2
    )
    return OpTable.from_rows(forward + backward)


def main() -> None:
    """Print the median time to cost the block on every design, per latency model."""
    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["hw=tpu_area", "system=phaze_1024"])
    start = time.perf_counter()
    designs = enumerate_designs(hw_space_from_config(cfg.hw))
    print(f"enumerate {len(designs)} designs: {time.perf_counter() - start:.3f} s")
    system = system_from_config(cfg.system)
    ops = gpt3_block_ops_analytic()
    for name, model in MODELS.items():
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            op_costs(ops, designs, system, model)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(
            f"cost={name}: {len(ops)} ops x {len(designs)} designs, runs {[round(x, 3) for x in times]} s, "
            f"median {median:.3f} s = {median / TARGET_S:.2f} x the {TARGET_S:.0f} s target"
        )


if __name__ == "__main__":
    main()
