"""The `bo` strategy: a Spotlight-style baseline that picks a design by Bayesian optimisation alone.

Optuna's TPE sampler (seeded by `search.seed`) proposes a value for each knob of the design space
(`vc_width` follows `tc_width` when the space ties them) for `search.trials` trials; a proposal the
space does not hold (e.g. over the area budget) scores infinity. A design scores its block's forward
latency (`Evaluator.block_forward_s`), an inference-style objective blind to the training plan. The
design with the least score (the earliest trial on a tie) is then evaluated like any other, with the
full placement, so the result shows what co-design adds over optimising the accelerator alone.
Trials run one after another in this process, so the sampler sees every earlier result and the
choice is repeatable.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import numpy as np
import optuna
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.hw.designs import KNOBS, Designs
from phazec.predict.evaluator import Evaluator
from phazec.search.executors.base import Executor
from phazec.search.loop import Found, explore
from phazec.search.schema import SearchConfig
from phazec.search.state import SearchState
from phazec.search.strategies.exhaustive import Exhaustive
from phazec.util.progress import progress

log = logging.getLogger(__name__)


def tpe_design(
    evaluator: Evaluator,
    designs: Designs,
    trials: int,
    seed: int,
    weight: NDArray[np.float64] | None = None,
) -> int:
    """The index of the design with the least block forward latency (times `weight[design]` when given:
    the objective's cost) that TPE found in `trials` trials.

    Raises:
        PhazecError: no trial proposed a design of the space.
    """
    tied = bool(np.array_equal(designs.vc_width, designs.tc_width))
    free = [k for k in KNOBS if not (tied and k == "vc_width")]
    choices = {k: sorted({int(v) for v in getattr(designs, k)}) for k in free}
    index: dict[tuple[int, ...], int] = {}
    for i, row in enumerate(zip(*(getattr(designs, k).tolist() for k in KNOBS), strict=True)):
        index.setdefault(tuple(row), i)

    def objective(trial: optuna.Trial) -> float:
        knobs = {k: trial.suggest_categorical(k, choices[k]) for k in free}
        if tied:
            knobs["vc_width"] = knobs["tc_width"]
        j = index.get(tuple(knobs[k] for k in KNOBS))
        if j is None:
            return math.inf
        latency_s = float(evaluator.block_forward_s(designs.take(np.array([j])))[0])
        return latency_s if weight is None else latency_s * float(weight[j])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    with progress("bo trials", trials, "trial") as bar:
        study.optimize(objective, n_trials=trials, callbacks=[lambda _, __: bar.update()])
    done = [(t.value, t.number, t.params) for t in study.trials if t.value is not None and t.value < math.inf]
    if not done:
        raise PhazecError(
            f"search.trials={trials} Bayesian-optimisation trials proposed no design of the space; "
            "raise search.trials or use another strategy."
        )
    value, number, params = min(done, key=lambda d: (d[0], d[1]))
    knobs = {**params, **({"vc_width": params["tc_width"]} if tied else {})}
    log.info("bo: trial %d of %d found block forward latency %.4g s", number, trials, value)
    return index[tuple(knobs[k] for k in KNOBS)]


def batch_count(designs: Designs, config: SearchConfig) -> int:
    """One batch: the chosen design."""
    return 1


def run(
    designs: Designs,
    config: SearchConfig,
    workers: Executor,
    state: SearchState,
    weight: NDArray[np.float64] | None,
) -> Found:
    """Pick a design by its block's forward latency (times `weight`), then evaluate it with the full
    placement; every other design is pruned as `not_chosen`."""
    chosen = tpe_design(workers.evaluator, designs, config.trials, config.seed, weight)
    batches = [np.array([chosen], dtype=np.int64)]
    found = explore(Exhaustive(batches), designs, workers, state, "bo", weight=weight)
    return replace(found, pruned_by={"not_chosen": found.pruned} if found.pruned else {})
