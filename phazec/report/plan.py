"""The `phazec-plan` table: one plan's iteration, breakdown and memory, read in five seconds."""

from __future__ import annotations

from phazec.hw.validation import band_record, band_text
from phazec.predict.plan_report import PlanReport
from phazec.report.table import render


def plan_summary(report: PlanReport) -> str:
    """The plan in a line: its widths, devices, microbatch and knobs, and the blocks of each stage."""
    plan = report.plan
    training = plan.training
    sp = ", sequence parallel" if training.sequence_parallel else ""
    interleave = f", interleave {training.interleave}" if training.interleave > 1 else ""
    distributed = f", ZeRO-{training.zero_stage}" if training.zero_stage else ""
    precision = f", {training.precision}" if training.precision != "bf16" else ""
    cp = f" x cp {training.cp}" if training.cp > 1 else ""
    experts = f" (ep {training.ep})" if training.ep > 1 else ""
    offload = f", {training.offload_layers} blocks offloaded" if training.offload_layers else ""
    schedule = ", ZB-H1" if training.pipeline_schedule == "zb_h1" else ""
    recompute = training.recompute
    if recompute == "block":
        recompute = f"block ({training.recompute_layers} a model chunk)"
    return (
        f"tp {plan.tp} x pp {plan.pp} x dp {plan.dp}{cp} = {report.devices} devices{experts}, "
        f"microbatch {training.microbatch}, recompute {recompute}{sp}{interleave}{schedule}"
        f"{precision}{distributed}{offload}; layers per stage {list(report.layers_per_stage)}"
    )


def plan_table(report: PlanReport) -> str:
    """The plan, its throughput, the iteration's parts and the fullest stage's memory."""
    b, mem, training = report.breakdown, report.memory, report.plan.training
    distributed = f", ZeRO-{training.zero_stage}" if training.zero_stage else ""
    offloaded = f", {training.offload_layers} blocks' on the host" if training.offload_layers else ""
    header = f"{report.model}: {plan_summary(report)}"
    speed = (
        f"{report.time_per_batch_s:.4g} s per iteration, {report.samples_per_s:.4g} samples/s, "
        f"{report.tokens_per_s:.4g} tokens/s, {report.model_tflops_per_device:.4g} TFLOP/s per device "
        f"(MFU {report.mfu:.1%}, HFU {report.hfu:.1%} of {report.peak_tflops:.4g})"
    )
    parts = [
        ("forward", b.forward_s),
        ("backward", b.backward_s),
        ("recompute", b.recompute_s),
        ("TP communication", b.tp_communication_s),
        ("EP all-to-all", b.ep_communication_s),
        ("pipeline p2p", b.pipeline_p2p_s),
        *([("ZeRO-3 weight gathers", b.weight_gather_s)] if training.zero_stage == 3 else []),
        ("bubble (ZB-H1)" if training.pipeline_schedule == "zb_h1" else "bubble", b.bubble_s),
        (f"DP gradient sync (stage {b.dp_sync_stage})", b.dp_sync_s),
        (f"optimizer step (stage {b.dp_sync_stage})", b.optimizer_s),
    ]
    time_rows = [[name, f"{s:.4g}", f"{s / report.time_per_batch_s:.1%}"] for name, s in parts]
    time_rows.append(["total", f"{report.time_per_batch_s:.4g}", "100.0%"])
    memory = [
        ("weights", mem.weights_bytes),
        (f"gradients ({'fp32' if training.grad_reduce_in_fp32 else 'bf16'})", mem.gradients_bytes),
        (f"optimizer state ({training.optimizer}{distributed})", mem.optimizer_state_bytes),
        (f"activations ({mem.in_flight} in flight{offloaded})", mem.activation_stash_bytes),
        ("recompute working set", mem.activation_working_bytes),
        ("total", mem.total_bytes),
        ("HBM headroom", mem.headroom_bytes),
    ]
    memory_rows = [[name, f"{value / 1e9:.3f}"] for name, value in memory]
    fit = "fits" if report.fits else "DOES NOT FIT"
    memory_title = f"memory per device, stage {mem.stage} ({fit} in {mem.hbm_bytes / 1e9:g} GB)"
    return "\n".join([
        header,
        speed,
        f"iteration: {band_text(report.time_per_batch_s, band_record(report.band))}",
        "",
        render([f"time (stage {b.bottleneck_stage} sets the pace)", "s", "share"], time_rows),
        "",
        render([memory_title, "GB"], memory_rows),
    ])  # fmt: skip
