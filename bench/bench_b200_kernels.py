"""Per-kernel check of the b200 preset: phazec's GEMM and attention latencies against SimuMax's measured
B200 kernels.

Data: `bench/data/simumax_b200_gemm.csv`, the 514 BF16 GEMMs of MooreThreads/SimuMax@4dcaae5
`configs/system/b200_bf16_ceperm.json` (Apache-2.0; `matmul.accurate_efficient_factor`, read into a
table of figures): each a Transformer Engine GEMM of the Megatron-LM runs the modern bench's SimuMax
rows come from, measured on that B200 node, as its share of 2,250 dense BF16 TFLOP/s. Its key names m,
k, n: m x k by k x n, 2 m k n FLOPs (fprop TN: tokens x hidden by hidden x out; dgrad NN; wgrad NT,
accumulating into an fp32 gradient). Measured seconds = 2 m k n / (share x 2.25e15).

Attention: `bench/data/simumax_b200_attention.csv`, the same table's Transformer Engine causal attention
kernels (`sdp_fwd`, `sdp_bwd`), forward and backward, as shares of the peak over SimuMax's count of
2 s^2 h (d_qk + d_v) forward FLOPs (the whole square of scores; 2.5 times that backward): measured seconds
= that count / (share x 2.25e15). The rows whose query-key and value head sizes are equal (phazec's flash
op has one) are priced as phazec prices a causal flash kernel (`phazec.ir.ops.flash_dims`: the tiles on
and below the diagonal) at the preset's `attention_utilisation`.

Printed: the kernels' error at the preset's device model (its utilisation fitted on whole iterations of
SimuMax's two B200 calibration rows, `bench_fidelity_modern.py --fit`), and the utilisation these
kernels alone fit (even positions of the table calibrate, odd ones are held out, the grid of
`bench_fidelity.UTILISATIONS`), the preset's other constants kept. The gap between the two is what
the whole-iteration fit takes up besides the GEMMs' main loops.

    .venv/bin/python bench/bench_b200_kernels.py
"""

import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from numpy.typing import NDArray

from phazec.cli import conf_dir
from phazec.config.settings import typed
from phazec.cost.ops import OpKind, OpTable, OpWork
from phazec.cost.tiled import attention_latency_s, gemm_latency_s
from phazec.hw.designs import Designs
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.ir.ops import FLASH_BLOCK, FLASH_PRODUCTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity

TABLE = Path(__file__).resolve().parent / "data" / "simumax_b200_gemm.csv"
ATTENTION_TABLE = Path(__file__).resolve().parent / "data" / "simumax_b200_attention.csv"
BF16_PEAK_FLOP_PER_S = 2.25e15
"""The dense BF16 peak SimuMax's shares are of (its `matmul.tflops`, the data sheet's)."""


