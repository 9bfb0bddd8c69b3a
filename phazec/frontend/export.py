"""Hugging Face config -> weight-free ONNX file, cached on disk.

The model is built on the meta device (no weights, no download) in training mode, wrapped so that its
output is the training loss, and exported with torch's dynamo exporter. The batch dimension is exported
at a prime no model dimension shares (`BATCH_SENTINEL`), so the lowering can tell which axis of every
tensor scales with the microbatch.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import json
import logging
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from phazec.errors import PhazecError
from phazec.frontend.config_json import model_kwargs
from phazec.frontend.moe import routing_of, static_experts, static_latent_attention
from phazec.frontend.mtp import add_mtp, mtp_loss_of
from phazec.frontend.rotary import real_rotary
from phazec.frontend.schema import ModelConfig
from phazec.util import sealed
from phazec.util.atomic import write_bytes

log = logging.getLogger(__name__)

BATCH_SENTINEL = 1009
"""The batch size of every export: a prime, so an axis is batch-scaled iff the sentinel divides it."""

EXPORT_SOURCES = ("export.py", "moe.py", "mtp.py", "rotary.py")
"""The modules of `phazec.frontend` whose code shapes the exported graph (this one, and the formulations
swapped in while exporting): their text is part of the cache key, so an exported file is never reused
across a change to them."""

DTYPES = ("bfloat16", "float16", "float32")
KEPT_METADATA = "pkg.torch.onnx.name_scopes"
"""The only per-node metadata kept in the cached file (module scopes, used to find layers)."""


def cache_key(cfg: ModelConfig) -> str:
    """A digest of everything that affects the exported file (reads versions without importing torch)."""
    facts = {
        "arch": cfg.arch,
        "hf_config": dict(sorted(model_kwargs(cfg).items())),
        "seq_len": cfg.seq_len,
        "dtype": cfg.dtype,
        "moe": [cfg.moe.imbalance, cfg.moe.capacity_factor],
        "mtp": cfg.mtp_layers,
        "batch": BATCH_SENTINEL,
        "sources": export_sources_digest(),
        "versions": [metadata.version(p) for p in ("torch", "transformers", "onnx", "onnxscript")],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:20]


@functools.cache
def export_sources_digest() -> str:
    """The SHA-256 of the text of `EXPORT_SOURCES`, read once per process."""
    digest = hashlib.sha256()
    for name in EXPORT_SOURCES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def exported_onnx(cfg: ModelConfig, cache_dir: Path) -> Path:
    """The cached ONNX file of a Hugging Face model preset, exporting it on a cache miss or when the
    cached file does not match the checksum saved beside it."""
    path = cache_dir / "onnx" / f"{cfg.name}-{cache_key(cfg)}.onnx"
    checksum = path.with_name(path.name + ".sha256")
    if path.exists():
        if sealed.read(checksum, path.name) == sealed.digest(path.read_bytes()):
            log.info("ONNX cache hit: %s", path)
            return path
        log.warning("the cached export %s is damaged or unchecked; exporting it again", path)
    log.info("exporting %s (%s) to ONNX", cfg.name, cfg.arch)
    try:
        model = build_meta_model(cfg)
    except PhazecError:
        raise
    except Exception as err:  # transformers and torch reject inconsistent dimensions in many ways
        raise PhazecError(
            f"model {cfg.name!r} ({cfg.arch}) cannot be built from model.hf_config={model_kwargs(cfg)} and "
            f"model.seq_len={cfg.seq_len}: {plain_text(f'{type(err).__name__}: {err}')}"
        ) from err
    try:
        data = export_proto(model, cfg).SerializeToString()
    except PhazecError:
        raise
    except Exception as err:
        raise PhazecError(export_failure(cfg, err)) from err
    write_bytes(path, data)
    sealed.write(checksum, path.name, sealed.digest(data))
    return path


ANSI_CODE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""A terminal's colour or cursor code, as torch's exporter puts in its messages."""
FAILING_OPERATOR = re.compile(r"torch\.ops\.(\w+)\.(\w+)|\b(aten)(?:::|_)(\w+)")
"""Where an exporter's message names the operator it failed on: `target=torch.ops.aten.histc.default`
(the node being translated) or `aten_histc` / `aten::histc`."""
EXCEPTION_SUMMARY = "## Exception summary"
"""The heading under which torch's exporter lists the chain of exceptions, innermost first."""


