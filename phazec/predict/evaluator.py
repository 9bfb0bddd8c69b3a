"""Evaluate accelerator designs: per-layer schedules on each design, then the optimal placement.

For a batch of designs, every layer class's forward and backward operators are priced on all of them
at once (the cost pass), each class is scheduled per design by the ILP (cached), and the placement DP
solves every combination of tensor-parallel width, recompute flag and HBM size per microbatch size.
`lower_bounds_s` does the same with a cheap lower bound in place of each schedule, which gives a
proven lower bound on a design's time per batch (the `bounded` search strategy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from phazec.cost.model import LatencyModel, OpCosts
from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.hw.system import System
from phazec.ir.core import Graph, LayerClass, LayerKind, Model
from phazec.passes.memory import OPTIMIZER_STATE_BYTES, megatron_bytes, op_checkpoint, selective_ops
from phazec.predict.layer_costs import (
    ClassCosts,
    class_costs,
    class_split,
)
from phazec.predict.megatron import check_runs
from phazec.predict.offload import offloaded_problem
from phazec.predict.schedule_problem import schedule_problem
from phazec.predict.training import SEARCHED, Knobs, Training, core_settings, spec
from phazec.solvers.placement.dp import solve_placements
from phazec.solvers.placement.evaluate import evaluate_plan
from phazec.solvers.placement.megatron import megatron_plan
from phazec.solvers.placement.problem import (
    NoFeasiblePlacement,
    Placement,
    PlacementProblem,
    PlacementResult,
    Variant,
)
from phazec.solvers.schedule.bounds import lower_bounds_s
from phazec.solvers.schedule.problem import ScheduleProblem, canonical_key
from phazec.solvers.schedule.solve import ScheduleCache, schedule
from phazec.solvers.schema import SolverConfig

log = logging.getLogger(__name__)

BOUND_MARGIN = 1e-9
"""Relative amount by which a layer's latency lower bound is lowered to absorb rounding."""

VARIANT_KNOBS = tuple(name for name in SEARCHED if not spec(name).layers)
"""The searched knobs the compiled model reads: one C++ call solves every setting of them at once."""
OUTER_KNOBS = tuple(name for name in SEARCHED if spec(name).layers)
"""The searched knobs the layers' latencies and bytes depend on: each setting is its own problem."""


@dataclass(frozen=True)
class Candidate:
    """One evaluated (design, training settings): a plan or the reason none fits."""

    design: int
    """Index into the evaluated Designs."""
    training: Training
    """Every knob's setting it was evaluated under."""
    result: PlacementResult

    @property
    def microbatch(self) -> int:
        """Its microbatch size (samples)."""
        return self.training.microbatch


