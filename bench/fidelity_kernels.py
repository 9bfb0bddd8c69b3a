"""Per-kernel fidelity: phazec's device model against NeuSight's measured A100 and H100 kernels.

Data: `../shared/neusight/` (NeuSight's test set, MIT; see its README): FP32 `linear` and `bmm`
latencies measured with PyTorch 2.1 on an A100 80GB PCIe and an H100 80GB HBM3, and elementwise `add`.
The kernels are FP32 SIMT GEMMs, so each GPU is modelled here at its FP32 peak (device_configs: SMs,
FP32 lanes per SM, clock, memory bandwidth); the shape behaviour fitted here (tile overhead, kernel
latency, memory utilisation) carries over to the bf16 presets, whose tensor-core utilisation is fitted
on whole iterations instead (`bench_fidelity.py`).

Split, fixed before fitting: per GPU and file, rows in file order; even positions calibrate, odd
positions are held out. Fitted per GPU on the calibration rows (least mean absolute relative error):
the set of output tiles (one of TILE_SETS), the tile overhead (OVERHEAD_CYCLES), the kernel latency
(KERNEL_LATENCIES_S) and the utilisation (0.30 .. 1.00 by 0.02). Memory utilisation: the median share
of the bandwidth that the largest (>= 64 MiB) FP32 `add` kernels reach.
"""

import csv
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from phazec.cost.ops import OpKind, OpTable, OpWork
from phazec.cost.tiled import gemm_latency_s
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel


def shared_dir() -> Path:
    """The public data: $PHAZEC_SHARED_DIR, else the nearest `shared/` beside a parent of this file."""
    if "PHAZEC_SHARED_DIR" in os.environ:
        return Path(os.environ["PHAZEC_SHARED_DIR"])
    here = Path(__file__).resolve()
    return next((p / "shared" for p in here.parents if (p / "shared" / "neusight").is_dir()), here.parent)


NEUSIGHT = shared_dir() / "neusight"
GPUS = {"a100": "NVIDIA A100 80GB PCIe", "h100": "NVIDIA H100 80GB HBM3", "v100": "Tesla V100-PCIE-32GB"}
CONFIGS = {"a100": "NVIDIA_A100_80GB_PCIe.json", "h100": "NVIDIA_H100_80GB_HBM3.json",
           "v100": "Tesla_V100-PCIE-32GB.json"}  # fmt: skip
TILE_SETS = (
    ((128, 128),),
    ((256, 128), (128, 128), (128, 64), (64, 64)),
    ((128, 128), (128, 64), (64, 64), (64, 32), (32, 32)),
)
OVERHEAD_CYCLES = (0.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0)
KERNEL_LATENCIES_S = (0.0, 5e-6, 1e-5, 2e-5)
UTILISATIONS = np.round(np.arange(0.30, 1.001, 0.02), 2)
FP32_BYTES = 4


@dataclass(frozen=True)
class Kernels:
    """Measured GEMM kernels of one GPU: names, the cost-model rows and latencies in seconds."""

    names: list[str]
    ops: OpTable
    measured_s: NDArray[np.float64]
    calibration: NDArray[np.bool_]


def fp32_design(gpu: str) -> Designs:
    """The GPU at its FP32 peak in the template: one core per SM, FP32 lanes as an array of lanes x 1."""
    config = json.loads((NEUSIGHT / "device_configs" / CONFIGS[gpu]).read_text())
    lanes = int(config["Core_Per_SM"])
    return Designs.of(
        num_tc=int(config["Num_Sm"]),
        tc_width=lanes,
        tc_depth=1,
        num_vc=int(config["Num_Sm"]),
        vc_width=lanes,
        glb_bytes=int(config["L2Cache"]) * 2**20,
        clock_hz=float(config["Freq"]) * 1e6,
        hbm_bytes_per_s=float(config["Mem_Bw"]) * 1e9,
        sram_interpolation=True,
    )


def _gemm_row(op: str, b: int, m: int, n: int, k: int) -> OpWork:
    """A `linear` (B x M rows of K inputs to N outputs) or a `bmm` (B products of M x K by K x N)."""
    batch, rows = (b, m) if op == "bmm" else (1, b * m)
    weights = batch * k * n
    return OpWork(
        OpKind.GEMM,
        batch=batch,
        m=rows,
        k=k,
        n=n,
        bytes_read=FP32_BYTES * (batch * rows * k + weights),
        bytes_written=FP32_BYTES * batch * rows * n,
    )


