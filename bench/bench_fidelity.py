"""Fidelity on real chips: phazec's iteration time against published training runs, and its per-kernel
latency against NeuSight's measured A100 and H100 kernels (issue 15).

    .venv/bin/python bench/bench_fidelity.py            # kernels, then every expressible run
    .venv/bin/python bench/bench_fidelity.py --fit      # also refit each chip's utilisation
    .venv/bin/python bench/bench_fidelity.py --fit hw.device.fuse_elementwise=true   # what if: any
                                                        # hw.device override, on every row

Runs: `../shared/validation/public-runs.csv` (62 published runs; see its README). A row is predicted
with phazec's one model of time as `phazec-plan` times a plan (`predict`; the model lowered at its depth
in seconds, `phazec.frontend.depth` exporting two blocks and repeating them): Megatron's stages, 1F1B
with the row's interleave, recompute (full in every stage, the last too; selective for the Megatron-Core
rows, whose flash attention keeps no s x s scores and recomputes them in the backward pass), the
attention kernel the run used (`Run.attention`), sequence parallelism, `tp`, `pp`, `dp`, mixed-precision
Adam and its optimizer step, on the chip's hw preset (`a100`, `h100`, `v100`) and system (`dgx_a100`,
`dgx_h100`, `dgx2_v100`; `jean_zay_a100` for BLOOM's Omni-Path cluster, `CLUSTERS`) with the row's GPU
count and global batch, its blocks split over the stages evenly or as Megatron-DeepSpeed's partition
(`stage_blocks`). The measured seconds per iteration are the row's own, or FLOPs / (GPUs * TFLOP/s per
GPU) with the FLOP count its source used (see `measured_s`). Rows phazec cannot express are listed with
the reason.

Split, written down before fitting: CALIBRATION below; every other expressible row is held out.
Fit (`fit_chips`): `hw.device.gemm_utilisation` per chip and one `hw.device.kernel_latency_s`, on a
grid (`UTILISATIONS`, `KERNEL_LATENCIES_S`), with the least mean absolute error on the calibration
rows: the A100's pair together on its four rows, the H100's utilisation on its two at the A100's
kernel latency (`fit_device`). Every other device constant comes from NeuSight's kernels
(`fidelity_kernels.py`) or a datasheet; network tiers from the system presets. The fitted values are
written into conf/hw/<chip>.yaml by hand.
"""

import argparse
import csv
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from numpy.typing import NDArray
from omegaconf import DictConfig, open_dict

from phazec.cli import conf_dir
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config
from phazec.hw.designs import Designs
from phazec.predict.evaluator import Evaluator
from phazec.predict.plan_report import Plan, PlanReport, time_plan
from phazec.predict.training import Knobs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fidelity_kernels

RUNS = fidelity_kernels.shared_dir() / "validation" / "public-runs.csv"

CALIBRATION = {
    "a100": ("NAR21-T1-7.5B", "MEG20-MP-A100-1B", "MEG20-DP-A100-4B", "NAR21-T2-PTD-175B-768"),
    "h100": ("MEG24-H100-7.1B", "MEG24-H100-70B"),
    "v100": (),
}
"""Calibration rows per chip, chosen before any fit: one of each family and size range. V100 is not
fitted (it takes the A100's utilisation)."""

CHIPS = {"A100": ("a100", "dgx_a100"), "H100": ("h100", "dgx_h100"), "V100": ("v100", "dgx2_v100")}
"""GPU name in the row -> (hw preset, system preset)."""

CLUSTERS = {"Omni-Path": "jean_zay_a100"}
"""Inter-node link named in the row -> the system preset of the cluster it names (BLOOM's Jean Zay);
other rows take their chip's DGX."""