@dataclass
class Timings:
    """Seconds spent in each stage of evaluation (summed over designs)."""

    cost_s: float = 0.0
    ilp_s: float = 0.0
    dp_s: float = 0.0
    ilp_cache_hits: int = 0
    ilp_solves: int = 0
    bound_s: float = 0.0
    """Lower bounds on designs (strategy `bounded`): schedule bounds and the DP on them."""
    unproven: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Schedules used that a limit stopped before their optimum was proven: canonical key ->
    (makespan_s, proven lower bound_s)."""

    def add(self, other: Timings) -> None:
        """Add another process's timings to these."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, {**mine, **theirs} if isinstance(mine, dict) else mine + theirs)

    def unproven_json(self) -> list[dict[str, float | str]]:
        """The unproven schedules for result.json, by key: makespan, bound and relative gap."""
        return [
            {"key": key, "makespan_s": makespan_s, "bound_s": bound_s, "gap": 1.0 - bound_s / makespan_s}
            for key, (makespan_s, bound_s) in sorted(self.unproven.items())
        ]


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
    lp_dir: Path | None = None
    """Where each ILP is written as an LP file when `solver.write_lp` is set."""
    timings: Timings = field(default_factory=Timings)
    layer_bytes: dict[tuple[int, Training], LayerArrays] = field(default_factory=dict, repr=False)
    """Each t's per-layer bytes under each training setting a problem was built for (`layer_arrays`):
    the same on every design, so built once."""

    def layer_latencies_s(self, designs: Designs, training: Training) -> dict[int, NDArray[np.float64]]:
        """Per t: array [designs, 5, layers] of forward and backward latency of every layer (ILP), the
        latency of its attention core's forward ops run one after another on all cores (what
        selective recompute repeats; `attention_core_s`), of the ops op recompute runs again, the same
        way (`op_recompute_s`), and of its weight-gradient products, the same way and at most its
        backward latency (what ZB-H1 defers; `weight_grad_s`), under the knobs `training` sets that
        price a layer (microbatch, sequence parallelism, precision)."""
        return self._per_layer_s(designs, training, self.schedules_s)

    def layer_lower_bounds_s(self, designs: Designs, training: Training) -> dict[int, NDArray[np.float64]]:
        """Like `layer_latencies_s`, but proven lower bounds on those latencies, without the ILP."""
        return self._per_layer_s(designs, training, self.lower_s)

    def class_costs(self, model: Model, cls: int, designs: Designs, training: Training) -> ClassCosts:
        """The operator costs of class `cls` of `model` on every design under `training`
        (`phazec.predict.layer_costs.class_costs` at its `class_split`)."""
        start = time.perf_counter()
        costs = class_costs(
            model.classes[cls], designs, self.system, self.latency_model, class_split(model, cls, training)
        )
        self.timings.cost_s += time.perf_counter() - start
        return costs

    def _per_layer_s(
        self,
        designs: Designs,
        training: Training,
        latency_s: Callable[[Graph, OpCosts, Designs], NDArray[np.float64]],
    ) -> dict[int, NDArray[np.float64]]:
        """Per t: array [designs, 5, layers] of `latency_s` of each layer's forward and backward
        graph on every design, its attention core's latency, its op recompute's and its weight
        gradients' (at most its backward latency)."""
        out: dict[int, NDArray[np.float64]] = {}
        held = held_share(designs, training)
        for t, model in self.graphs.items():
            per_class = np.zeros((len(designs), 5, len(model.classes)))
            for c, cls in enumerate(model.classes):
                costs = self.class_costs(model, c, designs, training)
                per_class[:, 2, c] = attention_core_s(
                    cls.graph, costs.forward, model.seq_len, training.selective_modules
                )
                if cls.backward is not None:
                    per_class[:, 3, c] = op_recompute_s(cls.graph, cls.backward, costs.forward)
                per_class[:, 0, c] = latency_s(cls.graph, costs.forward, designs)
                if cls.backward is not None and costs.backward is not None:
                    per_class[:, 1, c] = latency_s(cls.backward, costs.backward, designs)
                parts = moe_parts(cls, costs) if training.overlap_moe_expert_parallel_comm else None
                if parts is not None:
                    per_class[:, 0, c], per_class[:, 1, c], _ = overlapped(
                        per_class[:, 0, c], per_class[:, 1, c], parts, held
                    )
                if cls.backward is not None and costs.backward is not None:
                    weight_grads_s = weight_grad_s(cls.backward, costs.backward)
                    per_class[:, 4, c] = np.minimum(weight_grads_s, per_class[:, 1, c])
            layer_class = np.array([layer.cls for layer in model.layers])
            out[t] = per_class[:, :, layer_class]
        return out

    def schedule_problem(self, graph: Graph, op_costs: OpCosts, designs: Designs, j: int) -> ScheduleProblem:
        """The scheduling problem of one graph on design j."""
        return schedule_problem(
            graph,
            op_costs.single_core_s[:, j],
            op_costs.all_cores_s[:, j],
            op_costs.hbm_s[:, j],
            num_tc=int(designs.num_tc[j]),
            num_vc=int(designs.num_vc[j]),
            config=self.solver,
            shared_cores=designs.device.shared_cores,
            collectives_hold_cores=designs.device.collectives_hold_cores,
        )

    def schedules_s(self, graph: Graph, op_costs: OpCosts, designs: Designs) -> NDArray[np.float64]:
        """Per design, the optimal latency of one layer's graph (ILP, cached)."""
        return np.array(
            [self.schedule_s(self.schedule_problem(graph, op_costs, designs, j)) for j in range(len(designs))]
        )

    def schedule_s(self, problem: ScheduleProblem) -> float:
        """The optimal latency of one layer's graph on one design (ILP, cached)."""
        start = time.perf_counter()
        key = canonical_key(problem, self.solver)
        cached = self.cache.get(key) is not None
        found = schedule(problem, self.solver, self.cache, self.lp_dir)
        self.timings.ilp_s += time.perf_counter() - start
        if cached:
            self.timings.ilp_cache_hits += 1
        else:
            self.timings.ilp_solves += 1
        if not found.optimal:
            self.timings.unproven[key] = (found.makespan_s, found.bound_s)
        return found.makespan_s

    def lower_s(self, graph: Graph, op_costs: OpCosts, designs: Designs) -> NDArray[np.float64]:
        """Per design, a proven lower bound on the makespan of every schedule of one layer's graph,
        without the ILP: `schedule_model.bounds` on every design at once (`schedule_bounds`).

        The structure (which zero-cost ops are contracted away) is design 0's. Every operator costs
        something on every design or on none, so it is every design's; were it not, an op contracted
        here would only relax a design's problem, and the bound would stay a bound.
        `bounds` sums latencies in another order than a replayed schedule does, so it is lowered by
        BOUND_MARGIN: far more than any rounding difference, far less than any real one.
        """
        start = time.perf_counter()
        structure = self.schedule_problem(graph, op_costs, designs, 0)
        kept = np.flatnonzero((op_costs.single_core_s[:, 0] > 0) | (op_costs.all_cores_s[:, 0] > 0))
        lower_s = lower_bounds_s(
            structure,
            op_costs.single_core_s[kept],
            op_costs.all_cores_s[kept],
            op_costs.hbm_s[kept],
            num_tc=designs.num_tc,
            num_vc=designs.num_vc,
        )
        self.timings.bound_s += time.perf_counter() - start
        return lower_s * (1.0 - BOUND_MARGIN)

    def problem(
        self,
        latencies: dict[int, NDArray[np.float64]],
        j: int,
        training: Training,
        designs: Designs,
        *,
        bound_sync_windows: bool = False,
    ) -> PlacementProblem:
        """The placement problem of design j at `training`'s microbatch size and sequence parallelism
        (all allowed t), under the first of the searched settings (`Variant.applied` sets the
        others); `bound_sync_windows` as in `PlacementProblem`; the first `training.offload_layers`
        blocks offloaded to the host (`offloaded_problem`)."""
        microbatch = training.microbatch
        widths = sorted(self.graphs)
        for t in widths:
            if (t, training) not in self.layer_bytes:
                self.layer_bytes[(t, training)] = layer_arrays(self.graphs[t], training)
        rows = [self.layer_bytes[(t, training)] for t in widths]
        reference = self.graphs[widths[0]]
        block_layers = np.array([layer.kind is LayerKind.BLOCK for layer in reference.layers])
        edges = np.array([(e.src, e.dst) for e in reference.edges], dtype=np.int64).reshape(-1, 2)
        problem = PlacementProblem(
            t_values=np.array(widths, dtype=np.int64),
            forward_latency_s=np.stack([latencies[t][j, 0] for t in widths]),
            backward_latency_s=np.stack([latencies[t][j, 1] for t in widths]),
            param_bytes=np.stack([r.param_bytes for r in rows]),
            expert_param_bytes=np.stack([r.expert_param_bytes for r in rows]),
            gather_bytes=np.stack([r.gather_bytes for r in rows]),
            expert_gather_bytes=np.stack([r.expert_gather_bytes for r in rows]),
            dummy_wgrad_bytes=np.stack([r.dummy_wgrad_bytes for r in rows]),
            activation_bytes=np.stack([r.stash_bytes for r in rows]),  # what full recompute rebuilds
            stash_bytes=np.stack([r.stash_bytes for r in rows]),
            input_bytes=np.stack([r.checkpoint_bytes for r in rows]),
            tensor_parallel=np.stack([r.tensor_parallel for r in rows]),
            edges=edges,
            edge_bytes=np.array(
                [
                    e.nbytes(microbatch, self.knobs.fixed.pipeline_sends_masks, training.cp)
                    for e in reference.edges
                ],
                dtype=np.int64,
            ),
            device_count=self.system.devices,
            microbatch_count=self.system.global_batch // microbatch,
            samples_per_microbatch=microbatch,
            tiers=self.system.tiers,
            optimizer_factor=optimizer_factor(self.knobs.fixed.optimizer),
            selective_stash_bytes=np.stack([r.selective_bytes for r in rows]),
            selective_recompute_s=np.stack([latencies[t][j, 2] for t in widths]),
            op_stash_bytes=np.stack([r.op_bytes for r in rows]),
            op_recompute_s=np.stack([latencies[t][j, 3] for t in widths]),
            weight_grad_latency_s=np.stack([latencies[t][j, 4] for t in widths]),
            hbm_bytes_per_s=float(designs.hbm_bytes_per_s[j]) if self.knobs.fixed.optimizer_step else 0.0,
            collective_share=float(sm_share(designs, designs.device.collective_sms)[j]),
            block_layers=block_layers,
            bound_sync_windows=bound_sync_windows,
        )
        blocks = np.flatnonzero(block_layers).tolist()
        return offloaded_problem(problem, blocks, training.offload_layers, self.system.host_link_bytes_per_s)

    def outer(self) -> list[Training]:
        """Each setting of the searched knobs the layers' latencies and bytes depend on
        (`OUTER_KNOBS`: the microbatch, then sequence parallelism), the others at their first value."""
        return [replace(self.knobs.fixed, **chosen) for chosen in self.knobs.settings(OUTER_KNOBS)]

    def variants(
        self, outer: Training, hbm_sizes: tuple[int, ...] | None = None
    ) -> list[tuple[Variant, Training]]:
        """Every setting of the searched knobs the compiled model reads (`VARIANT_KNOBS`) at each
        tensor-parallel width and HBM size (the knobs' unless given), under `outer`'s other settings:
        the variant and the whole training setting of each. Ties between equally fast plans break in
        this order: t, recompute, HBM size, then the other knobs in declaration order (PHAZE's
        reproduction's order). `recompute_layers` is tried under block recompute only: every other
        mode reads none of its values but the first."""
        first, *rest = VARIANT_KNOBS
        least_layers = self.knobs.tried("recompute_layers")[0]
        out = []
        for t in sorted(self.graphs):
            for value in self.knobs.tried(first):
                for hbm in hbm_sizes or self.knobs.hbm_bytes:
                    for others in self.knobs.settings(rest):
                        training = replace(outer, **{first: value}, **others)
                        if training.recompute != "block" and training.recompute_layers != least_layers:
                            continue  # the same variant as at the first value
                        if t * training.cp <= self.system.devices:  # else no stage fits on the devices
                            out.append((Variant(t, hbm, core_settings(training)), training))
        return out

    def evaluate(self, designs: Designs) -> list[Candidate]:
        """Every (design, outer setting, variant) of a batch of designs, in that order."""
        outers = self.outer()
        latencies = [self.layer_latencies_s(designs, o) for o in outers]
        candidates = []
        for j in range(len(designs)):
            for outer, latency in zip(outers, latencies, strict=True):
                start = time.perf_counter()
                problem = self.problem(latency, j, outer, designs)
                variants = self.variants(outer)
                results = solve_placements(problem, [variant for variant, _ in variants])
                self.timings.dp_s += time.perf_counter() - start
                candidates += [
                    Candidate(j, training, r) for (_, training), r in zip(variants, results, strict=True)
                ]
        return candidates

    def lower_bounds_s(self, designs: Designs) -> NDArray[np.float64]:
        """Per design, a proven lower bound on the time per batch of every plan and knob setting.

        It is the placement DP's optimum with every layer's latency replaced by a lower bound on its
        schedule (`lower_s`) and each DP sync hidden behind windows as long as the bottleneck load
        allows (`PlacementProblem.bound_sync_windows`: never above the real time of a plan; under
        ZB-H1 the bubble is also taken as 0, `phazec.solvers.placement`). That time per batch only
        grows with any layer latency (critical paths, sums, max and products with positive counts, all
        rounded monotonically; a window grows no faster than the bottleneck load times its slots), and
        which plans fit in HBM does not depend on latencies, so this optimum is at most the real one.
        Only the largest HBM size is solved: more HBM admits a superset of plans. A design on which no plan
        fits gets infinity. Designs of the batch whose layer bounds (and HBM bandwidth) are all equal
        share one DP solve per sequence-parallel setting (the placement problem depends on the design
        only through them).
        """
        out = np.full(len(designs), np.inf)
        for outer in self.outer():
            variants = [variant for variant, _ in self.variants(outer, (max(self.knobs.hbm_bytes),))]
            latencies = self.layer_lower_bounds_s(designs, outer)
            start = time.perf_counter()
            solved: dict[bytes, float] = {}
            for j in range(len(designs)):
                key = b"".join(
                    [
                        designs.hbm_bytes_per_s[j].tobytes(),
                        designs.num_tc[j].tobytes(),  # the collectives' share of the cores
                        *(latencies[t][j].tobytes() for t in sorted(latencies)),
                    ]
                )
                if key not in solved:
                    problem = self.problem(latencies, j, outer, designs, bound_sync_windows=True)
                    results = solve_placements(problem, variants)
                    solved[key] = min(
                        [np.inf, *(r.time_per_batch_s for r in results if isinstance(r, Placement))]
                    )
                out[j] = min(out[j], solved[key])
            self.timings.bound_s += time.perf_counter() - start
        return out

    def block_forward_s(self, designs: Designs) -> NDArray[np.float64]:
        """Per design, the scheduled latency of one forward pass of the model's block (the layer class
        with the most layers, the first on a tie) at the smallest tensor-parallel width and the largest
        microbatch: one accelerator's inference-style figure, blind to placement (strategy `bo`)."""
        model = self.graphs[min(self.graphs)]
        c = max(range(len(model.classes)), key=lambda i: model.classes[i].count)
        block = model.classes[c]
        microbatch = max(self.knobs.tried("microbatch"))
        costs = self.class_costs(model, c, designs, replace(self.knobs.fixed, microbatch=microbatch))
        problems = [
            self.schedule_problem(block.graph, costs.forward, designs, j) for j in range(len(designs))
        ]
        return np.array([self.schedule_s(problem) for problem in problems])

    def evaluate_fixed(self, designs: Designs, pp: int, dp: int, tp: int) -> list[Candidate]:
        """A fixed Megatron-style plan (layers split evenly) on each design, every knob setting; the
        microbatches it cannot run at, or that Megatron-LM would not run it at
        (`phazec.predict.megatron.check_runs`, the rule `phazec-plan` applies), are skipped.

        Raises:
            PhazecError: the plan cannot run at any microbatch (the message says why).
        """
        if tp not in self.graphs:
            raise PhazecError(
                f"the baseline plan's tensor-parallel width {tp} is not one of the model's widths "
                f"{sorted(self.graphs)}; set model.baseline.tp to one of them."
            )
        candidates = []
        reasons = []
        outers = self.outer()
        for microbatch in self.knobs.tried("microbatch"):
            try:
                check_runs(
                    "model.baseline", (tp, pp, dp), microbatch, devices=self.system.devices,
                    global_batch=self.system.global_batch, microbatch_key="train.microbatch",
                )  # fmt: skip
            except PhazecError as err:
                reasons.append(f"microbatch {microbatch}: {err}")
                continue
            mine = [outer for outer in outers if outer.microbatch == microbatch]
            latencies = [self.layer_latencies_s(designs, o) for o in mine]
            for j in range(len(designs)):
                for outer, latency in zip(mine, latencies, strict=True):
                    problem = self.problem(latency, j, outer, designs)
                    try:
                        stages = megatron_plan(problem, pp)
                        for variant, training in self.variants(outer):
                            if variant.t == tp:
                                placed = evaluate_plan(problem, variant, stages, dp)
                                candidates.append(Candidate(j, training, placed))
                    except PhazecError as err:
                        reasons.append(f"microbatch {microbatch}: {err}")
        if not candidates and reasons:
            raise PhazecError(f"the plan pp={pp} dp={dp} tp={tp} cannot run at any microbatch ({reasons[0]})")
        return candidates


