"""Fidelity on 2024-26 training runs: phazec's iteration time against the published Llama runs of
`../shared/validation/modern-runs.csv` (FP8 and MXFP8, FSDP, context parallelism; H100, H200, B200,
GB200, GB300), per chip and per feature (issue 40).

    .venv/bin/python bench/bench_fidelity_modern.py          # every expressible row, the presets' values
    .venv/bin/python bench/bench_fidelity_modern.py --fit    # refit each chip's utilisation first
    .venv/bin/python bench/bench_fidelity_modern.py hw.device.attention_utilisation=0.6   # a what-if

Each row is predicted with `bench_fidelity.py`'s machinery (`bench_fidelity.prepare` and `predict`: its
plan timed as `phazec-plan` times it), as
a Llama block (`model=llama3_8b`'s architecture at the row's hidden size, FFN, heads, key-value heads and
vocabulary) on its chip's hw and system presets (`CHIPS`) with the row's GPU count, global batch,
microbatch, tp, pp, dp, interleave, recompute, sequence parallelism, and its precision, zero stage and
context parallelism as the plan knobs `precision`, `zero_stage` and `cp`, and the transformer blocks its
recipe offloads to the host as `offload_layers` (`OFFLOAD_LAYERS`). Measured seconds per iteration:
the row's own, else global batch x sequence / (tokens/s per GPU x GPUs) (the csv's README).

Expressible is decided at run time by what phazec can plan (`expressible`): a row needing FP8, zero
stage 2-3 or cp > 1 waits for that knob to be a field of `phazec.predict.training.Training`, so the rows
become expressible as the knobs land, with no change here; a row whose plan phazec then refuses (e.g. FP8
on a chip without an FP8 rate) is listed with phazec's own message. MoE rows are listed as not
expressible (issue 39), as are rows whose source leaves the microbatch, the interleave or the zero stage
unstated, or recomputes some layers without saying how many. A row that recomputes "full, block, N
layers" runs Megatron-Core's block method (`plan.recompute=block plan.recompute_layers=N`). A torchtitan
row with a pipeline and no microbatch runs torchtitan's default, as many microbatches as stages
(`torchtitan_microbatch`), and its FSDP2 in a pipeline gathers and reduce-scatters once a step, phazec's
zero stage 1 (`plan_zero_stage`).

How each framework runs (`Run.megatron_core`, `Run.attention`): every row runs flash attention
(Transformer Engine's, cuDNN's or FlashAttention's; torchtitan's and NeMo Automodel's FlashAttention-2 on
Hopper at its own share of the peak, `FLASH_ATTENTION_2_HOPPER`); the Megatron-Bridge, torchtitan and NeMo
Automodel rows overlap the gradient reduction and the parameter gather with compute (Megatron-Core's
distributed optimizer overlaps, FSDP2's prefetch) and their TP communication with the GEMMs (Transformer
Engine's overlap, torchtitan's AsyncTP); SimuMax's Megatron-LM runs disable every overlap and exchange
their context-parallel tokens by all-to-all (`ALL_TO_ALL_CP`; the others run the ring). A torchtitan
row's "selective" recompute is its llama3 configs' op-level selective activation checkpointing
(`selective_ac_option = "op"`): `plan.recompute=op` (`recompute_mode`). A row whose recompute is its
recipe's default ("not stated (recipe default)": Megatron-Bridge's perf recipes set none) recomputes
nothing; a row that says nothing of it (unless its config is read, `RECOMPUTE_READ`) runs the least
recompute that fits its HBM, none, selective, then full (`least_recompute_that_fits`: the run fit, so it
recomputed at least that much; with flash attention phazec's selective recompute is the same as none). The
2024 torchtitan rows' TP runs vanilla (their source gives AsyncTP's figure beside it); they are timed
overlapped like the rest (docs/devices.md says what changes). GB200 and GB300 rows of more than one rack
run in 64-GPU NVLink domains (Slurm segments of 16 trays, NVIDIA's advice for jobs of 128 GPUs and more;
conf/system/gb200_nvl72.yaml).

Split, written down before any fit (`CALIBRATION`): per chip family one or two rows, chosen by family and
model size, not by error; every other expressible row is held out. `--fit` fits each calibrated chip's
`hw.device.gemm_utilisation` on its calibration rows at its preset's kernel latency
(`bench_fidelity.fit_device`; a power-limited family's attention utilisation moves with it,
`POWER_LIMITED`); H100 and H200 rows take the h100 preset's fit on `public-runs.csv` (the H200 is the
H100's silicon), GB300 has no dense row to fit on.
"""

