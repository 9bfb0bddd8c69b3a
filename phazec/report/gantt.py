"""Gantt chart of one layer's schedule: a row per core in use (and the network), a bar per op."""

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from phazec import atomic
from phazec.solvers.schedule import Schedule
from phazec.solvers.schedule_problem import OpKind, ScheduleProblem

_COLOURS = {
    OpKind.TC: "tab:blue",
    OpKind.VC: "tab:orange",
    OpKind.FUSED: "tab:purple",
    OpKind.COLLECTIVE: "tab:green",
}
_LABELS = {"tc": "TC", "vc": "VC", "net": "network"}


def plot_schedule(problem: ScheduleProblem, found: Schedule, path: Path, title: str = "") -> Path:
    """Write a PNG Gantt chart of `found` to `path` and return the path.

    Rows are the cores that some op holds alone, plus one row per resource for ops spread over
    all its cores (drawn hatched); the network is one row. Bars carry the op names.
    """
    lanes: list[tuple[str, int]] = []  # (resource, core); core -1 is the "all cores" row
    for r in ("tc", "vc", "net"):
        cores = sorted({c for held in found.cores for res, c in held if res == r})
        spread_here = any(found.spread[i] and r in problem.resources(i) for i in range(len(problem.ops)))
        lanes += [(r, c) for c in cores] + ([(r, -1)] if spread_here and r != "net" else [])
    row = {lane: k for k, lane in enumerate(lanes)}
    fig = Figure(figsize=(10, 1 + 0.4 * max(1, len(lanes))))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, op in enumerate(problem.ops):
        if found.duration_s[i] == 0:
            continue
        held = found.cores[i] if not found.spread[i] else tuple((r, -1) for r in problem.resources(i))
        for lane in held:
            y = row[lane]
            ax.barh(
                y,
                found.duration_s[i],
                left=found.start_s[i],
                height=0.8,
                color=_COLOURS[op.kind],
                edgecolor="black",
                linewidth=0.5,
                hatch="//" if found.spread[i] else None,
            )
            ax.text(
                found.start_s[i] + found.duration_s[i] / 2,
                y,
                op.name,
                ha="center",
                va="center",
                fontsize=6,
                clip_on=True,
            )
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(
        [f"{_LABELS[r]} {'all' if c < 0 else c}" if r != "net" else _LABELS[r] for r, c in lanes]
    )
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, max(found.makespan_s, 1e-12))
    ax.set_title(title or f"makespan {found.makespan_s:.6g} s")
    fig.tight_layout()
    return atomic.write_png(path, fig, dpi=120)
