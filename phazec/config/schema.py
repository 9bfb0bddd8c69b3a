"""The config tree: Hydra's schema of every group, derived from the typed settings it fills.

Each group's settings are a frozen dataclass declared beside the code that reads them: the model
(`phazec.frontend.schema.ModelConfig`), the hardware space, system and cost model (`phazec.hw.schema`),
the solver (`phazec.solvers.schema.SolverConfig`), the search (`phazec.search.schema.SearchConfig`), the
training knobs (`phazec.predict.training.Training`, whose `train.*` lists and `plan.*` values both come
from it), the plan (`phazec.predict.plan_report.Plan`), and tracking and `phazec-ir`'s parallel
settings (`phazec.commands.settings`). Hydra composes into mutable twins of them
(`hydra_twin`), registered as `phazec_schema`, which `conf/config.yaml`, `ir.yaml` and `plan.yaml`
start their defaults with: a misspelled key or a value of the wrong type fails at composition with
Hydra's message, and a field without a default must be set. `phazec.config.settings` turns a composed
config back into the frozen settings, once, at a command's entry.
"""

import functools
import types
from collections.abc import Callable
from dataclasses import MISSING, Field, field, fields, is_dataclass, make_dataclass
from typing import Any, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore

from phazec.commands.settings import ParallelConfig, TrackingConfig
from phazec.config.rundir import register_resolver
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.predict.plan_report import Plan
from phazec.predict.training import KNOB_FIELDS, Training, spec
from phazec.search.schema import SearchConfig
from phazec.solvers.schema import SolverConfig

GROUPS: dict[str, type] = {
    "model": ModelConfig,
    "hw": HwConfig,
    "system": SystemConfig,
    "cost": CostConfig,
    "train": Training,
    "parallel": ParallelConfig,
    "search": SearchConfig,
    "plan": Plan,
    "solver": SolverConfig,
    "tracking": TrackingConfig,
}
"""Each config group and the settings it fills; `model`, `hw`, `system` and `cost` have no default
(a preset must be chosen). `cache_dir` is the tree's one plain key."""
PRESET_GROUPS = ("model", "hw", "system", "cost")
"""The groups with no default settings: a preset must be chosen."""


def twin_type(kind: Any) -> Any:
    """The type Hydra is given for a settings field of type `kind`: a dataclass's twin, a tuple as a
    list (a config holds lists), unions and containers element by element."""
    origin = get_origin(kind)
    if is_dataclass(kind) and isinstance(kind, type):
        return hydra_twin(kind)
    if origin is tuple:
        return list[twin_type(get_args(kind)[0])]  # type: ignore[misc]
    if origin is list:
        return list[twin_type(get_args(kind)[0])]  # type: ignore[misc]
    if origin in (types.UnionType,):
        args = [twin_type(arg) for arg in get_args(kind)]
        return functools.reduce(lambda a, b: a | b, args)
    return kind


def _twin_field(setting: Field[Any], kind: Any) -> Any:
    """The default of a twin's field: the setting's, a nested twin, or none (a required field)."""
    if setting.default is not MISSING:
        return field(default=list(setting.default) if isinstance(setting.default, tuple) else setting.default)
    if setting.default_factory is not MISSING:
        if is_dataclass(kind) and isinstance(kind, type):
            return field(default_factory=hydra_twin(kind))
        return field(default_factory=setting.default_factory)
    return field()


@functools.cache
def hydra_twin(settings: type) -> type:
    """The mutable dataclass Hydra composes for frozen settings `settings`: the same fields, types and
    defaults (nested settings as their twins; `Plan`'s knobs flattened, `Training`'s searched knobs as
    lists of values; a field whose metadata has `config`, (type, default), as that type and default:
    the settings check and resolve it). A field without a default is one Hydra reports missing."""
    if settings is Training:
        return _train_schema()
    hints = get_type_hints(settings)
    specs: list[tuple[str, Any, Any]] = []
    for setting in fields(settings):
        if settings is Plan and setting.name == "training":
            specs += _plan_knobs()
            continue
        if "config" in setting.metadata:  # a value the config gives in another form (`plan.dp=auto`)
            kind, default = setting.metadata["config"]
            specs.append((setting.name, kind, field(default=default)))
            continue
        specs.append(
            (setting.name, twin_type(hints[setting.name]), _twin_field(setting, hints[setting.name]))
        )
    return _twin(settings, specs)


def _twin(settings: type, specs: list[tuple[str, Any, Any]]) -> type:
    """A dataclass of `specs` standing for `settings`, reachable as this module's `Hydra<name>`: Hydra's
    launchers pickle composed configs into other processes, which find their schema classes by name."""
    twin = make_dataclass(settings.__name__, specs, kw_only=True)
    twin.__doc__ = settings.__doc__
    twin.__module__ = __name__
    twin.settings = settings  # type: ignore[attr-defined]  # the docs' configuration reference reads it
    twin.__qualname__ = f"Hydra{settings.__name__}"
    globals()[twin.__qualname__] = twin
    return twin


def _train_schema() -> type:
    """`train.*`: each searched knob a list of the values to try, every other knob one setting."""
    hints = get_type_hints(Training)
    specs: list[tuple[str, Any, Any]] = []
    for knob in KNOB_FIELDS:
        knob_spec = spec(knob.name)
        if knob_spec.searched:
            element = Any if knob_spec.legacy else hints[knob.name]
            specs.append((knob.name, list[element], field(default_factory=_copies(knob_spec.search))))  # type: ignore[valid-type]
        else:
            specs.append((knob.name, hints[knob.name], field(default=knob_spec.search)))
    return _twin(Training, specs)


def _copies(values: list[Any]) -> Callable[[], list[Any]]:
    """A default factory giving a fresh copy of `values`."""
    return lambda: list(values)


def _plan_knobs() -> list[tuple[str, Any, Any]]:
    """`plan.<knob>` for each knob a plan takes, at its value for one plan."""
    hints = get_type_hints(Training)
    return [(k.name, hints[k.name], field(default=k.default)) for k in KNOB_FIELDS if spec(k.name).in_plan]


def root_schema() -> type:
    """The whole tree: each group's twin (no default for the groups a preset must fill) and `cache_dir`,
    where exported ONNX files and solver results are cached (empty: $PHAZEC_CACHE_DIR or
    ~/.cache/phazec)."""
    specs: list[tuple[str, Any, Any]] = []
    for group, settings in GROUPS.items():
        twin = hydra_twin(settings)
        specs.append((group, twin, field() if group in PRESET_GROUPS else field(default_factory=twin)))
    specs.append(("cache_dir", str, field(default="")))
    root = make_dataclass("Config", specs, kw_only=True)
    root.__module__ = __name__
    root.__qualname__ = "SCHEMA"
    return root


SCHEMA = root_schema()
"""The root schema (made at import, so that every twin is this module's attribute in any process)."""


def register() -> None:
    """Register the schema with Hydra and the run-directory resolver; called before composition."""
    ConfigStore.instance().store(name="phazec_schema", node=SCHEMA)
    register_resolver()