def plain_text(text: str) -> str:
    """`text` without terminal codes, its whitespace (newlines included) collapsed: one paragraph."""
    return " ".join(ANSI_CODE.sub("", text).split())


def export_failure(cfg: ModelConfig, error: Exception) -> str:
    """What to say when torch's exporter fails on a model that was built: the operator it failed on
    (when its message names one) and the whole cause in plain text (the exporter's chain of exceptions,
    innermost first, without its advice to PyTorch developers), and that the architecture is not
    supported as the installed torch exports it."""
    text = ANSI_CODE.sub("", str(error))
    cause = text.partition(EXCEPTION_SUMMARY)[2] or text
    cause = cause.split("(Refer to the full stack trace", 1)[0]
    links = [" ".join(link.split()) for link in cause.split("⬆️")]
    chain = " -> ".join(re.sub(r"^<class '(?:[\w.]*\.)?(\w+)'>", r"\1", link) for link in links if link)
    found = FAILING_OPERATOR.search(text)
    operator = "" if found is None else "::".join(part for part in found.groups() if part)
    failed_on = f"fails on the operator {operator}" if operator else "fails"
    return (
        f"model {cfg.name!r} ({cfg.arch}) is not supported: torch {metadata.version('torch')}'s ONNX "
        f"exporter {failed_on} ({type(error).__name__}: {chain or plain_text(text)}). phazec lowers a model "
        "through that export; an architecture using an operator it cannot export cannot be lowered."
    )


def hf_model_class(arch: str) -> Any:
    """The transformers class named `arch`, or a PhazecError saying what is valid."""
    import transformers

    cls = getattr(transformers, arch, None)
    trainable = (
        isinstance(cls, type)
        and issubclass(cls, transformers.PreTrainedModel)
        and "labels" in inspect.signature(cls.forward).parameters
    )
    if not trainable:
        reason = (
            f"{arch} has no loss head (its forward takes no labels)"
            if isinstance(cls, type)
            else f"the installed transformers {transformers.__version__} has no class {arch}"
        )
        raise PhazecError(
            f"model.arch={arch!r} is not supported: phazec trains Hugging Face language-model classes "
            f"with a loss head, and {reason}; give one such as LlamaForCausalLM, GPT2LMHeadModel, "
            "OPTForCausalLM or BertForMaskedLM."
        )
    return cls


def build_config(cfg: ModelConfig) -> Any:
    """The architecture's config object from the preset (and its config.json), rejecting keys of
    `model.hf_config` neither the config nor the model's code (which reads some, such as Qwen3-MoE's
    `head_dim`, with `getattr`) knows (`unknown_keys`)."""
    config_class = hf_model_class(cfg.arch).config_class
    source = inspect.getsource(sys.modules[hf_model_class(cfg.arch).__module__])
    unknown = [k for k in unknown_keys(config_class, cfg.hf_config) if f'"{k}"' not in source]
    if unknown:
        valid = sorted(k for k in config_class().to_dict() if not k.startswith("_"))
        named = "; ".join(f"{key!r}{closest(key, valid)}" for key in unknown)
        raise PhazecError(
            f"model.hf_config has keys that {config_class.__name__} ({cfg.arch}) does not define: {named}. "
            f"Its keys are {', '.join(valid)}."
        )
    attention = "sdpa" if hf_model_class(cfg.arch)._supports_sdpa else "eager"
    config = config_class(**model_kwargs(cfg), use_cache=False, attn_implementation=attention)
    max_positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if max_positions is not None and cfg.seq_len > max_positions:
        raise PhazecError(
            f"model.seq_len={cfg.seq_len} exceeds the {cfg.arch} config's {max_positions} positions; "
            f"use a sequence length of at most {max_positions} or raise the position count in hf_config."
        )
    return config