def load_kernels(gpu: str) -> Kernels:
    """The GPU's linear and bmm rows; even positions (per file) calibrate."""
    names, rows, measured, calibration = [], [], [], []
    for op in ("linear", "bmm"):
        with (NEUSIGHT / f"{op}.csv").open() as f:
            picked = [r for r in csv.DictReader(f) if r["Device"] == GPUS[gpu]]
        for i, r in enumerate(picked):
            b, m, n, k = (int(r[key]) for key in ("B", "M", "N", "K"))
            names.append(f"{op} B={b} M={m} N={n} K={k}")
            rows.append(_gemm_row(op, b, m, n, k))
            measured.append(float(r["Latency"]) * 1e-3)
            calibration.append(i % 2 == 0)
    return Kernels(names, OpTable.from_rows(rows), np.array(measured), np.array(calibration))


def predict_s(kernels: Kernels, design: Designs, device: DeviceModel) -> NDArray[np.float64]:
    """phazec's latency of every kernel on all cores of the design under `device`."""
    latency_s: NDArray[np.float64] = gemm_latency_s(kernels.ops, replace(design, device=device), True)[:, 0]
    return latency_s


def abs_errors(predicted_s: NDArray[np.float64], measured_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """|predicted - measured| / measured."""
    errors: NDArray[np.float64] = np.abs(predicted_s - measured_s) / measured_s
    return errors


def fit_gemm(kernels: Kernels, design: Designs) -> DeviceModel:
    """The tile, tile overhead, kernel latency and utilisation with the least mean absolute error on the
    calibration rows (ties: the first in grid order)."""
    cal = kernels.calibration
    best: tuple[float, DeviceModel] | None = None
    for tiles in TILE_SETS:
        for overhead in OVERHEAD_CYCLES:
            for kernel_s in KERNEL_LATENCIES_S:
                base = DeviceModel(True, tiles, 1.0, overhead, 1.0, kernel_s)
                for u in UTILISATIONS:
                    device = replace(base, gemm_utilisation=float(u))
                    error = float(
                        abs_errors(predict_s(kernels, design, device)[cal], kernels.measured_s[cal]).mean()
                    )
                    if best is None or error < best[0]:
                        best = (error, device)
    assert best is not None
    return best[1]


def memory_utilisation(gpu: str, design: Designs) -> float | None:
    """Median share of the HBM bandwidth reached by FP32 `add` kernels moving >= 64 MiB (None: the GPU
    has no such rows, as NeuSight's H100)."""
    with (NEUSIGHT / "elem.csv").open() as f:
        adds = [r for r in csv.DictReader(f) if r["Device"] == GPUS[gpu] and r["OPName"] == "add"]
    shares = []
    for r in adds:
        moved = 3 * FP32_BYTES * int(r["B"]) * int(r["H"])
        if moved >= 64 * 2**20:
            shares.append(moved / (float(r["Latency"]) * 1e-3) / float(design.hbm_bytes_per_s[0]))
    return float(np.median(shares)) if shares else None


def report(gpu: str) -> dict[str, object]:
    """Fit one GPU and print its calibration and held-out errors and its worst held-out kernels."""
    kernels = load_kernels(gpu)
    design = fp32_design(gpu)
    device = fit_gemm(kernels, design)
    predicted = predict_s(kernels, design, device)
    errors = abs_errors(predicted, kernels.measured_s)
    mu = memory_utilisation(gpu, design)
    print(f"\n{gpu} (NeuSight {GPUS[gpu]}, FP32): fitted tiles {device.gemm_tiles}, tile overhead "
          f"{device.gemm_tile_overhead_cycles:g} cycles, kernel latency {device.kernel_latency_s * 1e6:g} us,"
          f" utilisation {device.gemm_utilisation:.2f}; memory utilisation "
          f"{'(no elementwise rows)' if mu is None else f'{mu:.3f}'}")  # fmt: skip
    for split, mask in (("calibration", kernels.calibration), ("held-out", ~kernels.calibration)):
        print(f"  {split:11s} {mask.sum():5d} kernels: mean abs error {errors[mask].mean():6.1%}, "
              f"median {np.median(errors[mask]):6.1%}, max {errors[mask].max():7.1%}")  # fmt: skip
    held = np.flatnonzero(~kernels.calibration)
    worst = held[np.argsort(-errors[held])[:5]]
    print("  worst held-out kernels:")
    for i in worst:
        error = predicted[i] / kernels.measured_s[i] - 1
        print(f"    {kernels.names[i]:42s} measured {kernels.measured_s[i] * 1e3:9.4f} ms, predicted "
              f"{predicted[i] * 1e3:9.4f} ms, error {error:+.0%}")  # fmt: skip
    return {"device": device, "memory_utilisation": mu, "held_out_mean": float(errors[held].mean())}


def main() -> None:
    """Fit and report every GPU."""
    for gpu in GPUS:
        report(gpu)


if __name__ == "__main__":
    main()
