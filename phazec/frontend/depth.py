"""Deep models from shallow exports: each run of identical blocks exported with two and repeated in the IR.

Exporting a model to ONNX takes time in proportion to its depth (Llama 2 70B's 80 blocks: minutes),
though its blocks are identical. A model whose blocks form runs of one kind each (every block alike;
DeepSeek's dense blocks before its MoE ones) is exported with at most two blocks a run (`shallow`), and
the second block of each run is repeated to the run's length in the layer graph (`repeat_block`):
the layers, classes, edges and parameter count are those of the deep export (tests/frontend/test_depth.py
lowers both). A model whose layers vary otherwise (alternating attention windows, every other block
MoE, an architecture not listed in `UNIFORM_TYPES`) is exported at full depth, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phazec.errors import PhazecError
from phazec.frontend.config_json import model_kwargs
from phazec.frontend.export import build_config, cache_key
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Layer, LayerKind, Model
from phazec.util import sealed

UNIFORM_TYPES = frozenset(
    {"bert", "gpt2", "opt", "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3"}
)
"""Hugging Face `model_type`s whose blocks are alike but for the fields `block_runs` reads; any other
architecture is exported at full depth."""

EXPORTED_PER_RUN = 2
"""Blocks exported of each run longer than that: the first may differ from the rest only in its inputs,
the second is the one repeated."""


@dataclass(frozen=True, slots=True)
class Shallow:
    """How a deep model is exported shallow: the config to export, and each run's length at full depth."""

    cfg: ModelConfig
    runs: tuple[int, ...]
    """Blocks of each run of identical blocks, in order (their sum is the model's depth)."""

    @property
    def exported(self) -> tuple[int, ...]:
        """Blocks of each run in the shallow export."""
        return exported_blocks(self.runs)


def exported_blocks(runs: tuple[int, ...]) -> tuple[int, ...]:
    """Blocks of each run that a shallow export holds: at most `EXPORTED_PER_RUN`."""
    return tuple(min(run, EXPORTED_PER_RUN) for run in runs)


def block_runs(config: Any) -> tuple[int, ...] | None:
    """The lengths of the runs of identical blocks of a Hugging Face config object, or None when its
    blocks vary otherwise (or its architecture is not one of `UNIFORM_TYPES`)."""
    layers = getattr(config, "num_hidden_layers", None)
    if config.model_type not in UNIFORM_TYPES or not isinstance(layers, int) or layers < 1:
        return None
    for value in config.to_dict().values():  # a per-layer list (layer_types, ...) must say one thing
        if isinstance(value, list) and len(value) == layers and len({repr(v) for v in value}) > 1:
            return None
    if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
        return None  # Qwen's dense blocks among the MoE ones
    if getattr(config, "use_sliding_window", False) and getattr(config, "max_window_layers", layers) < layers:
        return None  # Qwen 2's windowed attention from some block on
    dense = getattr(config, "first_k_dense_replace", 0) if config.model_type == "deepseek_v3" else 0
    return tuple(run for run in (min(dense, layers), layers - min(dense, layers)) if run)


def shallow(cfg: ModelConfig, cache_dir: Path) -> Shallow | None:
    """How to export `cfg` with at most `EXPORTED_PER_RUN` blocks a run; None to export it at full
    depth (its blocks do not form runs, `block_runs`, or no run is longer). Decided from its config
    object (building one imports transformers and torch: seconds), then cached beside the exports, so
    a model whose export is cached lowers without them.

    Raises:
        PhazecError: `model.hf_config` is not a valid config of `model.arch` (`build_config`).
    """
    key = cache_key(cfg)
    path = cache_dir / "onnx" / f"{cfg.name}-{key}.depth.json"
    decided = sealed.read(path, key)
    if decided is None:
        config = build_config(cfg)
        runs = block_runs(config)
        depth_key = type(config).attribute_map.get("num_hidden_layers", "num_hidden_layers")
        decided = {"runs": runs, "depth_key": depth_key}
        sealed.write(path, key, decided)
    runs = tuple(decided["runs"]) if decided["runs"] is not None else None
    if runs is None or all(run <= EXPORTED_PER_RUN for run in runs):
        return None
    exported = exported_blocks(runs)
    keys: dict[str, Any] = {decided["depth_key"]: sum(exported)}
    if len(runs) == 2:  # DeepSeek: its dense blocks first
        keys["first_k_dense_replace"] = exported[0]
    for name, value in model_kwargs(cfg).items():  # a per-layer list given (layer_types), one value a layer
        if isinstance(value, list) and len(value) == sum(runs):
            keys[name] = value[: sum(exported)]
    return Shallow(replace(cfg, hf_config={**cfg.hf_config, **keys}), runs)


