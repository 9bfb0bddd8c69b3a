"""The schedule lower bound on many designs at once gives each design's own bound, bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from phazec.config.settings import typed
from phazec.cost.model import latency_model_from_config
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import Model
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.predict.evaluator import BOUND_MARGIN, Evaluator
from phazec.predict.layer_costs import Split, class_costs
from phazec.predict.training import Knobs
from phazec.solvers.schedule.model import bounds
from phazec.solvers.schema import SolverConfig
from tests.conftest import compose_config


@pytest.mark.parametrize(
    ("preset", "cost", "as_vector"), [("bert_large", "tiled", False), ("llama2_7b", "phaze", True)]
)
def test_every_design_gets_its_own_bound(
    lowered: Callable[[str], Model], preset: str, cost: str, as_vector: bool
) -> None:
    cfg = compose_config("hw=tpu_small", f"cost={cost}")
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    evaluator = Evaluator(
        graphs=training_graphs(lowered(preset), [1, 2], GraphSettings(optimizer="adam", vocab_parallel=True)),
        system=system_from_config(typed(SystemConfig, cfg.system, "system")),
        latency_model=latency_model_from_config(typed(CostConfig, cfg.cost, "cost")),
        solver=SolverConfig(collectives_as_vector=as_vector),
        knobs=Knobs.searching((32 * 10**9,), microbatch=[4], recompute=[False], optimizer="adam"),
    )
    checked = 0
    for model in evaluator.graphs.values():
        for cls in model.classes:
            costs = class_costs(cls, designs, evaluator.system, evaluator.latency_model, Split(4))
            for graph, op_costs in ((cls.graph, costs.forward), (cls.backward, costs.backward)):
                if graph is None or op_costs is None:
                    continue
                together = evaluator.lower_s(graph, op_costs, designs)
                for j in range(len(designs)):
                    problem = evaluator.schedule_problem(graph, op_costs, designs, j)
                    modes = [problem.modes(i) for i in range(len(problem.ops))]
                    alone = bounds(problem, modes).lower_s * (1.0 - BOUND_MARGIN)
                    assert together[j] == alone
                    checked += 1
    assert checked >= 4 * len(designs)
