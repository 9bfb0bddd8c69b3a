"""Fidelity on Mixture-of-Experts runs: phazec-plan's iteration time and fit in HBM against the MoE rows of
`../shared/validation/modern-runs.csv` (issue 39).

    .venv/bin/python bench/bench_moe_fidelity.py

A row is timed as `phazec-plan` times its plan (`phazec.predict.plan_report.time_plan`), its preset's
model at the row's depth (DeepSeek's with its dense blocks first: the csv's `layers` less
`moe_layers`; SimuMax's rows dropping tokens at capacity factor 1, as the csv says they ran): the
row's tp, pp, dp, ep, interleave, microbatch and global batch on its chip's hw and
system presets, as Megatron-Core runs them (distributed optimizer, overlapped gradient reduction and
parameter gather but in SimuMax's runs, which disable every overlap, `MoeRun.overlaps`; flash attention,
selective recompute where the row names one; mixed-precision Adam), balanced routing (NVIDIA's MoE
benchmarks force it). Measured seconds per iteration: the row's own, else global batch x sequence /
(tokens/s per GPU x GPUs). A row's recompute is the csv's, unless `RECOMPUTE_READ` reads it otherwise.

Split, written down before anything is run: nothing is fitted here. The H100's device constants are
the ones `bench_fidelity.py` fitted on the dense rows of `public-runs.csv` (conf/hw/h100.yaml), so
every MoE row phazec can express is held out (`CALIBRATION` is empty); the B200's and GB200's
utilisation are the ones `bench_fidelity_modern.py` fitted on their dense rows. A row runs in its
precision (`plan.precision`), zero stage (`plan.zero_stage`) and context-parallel width (`plan.cp`) on
its chip (`bench_fidelity_modern.CHIPS`; a GB200 or GB300 row of more than one rack in 64-GPU NVLink
domains, as there). A row whose blocks split unevenly runs the pipeline layout its release's
Megatron-Bridge recipe sets (`LAYOUTS`). A row at tp > 1 runs with sequence parallelism where the csv
says it ran with it (Megatron-Core's MoE layers need it). DeepSeek-V3 rows that train a
multi-token-prediction module run with it (`MTP_ROWS`), and rows whose recipe overlaps the
expert-parallel all-to-all with compute with that overlap (`A2A_OVERLAP`); rows that ran DeepEP or
HybridEP deduplicate their tokens (`FLEX_DISPATCHER`). Rows phazec cannot express
yet are listed with the reason: some uneven splits are not stated (`UNTIMED`), among them DeepSeek's
own H800 run (which also states no microbatch and ran DualPipe).
"""

import csv
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from phazec.cli import conf_dir
from phazec.commands.setup import setup
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.predict.plan_report import PlanReport, time_plan
from phazec.predict.training import Knobs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fidelity
import bench_fidelity_modern
import fidelity_kernels

RUNS = fidelity_kernels.shared_dir() / "validation" / "modern-runs.csv"

CALIBRATION: tuple[str, ...] = ()
"""Rows fitted on: none (module docstring)."""

FRAMEWORKS = (
    ("MB", "Megatron-Bridge"),
    ("SIMUMAX", "Megatron-LM (SimuMax's runs)"),
    ("TT", "torchtitan"),
    ("AM", "NeMo Automodel"),
    ("DSV3", "DeepSeek's own"),
)
"""(row id prefix, the framework whose run the row measured)."""

GRAD_REDUCE_NOT_OVERLAPPED = frozenset({"MB2509-DSV3-H100-1024-FP8"})
"""Rows whose run left the data-parallel gradient reduction unoverlapped though their framework overlaps
it: Megatron-Bridge v0.1.0rc4's `scripts/performance/run_script.py` sets `overlap_grad_reduce = False`
for the DeepSeek-V3 H100 run (a user setting its comm-overlap config keeps)."""