def closest(key: str, valid: list[str]) -> str:
    """ " (did you mean 'x'?)" naming the valid key closest to `key` (difflib), or "" if none is close."""
    close = difflib.get_close_matches(key, valid, 1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_keys(config_class: Any, keys: dict[str, Any]) -> list[str]:
    """The keys of `keys` that `config_class` neither defines nor takes under another name: a key
    the installed transformers renamed (`rope_theta`, `rope_parameters` in transformers 5) is read
    into its new name, while an unknown one stays an attribute of its own."""
    defaults = config_class()
    candidates = {k: v for k, v in keys.items() if not hasattr(defaults, k)}
    if not candidates:
        return []
    try:
        kept = set(config_class(**candidates).to_dict())
    except Exception:  # a value the config's own checks reject: the keys are named for what they are
        kept = set(candidates)
    return sorted(k for k in candidates if k in kept)


def build_meta_model(cfg: ModelConfig) -> Any:
    """The model on the meta device in training mode, wrapped to return its loss."""
    import torch

    config = build_config(cfg)
    arch = hf_model_class(cfg.arch)
    with torch.device("meta"):
        model = arch(config).to(getattr(torch, cfg.dtype))
    model.train()
    return model


def loss_of(model: Any) -> Any:
    """A module whose output is `model`'s training loss for token ids and labels."""
    import torch

    class LossOf(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.m = inner

        def forward(self, input_ids: Any, labels: Any) -> Any:
            return self.m(input_ids=input_ids, labels=labels).loss

    return LossOf(model)


QUIET_LOGGERS = ("torch.onnx", "transformers")
"""Libraries whose log records while exporting go to the run's log file, not to stderr."""


@contextmanager
def exporter_logs_to_files() -> Iterator[None]:
    """While exporting, the exporter's and transformers' log records (e.g. "torchvision is not
    installed") go to the log files the root logger writes (a Hydra run's log file), not through their
    own handlers (or Python's last-resort one) to stderr; with no log file (the Python API), nowhere."""
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    saved = [(logger.handlers, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers = list(files) or [logging.NullHandler()]
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (handlers, propagate) in zip(loggers, saved, strict=True):
            logger.handlers, logger.propagate = handlers, propagate


def export_proto(model: Any, cfg: ModelConfig) -> Any:
    """Export with the dynamo exporter, weights as shape-only graph inputs; returns the ModelProto."""
    import onnx
    import torch

    if cfg.mtp_layers:
        add_mtp(model, cfg.mtp_layers)
    static_latent_attention(model)
    routing = routing_of(model, cfg)
    if routing is not None:
        static_experts(model, routing, cfg.seq_len)
    wrapper = mtp_loss_of(model) if cfg.mtp_layers else loss_of(model)
    with torch.device("meta"):
        ids = torch.zeros((BATCH_SENTINEL, cfg.seq_len), dtype=torch.long)
        labels = torch.zeros((BATCH_SENTINEL, cfg.seq_len), dtype=torch.long)
    with warnings.catch_warnings(), torch.no_grad(), exporter_logs_to_files(), real_rotary(model):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, (ids, labels), dynamo=True, optimize=False, verbose=False)
    if program is None:
        raise PhazecError(f"torch.onnx.export returned no program for {cfg.name!r} ({cfg.arch}).")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.onnx"
        program.save(str(raw), include_initializers=False, keep_initializers_as_inputs=True)
        proto = onnx.load(str(raw), load_external_data=False)
    for node in proto.graph.node:
        kept = [p for p in node.metadata_props if p.key == KEPT_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    parameters = sorted(name for name, _ in wrapper.named_parameters(remove_duplicate=False))
    onnx.helper.set_model_props(
        proto,
        {
            "phazec.parameters": json.dumps(parameters),
            "phazec.data_inputs": json.dumps(["input_ids", "labels"]),
            "phazec.batch_sentinel": str(BATCH_SENTINEL),
            **({"phazec.routing": json.dumps(asdict(routing))} if routing is not None else {}),
        },
    )
    return proto
