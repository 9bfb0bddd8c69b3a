"""Evaluate accelerator designs: per-layer schedules on each design, then the optimal placement.

For a batch of designs, every layer class's forward and backward operators are priced on all of them
at once (the cost pass), each class is scheduled per design by the ILP (cached), and the placement DP
solves every combination of tensor-parallel width, recompute flag and HBM size per microbatch size.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from phazec.cost.model import LatencyModel, OpCosts
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.system import System
from phazec.ir.core import Graph, Model
from phazec.passes.cost import class_costs
from phazec.passes.schedule import schedule_problem
from phazec.solvers.placement import (
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    PlacementResult,
    Variant,
    evaluate_plan,
    megatron_plan,
    solve_placements,
)
from phazec.solvers.schedule import ScheduleCache, schedule
from phazec.solvers.schema import SolverConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Knobs:
    """The training knobs one search covers."""

    microbatches: tuple[int, ...]
    recompute: tuple[bool, ...]
    hbm_bytes: tuple[int, ...]
    optimizer: str


@dataclass(frozen=True)
class Candidate:
    """One evaluated (design, microbatch, variant): a plan or the reason none fits."""

    design: int
    """Index into the evaluated Designs."""
    microbatch: int
    result: PlacementResult


@dataclass
class Timings:
    """Seconds spent in each stage of evaluation (summed over designs)."""

    cost_s: float = 0.0
    ilp_s: float = 0.0
    dp_s: float = 0.0
    ilp_cache_hits: int = 0
    ilp_solves: int = 0


@dataclass
class Evaluator:
    """Everything that does not change from design to design."""

    graphs: dict[int, Model]
    """The training graph (per-device, with backward graphs and memory) for each allowed t."""
    system: System
    latency_model: LatencyModel
    solver: SolverConfig
    knobs: Knobs
    cache: ScheduleCache = field(default_factory=ScheduleCache)
    timings: Timings = field(default_factory=Timings)

    def layer_latencies_s(self, designs: Designs, microbatch: int) -> dict[int, NDArray[np.float64]]:
        """Per t: array [designs, 2, layers] of forward and backward latency of every layer."""
        out: dict[int, NDArray[np.float64]] = {}
        for t, model in self.graphs.items():
            per_class = np.zeros((len(designs), 2, len(model.classes)))
            for c, cls in enumerate(model.classes):
                start = time.perf_counter()
                costs = class_costs(cls, designs, self.system, self.latency_model, microbatch)
                self.timings.cost_s += time.perf_counter() - start
                graphs = [(0, cls.graph, costs.forward)]
                if cls.backward is not None and costs.backward is not None:
                    graphs.append((1, cls.backward, costs.backward))
                for direction, graph, op_costs in graphs:
                    for j in range(len(designs)):
                        per_class[j, direction, c] = self.schedule_s(graph, op_costs, designs, j)
            layer_class = np.array([layer.cls for layer in model.layers])
            out[t] = per_class[:, :, layer_class]
        return out

    def schedule_s(self, graph: Graph, op_costs: OpCosts, designs: Designs, j: int) -> float:
        """The optimal latency of one graph on design j (ILP, cached)."""
        start = time.perf_counter()
        hits = len(self.cache)
        problem = schedule_problem(
            graph,
            op_costs.single_core_s[:, j],
            op_costs.all_cores_s[:, j],
            num_tc=int(designs.num_tc[j]),
            num_vc=int(designs.num_vc[j]),
            config=self.solver,
        )
        found = schedule(problem, self.solver, self.cache)
        self.timings.ilp_s += time.perf_counter() - start
        if len(self.cache) == hits:
            self.timings.ilp_cache_hits += 1
        else:
            self.timings.ilp_solves += 1
        return found.makespan_s

    def problem(self, latencies: dict[int, NDArray[np.float64]], j: int, microbatch: int) -> PlacementProblem:
        """The placement problem of design j at one microbatch size (all allowed t)."""
        widths = sorted(self.graphs)
        rows = [layer_rows(self.graphs[t], microbatch) for t in widths]
        reference = self.graphs[widths[0]]
        edges = np.array([(e.src, e.dst) for e in reference.edges], dtype=np.int64).reshape(-1, 2)
        return PlacementProblem(
            t_values=np.array(widths, dtype=np.int64),
            forward_latency_s=np.stack([latencies[t][j, 0] for t in widths]),
            backward_latency_s=np.stack([latencies[t][j, 1] for t in widths]),
            param_bytes=np.stack([r[0] for r in rows]),
            activation_bytes=np.stack([r[1] for r in rows]),  # live activations = the stash of one microbatch
            stash_bytes=np.stack([r[1] for r in rows]),
            input_bytes=np.stack([r[2] for r in rows]),
            tensor_parallel=np.stack([r[3] for r in rows]),
            edges=edges,
            edge_bytes=np.array([e.nbytes(microbatch) for e in reference.edges], dtype=np.int64),
            device_count=self.system.devices,
            microbatch_count=self.system.global_batch // microbatch,
            samples_per_microbatch=microbatch,
            tiers=self.system.tiers,
            hbm_bytes=self.knobs.hbm_bytes[0],
            optimizer="adam" if self.knobs.optimizer == "adam" else "sgd",
        )

    def variants(self) -> list[Variant]:
        """Every (t, recompute, HBM) combination."""
        return [
            Variant(t, recompute, hbm)
            for t in sorted(self.graphs)
            for recompute in self.knobs.recompute
            for hbm in self.knobs.hbm_bytes
        ]

    def evaluate(self, designs: Designs) -> list[Candidate]:
        """Every (design, microbatch, variant) of a batch of designs."""
        candidates = []
        for microbatch in self.knobs.microbatches:
            latencies = self.layer_latencies_s(designs, microbatch)
            for j in range(len(designs)):
                start = time.perf_counter()
                results = solve_placements(self.problem(latencies, j, microbatch), self.variants())
                self.timings.dp_s += time.perf_counter() - start
                candidates += [Candidate(j, microbatch, r) for r in results]
        return candidates

    def evaluate_fixed(self, designs: Designs, pp: int, dp: int, tp: int) -> list[Candidate]:
        """A fixed Megatron-style plan (layers split evenly) on each design, every knob setting."""
        if tp not in self.graphs:
            raise PhazecError(
                f"the baseline plan's tensor-parallel width {tp} is not one of the model's widths "
                f"{sorted(self.graphs)}; set model.baseline.tp to one of them."
            )
        candidates = []
        for microbatch in self.knobs.microbatches:
            latencies = self.layer_latencies_s(designs, microbatch)
            for j in range(len(designs)):
                problem = self.problem(latencies, j, microbatch)
                stages = megatron_plan(problem, pp)
                for recompute in self.knobs.recompute:
                    for hbm in self.knobs.hbm_bytes:
                        variant = _with(problem, recompute, hbm)
                        candidates.append(Candidate(j, microbatch, evaluate_plan(variant, stages, tp, dp)))
        return candidates


def _with(problem: PlacementProblem, recompute: bool, hbm_bytes: int) -> PlacementProblem:
    """The same problem under another recompute flag and HBM size."""
    return replace(problem, recompute=recompute, hbm_bytes=hbm_bytes)


def layer_rows(
    model: Model, microbatch: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
    """Per layer: parameter bytes, stash bytes, bytes read from outside the layer graph, TP flag."""
    params, stash, inputs, split = [], [], [], []
    incoming = np.zeros(len(model.layers), dtype=np.int64)
    for edge in model.edges:
        incoming[edge.dst] += edge.nbytes(microbatch)
    for layer in model.layers:
        cls = model.classes[layer.cls]
        memory = cls.memory
        if memory is None:
            raise PhazecError("the placement needs the memory pass; run the training pipeline first.")
        params.append(memory.parameter_bytes)
        stash.append(memory.stash_bytes(microbatch))
        read = memory.input_bytes(microbatch)
        inputs.append(max(0, read - int(incoming[layer.index])))
        split.append(cls.tp_width > 1)
    return (
        np.array(params, dtype=np.int64),
        np.array(stash, dtype=np.int64),
        np.array(inputs, dtype=np.int64),
        np.array(split, dtype=np.bool_),
    )


def best(candidates: list[Candidate]) -> Candidate | None:
    """The fastest feasible candidate (ties: the first), or None if none fits."""
    feasible = [c for c in candidates if isinstance(c.result, Placement) and c.result.fits_hbm]
    if not feasible:
        return None
    return min(feasible, key=lambda c: c.result.time_per_batch_s)  # type: ignore[union-attr]


def least_memory(candidates: list[Candidate]) -> NoFeasiblePlacement | None:
    """Among infeasible results, the one needing the least memory per device."""
    infeasible = [c.result for c in candidates if isinstance(c.result, NoFeasiblePlacement)]
    return min(infeasible, key=lambda r: r.min_memory_bytes) if infeasible else None