P2P_OVERLAP = frozenset({"Megatron-Bridge"})
"""Frameworks whose interleaved pipelines send beside the next model chunk's pass (`plan.overlap_p2p_comm`):
Megatron-Bridge sets Megatron-Core's `overlap_p2p_comm` wherever pp > 1 and vp > 1
(`src/megatron/bridge/training/comm_overlap.py`, v0.2.1 and later; no effect at vp 1). The other
frameworks' rows that pipeline do not interleave."""

FUSED_CROSS_ENTROPY = frozenset({"Megatron-Bridge", "NeMo Automodel"})
"""Frameworks whose runs take the loss on the bf16 logits, keeping no fp32 copy (`plan.fused_cross_entropy`):
Megatron-Bridge's performance recipes (Transformer Engine's fused cross entropy,
`bench_fidelity_modern.FUSED_CROSS_ENTROPY_SOURCE`) and NeMo Automodel's MoE benchmark configs
(`MaskedCrossEntropy` with `fp32_upcast: false`, the configs `EP_FROM_CONFIG` names)."""

RECOMPUTE_READ = {
    "TT-SCOUT-GB200-256-BF16": "full",
    "TT-SCOUT-GB200-256-MXFP8": "full",
    "AM-OSS20B-H100-8-BF16": "full",
}
"""Rows whose recompute is read elsewhere than the csv's column.

- torchtitan's Llama 4 Scout rows state no activation checkpointing at a local batch of 10 sequences
  of 8,192 tokens (torchtitan's MXFP8 page: "mode: none", selective per-op checkpointing being broken
  then): 924 GB a GPU in phazec's model (the loss's bf16 and fp32 logits alone 99 GB; 48 blocks of
  81,920 tokens keep at least 40 GB a tensor of the hidden width), where a GB200 has 195.9 GB, and the
  runs ran. Whatever saved the memory is not stated; full recompute, torchtitan's other mode, is the
  reading (123 GB).
- NeMo Automodel's GPT-OSS-20B row (csv: "not stated") was published on 2025-10-06 with its benchmark
  config (NVIDIA-NeMo/Automodel@89e3a9fdd, `docs/performance-summary.md` and
  `examples/benchmark/configs/gptoss_20b_te_deepep.yaml`: `activation_checkpointing: true`, which
  `nemo_automodel/components/moe/parallelizer.py` `apply_ac` turns into a checkpoint wrapper round
  every block: full recompute); the config turned it off on 2025-11-10 (4aadb1a95), and the table's
  figures have not changed since they were published."""

UP_PROJECTION_RECOMPUTE = frozenset(
    {
        "MB2604-DSV3-B200-256-MXFP8",
        "MB2511-DSV3-GB200-256-BF16",
        "MB2511-DSV3-B200-256-MXFP8-MTP",
        "MB2604-KIMIK2-GB300-256-MXFP8",
        "MB2604-DSV3-GB300-256-MXFP8",
        "MB2509-DSV3-H100-1024-FP8",
    }
)
"""Rows whose recipe recomputes multi-head latent attention's up-projections (Megatron-Core's
`recompute_modules=["mla_up_proj"]`, read in the performance configs of the Megatron-Bridge release
that published the row's table: v0.1.0rc4 (25.09) `scripts/performance/run_script.py`, which sets
`["mla_up_proj", "mlp"]` on H100; v0.2.0 (25.11) `DEEPSEEK_V3_GB200_BASE_CONFIG` and
`DEEPSEEK_V3_B200_BASE_CONFIG`; v0.4.2 (26.04.01) `KIMI_K2_PRETRAIN_CONFIG_GB300` and
`DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1`, as in v0.4.0, and `DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2`, which
reruns the dense MLPs too; the csv says "not stated"): they run selective
recompute with `plan.recompute_mla_up_proj=true`."""