import csv
import dataclasses
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phazec.errors import PhazecError
from phazec.predict.plan_report import PlanReport, plan_stages
from phazec.predict.training import Training

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity
import fidelity_kernels

RUNS = fidelity_kernels.shared_dir() / "validation" / "modern-runs.csv"

CHIPS = {
    "GB300": ("gb300", "gb300_nvl72", "gb300"),
    "GB200": ("gb200", "gb200_nvl72", "gb200"),
    "B200": ("b200", "dgx_b200", "b200"),
    "H200": ("h200", "dgx_h200", "h200"),
    "H100 SXM 96GB HBM2e, 500 W": ("h100_500w", "dgx_h100", "h100_500w"),
    "H100": ("h100", "dgx_h100", "h100"),
    "H800": ("h100", "dgx_h800", "h800"),
}
"""GPU named in the row (the first match, in this order) -> (hw preset, system preset, chip family).
Meta's Grand Teton H100s (torchtitan's 2024 rows: 96 GB HBM2e at 2.4 TB/s, power-limited to 500 W)
run their own preset, `h100_500w`, with 96 GB, as their own family: their power-limited clock is not
published, so their utilisation is fitted apart from the 700 W DGX H100's (`POWER_LIMITED`). The H800
is the H100's chip on `dgx_h800` (its NVLink cut to 400 GB/s), reported as its own family."""

HBM_GB = {"h100_500w": 96}
"""A family's HBM capacity where it is not its system preset's."""

CALIBRATION = {
    "h100_500w": ("TT24-L8B-H100-128-BF16", "TT24-L70B-H100-256-FP8-2D"),
    "b200": ("SIMUMAX-B200-L70L12-TP1CP8-32K", "SIMUMAX-B200-L405L4-TP2CP4-32K"),
    "gb200": ("MB2511-L8B-GB200-8-FP8", "MB2604-L70B-GB200-64-MXFP8"),
}
"""Calibration rows per chip family, chosen before any fit: an 8B and a 70B torchtitan row on the Grand
Teton H100s (a BF16 one to pin the power-limited rate); a 70B-shaped and a 405B-shaped SimuMax row on
B200 (its Megatron-Bridge 405B row stays held out); an 8B and a 70B Megatron-Bridge row on GB200. Not
fitted: h100 (its one dense row is held out; the h100 preset's fit on public-runs.csv), h200 (the H100's
silicon: the same fit), gb300 (no dense row)."""

OFFLOAD_LAYERS = {"MB2604-L70B-GB200-64-FP8-FSDP": 40}
"""Transformer blocks whose activations a row's recipe offloads to the host (`plan.offload_layers`),
where modern-runs.csv has no column for it: Megatron-Bridge's llama3_70b_pretrain_64gpu_gb200_fp8cs_config
sets `cpu_offloading=True`, `cpu_offloading_weights=False`, `cpu_offloading_num_layers=40`
(NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a,
src/megatron/bridge/perf_recipes/llama/gb200/llama3.py, the commit the row cites). Every other row's
recipe offloads nothing (0); the B200 and B300 70B FSDP recipes that do have no row."""

FUSED_CROSS_ENTROPY_SOURCE = "Megatron-Bridge"
"""Rows whose source names it run Transformer Engine's fused cross entropy (`plan.fused_cross_entropy`):
Megatron-Bridge's performance recipes call `_benchmark_common(cfg, cross_entropy_impl="te")`, which sets
`cross_entropy_fusion_impl`, with `cross_entropy_loss_fusion` on by the GPT provider's default
(NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a, src/megatron/bridge/perf_recipes/
_common.py and models/gpt_provider.py). The other frameworks' rows cast the logits to fp32."""

RECOMPUTE_READ = {"AM-L70B-H100-64-BF16-CP2": "full"}
"""Recompute a row's csv leaves unstated, read in the config that produced its number: NeMo Automodel's
70B benchmark config at the commit that published the figure (NVIDIA-NeMo/Automodel@2013a4dd6,
`custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml`, line 88: `activation_checkpointing: True`, which
with torch.compile on checkpoints each block's attention and MLP apart, `parallelizer.py`, lines
229-239: all of a block's work runs again, phazec's `full`)."""

