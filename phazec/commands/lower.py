"""`phazec-ir`: lower a model, derive its per-device training graph, and report both (`ir.json`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from phazec.commands.settings import Settings
from phazec.commands.setup import graph_settings
from phazec.frontend import load_model
from phazec.ir.summary import summarize
from phazec.passes.training import training_rows
from phazec.report.table import layer_table, training_table
from phazec.util import atomic
from phazec.util.progress import stage

IR_JSON = "ir.json"


def lower(settings: Settings, out_dir: Path) -> tuple[dict[str, Any], str]:
    """Lower the model of `model.*` and write `out_dir/ir.json`; returns its content and the text
    `phazec-ir` prints (the layer table and the per-device training table at `parallel.tp`)."""
    with stage("lowering"):
        model = load_model(settings.model, settings.cache_dir)
    rows = summarize(model)
    tp = settings.parallel.tp
    fixed = settings.train.fixed
    optimizer = fixed.optimizer
    training, _ = training_rows(model, tp, graph_settings(settings, settings.hw.device, fixed))
    active = f" ({model.active_parameter_count:,} active)" if model.routing is not None else ""
    experts = f", expert-parallel width {fixed.ep}" if model.routing is not None else ""
    text = "\n".join([
        f"{model.name}: {len(model.layers)} layers, {len(model.classes)} classes, "
        f"{model.parameter_count:,} parameters{active}, sequence {model.seq_len}",
        layer_table(rows),
        f"\nper device at tensor-parallel width {tp}{experts} ({optimizer}), per sample:",
        training_table(training),
    ])  # fmt: skip
    report = {
        "model": model.name,
        "seq_len": model.seq_len,
        "parameters": model.parameter_count,
        "active_parameters": model.active_parameter_count,
        "routing": None
        if model.routing is None
        else {k: v for k, v in dataclasses.asdict(model.routing).items() if k != "expert_parameters"},
        "layers": [dataclasses.asdict(r) for r in rows],
        "edges": [dataclasses.asdict(e) for e in model.edges],
        "training": {"tp": tp, "ep": fixed.ep, "layers": [dataclasses.asdict(r) for r in training]},
    }
    atomic.write_json(out_dir / IR_JSON, report)
    return report, text