MLP_RECOMPUTE = frozenset(
    {"MB2604-DSV3-GB200-256-MXFP8", "MB2604-DSV3-B200-256-MXFP8", "MB2509-DSV3-H100-1024-FP8"}
)
"""Rows whose recipe reruns the dense MLPs (Megatron-Core's `recompute_modules=["mlp"]`, which leaves MoE
layers alone): the 26.04 DeepSeek-V3 GB200 row, whose csv entry names mla_up_proj from later recipes
where its release's (Megatron-Bridge v0.4.2, `scripts/performance/configs/deepseek/
deepseek_workload_base_configs.py`, `DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V1`, which its FP8-MX variants
take) sets `mlp` alone: it runs selective recompute with `plan.recompute_mlp=true`, which under flash
attention reruns the first 3 blocks' MLPs and nothing else; and the B200 row, whose
`DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2` sets `["mla_up_proj", "mlp"]`; and the 25.09 H100 row, whose
release's (v0.1.0rc4) `scripts/performance/run_script.py` sets `["mla_up_proj", "mlp"]` on H100."""

NORM_AND_ACT_RECOMPUTE = frozenset({"MB2604-OSS120B-GB200-64-BF16", "MB2604-OSS120B-H100-64-BF16"})
"""Rows whose recipe reruns each MoE block's pre-router norm and its experts' activation (Megatron-Core's
`recompute_modules=["layernorm", "moe_act"]`, as the csv says): Megatron-Bridge v0.4.2's
`scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py`,
`GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2` and `GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2` (from their
V1 configs), which `_set_recompute_overrides` turns into selective recompute; they run with
`plan.recompute_layernorm=true plan.recompute_moe_act=true`."""

MTP_ROWS = frozenset(
    {
        "MB2604-DSV3-GB200-256-MXFP8",
        "MB2604-DSV3-B200-256-MXFP8",
        "MB2604-DSV3-GB300-256-MXFP8",
        "MB2511-DSV3-B200-256-MXFP8-MTP",
        "MB2509-DSV3-H100-1024-FP8",
    }
)
"""DeepSeek-V3 rows that train one multi-token-prediction module (`model.mtp_layers=1`): the 26.04
recipes (Megatron-Bridge v0.4.2, `recipes/deepseek/deepseek_v3.py`: mtp_num_layers = 1), the 25.11
row listed 'w/ MTP' (v0.2.0's recipe defaults to 1; its other rows are listed 'w/o MTP') and the 25.09
H100 row (v0.1.0rc4's recipe defaults to 1, and its layout, `LAYOUTS`, places the module: 'm')."""

EP_FROM_CONFIG = {"AM-OSS120B-H100-64-BF16": 64, "AM-OSS20B-H100-8-BF16": 8}
"""Expert-parallel widths the csv leaves blank ('-' in NeMo Automodel's table), from the benchmark
configs of those runs: NVIDIA-NeMo/Automodel `examples/benchmark/configs/gptoss_120b_te_deepep.yaml` and
`gptoss_20b_te_deepep.yaml`, `distributed.ep_size` (their global and local batch, FSDP width and the other
parallel sizes are the table's). The 20B config as published with the table (89e3a9fdd, 2025-10-06)
matches the table's plan and sets full activation checkpointing (`RECOMPUTE_READ`); the 120B config of
that commit does not match the table's plan (pp 2, ep 16, global batch 256 against the table's pp 1, 64
and 512), so the 120B row takes the first config that does (037e04a, 2026-01-27: ep 64, no activation
checkpointing). Both set DeepEP, Transformer Engine's linear layers, balanced routing
(`fake_balanced_gate`) and the loss without an fp32 copy of the logits."""

