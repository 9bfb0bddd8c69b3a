"""Frontend: a model preset (Hugging Face config or ONNX file) -> phazec IR."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from phazec.errors import PhazecError
from phazec.frontend.depth import deepened, shallow
from phazec.frontend.export import DTYPES, exported_onnx
from phazec.frontend.lower import lower_onnx, scores_length
from phazec.frontend.mtp import MTP_ARCHS
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Model
from phazec.util.progress import stage

log = logging.getLogger(__name__)

SOURCES = ("hf", "onnx")
MAX_SEQ_LEN = 1 << 20
"""The longest sequence length accepted (tokens): a million, beyond any model's context."""


def default_cache_dir(configured: str = "") -> Path:
    """The cache directory: the configured one, else $PHAZEC_CACHE_DIR, else ~/.cache/phazec."""
    chosen = configured or os.environ.get("PHAZEC_CACHE_DIR") or str(Path.home() / ".cache" / "phazec")
    return Path(chosen).expanduser()


def validate(cfg: ModelConfig) -> None:
    """Range checks Hydra's types cannot express; raises PhazecError naming the bad value."""
    if cfg.source not in SOURCES:
        raise PhazecError(f"model.source={cfg.source!r} is not a model source; valid: {list(SOURCES)}.")
    check_mtp(cfg)
    if cfg.source == "onnx":
        onnx_path(cfg.path)
        if cfg.seq_len < 0:
            raise PhazecError(
                f"model.seq_len={cfg.seq_len} is not valid: give the ONNX model's sequence length in "
                "tokens, or 0 to read it from its attention scores."
            )
        return
    if not 0 < cfg.seq_len <= MAX_SEQ_LEN:
        raise PhazecError(
            f"model.seq_len={cfg.seq_len} is not valid: give a positive number of tokens up to "
            f"{MAX_SEQ_LEN:,}, e.g. 2048."
        )
    if cfg.dtype not in DTYPES:
        raise PhazecError(f"model.dtype={cfg.dtype!r} is not supported; valid: {list(DTYPES)}.")
    if cfg.moe.capacity_factor is not None and not cfg.moe.capacity_factor > 0:
        raise PhazecError(
            f"model.moe.capacity_factor={cfg.moe.capacity_factor} is not valid: give a positive factor of "
            "the balanced tokens per expert each expert processes (e.g. 1.0 or 1.25; tokens beyond it are "
            "dropped), or null for dropless routing."
        )
    if not cfg.moe.imbalance >= 1:
        raise PhazecError(
            f"model.moe.imbalance={cfg.moe.imbalance} is not valid: give the busiest expert's tokens over "
            "the balanced share, at least 1 (1: balanced routing, e.g. 1.2 for 20% more)."
        )
    bad_widths = [t for t in cfg.tp_widths if t <= 0]
    if bad_widths or not cfg.tp_widths:
        raise PhazecError(
            f"model.tp_widths={list(cfg.tp_widths)} must list positive widths, e.g. [1, 2, 4, 8]."
        )


def check_mtp(cfg: ModelConfig) -> None:
    """`model.mtp_layers` is at least 0, and above 0 only for a Hugging Face class that has MTP modules."""
    if cfg.mtp_layers < 0:
        raise PhazecError(
            f"model.mtp_layers={cfg.mtp_layers} is not valid: give the number of multi-token-prediction "
            "modules to train after the last block, 0 for none (DeepSeek-V3 trains 1)."
        )
    if cfg.mtp_layers and (cfg.source != "hf" or cfg.arch not in MTP_ARCHS):
        model = f"the ONNX file {cfg.path!r}" if cfg.source == "onnx" else f"{cfg.arch or 'no class'}"
        raise PhazecError(
            f"model.mtp_layers={cfg.mtp_layers} adds DeepSeek's multi-token-prediction modules, which phazec "
            f"builds for the Hugging Face classes {list(MTP_ARCHS)} only, and model {cfg.name!r} is "
            f"{model}: set model.mtp_layers=0, or use model=deepseek_v3."
        )


def onnx_path(path: str) -> None:
    """`model.path` of an ONNX model names an existing file."""
    if not path:
        raise PhazecError("model.path is not set: give model.path=/abs/path/model.onnx (an ONNX file).")
    if Path(path).expanduser().is_dir():
        raise PhazecError(f"model.path={path!r} is a directory: give the .onnx file inside it.")
    if not Path(path).expanduser().is_file():
        raise PhazecError(f"ONNX file {path!r} does not exist; give model.path=<an existing .onnx file>.")


def load_model(cfg: ModelConfig, cache_dir: Path) -> Model:
    """Lower a model preset to the IR, exporting (and caching) Hugging Face models to ONNX first: with
    two blocks of each run of identical blocks, repeated to its length in the IR (`phazec.frontend.depth`)."""
    validate(cfg)
    if cfg.source == "onnx":
        model = lower_onnx(Path(cfg.path).expanduser(), cfg.name, cfg.seq_len)
        say_seq_len(model, cfg.seq_len)
        return model
    with stage("export"):
        plan = shallow(cfg, cache_dir)
        path = exported_onnx(plan.cfg if plan is not None else cfg, cache_dir)
    model = lower_onnx(path, cfg.name, cfg.seq_len)
    return deepened(model, plan) if plan is not None else model


def say_seq_len(model: Model, given: int) -> None:
    """Log the sequence length read from an ONNX model's attention scores, or warn that none was, or
    that the `given` one (`model.seq_len`) is not its scores' length."""
    if given:
        read = scores_length([cls.graph for cls in model.classes])
        if read and read != given:
            log.warning(
                "model.seq_len=%d, but the ONNX model's attention scores are %d long: no attention core "
                "is found at %d, so its attention is priced op by op as exported",
                given, read, given,
            )  # fmt: skip
        return
    if model.seq_len:
        log.info("model.seq_len=%d, read from the ONNX model's attention scores", model.seq_len)
        return
    log.warning(
        "no attention scores of one sequence length found in the ONNX model (products [.., s, d] x "
        "[.., d, s]): its attention is priced op by op as exported (no flash or fused-softmax kernel, "
        "no selective recompute) and its tokens/s reads 0; give model.seq_len=<tokens> if it has one"
    )
