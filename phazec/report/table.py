"""Plain-text tables for the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from phazec.hw.validation import band_text
from phazec.ir.summary import LayerRow
from phazec.passes.training import TrainingRow
from phazec.report.result import headline_throughput


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns right-aligned except the first, separated by two spaces."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).rjust(w) for c, w in zip(cells, widths, strict=True)]
        padded[0] = str(cells[0]).ljust(widths[0])
        return "  ".join(padded)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def runs(classes: Sequence[int]) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive equal classes."""
    bounds: list[tuple[int, int]] = []
    for i, cls in enumerate(classes):
        if bounds and classes[bounds[-1][1]] == cls:
            bounds[-1] = (bounds[-1][0], i)
        else:
            bounds.append((i, i))
    return bounds


def run_name(first: str, last: str) -> str:
    """`block.0..31` for a run of layers, the name alone for one layer."""
    return first if first == last else f"{first}..{last.rsplit('.', 1)[-1]}"


def run_ids(first: int, last: int) -> str:
    """`1-32` for a run of layer ids, the id alone for one layer. Layer ids are the numbering every
    table and plot uses (the embedding is layer 0, the pipeline plot's stages span ids)."""
    return str(first) if first == last else f"{first}-{last}"


def layer_table(rows: Sequence[LayerRow]) -> str:
    """The layer table of `phazec-ir`; consecutive layers of one class share a row."""
    groups = [rows[a : b + 1] for a, b in runs([r.cls for r in rows])]
    headers = ["layer", "name", "count", "ops", "parameters", "fwd FLOPs/sample", "activation B/sample",
               "class"]  # fmt: skip
    body = [
        [
            run_ids(g[0].index, g[-1].index),
            run_name(g[0].name, g[-1].name),
            str(len(g)),
            str(g[0].ops),
            f"{g[0].parameters:,}",
            f"{g[0].forward_flops_per_sample:.4g}",
            f"{g[0].activation_bytes_per_sample:,}",
            f"{g[0].cls} (x{g[0].class_count})",
        ]
        for g in groups
    ]
    return render(headers, body)


BASELINES = (
    "tpuv4_optimal_placement",
    "tpuv4_megatron_plan",
    "found_design_megatron_plan",
    "megatron_default_plan",
)
"""The baselines of a search's result, in the order its table lists them under the found plan (the
last only in a search of one GPU design)."""


def _design_text(design: dict[str, Any] | None) -> str:
    if design is None:
        return "-"
    return (
        f"{design['num_tc']}x TC {design['tc_width']}x{design['tc_depth']}, "
        f"{design['num_vc']}x VC {design['vc_width']}, GLB {design['glb_bytes'] // 2**20} MiB, "
        f"HBM {design['hbm_bytes'] / 1e9:g} GB, {design['area_mm2']:.2f} mm^2"
    )


def _plan_text(plan: dict[str, Any] | None) -> str:
    """A plan in a few words, its expert-parallel width where its experts are spread."""
    if plan is None:
        return "no plan fits"
    recompute = "stash" if plan["recompute"] in (False, "none") else f"recompute {plan['recompute']}"
    ep = int(plan.get("ep", 1))
    experts = f" ep={ep}" if ep > 1 else ""
    return f"mb {plan['microbatch']}, {recompute}, t={plan['tp']} p={plan['pp']} d={plan['dp']}{experts}"


TABLE_COLUMNS = 120
"""The widest line a result table prints (full detail is in result.json)."""
VS_TPUV4 = (
    "vs TPUv4: throughput over the TPUv4 design under its own optimal plan (tpuv4 optimal placement); "
    "devices: those the plan uses (t x p x d) of system.devices."
)
"""What the result table's `vs TPUv4` and `devices` columns mean, said under it."""
VS = {
    "tpuv4_optimal_placement": ("vs TPUv4", VS_TPUV4),
    "megatron_default_plan": (
        "vs default",
        "vs default: throughput over the chip's own Megatron-style default plan (megatron default plan: tp "
        "inside a node, the fewest pipeline stages that fit, the rest data-parallel); devices: those the "
        "plan uses (t x p x d) of system.devices.",
    ),
}
"""Per reference baseline, the ratio column's header and what it means."""