LAYOUTS = {
    "MB2511-DSV3-GB200-256-BF16": "Et*4|(t*4|)*14tL",
    "MB2604-KIMIK2-GB300-256-MXFP8": "Et*4|(t*4|)*14tL",
    **dict.fromkeys(
        ("MB2604-DSV3-GB200-256-MXFP8", "MB2604-DSV3-GB300-256-MXFP8", "MB2511-DSV3-B200-256-MXFP8-MTP"),
        "Et*4|(t*4|)*14tmL",
    ),
    "MB2604-DSV3-B200-256-MXFP8": "Et*4|(t*4|)*14tmL",
    "MB2604-Q235B-H100-256-FP8": "Ett|(ttt|)*30ttL",
    "MB2509-DSV3-H100-1024-FP8": "Et|(tt|)*30mL",
}
"""Megatron-Core pipeline layouts (`pipeline_model_parallel_layout`: E the embedding, t a block, L the
loss, '|' between virtual stages, `*n` a repeat) of rows whose blocks split over pp x vp virtual stages
unevenly, as the release's Megatron-Bridge recipes set them for the row's pp x vp
(NVIDIA-NeMo/Megatron-Bridge, read at its tags; `stage_layout` folds them onto the stages):

- DeepSeek-V3, 25.11 (v0.2.0, `recipes/deepseek/deepseek_v3.py`, `layout_map[(4, 4)]`): the
  embedding and 4 blocks, 14 virtual stages of 4, then a block and the loss; the table lists the model
  without multi-token prediction, so no MTP layer before the loss; its 'w/ MTP' B200 row
  (`layout_map[(16, 1)]`) has the MTP layer ('m') there;
- DeepSeek-V3, 26.04 (v0.4.2, which published the 26.04.01 table: the same recipe's `layout_map[(4, 4)]`;
  the GB300 row's pp 2 x vp 8 from `DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1.pp_layout`, the B200 row's pp 8
  x vp 2 from `DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2.pp_layout`): the same with the MTP layer;
- Kimi K2, 26.04 (v0.4.2, `recipes/kimi/kimi_k2.py`, `map_pp_vp_to_layout[(4, 4)]`, as in v0.4.0):
  without it;
- Qwen3-235B-A22B on H100, 26.04 (v0.4.2, as v0.4.0): the performance config (`scripts/performance/
  configs/qwen/qwen3_workload_base_configs.py`, `QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2`: tp 2,
  pp 8, vp 4, ep 32) sets no layout; its recipe (`recipes/qwen/qwen3_moe.py`,
  `qwen3_235b_a22b_pretrain_config`) sets `account_for_embedding_in_pipeline_split` and
  `account_for_loss_in_pipeline_split`, under which Megatron-Core counts the embedding and the loss as a
  layer each: 94 + 2 = 96 over 32 virtual stages, 3 each, the first the embedding and 2 blocks, the last
  2 blocks and the loss (11, 12 x 6 and 11 blocks a stage);
- DeepSeek-V3 on H100, 25.09 (v0.1.0rc4, `scripts/performance/run_script.py`: pp 8 x vp 4 and
  `layout = "Et|(tt|)*30mL"` on H100): the embedding and a block, 30 virtual stages of 2 blocks, then
  the MTP layer and the loss (7, 8 x 6 and 6 blocks a stage).

`UNTIMED` lists the rows whose layout the recipes do not give."""

UNTIMED = {
    **dict.fromkeys(
        ("MB2511-DSV3-GB200-256-MXFP8", "MB2511-DSV3-GB300-256-BF16", "MB2511-DSV3-GB300-256-MXFP8"),
        "Megatron-Bridge's 25.11 recipes give no layout of 61 blocks for its pp x vp",
    ),
    **dict.fromkeys(
        ("AM-DSV3-H100-256-BF16", "AM-KIMIK2-H100-256-BF16"),
        "NeMo Automodel's split of 61 blocks over its pp x vp stages is not stated",
    ),
}
"""Rows phazec does not time, with the reason: uneven depths whose layout is not stated (`LAYOUTS`)."""

