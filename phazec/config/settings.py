"""A composed config, checked once and typed: what every command reads.

`settings_from_config(cfg)` runs, before anything is lowered or evaluated, every check a group's values
need on their own (non-finite numbers anywhere, missing or ill-typed keys, names that become paths, the
model's dimensions, the cache directory, the space and its size, system, cost model, solver, search,
training knobs and plan) and returns frozen `Settings`: nothing below the commands sees the composed
config. The checks one command alone needs stay with it (`phazec.commands.search`: microbatches
dividing the global batch, the baseline plan; `phazec.commands.plan`: the plan's widths against the
system). Each check raises a PhazecError naming the bad value and what would be valid.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from phazec.commands.settings import ParallelConfig, Settings, TrackingConfig
from phazec.config.command_line import preset
from phazec.config.schema import hydra_twin
from phazec.cost.model import latency_model_from_config
from phazec.errors import PhazecError
from phazec.frontend import check_mtp, default_cache_dir
from phazec.frontend.config_json import model_kwargs, with_config_json
from phazec.frontend.moe import EXPERT_KEYS, check_expert_parallel, check_moe_tensor_parallel
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import HwSpace, check_size, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.predict.offload import check_offload
from phazec.predict.plan_report import AUTO_DP, Plan
from phazec.predict.training import KNOB_FIELDS, SELECTIVE_KNOBS, Knobs, Training, check_knob, spec
from phazec.search.driver import check_search
from phazec.search.schema import SearchConfig
from phazec.solvers.schedule.backends import check_config
from phazec.solvers.schema import SolverConfig
from phazec.util import sealed
from phazec.util.atomic import writable_dir

T = TypeVar("T")

TPUV4_PRESET = "tpuv4"
"""The `hw` preset holding the TPUv4-like design every search compares against."""


def settings_from_config(cfg: DictConfig) -> Settings:
    """Check a composed config and type it (module docstring).

    Raises:
        PhazecError: the first bad value, named, with what would be valid.
    """
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    search = typed(SearchConfig, cfg.search, "search")
    check_search(search)
    model = with_config_json(typed(ModelConfig, cfg.model, "model"))
    for key in ("model.name", "hw.name", "system.name"):
        path_name(key, OmegaConf.select(cfg, key))
    model_dims(model)
    cache_dir = default_cache_dir(str(plain["cache_dir"]))
    writable_dir(cache_dir, "cache_dir")
    sealed.shared_warning(cache_dir, "cache_dir")
    solver = typed(SolverConfig, cfg.solver, "solver")
    check_config(solver)
    system_config = typed(SystemConfig, cfg.system, "system")
    system = system_from_config(system_config)
    hw = hw_space_from_config(typed(HwConfig, cfg.hw, "hw"))
    check_size(hw, search.max_designs)
    train = train_knobs(cfg.train, system_config)
    plan = plan_settings(cfg.plan, cfg.train, system.devices)
    check_mtp(model)
    check_precision(hw, train.tried("precision"), "train.precision")
    check_precision(hw, (plan.training.precision,), "plan.precision")
    check_context_parallel(model, hw, train.tried("cp"), "train.cp")
    check_context_parallel(model, hw, (plan.training.cp,), "plan.cp")
    if train.fixed.cp_all_to_all:
        check_cp_all_to_all(model, model.tp_widths, train.tried("cp"), "train")
    if plan.training.cp_all_to_all:
        check_cp_all_to_all(model, (plan.tp,), (plan.training.cp,), "plan")
    check_selective_modules(model, train.fixed, train.tried("recompute"), "train")
    check_selective_modules(model, plan.training, (plan.training.recompute,), "plan")
    check_all_to_all_knobs(train.fixed, "train")
    check_all_to_all_knobs(plan.training, "plan")
    check_fp8_param_gather(train.fixed, train.tried("precision"), train.tried("zero_stage"), "train")
    check_fp8_param_gather(plan.training, (plan.training.precision,), (plan.training.zero_stage,), "plan")
    check_pipeline_schedule(train.fixed.pipeline_schedule, train.tried("interleave"), "train")
    check_pipeline_schedule(plan.training.pipeline_schedule, (plan.training.interleave,), "plan")
    blocks = model_kwargs(model).get("num_hidden_layers") if model.source == "hf" else None
    check_recompute_layers(train.tried("recompute_layers"), train.tried("recompute"), "train", blocks)
    check_recompute_layers((plan.training.recompute_layers,), (plan.training.recompute,), "plan", blocks)
    host_s = system.host_link_bytes_per_s
    check_offload(
        "train.offload_layers", train.fixed.offload_layers, host_s, train.tried("recompute"), blocks
    )
    check_offload(
        "plan.offload_layers", plan.training.offload_layers, host_s, (plan.training.recompute,), blocks
    )
    typed_settings = Settings(
        model=model,
        hw=hw,
        system=system,
        cost=latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        train=train,
        plan=plan,
        parallel=typed(ParallelConfig, cfg.parallel, "parallel"),
        search=search,
        solver=solver,
        tracking=typed(TrackingConfig, cfg.tracking, "tracking"),
        cache_dir=cache_dir,
        config={str(key): value for key, value in plain.items()},
    )
    devices = system.devices
    check_expert_parallel(model, "train", typed_settings.train.fixed.ep, devices)
    check_expert_parallel(model, "plan", typed_settings.plan.training.ep, devices)
    check_moe_tensor_parallel(
        model, "model.tp_widths", model.tp_widths, "train.sequence_parallel", train.tried("sequence_parallel")
    )
    check_moe_tensor_parallel(
        model, "plan.tp", (plan.tp,), "plan.sequence_parallel", (plan.training.sequence_parallel,)
    )
    finite_numbers(plain)  # last: a group's own check names a bad value more precisely
    return typed_settings


def typed(kind: type[T], node: Any, group: str) -> T:
    """`node` (a composed group, or plain data) as the frozen settings `kind`, checked against its
    schema (`phazec.config.schema.hydra_twin`).

    Raises:
        PhazecError: a key is unknown, a value has the wrong type, or a required value is missing.
    """
    data = checked(kind, node, group)
    return build(kind, data)


def checked(kind: type, node: Any, group: str) -> dict[str, Any]:
    """The values of `node` merged into the schema of settings `kind`, as plain data."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(hydra_twin(kind)), node)
    except OmegaConfBaseException as error:
        detail = " ".join(str(error).split())
        raise PhazecError(f"The {group} config does not fit its schema {kind.__name__}: {detail}") from None
    missing = sorted(OmegaConf.missing_keys(merged))
    if missing:
        raise PhazecError(
            f"The {group} config is missing {', '.join(f'{group}.{key}' for key in missing)}: "
            f"every field of {kind.__name__} without a default must be set (see conf/{group}/)."
        )
    values = OmegaConf.to_container(merged, resolve=True)
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}