def result_table(result: dict[str, Any]) -> str:
    """The found design against the TPUv4 design and the fixed Megatron-style plan: the designs, then
    each entry's plan, devices used and throughput, then its core utilisation and energy, in tables
    of at most `TABLE_COLUMNS` characters, and what the columns compare with."""
    found = {"design": result["design"], "plan": result["plan"], **result}
    compared = result["baselines"]
    named = [(name, compared[name]) for name in BASELINES if name in compared]
    rows = [("found design, optimal plan", found), *named]
    # On one GPU design the ratio is over the chip's own default plan (`phazec.commands.search.own_chip`).
    reference_name = next(name for name in reversed(BASELINES) if name in VS and name in compared)
    ratio, note = VS[reference_name]
    reference = compared[reference_name]["throughput_samples_per_s"]
    devices = int(result["config"]["system"]["devices"])
    names = [name.replace("_", " ") for name, _ in rows]
    plans = [
        [
            name,
            "not applicable (below)" if "not_applicable" in entry else _plan_text(entry["plan"]),
            _devices_text(entry["plan"], devices),
            *_throughput_text(entry["throughput_samples_per_s"], reference, entry.get("within_model_error")),
        ]
        for name, (_, entry) in zip(names, rows, strict=True)
    ]
    usage = [[name, *_usage_text(entry)] for name, (_, entry) in zip(names, rows, strict=True)]
    why: dict[str, list[str]] = {}
    for name, entry in rows:
        if "not_applicable" in entry:
            why.setdefault(entry["not_applicable"], []).append(name.replace("_", " "))
    reasons = [f"{' and '.join(names)}: not applicable: {reason}" for reason, names in why.items()]
    search = result["search"]
    objective = "" if result["objective"] == "throughput" else f", best {result['objective']}"
    header = (
        f"{result['model']}: {search['designs_evaluated']} of {search['designs_total']} designs evaluated "
        f"({search['strategy']}{objective}) in {search['wall_s']:.1f} s"
    )
    tpuv4 = result["baselines"]["tpuv4_optimal_placement"]["design"]
    designs = [f"found design: {_design_text(result['design'])}", f"tpuv4 design: {_design_text(tpuv4)}"]
    return "\n".join([
        header,
        *designs,
        "",
        render(["", "plan", "devices", "samples/s", ratio], plans),
        "",
        render(["", "TC util mean/bneck", "VC util mean/bneck", "J/sample", "samples/s/W"], usage),
        *(textwrap.fill(line, TABLE_COLUMNS, subsequent_indent="  ") for line in [*reasons, note]),
        *(textwrap.fill(line, TABLE_COLUMNS, subsequent_indent="  ") for line in _band_lines(result)),
    ])  # fmt: skip


def _devices_text(plan: dict[str, Any] | None, devices: int) -> str:
    """`994 of 1024`: the devices a plan uses (t x p x d) of the system's; a dash without a plan."""
    if plan is None:
        return "-"
    return f"{plan['tp'] * plan['pp'] * plan['dp']} of {devices}"


WITHIN_ERROR = "~"
"""The mark of an entry within the model's error of the found plan (their bands overlap)."""


def _throughput_text(samples_per_s: float, reference: float, within_error: bool | None = None) -> list[str]:
    """Throughput (marked `WITHIN_ERROR` when `within_error`) and its ratio to the reference's; dashes
    for an entry with no plan (0 samples/s)."""
    if not samples_per_s:
        return ["-", "-"]
    mark = WITHIN_ERROR if within_error else ""
    return [f"{samples_per_s:.4g}{mark}", f"{samples_per_s / reference:.2f}x" if reference else "-"]


def _band_lines(result: dict[str, Any]) -> list[str]:
    """The found plan's time with its band, and what the `WITHIN_ERROR` mark says when an entry has
    it (a result written before bands has neither)."""
    if "band" not in result:
        return []
    lines = [f"found plan: {band_text(result['time_per_batch_s'], result['band'])}."]
    if any(entry.get("within_model_error") for entry in result["baselines"].values()):
        lines.append(
            f"{WITHIN_ERROR}: within the model's error of the found plan (its band overlaps the found "
            "plan's): the model cannot tell the two apart."
        )
    return lines