A2A_OVERLAP = {
    "MB2604-DSV3-B200-256-MXFP8": "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (DeepEP)",
    "MB2604-Q235B-H100-256-FP8": "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
    "MB2604-OSS120B-GB200-64-BF16": "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2",
    "MB2509-DSV3-H100-1024-FP8": "v0.1.0rc4 scripts/performance/run_script.py (A2A_1F1B on H100)",
}
"""Rows whose recipe overlaps the expert-parallel all-to-all with the compute of another microbatch
(`moe_a2a_overlap=True`, Megatron-Core's `overlap_moe_expert_parallel_comm`; the configs named, in
Megatron-Bridge v0.4.2's `scripts/performance/configs/`, which published the 26.04.01 table, and the 25.09
H100 row's script, which sets `overlap_moe_expert_parallel_comm = True` on H100; every other
Megatron-Bridge row's recipe sets it false or leaves it at its default, false): they run with
`plan.overlap_moe_expert_parallel_comm=true`."""


FLEX_DISPATCHER = {
    "MB2604-DSV3-GB200-256-MXFP8": "HybridEP: DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 (v0.4.2)",
    "MB2604-DSV3-B200-256-MXFP8": "DeepEP: DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (v0.4.2)",
    "MB2604-DSV3-GB300-256-MXFP8": "HybridEP: DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V2 (v0.4.2)",
    "MB2511-DSV3-GB200-256-BF16": "HybridEP: DEEPSEEK_V3_GB200_BASE_CONFIG (v0.2.x)",
    "MB2604-KIMIK2-GB300-256-MXFP8": "HybridEP: KIMI_K2_PRETRAIN_CONFIG_GB300 (v0.4.2)",
    "MB2604-Q30B-GB200-8-MXFP8": "HybridEP: QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (v0.4.2)",
    "MB2604-Q30B-B200-8-MXFP8": "HybridEP: QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1 (v0.4.2)",
    "MB2604-Q30B-H100-16-FP8": "HybridEP: QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 (v0.4.2)",
    "MB2511-Q235B-GB200-256-BF16": "HybridEP: QWEN3_235B_A22B_GB200_BF16_BASE_CONFIG (v0.2.x)",
    "AM-OSS20B-H100-8-BF16": "DeepEP: gptoss_20b_te_deepep.yaml",
    "AM-OSS120B-H100-64-BF16": "DeepEP: gptoss_120b_te_deepep.yaml",
    "MB2509-DSV3-H100-1024-FP8": "DeepEP: scripts/performance/run_script.py, H100 (v0.1.0rc4)",
}
"""Rows whose run deduplicated its tokens (`plan.moe_token_dispatcher=flex`): Megatron-Core's flex
dispatcher with the backend its release's recipe names (NVIDIA-NeMo/Megatron-Bridge `scripts/performance/
configs/<family>/*workload_base_configs.py`, `moe_flex_dispatcher_backend`, which
`apply_flex_dispatcher_backend` turns into `moe_token_dispatcher_type="flex"`; the 25.11 rows at the
r0.2.0 branch, which published that table in v0.2.1; the 25.09 H100 row's v0.1.0rc4 script, whose
`enable_deepep` the DeepSeek-V3 recipe, `recipes/deepseek/deepseek_v3.py`, turns into
`moe_token_dispatcher_type = "flex"` and `moe_enable_deepep`), and NeMo Automodel's DeepEP configs
(`examples/benchmark/configs/*_te_deepep.yaml`, `backend.enable_deepep: true`). Every other row sent each
token copy: Megatron-Bridge's providers default to `alltoall` and those recipes name no backend (the
26.04.01 GPT-OSS GB200 recipe dropped HybridEP on 2026-04-30, before that table), torchtitan's expert
parallelism at the table's commit is its own NCCL all-to-all, and SimuMax's runs pass
`--moe-token-dispatcher-type alltoall`."""


def stage_layout(layout: str, pp: int) -> tuple[int, ...]:
    """Blocks per stage of a Megatron-Core pipeline layout: its virtual stages, expanded, go round the
    pp stages in turn (virtual stage j on stage j mod pp, as interleaved 1F1B places model chunks)."""
    while "(" in layout:
        layout = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    virtual = layout.split("|")
    if len(virtual) % pp != 0:
        raise ValueError(f"layout of {len(virtual)} virtual stages over pp {pp}")
    return tuple(sum(chunk.count("t") for chunk in virtual[stage::pp]) for stage in range(pp))