def deepened(model: Model, plan: Shallow) -> Model:
    """The lowered shallow export `model` with each run repeated to its length (`repeat_block`).

    Raises:
        PhazecError: the export's blocks do not fall into `plan`'s runs of one class each.
    """
    blocks = [layer.index for layer in model.layers if layer.kind is LayerKind.BLOCK]
    if len(blocks) != sum(plan.exported):
        raise PhazecError(
            f"the shallow export of {model.name!r} has {len(blocks)} blocks where {sum(plan.exported)} were "
            "exported; export it at full depth (this is phazec's fault: please report it)."
        )
    starts = [sum(plan.exported[:r]) for r in range(len(plan.runs))]
    for start, run, exported in reversed(list(zip(starts, plan.runs, plan.exported, strict=True))):
        if run > exported:
            model = repeat_block(model, blocks[start], blocks[start + 1], run)
    return model


def repeat_block(model: Model, first: int, second: int, blocks: int) -> Model:
    """`model` with the run of two identical blocks at layers `first` and `second` (= first + 1) made
    `blocks` long: the second repeated, the layers after it moved up.

    Edges from another layer into the second go to every block of the run after the first (e.g. a
    shared mask); first -> second becomes every block i -> i + 1 of the run; second -> a later layer
    leaves the run's last block; the others keep their ends.

    Raises:
        PhazecError: the two are not consecutive blocks of one class, `blocks` < 2, or the first feeds a
            layer other than the second.
    """
    kinds = {model.layers[i].kind for i in (first, second)}
    alike = model.layers[first].cls == model.layers[second].cls
    if second != first + 1 or kinds != {LayerKind.BLOCK} or not alike:
        raise PhazecError(
            f"the shallow export of {model.name!r} has no run of two identical blocks at layers {first} and "
            f"{second}; export it at full depth (this is phazec's fault: please report it)."
        )
    if blocks < 2:
        raise PhazecError(f"a run of blocks is repeated to at least 2 blocks, not {blocks}.")
    extra = blocks - 2

    def moved(index: int) -> int:
        return index + extra if index > second else index

    base = model.layers[first].name.rsplit(".", 1)[0]
    layers = [Layer(moved(layer.index), layer.name, layer.kind, layer.cls) for layer in model.layers]
    repeated = [Layer(first + i, "", LayerKind.BLOCK, model.layers[second].cls) for i in range(2, blocks)]
    layers = sorted([*layers[: second + 1], *repeated, *layers[second + 1 :]], key=lambda layer: layer.index)
    numbers = iter(range(sum(layer.kind is LayerKind.BLOCK for layer in layers)))
    layers = [
        replace(ly, name=f"{base}.{next(numbers)}") if ly.kind is LayerKind.BLOCK else ly for ly in layers
    ]
    edges = []
    for edge in model.edges:
        if edge.src == first and edge.dst == second:
            edges += [replace(edge, src=first + i, dst=first + i + 1) for i in range(blocks - 1)]
        elif edge.dst == second:
            edges += [replace(edge, src=moved(edge.src), dst=first + i) for i in range(1, blocks)]
        elif edge.src == second:
            edges.append(replace(edge, src=first + blocks - 1, dst=moved(edge.dst)))
        elif edge.src == first:
            raise PhazecError(
                f"the shallow export of {model.name!r} has an edge from block {first} to layer {edge.dst}, "
                "which a repeated run cannot carry; export it at full depth (this is phazec's fault: please "
                "report it)."
            )
        else:
            edges.append(replace(edge, src=moved(edge.src), dst=moved(edge.dst)))
    edges.sort(key=lambda edge: (edge.src, edge.dst))
    block_cls = model.layers[second].cls
    classes = []
    for c, cls in enumerate(model.classes):
        members = tuple(map(moved, cls.members))
        if c == block_cls:
            members = tuple(sorted({*members, *range(first, first + blocks)}))
        classes.append(replace(cls, members=members))
    graph = model.classes[block_cls].graph
    routing = model.routing
    if routing is not None:
        experts = sum(graph.tensors[w].numel() for w in graph.weights if w in routing.expert_parameters)
        routing = replace(routing, expert_parameter_count=routing.expert_parameter_count + extra * experts)
    return replace(
        model,
        layers=layers,
        edges=edges,
        classes=classes,
        parameter_count=model.parameter_count + extra * graph.parameter_count(),
        routing=routing,
    )