@dataclass(frozen=True)
class LayerArrays:
    """Per-layer figures of a training graph at one microbatch size (one entry per layer)."""

    param_bytes: NDArray[np.int64]
    expert_param_bytes: NDArray[np.int64]
    """Of the parameter bytes, the routed experts' (`LayerMemory.expert_parameter_bytes`)."""
    gather_bytes: NDArray[np.int64]
    """The bytes ZeRO-3 gathers of the layer's weights: its parameter bytes, less half its linear layers'
    (`LayerMemory.fp8_weight_bytes`) where they are gathered as one-byte FP8 copies."""
    expert_gather_bytes: NDArray[np.int64]
    """Of the gathered bytes, the routed experts'."""
    dummy_wgrad_bytes: NDArray[np.int64]
    """Transformer Engine's dummy weight gradients of the layer (`LayerMemory.dummy_wgrad_bytes`)."""
    stash_bytes: NDArray[np.int64]
    selective_bytes: NDArray[np.int64]
    checkpoint_bytes: NDArray[np.int64]
    op_bytes: NDArray[np.int64]
    tensor_parallel: NDArray[np.bool_]


def layer_arrays(model: Model, training: Training) -> LayerArrays:
    """Per layer: parameter bytes (and the routed experts' of them), the bytes ZeRO-3 gathers of them
    (a block's linear layers' weights at one byte under `fp8_param_gather` and `precision` fp8 or
    mxfp8), activation bytes per recompute mode under `training` (`megatron_bytes` at the layer's
    `class_split`: sequence parallelism splits a tensor-parallel layer's replicated activations t ways,
    context parallelism every per-sample byte cp ways, and a block's linear layers keep FP8 copies of
    their inputs in low precision; selective recompute also drops what the `selective_modules` it
    reruns write), Transformer Engine's dummy weight-gradient bytes (a transformer block's; the
    embedding and the output layer are Megatron-Core's own modules) and the TP flag."""
    rows: list[dict[str, int]] = []
    tensor_parallel = []
    for layer in model.layers:
        cls = model.classes[layer.cls]
        if cls.memory is None:
            raise PhazecError("the placement needs the memory pass; run the training pipeline first.")
        memory = cls.memory
        split = class_split(model, layer.cls, training)
        figures = megatron_bytes(
            memory, training.microbatch, split.sequence_parallel, split.context_parallel,
            split.low_precision, modules=training.selective_modules,
        )  # fmt: skip
        halved = training.fp8_param_gather and split.low_precision  # its linear weights at one byte
        rows.append(
            {
                "param_bytes": memory.parameter_bytes,
                "expert_param_bytes": memory.expert_parameter_bytes,
                "gather_bytes": memory.parameter_bytes - (memory.fp8_weight_bytes // 2 if halved else 0),
                "expert_gather_bytes": memory.expert_parameter_bytes
                - (memory.fp8_expert_weight_bytes // 2 if halved else 0),
                # Megatron-Core's embedding and output layer are not Transformer Engine's modules.
                "dummy_wgrad_bytes": memory.dummy_wgrad_bytes if layer.kind is LayerKind.BLOCK else 0,
                "stash_bytes": figures.stash_bytes,
                "selective_bytes": figures.selective_bytes,
                "checkpoint_bytes": figures.checkpoint_bytes,
                "op_bytes": figures.op_bytes,
            }
        )
        tensor_parallel.append(cls.tp_width > 1)
    return LayerArrays(
        **{
            f.name: np.array([row[f.name] for row in rows], dtype=np.int64)
            for f in fields(LayerArrays)
            if f.name != "tensor_parallel"
        },
        tensor_parallel=np.array(tensor_parallel, dtype=np.bool_),
    )


def attention_core_s(
    graph: Graph, forward: OpCosts, seq_len: int, modules: Collection[str] = ()
) -> NDArray[np.float64]:
    """Per design: the summed all-core latency of the forward ops that read or write an attention
    core's scores (QK^T, mask, softmax, dropout, AV; `core_scores`), and of the `modules` of
    `phazec.passes.memory.SELECTIVE_MODULES` it also reruns (`selective_ops`): what selective recompute
    repeats."""
    total = np.zeros(forward.all_cores_s.shape[1])
    for i in selective_ops(graph, seq_len, modules):
        total = total + forward.all_cores_s[i]
    return total


@dataclass(frozen=True)
class MoeParts:
    """A MoE layer's passes cut at their expert-parallel all-to-alls, as Megatron-Core's combined 1F1B
    schedule runs them (`overlapped`), per design, each the summed all-core latency of its operators in
    graph order. Forward: the attention and router before the dispatch (`attention`), the dispatch's
    all-to-alls (`dispatch`), the experts (`experts`), the combine's all-to-all (`combine`) and what
    follows it (`after_combine`: the unpermutation and residual add, run with the combine). Backward:
    the gradients of what follows the combine (`before_combine_grad`), the combine's all-to-all
    (`combine_grad`), the experts' (`experts_grad`), the dispatch's all-to-alls (`dispatch_grad`) and the
    router's and attention's (`attention_grad`)."""

    attention: NDArray[np.float64]
    dispatch: NDArray[np.float64]
    experts: NDArray[np.float64]
    combine: NDArray[np.float64]
    after_combine: NDArray[np.float64]
    before_combine_grad: NDArray[np.float64]
    combine_grad: NDArray[np.float64]
    experts_grad: NDArray[np.float64]
    dispatch_grad: NDArray[np.float64]
    attention_grad: NDArray[np.float64]


def moe_parts(cls: LayerClass, costs: ClassCosts) -> MoeParts | None:
    """A layer's `MoeParts`, or None for a layer without all-to-alls. Each pass is cut at its first and
    last `AllToAll`: the forward pass dispatches its tokens (and their routing weights) first and
    combines last, the backward pass the other way round; an all-to-all between them is the dispatch's
    (its routing weights', or their gradient's)."""
    if cls.backward is None or costs.backward is None:
        return None
    cut = []
    for graph, op_costs, dispatch_first in (
        (cls.graph, costs.forward, True),
        (cls.backward, costs.backward, False),
    ):
        exchanges = [i for i, op in enumerate(graph.ops) if op.op_type == "AllToAll"]
        if not exchanges:
            return None
        first, last, latency = exchanges[0], exchanges[-1], op_costs.all_cores_s
        inner = exchanges[1:-1]  # the dispatch's
        groups = (
            range(first),
            [first, *inner] if dispatch_first else [first],
            [i for i in range(first + 1, last) if i not in inner],
            [last] if dispatch_first else [*inner, last],
            range(last + 1, len(graph.ops)),
        )
        cut.append(
            [latency[list(ops)].sum(axis=0) if len(ops) else np.zeros(latency.shape[1]) for ops in groups]
        )
    (attention, dispatch, experts, combine, after), (before, combine_grad, experts_grad, last_grad, rest) = (
        cut
    )
    return MoeParts(
        attention, dispatch, experts, combine, after, before, combine_grad, experts_grad, last_grad, rest
    )


def overlapped(
    forward_s: NDArray[np.float64],
    backward_s: NDArray[np.float64],
    parts: MoeParts,
    held: NDArray[np.float64] | float = 0.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """A MoE layer's forward and backward latency with its all-to-alls overlapped with another
    microbatch's computation (`Training.overlap_moe_expert_parallel_comm`), and what is left exposed of
    them. Megatron-Core's combined 1F1B schedule runs one microbatch's forward layer beside another's
    backward layer in four steps, computation on one stream and communication on the other
    (`TransformerLayerSchedulePlan.run`): the backward combine's all-to-all P beside the forward
    attention and router A, the forward dispatch Q beside the backward experts X_b, the backward
    dispatch S beside the forward experts X_f, and the forward combine U beside the backward router and
    attention R. Each step takes as long as the longer of its two; while an all-to-all's kernels hold a
    share h = `held` of the cores (`held_share`), the computation beside it takes that share of the
    all-to-all's time longer. The combine's own computation (the unpermutation and residual add after
    its all-to-all, C_f, and their gradients before it, C_b) runs on the communication stream but on
    the cores every step's computation needs, so it adds to its step. The layer pair takes C_b +
    max(A + h P, P) + max(X_f + h S, S) (the forward's part) + max(X_b + h Q, Q) + max(R + h U, U) + C_f
    (the backward's): the period of the two streams over a stage's layers, each step waiting on the one
    before it on the other stream. The parts are the operators' summed latencies in graph order
    (`MoeParts`), each pass's computation scaled to its scheduled latency `forward_s` (`backward_s`)
    less its all-to-alls. The sum is at least the whole layers' pairing, max(A + X_f + C_f, P + S) +
    max(X_b + R + C_b, Q + U), and at most none hidden (held at most 1); it grows with both passes'
    latencies, so lower bounds on them give lower bounds."""
    forward_compute_s = np.maximum(forward_s - parts.dispatch - parts.combine, 0.0)
    backward_compute_s = np.maximum(backward_s - parts.combine_grad - parts.dispatch_grad, 0.0)
    forward_scale = _scale(forward_compute_s, parts.attention + parts.experts + parts.after_combine)
    backward_scale = _scale(
        backward_compute_s, parts.before_combine_grad + parts.experts_grad + parts.attention_grad
    )

    def step(compute_s: NDArray[np.float64], exchange_s: NDArray[np.float64]) -> NDArray[np.float64]:
        took: NDArray[np.float64] = np.maximum(compute_s + held * exchange_s, exchange_s)
        return took

    forward = (
        backward_scale * parts.before_combine_grad
        + step(forward_scale * parts.attention, parts.combine_grad)
        + step(forward_scale * parts.experts, parts.dispatch_grad)
    )
    backward = (
        step(backward_scale * parts.experts_grad, parts.dispatch)
        + step(backward_scale * parts.attention_grad, parts.combine)
        + forward_scale * parts.after_combine
    )
    exposed_s = forward + backward - forward_compute_s - backward_compute_s
    return forward, backward, exposed_s


def _scale(scheduled_s: NDArray[np.float64], summed_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """The factor that scales a pass's summed operator latencies to its scheduled computation (0 where
    nothing is summed)."""
    scale: NDArray[np.float64] = np.divide(
        scheduled_s, summed_s, out=np.zeros_like(summed_s), where=summed_s > 0
    )
    return scale


def sm_share(designs: Designs, sms: int) -> NDArray[np.float64]:
    """Per design, the share of its tensor cores (one per SM on a GPU preset) that `sms` of them are, at
    most all."""
    share: NDArray[np.float64] = np.minimum(1.0, sms / designs.num_tc.astype(np.float64))
    return share


def held_share(designs: Designs, training: Training) -> NDArray[np.float64]:
    """Per design, the share of its cores an overlapped all-to-all's kernels hold (`overlapped`): the flex
    dispatcher's `Training.moe_flex_sms` SMs (DeepEP's kernels), the all-to-all dispatcher's
    `DeviceModel.collective_sms` (NCCL's channels), as every overlapped collective's (`sm_share`)."""
    sms = training.moe_flex_sms if training.deduplicates_tokens else designs.device.collective_sms
    return sm_share(designs, sms)


def op_recompute_s(forward: Graph, backward: Graph, costs: OpCosts) -> NDArray[np.float64]:
    """Per design: the summed all-core latency of the forward ops op recompute runs again before the
    backward pass (`phazec.passes.memory.op_checkpoint`), one after another as selective's."""
    total = np.zeros(costs.all_cores_s.shape[1])
    for i in op_checkpoint(forward, backward).recomputed:
        total = total + costs.all_cores_s[i]
    return total


def weight_grad_s(backward: Graph, costs: OpCosts) -> NDArray[np.float64]:
    """Per design: the summed all-core latency of a layer's weight-gradient products (the backward
    graph's ops `phazec.passes.autodiff` marks `grad="weight"`): the work ZB-H1 takes out of a backward
    pass and runs later as its own kernels, priced as selective's and op recompute's are, each alone on
    the chip, one after another. The caller caps it at the layer's scheduled backward latency (the
    schedule may run these products beside other work, so their sum can exceed what they add to it).
    The weights' other gradients (a norm's scale, a bias: small reductions) are left in the backward
    pass, which can only lengthen ZB-H1's bubble."""
    total = np.zeros(costs.all_cores_s.shape[1])
    for i, op in enumerate(backward.ops):
        if op.attrs.get("grad") == "weight":
            total = total + costs.all_cores_s[i]
    return total


def best(candidates: list[Candidate], weight: NDArray[np.float64] | None = None) -> Candidate | None:
    """The feasible candidate of least `objective_cost` (ties: the first), or None if none fits."""
    feasible = [c for c in candidates if isinstance(c.result, Placement) and c.result.fits_hbm]
    if not feasible:
        return None
    return min(feasible, key=lambda c: objective_cost(c, weight))


def objective_cost(candidate: Candidate, weight: NDArray[np.float64] | None = None) -> float:
    """What a search minimises: a plan's time per batch, times `weight[design]` when given (the
    design's peak power under `search.objective=throughput_per_watt`, see `phazec.search.objective`)."""
    assert isinstance(candidate.result, Placement)
    time_s = candidate.result.time_per_batch_s
    return time_s if weight is None else time_s * float(weight[candidate.design])


def least_memory(candidates: list[Candidate]) -> Candidate | None:
    """Among infeasible candidates, the one needing the least memory per device."""
    infeasible = [c for c in candidates if isinstance(c.result, NoFeasiblePlacement)]
    return min(infeasible, key=lambda c: _min_memory_bytes(c.result)) if infeasible else None


def _min_memory_bytes(result: PlacementResult) -> int:
    assert isinstance(result, NoFeasiblePlacement)
    return result.min_memory_bytes


def optimizer_factor(optimizer: str) -> int:
    """Bytes of weights, gradients and optimizer state per byte of 2-byte weights: 2 B of weights and
    2 B of bf16 gradients per parameter, plus the optimizer's state (`OPTIMIZER_STATE_BYTES`); fp32
    gradients (`Training.grad_reduce_in_fp32`) are counted apart, in the compiled model."""
    return (2 + 2 + OPTIMIZER_STATE_BYTES[optimizer]) // 2