@dataclass(frozen=True)
class Run:
    """One expressible row: what phazec is asked to predict."""

    row_id: str
    chip: str
    system: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    vocab: int
    seq_len: int
    global_batch: int
    microbatch: int
    interleave: int
    sequence_parallel: bool
    layers_per_stage: tuple[int, ...] | None
    """Blocks per pipeline stage (`plan.layers`) when they do not split evenly; None: an even split."""
    zero_stage: int
    """1: the optimizer state is sharded over the data-parallel replicas (Megatron-Core's distributed
    optimizer; BLOOM's bf16 optimizer, "its own zero stage 1 equivalent"); 0: not."""
    megatron_core: bool
    """A Megatron-Core (2024) run: distributed optimizer, overlapped gradient reduction and parameter
    gather, TP communication overlapped with the GEMMs beside compute (Transformer Engine's; the
    overlaps its README names), sequence parallelism when tensor parallel (the Megatron-Core defaults
    of its weak-scaling scripts), and attention through Transformer Engine's fused (flash) attention,
    which keeps no s x s scores and recomputes them in the backward pass: selective recompute's memory
    and work. Otherwise a Megatron-LM run: collectives called synchronously, holding the SMs."""
    pipeline_sends_masks: bool
    """Megatron-DeepSpeed's pipeline engine (BLOOM's) sends each layer's outputs to the next stage, the
    attention mask among them; Megatron-LM's stages build their own."""
    tp: int
    pp: int
    dp: int
    gpus: int
    recompute: str
    """none, selective or full (`phazec.solvers.placement.RECOMPUTE_MODES`)."""
    attention: str
    """The attention kernel the run used (`hw.device.attention`): `flash` for Megatron-Core (Transformer
    Engine's fused attention), `fused_softmax` for Megatron-LM 2020-2021 (its scale-mask-softmax kernel,
    `--masked-softmax-fusion`, on by default)."""
    measured_s: float


def _int(value: str, default: int) -> int:
    return int(value) if value.strip() else default