FLASH_ATTENTION_2_SOURCES = ("pytorch/torchtitan", "NVIDIA-NeMo/Automodel")
"""Frameworks whose dense rows run PyTorch SDPA's FlashAttention-2 kernels on Hopper, not Transformer
Engine's cuDNN (FlashAttention-3-class) ones the hw presets' `attention_utilisation` stands for:
torchtitan puts SDPA's flash backend first and adds cuDNN's on B200 only
(pytorch/torchtitan@e7c0cae, `torchtitan/models/attention.py`, lines 200-214); NeMo Automodel's Llama
runs `attn_implementation: sdpa`, and context parallelism restricts SDPA to its flash and
memory-efficient backends (NVIDIA-NeMo/Automodel@2013a4dd6, `cp_utils.py`, line 59)."""

FLASH_ATTENTION_2_HOPPER = 0.35
"""FlashAttention-2's share of an H100's BF16 peak (Shah et al. 2024, "FlashAttention-3", abstract:
"FlashAttention-2 achieving only 35% utilization on H100"): the `attention_utilisation` of a
`FLASH_ATTENTION_2_SOURCES` row on a 700 W Hopper (H100, H200); the 500 W H100s' preset carries it
tied to their fitted GEMM utilisation (`POWER_LIMITED`)."""

HOPPER_AT_FULL_POWER = frozenset({"h100", "h200"})
"""Families of Hopper chips run at their rated power (`FLASH_ATTENTION_2_HOPPER`)."""

POWER_LIMITED = frozenset({"h100_500w"})
"""Families whose power limit slows their tensor cores, GEMMs and attention kernels alike: their fit
moves `hw.device.attention_utilisation` with the GEMMs' utilisation, at the ratio of their preset's
two values (`bench_fidelity.Fit.attention_per_gemm`), one fitted parameter for both."""

LLAMA_PRESET = "llama3_8b"
"""The model preset whose architecture (LlamaForCausalLM, untied, RoPE) every dense row takes."""


@dataclass(frozen=True)
class ModernRun:
    """One expressible row: `bench_fidelity.Run`'s plan plus the knobs of 2024-26 training."""

    run: bench_fidelity.Run
    family: str
    """The chip family the row is fitted and reported under (`CHIPS`)."""
    kv_heads: int
    precision: str
    """bf16, fp8 or mxfp8."""
    zero_stage: int
    cp: int
    gpus_per_domain: int | None
    """The NVLink domain's size where it is not the system preset's (`system.tiers.0.group_size`)."""
    offload_layers: int
    """Transformer blocks whose activations go to the host (`OFFLOAD_LAYERS`)."""
    fused_cross_entropy: bool
    """The loss reads the bf16 logits (`FUSED_CROSS_ENTROPY_SOURCE`)."""
    recompute_stated: bool = True
    """False where the row says nothing of recompute (not even its recipe's default): it runs the least
    recompute that fits (`least_recompute_that_fits`)."""
    attention_utilisation: float | None = None
    """The attention kernels' share of the peak where the row's framework calls other kernels than the
    preset's (`FLASH_ATTENTION_2_HOPPER`); None keeps the preset's."""
    fp8_param_gather: bool = False
    """FSDP gathers the FP8 weight copies (`FP8_WEIGHT_GATHER`)."""
    recompute_layers: int = 1
    """Under block recompute, the blocks of each model chunk recomputed (`recompute_mode`)."""
    cp_comm_type: str = "p2p"
    """Context parallelism's exchange: the ring (p2p), or all-to-all (a2a) where the row says so
    (`ALL_TO_ALL_CP`)."""
    grad_reduce_in_fp32: bool = False
    """The run keeps and reduces its gradients in fp32 (`FP32_GRADIENT_ROWS`)."""
    gradient_accumulation_fusion: bool = False
    """The run fuses its weight-gradient accumulation, keeping Transformer Engine's dummy weight
    gradients (`FUSED_ACCUMULATION_ROWS`)."""

    @property
    def features(self) -> tuple[str, ...]:
        """The issue-40 features the row uses: FP8 (fp8 or mxfp8), FSDP (zero stage 3), CP (cp > 1)."""
        return tuple(
            name
            for name, used in (
                ("FP8", self.precision != "bf16"),
                ("FSDP", self.zero_stage == 3),
                ("CP", self.cp > 1),
            )
            if used
        )

    def dims(self) -> dict[str, int]:
        """The Llama config keys of the row's dimensions."""
        r = self.run
        return {"hidden_size": r.hidden, "intermediate_size": r.ffn, "num_hidden_layers": r.layers,
                "num_attention_heads": r.heads, "num_key_value_heads": self.kv_heads, "vocab_size": r.vocab,
                "max_position_embeddings": r.seq_len}  # fmt: skip

    def overrides(self, knobs: frozenset[str]) -> tuple[str, ...]:
        """The plan knobs and system changes `bench_fidelity.run_config` does not set: each knob only
        if it is one of `knobs` (`training_knobs()`: `expressible` has refused the rows that need a
        missing one)."""
        values = (
            ("precision", self.precision),
            ("cp", self.cp),
            ("offload_layers", self.offload_layers),
            ("fused_cross_entropy", str(self.fused_cross_entropy).lower()),
            ("fp8_param_gather", str(self.fp8_param_gather).lower()),
            ("recompute_layers", self.recompute_layers),
            ("cp_comm_type", self.cp_comm_type),
            ("grad_reduce_in_fp32", str(self.grad_reduce_in_fp32).lower()),
            ("gradient_accumulation_fusion", str(self.gradient_accumulation_fusion).lower()),
        )
        # the zero stage is the Run's
        extra = [f"plan.{name}={value}" for name, value in values if name in knobs]
        if self.gpus_per_domain is not None:
            extra.append(f"system.tiers.0.group_size={self.gpus_per_domain}")
        if self.family in HBM_GB:
            extra.append(f"system.hbm_gb=[{HBM_GB[self.family]}]")
        if self.attention_utilisation is not None:
            extra.append(f"hw.device.attention_utilisation={self.attention_utilisation}")
        return tuple(extra)