def b200() -> Designs:
    """The b200 preset's one design, with its device model."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose("config", overrides=["hw=b200"])
    return enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))


def load() -> tuple[list[str], OpTable, NDArray[np.float64]]:
    """The table's GEMMs: their names, cost-model rows (bf16 operands; an fp32 result accumulated into,
    read and written, where the row says so) and measured seconds."""
    names, rows, measured = [], [], []
    with TABLE.open() as f:
        for r in csv.DictReader(f):
            b, m, k, n = (int(r[key]) for key in ("b", "m", "k", "n"))
            out_bytes = 4 if r["out_dtype"] == "fp32" else 2
            accumulate = r["accumulate"] == "True"
            rows.append(
                OpWork(
                    OpKind.GEMM,
                    batch=b,
                    m=m,
                    k=k,
                    n=n,
                    bytes_read=2 * b * (m * k + k * n) + (out_bytes * b * m * n if accumulate else 0),
                    bytes_written=out_bytes * b * m * n,
                )
            )
            names.append(f"{r['layout']} m={m} k={k} n={n}")
            measured.append(2.0 * b * m * k * n / (float(r["share_of_2250_tflops"]) * BF16_PEAK_FLOP_PER_S))
    return names, OpTable.from_rows(rows), np.array(measured)


def load_attention() -> tuple[list[str], OpTable, NDArray[np.float64]]:
    """The table's attention kernels with one head size: their names, cost-model rows (a causal flash
    kernel's tiles, reading Q, K, V (and O, dO backward) and writing O (dQ, dK, dV) in bf16) and
    measured seconds."""
    names, rows, measured = [], [], []
    with ATTENTION_TABLE.open() as f:
        for r in csv.DictReader(f):
            b, s, h, kv, d = (int(r[key]) for key in ("batch", "seq_len", "heads", "kv_heads", "qk_head_dim"))
            if d != int(r["v_head_dim"]) or r["qkv_contiguous"] != "True":
                continue
            backward = r["pass"] == "bwd"
            block = min(s, FLASH_BLOCK)
            t = -(-s // block)
            products = FLASH_PRODUCTS["FlashAttentionGrad" if backward else "FlashAttention"]
            q, keys_values = 2 * b * s * h * d, 2 * 2 * b * s * kv * d
            rows.append(
                OpWork(
                    OpKind.ATTENTION,
                    batch=products * b * h * t * (t + 1) // 2,
                    m=block,
                    k=d,
                    n=block,
                    bytes_read=q + keys_values + (2 * q if backward else 0),
                    bytes_written=q + (keys_values if backward else 0),
                )
            )
            names.append(f"{r['pass']} s={s} heads={h}/{kv}")
            full_square = 2.0 * b * s * s * h * 2 * d * (2.5 if backward else 1.0)
            measured.append(
                full_square / (float(r["share_of_2250_tflops_full_square"]) * BF16_PEAK_FLOP_PER_S)
            )
    return names, OpTable.from_rows(rows), np.array(measured)


def errors_at(
    ops: OpTable, design: Designs, utilisation: float, measured_s: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Signed relative error of phazec's all-cores latency at a GEMM utilisation."""
    device = replace(design.device, gemm_utilisation=utilisation)
    predicted: NDArray[np.float64] = gemm_latency_s(ops, replace(design, device=device), True)[:, 0]
    return predicted / measured_s - 1.0


def main() -> None:
    """Print the preset's error on the kernels and the kernels' own fit."""
    design = b200()
    names, ops, measured_s = load()
    preset = float(design.device.gemm_utilisation)
    at_preset = errors_at(ops, design, preset, measured_s)
    print(f"{len(names)} B200 GEMMs measured by SimuMax (BF16, Transformer Engine), phazec's b200 preset:")
    print(f"  at the preset's utilisation {preset:.2f}: mean error {at_preset.mean():+.1%}, mean abs "
          f"{np.abs(at_preset).mean():.1%}, median {np.median(at_preset):+.1%}")  # fmt: skip
    calibration = np.arange(len(names)) % 2 == 0
    fits = [(float(np.abs(errors_at(ops, design, float(u), measured_s)[calibration]).mean()), float(u))
            for u in bench_fidelity.UTILISATIONS]  # fmt: skip
    _, best = min(fits)
    fitted = errors_at(ops, design, best, measured_s)
    for split, mask in (("calibration", calibration), ("held-out", ~calibration)):
        print(f"  fitted on the kernels, utilisation {best:.2f}, {split:11s} {int(mask.sum()):3d}: mean abs "
              f"{np.abs(fitted[mask]).mean():.1%}, median {np.median(np.abs(fitted[mask])):.1%}, max "
              f"{np.abs(fitted[mask]).max():.1%}")  # fmt: skip
    worst = np.argsort(-np.abs(fitted))[:5]
    print("  worst kernels at the kernels' fit:")
    for i in worst:
        print(f"    {names[i]:34s} measured {measured_s[i] * 1e3:8.3f} ms, error {fitted[i]:+.0%}")
    names, ops, measured_s = load_attention()
    share = float(design.device.attention_utilisation)
    predicted = attention_latency_s(ops, design, True)[:, 0]
    errors = predicted / measured_s - 1.0
    print(f"{len(names)} B200 causal attention kernels measured by SimuMax (Transformer Engine), at the "
          f"preset's attention utilisation {share:.2f}: mean error {errors.mean():+.1%}, mean abs "
          f"{np.abs(errors).mean():.1%}, median {np.median(errors):+.1%}")  # fmt: skip
    for name, error, seconds in zip(names, errors, measured_s, strict=True):
        print(f"    {name:34s} measured {seconds * 1e3:8.3f} ms, error {error:+.0%}")


if __name__ == "__main__":
    main()
