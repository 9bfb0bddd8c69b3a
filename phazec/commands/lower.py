"""`phazec-ir`: lower a model, derive its per-device training graph, and report both (`ir.json`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from phazec.config import command_line as validate
from phazec.config.schema import validate_train
from phazec.frontend import default_cache_dir, load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.summary import summarize
from phazec.passes.attention import is_causal
from phazec.passes.training import training_rows
from phazec.report.table import layer_table, training_table
from phazec.util import atomic
from phazec.util.progress import stage

IR_JSON = "ir.json"


def lower_config(cfg: DictConfig, out_dir: Path) -> tuple[dict[str, Any], str]:
    """Lower the configured model and write `out_dir/ir.json`; returns its content and the text
    `phazec-ir` prints (the layer table and the per-device training table)."""
    model_cfg = OmegaConf.to_object(cfg.model)
    assert isinstance(model_cfg, ModelConfig)
    validate_train(cfg.train)
    cache_dir = default_cache_dir(cfg.cache_dir)
    validate.before_lowering(cfg, cache_dir)
    with stage("lowering"):
        model = load_model(model_cfg, cache_dir)
    rows = summarize(model)
    tp = cfg.parallel.tp
    training, _ = training_rows(
        model, tp, vocab_parallel=cfg.parallel.vocab_parallel, optimizer=cfg.train.optimizer,
        attention=cfg.hw.device.attention, causal=is_causal(model_cfg.arch, model_cfg.causal),
        fuse_elementwise=bool(cfg.hw.device.fuse_elementwise),
        fuse_norm_rope=bool(cfg.hw.device.fuse_norm_rope),
    )  # fmt: skip
    text = "\n".join([
        f"{model.name}: {len(model.layers)} layers, {len(model.classes)} classes, "
        f"{model.parameter_count:,} parameters, sequence {model.seq_len}",
        layer_table(rows),
        f"\nper device at tensor-parallel width {tp} ({cfg.train.optimizer}), per sample:",
        training_table(training),
    ])  # fmt: skip
    report = {
        "model": model.name,
        "seq_len": model.seq_len,
        "parameters": model.parameter_count,
        "layers": [dataclasses.asdict(r) for r in rows],
        "edges": [dataclasses.asdict(e) for e in model.edges],
        "training": {"tp": tp, "layers": [dataclasses.asdict(r) for r in training]},
    }
    atomic.write_json(out_dir / IR_JSON, report)
    return report, text