FP8_WEIGHT_GATHER = "FP8 FSDP all-gather"
"""What a row's precision says where its FSDP gathers the FP8 weight copies (`plan.fp8_param_gather`:
torchtitan's `enable_fsdp_float8_all_gather`, read in the launch commands of its 2025 H200 rows); a
row that does not say so gathers bf16."""


ALL_TO_ALL_CP = "CP comm type a2a"
"""What a row's source says where its context parallelism exchanges by all-to-all (Megatron-Core's
`--cp-comm-type a2a`, DeepSpeed-Ulysses: SimuMax's B200 runs); a row that does not say so runs the
ring (p2p), Megatron-Core's and torchtitan's default."""


FP32_GRADIENT_ROWS = "SIMUMAX"
"""The prefix of the rows whose runs keep and reduce their gradients in fp32 (`plan.grad_reduce_in_fp32`):
SimuMax's Megatron-LM scripts pass `--accumulate-allreduce-grads-in-fp32` (MooreThreads/SimuMax@4dcaae5,
simu_tools/megatron_scripts/scripts/run_pretrain_llama3.sh and run_pretrain_deepseekv2.sh). Megatron-Bridge's
performance configs turn it off (`grad_reduce_in_fp32 = False` in every model's
scripts/performance/configs at v0.4.2, and in `_benchmark_common` since), so its rows keep bf16
gradients; torchtitan's FSDP2 reduce-scatters in fp32 into fp32 gradient shards beside its fp32 weight
shards, a layout this knob (Megatron's fp32 buffer beside bf16 weights) does not describe."""


FUSED_ACCUMULATION_ROWS = "SIMUMAX"
"""The prefix of the rows whose runs fuse the weight-gradient accumulation into Transformer Engine's
linear layers (`plan.gradient_accumulation_fusion`, Megatron-LM's default): SimuMax's scripts leave
`--no-gradient-accumulation-fusion` commented out (MooreThreads/SimuMax@4dcaae5, run_pretrain_llama3.sh and
run_pretrain_deepseekv2.sh). Megatron-Bridge's performance configs set it per model and chip (off in
several Llama ones at v0.4.2), which the csv's rows do not say; their rows leave it off."""


def training_knobs() -> frozenset[str]:
    """The training knobs phazec has now: the fields of `Training`."""
    return frozenset(field.name for field in dataclasses.fields(Training))


def _first_word(value: str) -> str:
    return value.strip().split(" ")[0].lower()