def _usage_text(entry: dict[str, Any]) -> list[str]:
    """Core utilisation (mean over devices / bottleneck device), energy per sample and throughput per
    watt of a result entry; dashes when it has no plan."""
    if entry.get("plan") is None or "peak_power_w" not in entry:
        return ["-"] * 4
    utilisation = [
        f"{entry[f'{core}_utilisation_mean']:.0%}/{entry[f'{core}_utilisation_bottleneck']:.0%}"
        for core in ("tensor_core", "vector_core")
    ]
    return [
        *utilisation,
        f"{entry['energy_per_sample_j']['total']:.4g}",
        f"{entry['throughput_per_watt']:.4g}",
    ]


def multi_table(result: dict[str, Any]) -> str:
    """A multi-model result: the designs, then per model the common design against its own best
    design (plan, devices used, throughput, fraction of its own best, speedup over the TPUv4 design
    with its optimal plan), at most `TABLE_COLUMNS` wide."""
    devices = int(result["config"]["system"]["devices"])
    body = []
    designs = [f"common design: {_design_text(result['design'])}"]
    for name in result["model"]:
        own = result["baselines"][name]["own_best_design"]
        designs.append(f"{name}'s own best design: {_design_text(own['design'])}")
        tpu = result["baselines"][name]["tpuv4_optimal_placement"]["throughput_samples_per_s"]
        common = result["throughput_samples_per_s"][name]
        for label, plan, value in (
            ("common design", result["plan"][name], common),
            ("own best design", own["plan"], own["throughput_samples_per_s"]),
        ):
            ratio = value / own["throughput_samples_per_s"] if own["throughput_samples_per_s"] else 0.0
            vs_tpu = f"{value / tpu:.2f}x" if tpu else "-"
            throughput = [f"{value:.4g}", f"{ratio:.2f}", vs_tpu]
            body.append([name, label, _plan_text(plan), _devices_text(plan, devices), *throughput])
    search = result["search"]
    mean = headline_throughput(result)
    header = (
        f"{', '.join(result['model'])}: common design with mean throughput {mean:.4g} samples/s, "
        f"chosen among {search['designs_evaluated']} of {search['designs_total']} designs "
        f"({search['strategy']}) in {search['wall_s']:.1f} s"
    )
    table = render(["model", "", "plan", "devices", "samples/s", "of own best", "vs TPUv4"], body)
    note = textwrap.fill(VS_TPUV4, TABLE_COLUMNS, subsequent_indent="  ")
    return "\n".join([header, *designs, "", table, note])


def _collectives_text(row: TrainingRow) -> str:
    """A layer's collectives per type, forward+backward (`AllReduce 2+2, AllToAll 2+2`); 0 for none."""
    types = sorted({c.op_type for c in (*row.forward.collectives, *row.backward.collectives)})
    counts = (f"{t} {row.forward.collective(t).count}+{row.backward.collective(t).count}" for t in types)
    return ", ".join(counts) or "0"


def training_table(rows: Sequence[TrainingRow]) -> str:
    """Per-device training figures of `phazec-ir` at one width, per sample where they scale with it."""
    headers = [
        "layer", "name", "count", "params/device", "fwd FLOPs", "bwd FLOPs", "kernels", "collectives",
        "collective B", "weights+grads+opt B", "stash B", "recompute-input B",
    ]  # fmt: skip
    body = []
    for a, b in runs([r.layer_class for r in rows]):
        r = rows[a]
        body.append([
            run_ids(r.layer, rows[b].layer),
            run_name(r.name, rows[b].name),
            str(b - a + 1),
            f"{r.parameters:,}",
            f"{r.forward.flops:.4g}",
            f"{r.backward.flops:.4g}",
            f"{r.forward.kernels}+{r.backward.kernels}",
            _collectives_text(r),
            f"{sum(c.tensor_bytes for c in (*r.forward.collectives, *r.backward.collectives)):,}",
            f"{r.memory.state_bytes:,}",
            f"{r.stash_bytes:,}",
            f"{r.recompute_input_bytes:,}",
        ])  # fmt: skip
    return render(headers, body)