PRESETS = {
    "deepseek-ai/DeepSeek-V3": "deepseek_v3",
    "deepseek-ai/DeepSeek-V2": "deepseek_v2",
    "meta-llama/Llama-4-Scout-17B-16E": "llama4_scout",
    "Qwen/Qwen3-30B-A3B": "qwen3_30b_a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3_235b_a22b",
    "openai/gpt-oss-120b": "gpt_oss_120b",
    "openai/gpt-oss-20b": "gpt_oss_20b",
    "moonshotai/Kimi-K2-Base": "kimi_k2",
}
"""The row's Hugging Face config -> phazec's preset of it."""


@dataclass(frozen=True)
class MoeRun:
    """One MoE row phazec can express."""

    row_id: str
    preset: str
    chip: str
    system: str
    layers: int
    dense_layers: int
    """Dense blocks before the MoE ones (DeepSeek's `first_k_dense_replace`; 0 for the others)."""
    seq_len: int
    global_batch: int
    microbatch: int
    tp: int
    pp: int
    dp: int
    ep: int
    interleave: int
    recompute: str
    gpus: int
    measured_s: float
    precision: str
    zero_stage: int
    cp: int
    sequence_parallel: bool
    """Megatron's sequence parallelism: at tp > 1 where the csv says the run used it."""
    gpus_per_domain: int | None
    """The NVLink domain's size where it is not the system preset's."""
    layers_per_stage: tuple[int, ...] | None
    """Blocks per stage when they do not split evenly (`bench_fidelity.stage_blocks`)."""
    overlaps: bool
    """The run overlaps its gradient reduction and parameter gather with compute and runs NCCL off the
    compute stream (Megatron-Core's settings in NVIDIA's and NeMo's benchmarks); SimuMax's Megatron-LM
    runs disable every overlap (as in `bench_fidelity_modern.py`)."""


def measured_s(row: dict[str, str]) -> float:
    """The row's seconds per iteration, else global batch x sequence / (tokens/s per GPU x GPUs)."""
    if row["measured_s_per_iter"]:
        return float(row["measured_s_per_iter"])
    tokens = float(row["global_batch"]) * float(row["seq_len"])
    return tokens / (float(row["measured_tokens_per_s"]) * float(row["gpus"]))


def expressible(row: dict[str, str]) -> MoeRun | str:
    """The run phazec times for a MoE row, or why it cannot yet."""
    chips = bench_fidelity_modern.CHIPS
    chip = next((chips[name] for name in chips if name in row["gpu"]), None)
    preset = PRESETS.get(row["hf_config"].split(" ")[0])
    zero = row["zero_stage"].strip()[:1]
    reasons = (
        (chip is None, f"GPU {row['gpu'].split(' ')[0]} has no preset"),
        (not zero.isdigit(), "zero stage not stated"),
        (preset is None, f"no preset of {row['hf_config']}"),
        (row["source_id"] in UNTIMED, UNTIMED.get(row["source_id"], "")),
        (
            row["source_id"] not in LAYOUTS
            and not bench_fidelity.splittable(int(row["layers"]), int(row["pp"])),
            "layers split over pp neither evenly nor with the embedding and loss as a layer each",
        ),
        (not row["ep"] and row["source_id"] not in EP_FROM_CONFIG, "expert-parallel width not stated"),
    )
    for hit, reason in reasons:
        if hit:
            return reason
    assert chip is not None and preset is not None
    gpus = int(row["gpus"])
    multi_rack = chip[1].endswith("nvl72") and gpus > 72 and gpus % 64 == 0
    return MoeRun(
        row_id=row["source_id"],
        preset=preset,
        chip=chip[0],
        system=chip[1],
        layers=int(row["layers"]),
        dense_layers=int(row["layers"]) - int(row["moe_layers"] or row["layers"]),
        seq_len=int(row["seq_len"]),
        global_batch=int(row["global_batch"]),
        microbatch=int(row["microbatch"] or 1),
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        dp=int(row["dp"]),
        ep=int(row["ep"] or EP_FROM_CONFIG[row["source_id"]]),
        interleave=int(row["interleave"] or 1),
        recompute=RECOMPUTE_READ.get(
            row["source_id"],
            "selective"
            if row["recompute"].startswith("selective")
            or row["source_id"] in UP_PROJECTION_RECOMPUTE | MLP_RECOMPUTE
            else "none",
        ),
        gpus=gpus,
        measured_s=measured_s(row),
        precision=row["precision"].strip().split(" ")[0].lower(),
        zero_stage=int(zero),
        cp=int(row["cp"] or 1),
        sequence_parallel=int(row["tp"]) > 1 and row["seq_parallel"].startswith("yes"),
        gpus_per_domain=64 if multi_rack else None,
        layers_per_stage=(
            stage_layout(LAYOUTS[row["source_id"]], int(row["pp"]))
            if row["source_id"] in LAYOUTS
            else bench_fidelity.stage_blocks(int(row["layers"]), int(row["pp"]))
        ),
        overlaps=not row["source_id"].startswith("SIMUMAX"),
    )


