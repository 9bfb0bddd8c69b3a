"""Gantt chart of one layer's schedule: a row per core in use (and the network), a bar per op."""

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text

from phazec.predict.bottleneck import BottleneckBlock
from phazec.solvers.schedule.problem import OpKind, ScheduleProblem
from phazec.solvers.schedule.solve import Schedule
from phazec.util import atomic

_KINDS = {
    OpKind.TC: ("tab:blue", "tensor core (GEMM)"),
    OpKind.VC: ("tab:orange", "vector core"),
    OpKind.FUSED: ("tab:purple", "fused GEMM + vector op"),
    OpKind.COLLECTIVE: ("tab:green", "collective (network)"),
}
"""Colour and legend text of each op kind."""
_LABELS = {"tc": "TC", "vc": "VC", "net": "network"}
_LABEL_FILL = 0.9
"""An op's name is drawn on its bar only if it takes at most this fraction of the bar's width."""


def plot_schedule(
    problem: ScheduleProblem, found: Schedule, path: Path, title: str = "", legend_title: str = ""
) -> Path:
    """Write a PNG Gantt chart of `found` to `path` and return the path.

    Rows are the cores that some op holds alone, plus one row per resource for ops spread over
    all its cores (drawn hatched); the network is one row. A bar carries its op's name only where the
    name fits inside it; a legend names the colours (op kinds) and the hatching, under `legend_title`
    (e.g. the direction, `backward pass`).
    """
    lanes: list[tuple[str, int]] = []  # (resource, core); core -1 is the "all cores" row
    for r in ("tc", "vc", "net"):
        cores = sorted({c for held in found.cores for res, c in held if res == r})
        spread_here = any(found.spread[i] and r in problem.resources(i) for i in range(len(problem.ops)))
        lanes += [(r, c) for c in cores] + ([(r, -1)] if spread_here and r != "net" else [])
    row = {lane: k for k, lane in enumerate(lanes)}
    fig = Figure(figsize=(10, 1.6 + 0.4 * max(1, len(lanes))))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labels: list[tuple[Text, float, float]] = []  # (text, bar start, bar end)
    for i, op in enumerate(problem.ops):
        if found.duration_s[i] == 0:
            continue
        held = found.cores[i] if not found.spread[i] else tuple((r, -1) for r in problem.resources(i))
        start, end = found.start_s[i], found.start_s[i] + found.duration_s[i]
        for lane in held:
            ax.barh(row[lane], end - start, left=start, height=0.8, color=_KINDS[op.kind][0],
                    edgecolor="black", linewidth=0.5, hatch="//" if found.spread[i] else None)  # fmt: skip
            text = ax.text((start + end) / 2, row[lane], op.name, ha="center", va="center", fontsize=6)
            labels.append((text, start, end))
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(
        [f"{_LABELS[r]} {'all' if c < 0 else c}" if r != "net" else _LABELS[r] for r, c in lanes]
    )
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, max(found.makespan_s, 1e-12))
    ax.set_title(title or f"makespan {found.makespan_s:.6g} s", fontsize=9)
    kinds = sorted({op.kind for op in problem.ops}, key=list(_KINDS).index)
    handles = [Patch(facecolor=_KINDS[k][0], edgecolor="black", label=_KINDS[k][1]) for k in kinds]
    if any(found.spread):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="spread over all cores"))
    fig.legend(handles=handles, title=legend_title or None, loc="lower center", ncols=len(handles),
               fontsize=7, title_fontsize=7, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    _drop_labels_that_do_not_fit(fig, ax, labels)
    return atomic.write_png(path, fig, dpi=120)


def _drop_labels_that_do_not_fit(fig: Figure, ax: Axes, labels: list[tuple[Text, float, float]]) -> None:
    """Remove each op name wider than `_LABEL_FILL` of its bar, measured as drawn."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for text, start, end in labels:
        (x0, _), (x1, _) = ax.transData.transform([(start, 0.0), (end, 0.0)])
        if text.get_window_extent(renderer).width > _LABEL_FILL * (x1 - x0):
            text.remove()


BOTTLENECK_PNG = "bottleneck_gantt.png"


def write_bottleneck_gantt(block: BottleneckBlock, out_dir: Path) -> Path:
    """Write the Gantt chart of a plan's bottleneck block (`phazec.predict.bottleneck`) to
    `out_dir/bottleneck_gantt.png`."""
    return plot_schedule(
        block.problem, block.schedule, out_dir / BOTTLENECK_PNG, block.title, f"{block.direction} pass"
    )
