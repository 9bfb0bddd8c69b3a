"""Settings to objects: enumerate the space, lower the model and build its Evaluator (`Job`).

The commands that time plans start here: `phazec` (the co-search, `phazec.commands.search`) and
`phazec-plan` (one plan, `phazec.commands.plan`). The result is plain data; nothing here searches or
times anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phazec.commands.settings import Settings
from phazec.cost.model import check_applies
from phazec.frontend import load_model
from phazec.hw.designs import Designs
from phazec.hw.device import DeviceModel
from phazec.hw.space import enumerate_designs
from phazec.passes.attention import is_causal
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.evaluator import Evaluator
from phazec.predict.training import Knobs, Training
from phazec.solvers.schedule.solve import ScheduleCache
from phazec.util.progress import stage


@dataclass(frozen=True)
class Job:
    """One model, set up: its settings, the design space, and the evaluator holding its training graphs."""

    settings: Settings
    designs: Designs
    evaluator: Evaluator


def graph_settings(settings: Settings, device: DeviceModel, training: Training) -> GraphSettings:
    """The training passes' options the settings and the device model ask for: vocabulary parallelism,
    the device's attention kernel and fusions, the model's causality, the optimizer, expert parallelism,
    the loss kernel."""
    return GraphSettings(
        optimizer=training.optimizer,
        expert_parallel=training.ep,
        vocab_parallel=settings.parallel.vocab_parallel,
        attention=device.attention,
        causal=is_causal(settings.model.arch, settings.model.causal),
        fuse_elementwise=device.fuse_elementwise,
        fuse_norm_rope=device.fuse_norm_rope,
        fused_cross_entropy=training.fused_cross_entropy,
    )


def setup(settings: Settings, knobs: Knobs | None = None, widths: Sequence[int] | None = None) -> Job:
    """Enumerate the space, lower the model and build its Evaluator.

    Args:
        settings: the checked settings of the command.
        knobs: the training settings to evaluate; None means the search's (`train.*`).
        widths: the tensor-parallel widths to build training graphs for; None means `model.tp_widths`.
    """
    knobs = settings.train if knobs is None else knobs
    designs = enumerate_designs(settings.hw)
    check_applies(settings.cost, designs)  # before a lowering that can take minutes
    with stage("lowering"):
        model = load_model(settings.model, settings.cache_dir)
    with stage("training graphs"):
        widths = settings.model.tp_widths if widths is None else widths
        options = graph_settings(settings, designs.device, knobs.fixed)
        graphs = training_graphs(model, widths, options)
    evaluator = Evaluator(
        graphs=graphs,
        system=settings.system,
        latency_model=settings.cost,
        solver=settings.solver,
        knobs=knobs,
        cache=ScheduleCache(settings.cache_dir / "schedules"),
        lp_dir=settings.cache_dir / "lp" if settings.solver.write_lp else None,
    )
    return Job(settings, designs, evaluator)