def measured_s(row: dict[str, str]) -> float:
    """Measured seconds per iteration: the row's own figure, else its source's FLOP count over the GPUs'
    measured FLOP/s. Megatron-LM 2021 rows (NAR21): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), full
    recompute counted (public-runs README). Megatron-Core 2024 rows (MEG24): Megatron-Core's
    `num_floating_point_operations`, 12 B s l h^2 (6 + s/h + V/(2 l h)) with FFN 4h and no recompute."""
    if row["measured_s_per_iter"]:
        return float(row["measured_s_per_iter"])
    b, s, lay, h, v = (float(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    if row["source_id"].startswith("MEG24"):
        flops = 12 * b * s * lay * h * h * (6 + s / h + v / (2 * lay * h))
    else:
        flops = 96 * b * s * lay * h * h * (1 + s / (6 * h) + v / (16 * lay * h))
    return flops / (float(row["gpus"]) * float(row["measured_tflops_per_gpu"]) * 1e12)


def expressible(row: dict[str, str]) -> Run | str:
    """The run phazec predicts for a row, or why it cannot."""
    chip = next((CHIPS[name] for name in CHIPS if name in row["gpu"]), None)
    if chip is None:
        return f"GPU {row['gpu']!r} has no preset"
    reasons = (
        ("FP8" in row["model"], "FP8 (phazec prices 2-byte elements)"),
        ("ZeRO" in row["model"], "ZeRO-3 sharding is not modelled"),
        (
            row["source_id"].startswith(("LLAMA3", "OPT", "MTNLG", "BLOOM176B-GBS16")),
            "microbatch or the source's FLOP convention not stated",
        ),
        (not row["vocab"], "vocabulary not stated"),
        (
            bool(row["pp"]) and not splittable(int(row["layers"]), int(row["pp"])),
            "layers split over pp neither evenly nor as Megatron-DeepSpeed's transformer|embedding partition",
        ),
    )
    for hit, reason in reasons:
        if hit:
            return reason
    hidden = int(row["hidden"])
    h100_default = row["source_id"].startswith("MEG24")
    system = next((CLUSTERS[link] for link in CLUSTERS if link in row["inter_node_link"]), chip[1])
    return Run(
        row_id=row["source_id"],
        chip=chip[0],
        system=system,
        layers=int(row["layers"]),
        hidden=hidden,
        ffn=_int(row["ffn"], 4 * hidden),
        heads=int(row["heads"]),
        vocab=int(row["vocab"]),
        seq_len=int(row["seq_len"]),
        global_batch=int(row["global_batch"]),
        microbatch=_int(row["microbatch"], 1),
        interleave=_int(row["interleave"], 1),
        sequence_parallel=row["seq_parallel"] == "yes" or (h100_default and int(row["tp"]) > 1),
        layers_per_stage=stage_blocks(int(row["layers"]), int(row["pp"])),
        zero_stage=int(h100_default or row["source_id"].startswith("BLOOM")),
        megatron_core=h100_default,
        pipeline_sends_masks=row["source_id"].startswith("BLOOM"),
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        dp=int(row["dp"]),
        gpus=int(row["gpus"]),
        recompute="selective" if h100_default else "none" if row["recompute"] in ("none", "no") else "full",
        attention="flash" if h100_default else "fused_softmax",
        measured_s=measured_s(row),
    )


def splittable(layers: int, pp: int) -> bool:
    """Whether `stage_blocks` can split the blocks over pp stages."""
    return layers % pp == 0 or (layers + 2) % pp == 0


def stage_blocks(layers: int, pp: int) -> tuple[int, ...] | None:
    """Blocks per stage: None when `layers` split evenly; otherwise Megatron-DeepSpeed's
    `type:transformer|embedding` partition (BLOOM's), which counts the embedding and the head as one
    layer each of the first and the last stage and gives every stage (layers + 2) / pp."""
    if layers % pp == 0:
        return None
    per_stage = (layers + 2) // pp
    return (per_stage - 1, *[per_stage] * (pp - 2), per_stage - 1)


def gpt_dims(run: Run) -> dict[str, int]:
    """The Hugging Face GPT-2 config keys of a run's dimensions."""
    return {"n_embd": run.hidden, "n_layer": run.layers, "n_head": run.heads, "n_inner": run.ffn,
            "vocab_size": run.vocab, "n_positions": run.seq_len}  # fmt: skip


def run_config(
    run: Run, overrides: tuple[str, ...] = (), model: str = "gpt3_175b", dims: dict[str, int] | None = None
) -> DictConfig:
    """The phazec config of a run: the architecture of the `model` preset (GPT-2's by default) at the
    row's dimensions (`dims`, Hugging Face config keys; `gpt_dims` by default) on its chip;
    `overrides` (Hydra's `key=value`) last."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                f"model={model}",
                f"hw={run.chip}",
                f"system={run.system}",
                "tracking=none",
                "train.optimizer=adam",
                f"plan.tp={run.tp}",
                f"plan.pp={run.pp}",
                f"plan.dp={run.dp}",
                f"plan.microbatch={run.microbatch}",
                f"plan.recompute={run.recompute}",
                f"plan.interleave={run.interleave}",
                f"plan.sequence_parallel={str(run.sequence_parallel).lower()}",
                f"plan.zero_stage={run.zero_stage}",
                f"plan.overlap_grad_reduce={str(run.megatron_core).lower()}",
                f"plan.overlap_param_gather={str(run.megatron_core).lower()}",
                f"plan.overlap_p2p_comm={str(run.megatron_core).lower()}",
                f"plan.pipeline_sends_masks={str(run.pipeline_sends_masks).lower()}",
                f"hw.device.attention={run.attention}",
                f"hw.device.tp_comm_overlap={str(run.megatron_core).lower()}",
                f"hw.device.collectives_hold_cores={str(not run.megatron_core).lower()}",
                "solver.node_limit=200",
                "solver.search_node_limit=100000",
                *overrides,
            ],
        )
    if run.layers_per_stage is not None:
        cfg.plan.layers = list(run.layers_per_stage)
    cfg.model.name = run.row_id
    cfg.model.seq_len = run.seq_len
    cfg.model.tp_widths = [run.tp]
    cfg.model.baseline.pp, cfg.model.baseline.dp, cfg.model.baseline.tp = run.pp, run.dp, run.tp
    with open_dict(cfg.model.hf_config):
        cfg.model.hf_config.update(gpt_dims(run) if dims is None else dims)
    cfg.system.devices = run.gpus
    cfg.system.global_batch = run.global_batch
    cfg.system.tiers[-1].group_size = max(run.gpus, cfg.system.tiers[0].group_size + 1)
    return cfg


@dataclass
class Prepared:
    """A run lowered once: its config, evaluator and chip, re-priced for any utilisation."""

    run: Run
    plan: Plan
    evaluator: Evaluator
    designs: Designs


def prepare(
    run: Run, overrides: tuple[str, ...] = (), model: str = "gpt3_175b", dims: dict[str, int] | None = None
) -> Prepared:
    """Set a run up as `phazec-plan` does (`phazec.commands.setup.setup` with the plan's knobs);
    `overrides`, `model` and `dims` as in `run_config`."""
    settings = settings_from_config(run_config(run, overrides, model, dims))
    plan = settings.plan
    job = setup(settings, Knobs.single(plan.training, round(max(settings.system.hbm_bytes))), widths=[run.tp])
    return Prepared(run, plan, job.evaluator, job.designs)


@dataclass(frozen=True)
class Fit:
    """The two device constants fitted per chip."""

    utilisation: float
    """`hw.device.gemm_utilisation`."""
    kernel_s: float
    """`hw.device.kernel_latency_s`."""
    attention_per_gemm: float | None = None
    """Where set, `hw.device.attention_utilisation` is this times the GEMMs' utilisation (a chip whose
    tensor cores a power limit slows, GEMMs and attention kernels alike); None keeps the preset's."""


def predict(prepared: Prepared, device: Fit | None = None) -> PlanReport:
    """The row's plan timed by `phazec.predict.plan_report.time_plan`, as `phazec-plan` times it, with
    the preset's device model or a fitted utilisation and kernel latency."""
    designs = prepared.designs
    if device is not None:
        fitted = replace(
            designs.device, gemm_utilisation=device.utilisation, kernel_latency_s=device.kernel_s
        )
        if device.attention_per_gemm is not None:
            fitted = replace(fitted, attention_utilisation=device.attention_per_gemm * device.utilisation)
        designs = replace(designs, device=fitted)
    return time_plan(prepared.plan, prepared.evaluator, designs)


UTILISATIONS = np.round(np.arange(0.30, 1.001, 0.01), 2)
KERNEL_LATENCIES_S: NDArray[np.float64] = np.arange(0.0, 21.0) / 1e6
"""The grid searched: utilisation 0.30 .. 1.00 in steps of 0.01, kernel latency 0 .. 20 us in steps
of 1 us (a GPU kernel's launch-to-launch gap is a few microseconds when the host keeps ahead), each
divided by 1e6 so that it is the very float a preset's `20.0e-6` parses to."""


def fit_device(
    prepared: list[Prepared], kernel_latencies_s: NDArray[np.float64], attention_per_gemm: float | None = None
) -> Fit:
    """The utilisation (on `UTILISATIONS`) and kernel latency (on `kernel_latencies_s`) with the least
    mean absolute error on `prepared`; with `attention_per_gemm`, the attention kernels' utilisation
    moves with the GEMMs' (`Fit.attention_per_gemm`).

    GEMM compute time scales about with 1 / utilisation and every operator carries the kernel latency
    once, so each row's time is first taken as a / u + b + c k through its predictions at
    (u, k) = (0.9, 0), (0.6, 0) and (0.75, 10 us), three evaluations per row instead of one per grid
    point; the grid points within 3 utilisation steps and 2 latency steps of that model's best are
    then evaluated exactly, and the best of those is the fit.
    """
    measured = np.array([p.run.measured_s for p in prepared])

    def times(fit: Fit) -> NDArray[np.float64]:
        return np.array([predict(p, fit).time_per_batch_s for p in prepared])

    def error(predicted: NDArray[np.float64]) -> float:
        return float(np.mean(np.abs(predicted / measured - 1.0)))

    def at(utilisation: float, kernel_s: float) -> Fit:
        return Fit(utilisation, kernel_s, attention_per_gemm)

    high, low = times(at(0.9, 0.0)), times(at(0.6, 0.0))
    a = (low - high) / (1 / 0.6 - 1 / 0.9)
    b = high - a / 0.9
    c = (times(at(0.75, 10e-6)) - (a / 0.75 + b)) / 10e-6
    model = {
        (i, j): error(a / u + b + c * k)
        for i, u in enumerate(UTILISATIONS)
        for j, k in enumerate(kernel_latencies_s)
    }
    i0, j0 = min(model, key=lambda ij: (model[ij], ij))
    near = [
        (i, j)
        for i in range(max(0, i0 - 3), min(len(UTILISATIONS), i0 + 4))
        for j in range(max(0, j0 - 2), min(len(kernel_latencies_s), j0 + 3))
    ]
    exact = {(i, j): error(times(at(float(UTILISATIONS[i]), float(kernel_latencies_s[j])))) for i, j in near}
    i, j = min(exact, key=lambda ij: (exact[ij], ij))
    return at(float(UTILISATIONS[i]), float(kernel_latencies_s[j]))


def fit_chips(prepared: list[Prepared]) -> dict[str, Fit]:
    """Each calibrated chip's fit: the A100's utilisation and kernel latency together on its
    calibration rows; the others' utilisation on theirs, at the A100's kernel latency (a property of
    the host and driver's launch path more than of the chip, and the H100 has only two rows)."""
    fits: dict[str, Fit] = {}
    for chip, names in CALIBRATION.items():
        calibration = [p for p in prepared if p.run.row_id in names]
        if not calibration:
            continue
        grid = KERNEL_LATENCIES_S if chip == "a100" else np.array([fits["a100"].kernel_s])
        fits[chip] = fit_device(calibration, grid)
        print(f"{chip}: fitted gemm_utilisation {fits[chip].utilisation:.2f}, kernel_latency_s "
              f"{fits[chip].kernel_s * 1e6:.0f}e-6 on {', '.join(names)}")  # fmt: skip
    return fits


def command_line(prog: str, doc: str | None, fit_help: str) -> argparse.ArgumentParser:
    """A fidelity bench's command line: `--fit` (`fit_help` says what it fits) and device-model overrides
    (`device_overrides` checks them)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=(doc or "").split("\n\n")[0],
        epilog="The module docstring says how rows are predicted, split and fitted.",
    )  # fmt: skip
    parser.add_argument("--fit", action="store_true", help=fit_help)
    parser.add_argument(
        "overrides", nargs="*", metavar="hw.device.KEY=VALUE", help="a device-model override for every row"
    )
    return parser


def device_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    """The parsed `hw.device.<key>=<value>` overrides; anything else ends the bench with a usage error."""
    overrides = tuple(args.overrides)
    bad = [arg for arg in overrides if not arg.startswith("hw.device.") or "=" not in arg]
    if bad:
        parser.error(f"{bad[0]!r} is not a device-model override: give hw.device.<key>=<value>")
    return overrides


def main() -> None:
    """Per-kernel report, then every expressible run: row, measured, predicted, error and the exposed DP
    sync; then the summary."""
    parser = command_line(
        "bench_fidelity.py", __doc__,
        "refit each chip's hw.device.gemm_utilisation (and one kernel_latency_s) on its calibration rows "
        "before predicting; without it, the hw presets' values",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write each row's whole plan report to this file")
    args = parser.parse_args()
    overrides = device_overrides(parser, args)
    start = time.perf_counter()
    for gpu in fidelity_kernels.GPUS:
        fidelity_kernels.report(gpu)
    print(f"\nkernels: {time.perf_counter() - start:.0f} s")
    with RUNS.open() as f:
        rows = list(csv.DictReader(f))
    prepared: list[Prepared] = []
    for row in rows:
        run = expressible(row)
        if isinstance(run, str):
            print(f"skip {row['source_id']:30s} {run}")
            continue
        prepared.append(prepare(run, overrides))
        print(f"lowered {run.row_id}: {time.perf_counter() - start:.0f} s", flush=True)
    print(f"lowered {len(prepared)} runs: {time.perf_counter() - start:.0f} s")
    fitted = fit_chips(prepared) if args.fit else {}
    errors: dict[tuple[str, str], list[float]] = {}
    reports: dict[str, object] = {}
    print(f"\n{'row':30s} {'chip':5s} {'split':12s} {'measured s':>11s} {'predicted s':>12s} {'error':>8s}"
          f" {'compute s':>10s} {'TP s':>7s} {'bubble s':>9s} {'DP sync s':>10s}")  # fmt: skip
    for p in prepared:
        report = predict(p, fitted.get(p.run.chip))
        reports[p.run.row_id] = report.plain()
        split = "calibration" if p.run.row_id in CALIBRATION[p.run.chip] else "held-out"
        error = report.time_per_batch_s / p.run.measured_s - 1
        errors.setdefault((p.run.chip, split), []).append(abs(error))
        note = "" if report.fits else "  (over HBM in phazec's memory model)"
        b = report.breakdown
        compute_s = b.forward_s + b.backward_s + b.recompute_s
        print(f"{p.run.row_id:30s} {p.run.chip:5s} {split:12s} {p.run.measured_s:11.3f} "
              f"{report.time_per_batch_s:12.3f} {error:+8.1%} {compute_s:10.3f} {b.tp_communication_s:7.3f} "
              f"{b.bubble_s:9.3f} {b.dp_sync_s:10.3f}{note}")  # fmt: skip
    print("\nmean and max absolute error per chip and split:")
    for (chip, split), values in sorted(errors.items()):
        mean, worst = np.mean(values), np.max(values)
        print(f"  {chip:5s} {split:12s} {len(values):3d} rows: mean {mean:6.1%}, max {worst:6.1%}")
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