def framework(row_id: str) -> str:
    """The framework whose run a row measured (`FRAMEWORKS`)."""
    return next(name for prefix, name in FRAMEWORKS if row_id.startswith(prefix))


def predict(run: MoeRun) -> PlanReport:
    """The row's plan timed as `phazec-plan` times it."""
    overlaps, not_overlaps = str(run.overlaps).lower(), str(not run.overlaps).lower()
    grad_overlap = str(run.overlaps and run.row_id not in GRAD_REDUCE_NOT_OVERLAPPED).lower()
    deepseek = run.preset.startswith("deepseek")
    dense = [f"model.hf_config.first_k_dense_replace={run.dense_layers}"] if deepseek else []
    mtp = [f"model.mtp_layers={int(run.row_id in MTP_ROWS)}"]
    # SimuMax's runs drop tokens at capacity factor 1, padded to capacity (the csv's caveat)
    capacity = [] if run.overlaps else ["model.moe.capacity_factor=1.0"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                f"model={run.preset}", f"model.hf_config.num_hidden_layers={run.layers}",
                *dense, *mtp, *capacity, f"model.seq_len={run.seq_len}",
                f"hw={run.chip}", f"system={run.system}", f"system.devices={run.gpus}",
                f"system.global_batch={run.global_batch}", "tracking=none", "train.optimizer=adam",
                f"plan.tp={run.tp}", f"plan.pp={run.pp}", f"plan.dp={run.dp}", f"plan.ep={run.ep}",
                f"plan.microbatch={run.microbatch}", f"plan.interleave={run.interleave}",
                f"plan.recompute={run.recompute}", f"plan.zero_stage={run.zero_stage}",
                f"plan.recompute_mla_up_proj={run.row_id in UP_PROJECTION_RECOMPUTE}",
                f"plan.recompute_mlp={run.row_id in MLP_RECOMPUTE}",
                f"plan.recompute_layernorm={run.row_id in NORM_AND_ACT_RECOMPUTE}",
                f"plan.recompute_moe_act={run.row_id in NORM_AND_ACT_RECOMPUTE}",
                f"plan.overlap_moe_expert_parallel_comm={run.row_id in A2A_OVERLAP}",
                f"plan.moe_token_dispatcher={'flex' if run.row_id in FLEX_DISPATCHER else 'alltoall'}",
                f"plan.precision={run.precision}", f"plan.cp={run.cp}",
                f"plan.sequence_parallel={str(run.sequence_parallel).lower()}",
                f"plan.fused_cross_entropy={framework(run.row_id) in FUSED_CROSS_ENTROPY}",
                *([f"system.tiers.0.group_size={run.gpus_per_domain}"] if run.gpus_per_domain else []),
                *([f"plan.layers={list(run.layers_per_stage)}"] if run.layers_per_stage else []),
                f"plan.overlap_grad_reduce={grad_overlap}",
                f"plan.grad_reduce_in_fp32={run.row_id.startswith(bench_fidelity_modern.FP32_GRADIENT_ROWS)}",
                "plan.gradient_accumulation_fusion="
                f"{run.row_id.startswith(bench_fidelity_modern.FUSED_ACCUMULATION_ROWS)}",
                f"plan.overlap_param_gather={overlaps}",
                f"plan.overlap_p2p_comm={framework(run.row_id) in P2P_OVERLAP}",
                "hw.device.attention=flash", f"hw.device.collectives_hold_cores={not_overlaps}",
                "solver.node_limit=200", "solver.search_node_limit=100000",
            ],
        )  # fmt: skip
    settings = settings_from_config(cfg)
    plan = settings.plan
    job = setup(settings, Knobs.single(plan.training, round(max(settings.system.hbm_bytes))), widths=[run.tp])
    return time_plan(plan, job.evaluator, job.designs)


