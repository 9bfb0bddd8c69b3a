"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence

from phazec.ir.summary import LayerRow


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns right-aligned except the first, separated by two spaces."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).rjust(w) for c, w in zip(cells, widths, strict=True)]
        padded[0] = str(cells[0]).ljust(widths[0])
        return "  ".join(padded)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def layer_table(rows: Sequence[LayerRow]) -> str:
    """The layer table of `phazec-ir`; consecutive layers of one class share a row."""
    groups: list[list[LayerRow]] = []
    for row in rows:
        if groups and groups[-1][-1].cls == row.cls and groups[-1][-1].index == row.index - 1:
            groups[-1].append(row)
        else:
            groups.append([row])
    headers = ["layer", "count", "ops", "parameters", "fwd FLOPs/sample", "activation B/sample", "class"]
    body = [
        [
            g[0].name if len(g) == 1 else f"{g[0].name}..{g[-1].name.rsplit('.', 1)[-1]}",
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