def recompute_mode(text: str, torchtitan: bool = False) -> tuple[str, int] | None:
    """phazec's recompute for the row's words and the blocks a model chunk reruns under its block method
    ("full, block, 5 layers": block, 5; 1 in every other mode); None: some blocks, how many unsaid (not
    expressible). A torchtitan row's "selective" is its llama3 configs' op-level selective activation
    checkpointing (`selective_ac_option = "op"`, phazec's `op`); any other framework's is Megatron's."""
    words = text.lower()
    if "block" in words:
        count = re.search(r"(\d+) layers", words)
        return ("block", int(count.group(1))) if count else None
    if words.startswith("full"):
        return "full", 1
    if words.startswith("selective") or "(selective" in words:
        return ("op" if torchtitan else "selective"), 1
    return "none", 1  # "none", or not stated: Megatron-Core's default (see the module docstring)


def measured_s(row: dict[str, str]) -> float:
    """Seconds per iteration: the row's own, else global batch x sequence / (tokens/s per GPU x GPUs)."""
    if row["measured_s_per_iter"]:
        return float(row["measured_s_per_iter"])
    tokens = float(row["global_batch"]) * float(row["seq_len"])
    return tokens / (float(row["measured_tokens_per_s"]) * float(row["gpus"]))


def torchtitan_microbatch(row: dict[str, str]) -> str:
    """A torchtitan pipeline-parallel row's microbatch where it states none: torchtitan splits a rank's
    local batch (global batch / dp) into as many microbatches as there are pipeline stages unless
    `pipeline_parallel_microbatches` is set, which the 2024 table does not (pytorch/torchtitan,
    `build_pipeline_schedule`: `n_microbatches=parallel_dims.pp` in mid-2024's
    `torchtitan/parallelisms/pipelining_utils.py`, `pipeline_parallel_microbatches or
    pipeline_parallel_degree` by the table's commit). '' without a pipeline, or where the local batch
    does not split so."""
    pp, local = int(row["pp"]), int(row["global_batch"]) // int(row["dp"])
    return str(local // pp) if pp > 1 and local >= pp and local % pp == 0 else ""


def plan_zero_stage(row: dict[str, str], zero: int) -> int:
    """The zero stage phazec runs a row at: its own, but 1 for torchtitan's FSDP2 in a pipeline, which
    gathers each layer's weights once a step and reduce-scatters its gradients once, after the last
    microbatch's backward pass (torchtitan's `apply_fsdp`: `reshard_after_forward = not pp_enabled`,
    "to avoid per-microbatch all-gathers"; torch.distributed.pipelining's stage turns the gradient sync
    off but for the last backward pass): the step of Megatron's distributed optimizer, phazec's zero
    stage 1 (full weights and gradients during the step, the optimizer state and fp32 weights sharded),
    not per-microbatch gathers."""
    torchtitan = row["source_id"].startswith("TT")
    return 1 if torchtitan and zero == 3 and int(row["pp"]) > 1 else zero


def expressible(row: dict[str, str], knobs: frozenset[str]) -> ModernRun | str:
    """The run phazec predicts for a row, or why it cannot (with the training knobs `knobs`)."""
    chip = next((CHIPS[name] for name in CHIPS if name in row["gpu"]), None)
    precision = _first_word(row["precision"])
    zero = _first_word(row["zero_stage"])
    torchtitan = row["source_id"].startswith("TT")
    microbatch = row["microbatch"] or (torchtitan_microbatch(row) if torchtitan else "")
    cp = int(row["cp"] or 1)
    recompute_text = RECOMPUTE_READ.get(row["source_id"], row["recompute"])
    read = recompute_mode(recompute_text, torchtitan=torchtitan)
    reasons = (
        (bool(row["experts"]), "MoE (issue 39)"),
        (chip is None, f"GPU {row['gpu']!r} has no preset"),
        (not microbatch, "microbatch not stated"),
        (not row["interleave"].strip().isdigit() and bool(row["interleave"]), "interleave not stated"),
        (not zero.isdigit(), "zero stage not stated"),
        (read is None, f"recompute of some blocks, how many not stated ({row['recompute']})"),
        (
            not bench_fidelity.splittable(int(row["layers"]), int(row["pp"])),
            "layers split over pp neither evenly nor with the embedding and loss as a layer each",
        ),
    )  # fmt: skip
    for hit, reason in reasons:
        if hit:
            return reason
    offload = OFFLOAD_LAYERS.get(row["source_id"], 0)
    needed = {
        "precision": precision != "bf16",
        "zero_stage": int(zero) > 1,
        "cp": cp > 1,
        "offload_layers": offload > 0,
    }
    missing = [name for name, needs in needed.items() if needs and name not in knobs]
    if missing:
        asked = {"precision": precision, "zero_stage": zero, "cp": cp, "offload_layers": offload}
        return "needs the plan knobs " + ", ".join(f"{name} ({asked[name]})" for name in missing)
    assert chip is not None and read is not None
    recompute, recompute_layers = read
    hw, system, family = chip
    tp, pp, gpus, layers = int(row["tp"]), int(row["pp"]), int(row["gpus"]), int(row["layers"])
    simumax = row["source_id"].startswith("SIMUMAX")
    run = bench_fidelity.Run(
        row_id=row["source_id"],
        chip=hw,
        system=system,
        layers=layers,
        hidden=int(row["hidden"]),
        ffn=int(row["ffn"]),
        heads=int(row["heads"]),
        vocab=int(row["vocab"]),
        seq_len=int(row["seq_len"]),
        global_batch=int(row["global_batch"]),
        microbatch=int(microbatch),
        interleave=int(row["interleave"] or 1),
        sequence_parallel=row["seq_parallel"].startswith("yes") and tp > 1,
        layers_per_stage=bench_fidelity.stage_blocks(layers, pp),
        zero_stage=plan_zero_stage(row, int(zero)),
        megatron_core=not simumax,
        pipeline_sends_masks=False,
        tp=tp,
        pp=pp,
        dp=int(row["dp"]),
        gpus=gpus,
        recompute=recompute,
        attention="flash",
        measured_s=measured_s(row),
    )
    multi_rack = system.endswith("nvl72") and gpus > 72 and gpus % 64 == 0
    stated = recompute_text.strip().lower() != "not stated"
    domain = 64 if multi_rack else None
    fused = FUSED_CROSS_ENTROPY_SOURCE in row["source"]
    flash_2 = family in HOPPER_AT_FULL_POWER and any(
        name in row["source"] for name in FLASH_ATTENTION_2_SOURCES
    )
    attention = FLASH_ATTENTION_2_HOPPER if flash_2 else None
    gathers = run.zero_stage == 3  # a torchtitan pipeline's FSDP2 gathers once a step (`plan_zero_stage`)
    gathers_fp8 = FP8_WEIGHT_GATHER in row["precision"] and gathers and precision != "bf16"
    kv_heads = int(row["kv_heads"])
    return ModernRun(
        run, family, kv_heads, precision, int(zero), cp, domain, offload, fused, stated, attention,
        fp8_param_gather=gathers_fp8, recompute_layers=recompute_layers,
        cp_comm_type="a2a" if ALL_TO_ALL_CP in row["source"] else "p2p",
        grad_reduce_in_fp32=row["source_id"].startswith(FP32_GRADIENT_ROWS),
        gradient_accumulation_fusion=row["source_id"].startswith(FUSED_ACCUMULATION_ROWS),
    )  # fmt: skip


def least_recompute_that_fits(
    modern: ModernRun, prepared: bench_fidelity.Prepared, fit: bench_fidelity.Fit | None
) -> tuple[PlanReport, str]:
    """The row's prediction, and a note: a row that does not state its recompute ran the least
    recompute that fits (none, selective, full: the run fit its HBM, so it recomputed at least that
    much); a stated one, or one nothing makes fit, keeps its own."""
    report = bench_fidelity.predict(prepared, fit)
    if modern.recompute_stated or report.fits:
        return report, ""
    for mode in ("selective", "full"):
        training = dataclasses.replace(prepared.plan.training, recompute=mode)
        plan = dataclasses.replace(prepared.plan, training=training)
        tried = bench_fidelity.predict(dataclasses.replace(prepared, plan=plan), fit)
        if tried.fits:
            return tried, f"  (recompute not stated: {mode}, the least that fits)"
    return report, ""


def fit_families(
    prepared: dict[str, tuple[ModernRun, bench_fidelity.Prepared]],
) -> dict[str, bench_fidelity.Fit]:
    """Each calibrated family's `gemm_utilisation`, fitted on its expressible calibration rows at its
    preset's kernel latency; a family none of whose calibration rows is expressible is not fitted."""
    fits: dict[str, bench_fidelity.Fit] = {}
    for family, names in CALIBRATION.items():
        calibration = [
            p for modern, p in prepared.values() if modern.family == family and p.run.row_id in names
        ]
        if not calibration:
            print(f"{family}: not fitted (no calibration row expressible yet)")
            continue
        device = calibration[0].designs.device
        latency_s = np.array([device.kernel_latency_s])
        tied = device.attention_utilisation / device.gemm_utilisation if family in POWER_LIMITED else None
        fits[family] = bench_fidelity.fit_device(calibration, latency_s, tied)
        attention = "" if tied is None else f" (attention_utilisation {tied * fits[family].utilisation:.3f})"
        print(f"{family}: fitted gemm_utilisation {fits[family].utilisation:.2f}{attention} on "
              f"{', '.join(p.run.row_id for p in calibration)}")  # fmt: skip
    return fits


def summary(errors: dict[tuple[str, str], list[float]], what: str) -> None:
    """Mean and max absolute error per group and split."""
    print(f"\nmean and max absolute error per {what} and split:")
    for (group, split), values in sorted(errors.items()):
        mean, worst = np.mean(values), np.max(values)
        print(f"  {group:10s} {split:12s} {len(values):3d} rows: mean {mean:6.1%}, max {worst:6.1%}")


def main() -> None:
    """Every row: predicted against measured, or why not; then the errors per chip and per feature."""
    parser = bench_fidelity.command_line(
        "bench_fidelity_modern.py", __doc__,
        "refit each calibrated chip family's hw.device.gemm_utilisation before predicting; without it, "
        "the hw presets' values",
    )  # fmt: skip
    args = parser.parse_args()
    overrides = bench_fidelity.device_overrides(parser, args)
    start = time.perf_counter()
    knobs = training_knobs()
    with RUNS.open() as f:
        rows = list(csv.DictReader(f))
    prepared: dict[str, tuple[ModernRun, bench_fidelity.Prepared]] = {}
    for row in rows:
        modern = expressible(row, knobs)
        if isinstance(modern, str):
            print(f"not expressible {row['source_id']:34s} {modern}")
            continue
        row_overrides = (*modern.overrides(knobs), *overrides)
        try:
            lowered = bench_fidelity.prepare(modern.run, row_overrides, LLAMA_PRESET, modern.dims())
            plan_stages(lowered.evaluator.graphs[modern.run.tp], lowered.plan)  # phazec's split, or why not
        except PhazecError as err:
            print(f"not expressible {row['source_id']:34s} phazec refuses the plan: {err}")
            continue
        prepared[row["source_id"]] = (modern, lowered)
        print(f"lowered {row['source_id']}: {time.perf_counter() - start:.0f} s", flush=True)
    print(f"{len(prepared)} of {len(rows)} rows expressible: {time.perf_counter() - start:.0f} s")
    fitted = fit_families(prepared) if args.fit else {}
    by_chip: dict[tuple[str, str], list[float]] = {}
    by_feature: dict[tuple[str, str], list[float]] = {}
    print(f"\n{'row':34s} {'family':10s} {'features':12s} {'split':12s} {'measured s':>11s} "
          f"{'predicted s':>12s} {'error':>8s}")  # fmt: skip
    for modern, p in prepared.values():
        report, assumed = least_recompute_that_fits(modern, p, fitted.get(modern.family))
        split = "calibration" if p.run.row_id in CALIBRATION.get(modern.family, ()) else "held-out"
        error = report.time_per_batch_s / p.run.measured_s - 1
        by_chip.setdefault((modern.family, split), []).append(abs(error))
        for feature in modern.features or ("none",):
            by_feature.setdefault((feature, split), []).append(abs(error))
        over = f"{report.memory.total_bytes / 1e9:.1f} GB of {report.memory.hbm_bytes / 1e9:g}"
        note = assumed if report.fits else f"  (over HBM in phazec's memory model: {over})"
        print(f"{p.run.row_id:34s} {modern.family:10s} {'+'.join(modern.features) or '-':12s} {split:12s} "
              f"{p.run.measured_s:11.3f} {report.time_per_batch_s:12.3f} {error:+8.1%}{note}")  # fmt: skip
    summary(by_chip, "chip family")
    summary(by_feature, "feature (FP8, FSDP, CP; none)")
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
