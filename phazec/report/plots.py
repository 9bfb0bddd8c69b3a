"""PNG plots of a search result: throughput against area with the Pareto front, and the chosen plan.

Both are drawn from the files a search writes (`result.json`'s dict and `explored.csv`) with
matplotlib's Agg canvas, so no display and no global pyplot state are involved.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from phazec.util import atomic

THROUGHPUT_PNG = "throughput_vs_area.png"
PIPELINE_PNG = "pipeline.png"


@dataclass(frozen=True)
class DesignPoint:
    """One evaluated design: its area and the best throughput of any plan that fits (0: none fits)."""

    design: int
    area_mm2: float
    throughput_samples_per_s: float


def design_points(explored_csv: Path) -> list[DesignPoint]:
    """The best feasible throughput of every design in `explored.csv`, in design order."""
    best: dict[int, DesignPoint] = {}
    with explored_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            design = int(row["design"])
            throughput = float(row["throughput_samples_per_s"]) if row["feasible"] == "True" else 0.0
            seen = best.get(design)
            if seen is None or throughput > seen.throughput_samples_per_s:
                best[design] = DesignPoint(design, float(row["area_mm2"]), throughput)
    return [best[d] for d in sorted(best)]


def pareto_front(points: list[DesignPoint]) -> list[DesignPoint]:
    """The feasible points no other point beats with less or equal area and more throughput,
    by increasing area (ties in area keep the higher throughput)."""
    ordered = sorted(points, key=lambda p: (p.area_mm2, -p.throughput_samples_per_s))
    front: list[DesignPoint] = []
    for p in ordered:
        if p.throughput_samples_per_s > (front[-1].throughput_samples_per_s if front else 0.0):
            front.append(p)
    return front


def _new_figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in))
    FigureCanvasAgg(fig)
    return fig


def plot_throughput_vs_area(points: list[DesignPoint], result: dict[str, Any], path: Path) -> Path:
    """Throughput against area of every evaluated design, the Pareto front, the found design and the
    TPUv4 design (with its optimal placement); designs where nothing fits sit at zero as crosses."""
    fig = _new_figure(7, 4.5)
    ax = fig.add_subplot()
    fits = [p for p in points if p.throughput_samples_per_s > 0]
    none_fits = [p for p in points if p.throughput_samples_per_s == 0]
    ax.scatter([p.area_mm2 for p in fits], [p.throughput_samples_per_s for p in fits],
               s=10, color="tab:gray", alpha=0.6, label=f"evaluated designs ({len(points)})")  # fmt: skip
    if none_fits:
        ax.scatter([p.area_mm2 for p in none_fits], [0.0] * len(none_fits),
                   s=12, marker="x", color="tab:red", alpha=0.6, label="no plan fits")  # fmt: skip
    front = pareto_front(points)
    ax.step([p.area_mm2 for p in front], [p.throughput_samples_per_s for p in front],
            where="post", color="tab:blue", label="Pareto front")  # fmt: skip
    tpu = result["baselines"]["tpuv4_optimal_placement"]
    if tpu["design"] is not None:
        ax.scatter([tpu["design"]["area_mm2"]], [tpu["throughput_samples_per_s"]], s=90, marker="D",
                   color="tab:green", edgecolor="black", zorder=3, label="TPUv4, optimal plan")  # fmt: skip
    ax.scatter([result["design"]["area_mm2"]], [result["throughput_samples_per_s"]], s=160, marker="*",
               color="tab:orange", edgecolor="black", zorder=4, label="found design")  # fmt: skip
    ax.ticklabel_format(useOffset=False)  # explored.csv rounds areas to 1e-6 mm^2, result.json does not
    ax.set_ylim(bottom=0)
    ax.set_xlabel("area (mm$^2$)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title(f"{result['model']}: throughput against area")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return atomic.write_png(path, fig, dpi=110)


def layer_runs(layers: list[int]) -> list[tuple[int, int]]:
    """(first layer, count) of each run of consecutive layer ids, for ascending ids."""
    runs: list[tuple[int, int]] = []
    for layer in layers:
        if runs and runs[-1][0] + runs[-1][1] == layer:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((layer, 1))
    return runs


def plot_pipeline(result: dict[str, Any], path: Path) -> Path:
    """The chosen plan as a pipeline: a row per stage spanning its layers, labelled with its layers and
    devices (the devices of one replica times the data-parallel replicas)."""
    plan = result["plan"]
    stages = plan["stages"]
    fig = _new_figure(10, 1.2 + 0.45 * len(stages))
    ax = fig.add_subplot()
    for i, stage in enumerate(stages):
        ax.broken_barh(layer_runs(stage["layers"]), (i - 0.4, 0.8), facecolors=f"C{i % 10}",
                       edgecolor="black", linewidth=0.5)  # fmt: skip
    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels(
        [
            f"stage {i}: layers {s['layers'][0]}-{s['layers'][-1]}, {s['devices']} x {plan['dp']} devices"
            for i, s in enumerate(stages)
        ]
    )
    ax.invert_yaxis()
    ax.set_xlabel("layer (0: embedding, then the blocks, last: the head)")
    mode = "stash" if plan["recompute"] in (False, "none") else f"recompute {plan['recompute']}"
    ax.set_title(f"{result['model']}: microbatch {plan['microbatch']}, {mode}, "
                 f"t={plan['tp']} p={plan['pp']} d={plan['dp']}")  # fmt: skip
    fig.tight_layout()
    return atomic.write_png(path, fig, dpi=110)


def write_plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write both plots of a finished search (its result dict, `out_dir/explored.csv`) to `out_dir`."""
    points = design_points(out_dir / "explored.csv")
    return [
        plot_throughput_vs_area(points, result, out_dir / THROUGHPUT_PNG),
        plot_pipeline(result, out_dir / PIPELINE_PNG),
    ]