def main() -> None:
    """Every MoE row: skipped with its reason, or measured, predicted, error, fit in HBM; then the summary."""
    start = time.perf_counter()
    with RUNS.open() as f:
        rows = [row for row in csv.DictReader(f) if row["experts"] and int(row["experts"]) > 0]
    errors: dict[str, list[float]] = {}
    by_framework: dict[str, list[float]] = {}
    print(f"{'row':34s} {'split':11s} {'measured s':>10s} {'predicted s':>11s} {'error':>7s} "
          f"{'EP a2a s':>8s} {'bubble s':>8s} {'memory GB':>9s} fits")  # fmt: skip
    for row in rows:
        run = expressible(row)
        if isinstance(run, str):
            print(f"skip {row['source_id']:34s} {run}")
            continue
        try:
            report = predict(run)
        except PhazecError as err:
            print(f"skip {row['source_id']:34s} phazec refuses the plan: {err}")
            continue
        split = "calibration" if run.row_id in CALIBRATION else "held-out"
        error = report.time_per_batch_s / run.measured_s - 1
        errors.setdefault(split, []).append(abs(error))
        by_framework.setdefault(framework(run.row_id), []).append(abs(error))
        b = report.breakdown
        modules = [
            m
            for m, rows in (
                ("mla_up_proj", UP_PROJECTION_RECOMPUTE),
                ("mlp", MLP_RECOMPUTE),
                ("layernorm, moe_act", NORM_AND_ACT_RECOMPUTE),
            )
            if run.row_id in rows
        ]
        notes = [
            *([FLEX_DISPATCHER[run.row_id].split(":")[0]] if run.row_id in FLEX_DISPATCHER else []),
            *(["the recipe's all-to-all overlap"] if run.row_id in A2A_OVERLAP else []),
            *([f"recompute read: {run.recompute}"] if run.row_id in RECOMPUTE_READ else []),
            *([f"the recipe's recompute: {', '.join(modules)}"] if modules else []),
            *(["1 MTP module"] if run.row_id in MTP_ROWS else []),
        ]
        note = f"  ({'; '.join(notes)})" if notes else ""
        print(f"{run.row_id:34s} {split:11s} {run.measured_s:10.3f} {report.time_per_batch_s:11.3f} "
              f"{error:+7.1%} {b.ep_communication_s:8.3f} {b.bubble_s:8.3f} "
              f"{report.memory.total_bytes / 1e9:9.2f} {'yes' if report.fits else 'NO'}{note}",
              flush=True)  # fmt: skip
    print("\nmean and max absolute error per split:")
    for split, values in sorted(errors.items()):
        print(f"  {split:11s} {len(values):3d} rows: mean {np.mean(values):6.1%}, max {np.max(values):6.1%}")
    print("by the framework that ran them:")
    for name, values in sorted(by_framework.items()):
        mean, worst = np.mean(values), np.max(values)
        print(f"  {name:28s} {len(values):3d} rows: mean {mean:6.1%}, max {worst:6.1%}")
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