def build(kind: type[T], data: dict[str, Any]) -> T:
    """Frozen settings `kind` from plain data of its shape (nested settings built in turn, lists kept
    or made tuples as the field's type says)."""
    hints = get_type_hints(kind)
    values = {f.name: _value(hints[f.name], data[f.name]) for f in fields(kind) if f.name in data}  # type: ignore[arg-type]
    return kind(**values)


def _value(kind: Any, value: Any) -> Any:
    """Plain `value` as a field of type `kind` holds it."""
    origin = get_origin(kind)
    if is_dataclass(kind) and isinstance(kind, type):
        return build(kind, value)
    if origin is types.UnionType and value is not None:
        return _value(next(arg for arg in get_args(kind) if arg is not type(None)), value)
    if origin in (list, tuple) and value is not None:
        element = get_args(kind)[0]
        items = [_value(element, item) for item in value]
        return tuple(items) if origin is tuple else items
    return value


def check_precision(hw: HwSpace, precisions: Sequence[str], name: str) -> None:
    """Every precision of `precisions` (the values of `name`) runs on the hw preset's tensor cores.

    Raises:
        PhazecError: one does not (fp8 without FP8 tensor cores, mxfp8 without MXFP8).
    """
    runs = hw.device.precisions()
    for precision in precisions:
        if precision not in runs:
            raise PhazecError(
                f"{name}={precision!r} is not valid on hw={hw.name}: its tensor cores run "
                f"{', '.join(runs)} only (hw.device.fp8_rate = {hw.device.fp8_rate}, hw.device.mxfp8 = "
                f"{hw.device.mxfp8}). Use one of those, or a chip with FP8 tensor cores (h100 and later; "
                "mxfp8: Blackwell), or give the template FP8 tensor cores with hw.device.fp8_rate=2."
            )


def check_context_parallel(model: ModelConfig, hw: HwSpace, cps: Sequence[int], name: str) -> None:
    """Every context-parallel width of `cps` (the values of `name`) divides the model's sequence and
    runs on a fused attention kernel.

    Raises:
        PhazecError: one does not.
    """
    for cp in cps:
        if cp == 1:
            continue
        if model.seq_len % cp:
            raise PhazecError(
                f"{name}={cp} does not divide the sequence of model.seq_len={model.seq_len}: context "
                "parallelism gives each of its devices an equal share of every sample's tokens; choose a "
                "divisor of the sequence length."
            )
        if hw.device.attention != "flash":
            raise PhazecError(
                f"{name}={cp} needs a fused attention kernel, which passes keys and values round the "
                f"ring while it computes (as Megatron-Core and torchtitan require); hw.device.attention "
                f"= {hw.device.attention!r}: set hw.device.attention=flash, or cp=1."
            )


def check_cp_all_to_all(model: ModelConfig, tps: Sequence[int], cps: Sequence[int], group: str) -> None:
    """Context parallelism's all-to-all variant (`<group>.cp_comm_type=a2a`) at every tensor-parallel
    width of `tps` and context-parallel width of `cps`: each cp device takes 1/cp of a tensor-parallel
    rank's attention heads and of its key-value heads, so both divide by cp (Transformer Engine's
    all-to-all splits each of the query, key and value by heads). Checked where the model's config
    names its heads (`num_attention_heads`; key-value heads `num_key_value_heads`, else as many).

    Raises:
        PhazecError: a rank's heads or key-value heads do not divide by a cp.
    """
    kwargs = model_kwargs(model) if model.source == "hf" else {}
    heads = kwargs.get("num_attention_heads")
    if not isinstance(heads, int):
        return
    kv_heads = kwargs.get("num_key_value_heads") or heads
    for tp in tps:
        for cp in cps:
            local = (heads // tp, max(1, kv_heads // tp))
            if cp > 1 and (local[0] % cp or local[1] % cp):
                raise PhazecError(
                    f"{group}.cp_comm_type=a2a at tp {tp} and cp {cp} is not valid for model {model.name!r}: "
                    f"its all-to-alls give each of the cp devices 1/cp of a tensor-parallel rank's "
                    f"{local[0]} attention heads and {local[1]} key-value heads ({heads} and {kv_heads} over "
                    f"tp {tp}), and {cp} does not divide both; use {group}.cp_comm_type=p2p (the ring), "
                    "or a cp that divides them."
                )


def as_given(values: Sequence[Any], group: str) -> Any:
    """The values a knob takes as `<group>.<knob>` spells them: the list a search tries (`train`), or
    the one setting of a plan."""
    return list(values) if group == "train" else values[0]


def spelled(value: str, group: str) -> str:
    """`value` as `<group>.<knob>=` takes it: a one-element list for a search (`train`), else itself."""
    return f"[{value}]" if group == "train" else value


def check_selective_modules(
    model: ModelConfig, training: Training, recompute: Sequence[str], group: str
) -> None:
    """The modules selective recompute also reruns (`<group>.recompute_mla_up_proj`,
    `<group>.recompute_mlp`, `<group>.recompute_layernorm`, `<group>.recompute_moe_act`;
    `Training.selective_modules`), with the recompute modes `recompute` tried: each needs selective
    recompute among them, the up-projections a model with multi-head latent attention (a Hugging Face
    config with a `kv_lora_rank`), and the norm and the experts' activation a model with routed experts.

    Raises:
        PhazecError: a module is on without either.
    """
    for knob, module in SELECTIVE_KNOBS.items():
        if module not in training.selective_modules:
            continue
        name = f"{group}.{knob}=true"
        if module == "mla_up_proj" and (model.source != "hf" or not model_kwargs(model).get("kv_lora_rank")):
            raise PhazecError(
                f"{name} recomputes multi-head latent attention's up-projections, but model {model.name!r} "
                "has none (its model.hf_config has no kv_lora_rank, as DeepSeek-V2, DeepSeek-V3 and Kimi K2 "
                f"have): set {group}.{knob}=false."
            )
        if module in ("layernorm", "moe_act") and not (
            model.source == "hf" and any(k in model.hf_config for k in EXPERT_KEYS)
        ):
            what = (
                "normalisation before its router" if module == "layernorm" else "routed experts' activation"
            )
            raise PhazecError(
                f"{name} reruns a Mixture-of-Experts block's {what}, "
                f"but model {model.name!r} has no routed experts (its model.hf_config names none of "
                f"{list(EXPERT_KEYS)}): set {group}.{knob}=false."
            )
        if "selective" not in recompute:
            raise PhazecError(
                f"{name} extends selective recompute, but {group}.recompute is "
                f"{as_given(recompute, group)!r}: set {group}.recompute={spelled('selective', group)}, or "
                f"{group}.{knob}=false."
            )


MAX_RECOMPUTE_LAYERS = 2**31 - 1
"""The most blocks a model chunk can rerun where the model's block count is not known before lowering."""


def check_recompute_layers(
    layers: Sequence[int], recompute: Sequence[str], group: str, blocks: int | None
) -> None:
    """`<group>.recompute_layers` (block recompute's blocks per model chunk: `layers`, those tried), with
    the recompute modes `recompute` tried, on a model of `blocks` transformer blocks (None: not known
    before lowering): anything but its default needs block among them, and none is above the blocks.

    Raises:
        PhazecError: it is set without block recompute, or above the model's blocks.
    """
    most = MAX_RECOMPUTE_LAYERS if blocks is None else blocks
    over = [n for n in layers if n > most]
    if over:
        raise PhazecError(
            f"{group}.recompute_layers={as_given(layers, group)} is not valid: {over[0]} is more than the "
            f"model's {most} transformer blocks; give 1 to {most} ({most} reruns every block of each model "
            "chunk)."
        )
    if list(layers) != [1] and "block" not in recompute:
        raise PhazecError(
            f"{group}.recompute_layers={as_given(layers, group)} sets how many blocks of each model chunk "
            f"block recompute reruns, but {group}.recompute is {as_given(recompute, group)!r}: set "
            f"{group}.recompute={spelled('block', group)} (Megatron-Core's "
            f"recompute_method=block), or leave {group}.recompute_layers at 1."
        )


def check_all_to_all_knobs(training: Training, group: str) -> None:
    """`<group>.overlap_moe_expert_parallel_comm` and `<group>.moe_token_dispatcher=flex` shape the
    expert-parallel all-to-alls: they need some.

    Raises:
        PhazecError: either is set at ep 1.
    """
    if training.ep > 1:
        return
    if training.overlap_moe_expert_parallel_comm:
        setting, what, off = "overlap_moe_expert_parallel_comm=true", "overlaps", "=false"
    elif training.deduplicates_tokens:
        setting, what, off = "moe_token_dispatcher=flex", "deduplicates the tokens of", "=alltoall"
    else:
        return
    name = setting.split("=")[0]
    raise PhazecError(
        f"{group}.{setting} {what} the expert-parallel all-to-alls, but {group}.ep=1 sends none: set "
        f"{group}.ep above 1 on a Mixture-of-Experts model, or {group}.{name}{off}."
    )


def check_fp8_param_gather(
    training: Training, precisions: Sequence[str], zero_stages: Sequence[int], group: str
) -> None:
    """`<group>.fp8_param_gather=true` gathers ZeRO-3's FP8 weight copies: it needs zero stage 3 and a
    precision fp8 or mxfp8 among those tried (the plans tried without either gather as before).

    Raises:
        PhazecError: it is set and no plan tried has zero stage 3, or none an FP8 precision.
    """
    if not training.fp8_param_gather:
        return
    many = group == "train"
    if 3 not in zero_stages:
        given = f"{group}.zero_stage is {list(zero_stages) if many else zero_stages[0]!r}"
    elif all(p == "bf16" for p in precisions):
        given = f"{group}.precision is {list(precisions) if many else precisions[0]!r}"
    else:
        return
    raise PhazecError(
        f"{group}.fp8_param_gather=true gathers the FP8 copies of the weights ZeRO-3 shards, but {given}: "
        f"set {group}.zero_stage={'[3]' if many else '3'} and {group}.precision="
        f"{'[fp8]' if many else 'fp8'} (or mxfp8, on a chip with FP8 tensor cores), or "
        f"{group}.fp8_param_gather=false."
    )


def check_pipeline_schedule(schedule: str, interleave: Sequence[int], group: str) -> None:
    """`<group>.pipeline_schedule=zb_h1` is a schedule of one model chunk per stage.

    Raises:
        PhazecError: zb_h1 with an interleave above 1 (among those a search tries).
    """
    if schedule != "zb_h1":
        return
    chunked = [v for v in interleave if v > 1]
    if chunked:
        raise PhazecError(
            f"{group}.pipeline_schedule=zb_h1 is not an interleaved schedule, but {group}.interleave is "
            f"{as_given(interleave, group)!r}: ZB-H1 runs one model chunk per stage (1F1B's order with the "
            f"weight gradients deferred); set {group}.interleave={spelled('1', group)}, or "
            f"{group}.pipeline_schedule=1f1b for interleaved 1F1B."
        )


def train_knobs(train: Any, system: SystemConfig) -> Knobs:
    """The training settings a search tries: each searched knob's list of `train.*` (checked), every
    other knob's setting, and the HBM sizes of `system.hbm_gb` in the order given."""
    return Knobs.searching([round(g * 1e9) for g in system.hbm_gb], **checked(Training, train, "train"))


def plan_settings(plan: Any, train: Any, devices: int) -> Plan:
    """The plan of `plan.*`: positive widths (`plan.dp=auto`: the replicas that fill the `devices`),
    each knob checked, and the optimizer of `train.optimizer`.

    Raises:
        PhazecError: a width or knob value is not valid, or tp x pp does not divide the devices under
            `plan.dp=auto`.
    """
    values = checked(Plan, plan, "plan")
    for name in ("tp", "pp", "dp"):
        value = values[name]
        if name == "dp" and value == AUTO_DP:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            valid = "a positive integer" + (f", or {AUTO_DP!r} (the default)" if name == "dp" else "")
            raise PhazecError(f"plan.{name}={value!r} is not valid: it must be {valid}.")
    knobs = {k.name: check_knob("plan", k.name, values[k.name]) for k in KNOB_FIELDS if spec(k.name).in_plan}
    if values["dp"] == AUTO_DP:
        values["dp"] = auto_dp(values["tp"], values["pp"], devices, knobs["cp"])
    optimizer = check_knob("train", "optimizer", checked(Training, train, "train")["optimizer"])
    layers = values["layers"]
    return Plan(
        tp=values["tp"],
        pp=values["pp"],
        dp=values["dp"],
        training=Training(**knobs, optimizer=optimizer),
        layers=None if layers is None else tuple(layers),
        require_fit=values["require_fit"],
        trace=values["trace"],
    )


def auto_dp(tp: int, pp: int, devices: int, cp: int = 1) -> int:
    """`plan.dp=auto`: the data-parallel width that fills `devices` at `tp` x `pp` (x `cp`).

    Raises:
        PhazecError: tp x pp (x cp) does not divide the devices.
    """
    width = tp * pp * cp
    if devices % width:
        divisors = [d for d in range(1, min(devices, 10**6) + 1) if devices % d == 0]
        listed = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
        widths = {"tp": tp, "pp": pp, **({"cp": cp} if cp > 1 else {})}
        names = " x ".join(widths)
        keys = " x ".join(f"plan.{name}" for name in widths)
        values = " x ".join(str(value) for value in widths.values())
        raise PhazecError(
            f"plan.dp=auto fills the {devices} devices (system.devices) with replicas of {keys} "
            f"= {values} = {width} devices each, and {width} does not divide {devices}; choose a "
            f"{names} among the divisors of {devices} ({listed}), set system.devices to a multiple of "
            f"{width}, or give plan.dp a number (then the plan uses {names} x dp of the devices)."
        )
    return devices // width


def path_name(key: str, name: Any) -> str:
    """`name`, which becomes part of a file or directory name (`model.name` names the exported ONNX file
    under `cache_dir`, a model of `model=[a,b]` its result directory): one plain name, so that nothing
    is written outside the directory meant.

    Raises:
        PhazecError: `name` is empty, `.` or `..`, or holds a path separator, `..` or a NUL byte.
    """
    text = str(name)
    if not text or text in (".", "..") or any(bad in text for bad in ("/", "\\", "..", "\0")):
        raise PhazecError(
            f"{key}={text!r} is not valid: it becomes part of a file name, so it must be one plain name "
            "(letters, digits, _, -, .) with no /, \\, .. or NUL byte, e.g. my_model."
        )
    return text


DIMENSION = re.compile(r"(^|_)(size|layers|heads|dim|embd|positions|position_embeddings|layer|head|ctx)$")
"""hf_config keys that name a model dimension, which must be a positive integer."""


def finite_numbers(node: Any, prefix: str = "") -> None:
    """Every number in the config is finite (NaN and inf are never valid, and would silently turn
    comparisons such as the area bins of `search.bin_mm2` into something else)."""
    if isinstance(node, dict):
        for key, value in node.items():
            finite_numbers(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            finite_numbers(value, f"{prefix.removesuffix('.')}[{i}].")
    elif isinstance(node, float) and not math.isfinite(node):
        raise PhazecError(f"{prefix.removesuffix('.')}={node} is not a finite number; give a finite value.")


def model_dims(model: ModelConfig) -> None:
    """A Hugging Face preset's dimensions are positive integers (`phazec.frontend.validate` checks its
    sequence length)."""
    if model.source != "hf":
        return
    for key, value in model_kwargs(model).items():
        if DIMENSION.search(str(key)) and (
            isinstance(value, bool) or not isinstance(value, int) or value <= 0
        ):
            raise PhazecError(
                f"model.hf_config.{key}={value!r} is not valid: a model dimension must be a positive integer."
            )


def tpuv4_space() -> HwSpace:
    """The TPUv4-like design every search compares with: the `hw` preset `tpuv4`, composed."""
    return hw_space_from_config(typed(HwConfig, preset("hw", TPUV4_PRESET), "hw"))
