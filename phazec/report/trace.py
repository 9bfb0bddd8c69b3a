"""The predicted iteration as a timeline: `trace.json` in the Chrome trace event format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

Everything on it is the model's (`phazec.solvers.placement.explain_plan`), on the model's clock. The
model times an iteration as its slowest stage's load L (the work of a microbatch) m times, then the
bubble, (s - 1) / v loads, then the exposed DP sync and optimizer step of the stage whose end is
last. So every stage runs at the bottleneck stage's pace: the trace gives each microbatch's forward
pass of a model chunk a slot of `forward_slot_s` and its backward pass one of `backward_slot_s`, the
two adding up to L / v, on every stage, and orders the slots as Megatron's 1F1B schedule does
(`pipeline_order`: the model's warm-up of in-flight microbatches, interleaved over v model chunks),
each slot starting when the slot it waits for ends (`pipeline_slots`). With equal slots the last one
ends at L (m + (s - 1) / v), the model's flush (tests/report/test_trace.py checks it over stages,
chunks and microbatches); the slots are then the model's pace and the gaps between them its bubble.
Where no split of L / v holds every stage's passes, a forward pass longer than its slot runs on into
the idle time after it (`pace`). Under ZB-H1 each backward slot is followed by a weight-gradient slot,
stage j deferring its first j to its end, the order whose time is the model's on equal stages
(`zero_bubble_pace`, `pipeline_order`); the trace checks that its slots end at the model's flush.

Tracks (Perfetto's processes and threads), per pipeline stage: `stage j` with the bubble, each slot's
wait for the pace, the exposed DP sync, the optimizer step and the wait for the stage that ends the
iteration, so its slices end at `time_per_batch_s`; the work of each slot (ZeRO-3's exposed gathers,
forward `F i`, recompute `R i`, backward `B i`, ZB-H1's weight gradients `W i`, the p2p transfers
across its cut, microbatch i) on the
same track, or under interleaving on one track per virtual stage (`stage j, chunk c`); the stage's
memory per device over time (weights with gradients and optimizer state, the activation stash of the
microbatches in flight, the recompute working set) beside its HBM. Then one process with the operator
schedule the ILP chose for the bottleneck stage's slowest layer (`phazec.predict.bottleneck`), a track
per core (or per kind of core, for an operator spread over all of them), on its own clock from 0.

Times are written in microseconds (the format's unit) as whole nanoseconds: each slice's ends are the
model's seconds rounded to the nanosecond, so a track's slices tile it without gaps, and Perfetto's
JSON importer, which reads a timestamp as round(value x 1000) ns, reads them back exactly.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phazec.errors import PhazecError
from phazec.hw.designs import Designs
from phazec.predict.bottleneck import BottleneckBlock, bottleneck_block
from phazec.predict.evaluator import Candidate, Evaluator
from phazec.predict.plan_report import explain_candidate
from phazec.solvers.placement.evaluate import PlanFigures, StageCost
from phazec.solvers.placement.problem import RECOMPUTE_MODES, Stages
from phazec.util import atomic

log = logging.getLogger(__name__)

TRACE_JSON = "trace.json"

FORWARD, BACKWARD, WEIGHT = "F", "B", "W"


@dataclass(frozen=True)
class Slot:
    """One pass of one microbatch through one model chunk of a stage, at the bottleneck's pace."""

    kind: str
    """`FORWARD`, `BACKWARD` or, under ZB-H1, `WEIGHT` (the weight gradients the backward pass defers)."""
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


def pipeline_order(
    stage: int, stages: int, chunks: int, microbatches: int, zero_bubble: bool = False
) -> list[tuple[str, int, int]]:
    """The (pass, microbatch, chunk) order of one stage in Megatron's 1F1B schedule (interleaved over
    `chunks` model chunks): forward passes first as the warm-up, then one forward and one backward
    pass in turn, then the last backward passes. The warm-up holds the model's microbatches in flight
    less one (`in_flight` of `phazec/solvers/placement`: q - 1, or 2 (q - 1) + (v - 1) s interleaved,
    q = s - stage), so the stash peaks where the model's memory does; a microbatch's k-th pass in the
    interleaved order goes through chunk (k mod s v) // s (backward passes from the last chunk).
    `zero_bubble` (ZB-H1, one chunk): each backward pass is followed by its weight gradients, but the
    stage defers those of its first `stage` backward passes to its end: on equal stages this order takes
    the model's ZB-H1 time exactly (docs/model/placement.md, Time per batch)."""
    total = microbatches * chunks
    q = stages - stage
    warm_up = min(q - 1 if chunks == 1 else 2 * (q - 1) + (chunks - 1) * stages, total)

    def unit(k: int, forward: bool) -> tuple[int, int]:
        group, within = divmod(k, stages * chunks)
        chunk = within // stages
        return group * stages + within % stages, chunk if forward else chunks - 1 - chunk

    order = [(FORWARD, *unit(k, True)) for k in range(warm_up)]
    forward, backward = warm_up, 0
    while forward < total:
        order += [(FORWARD, *unit(forward, True)), (BACKWARD, *unit(backward, False))]
        forward, backward = forward + 1, backward + 1
    order += [(BACKWARD, *unit(k, False)) for k in range(backward, total)]
    if not zero_bubble:
        return order
    split: list[tuple[str, int, int]] = []
    for kind, i, c in order:
        split.append((kind, i, c))
        if kind == BACKWARD and i >= stage:
            split.append((WEIGHT, i, c))
    return split + [(WEIGHT, i, 0) for i in range(min(stage, microbatches))]


def pipeline_slots(
    stages: int,
    chunks: int,
    microbatches: int,
    forward_slot_s: float,
    backward_slot_s: float,
    *,
    weight_slot_s: float | None = None,
) -> list[list[Slot]]:
    """Each stage's slots in `pipeline_order`, each starting when the stage is free and the slot it
    waits for has ended: a forward pass waits for the same microbatch's forward pass on the stage
    before (the last stage's, of the chunk before, for the first stage), a backward pass for the
    backward pass on the stage after (the first stage's, of the chunk after, for the last stage; the
    last chunk's forward pass on the last stage). With `weight_slot_s`, ZB-H1's order, its weight
    gradients in slots of that length, each after its own backward pass on the same stage.

    Raises:
        PhazecError: under interleaving, microbatches not a multiple of the stages (Megatron's
            interleaved schedule needs them so, and the order would wait forever).
    """
    if chunks > 1 and microbatches % stages:
        raise PhazecError(
            f"the interleaved schedule of {stages} stages runs microbatches in groups of {stages}, and the "
            f"plan gives each pipeline {microbatches}: Megatron-LM refuses it, and the trace cannot draw it"
        )
    zero_bubble = weight_slot_s is not None
    orders = [pipeline_order(j, stages, chunks, microbatches, zero_bubble) for j in range(stages)]
    took = {FORWARD: forward_slot_s, BACKWARD: backward_slot_s, WEIGHT: weight_slot_s or 0.0}
    ends: dict[tuple[int, str, int, int], float] = {}
    slots: list[list[Slot]] = [[] for _ in range(stages)]
    free = [0.0] * stages
    progressed = True
    while progressed:
        progressed = False
        for j in range(stages):
            while len(slots[j]) < len(orders[j]):
                kind, i, c = orders[j][len(slots[j])]
                after = _waits_for((j, kind, i, c), stages, chunks)
                if after is not None and after not in ends:
                    break
                start = max(free[j], ends[after] if after is not None else 0.0)
                end = start + took[kind]
                ends[(j, kind, i, c)] = free[j] = end
                slots[j].append(Slot(kind, i, c, start, end))
                progressed = True
    return slots


def _waits_for(key: tuple[int, str, int, int], stages: int, chunks: int) -> tuple[int, str, int, int] | None:
    """The slot (stage, pass, microbatch, chunk) the slot `key` waits for; None for the very first."""
    j, kind, i, c = key
    if kind == WEIGHT:
        return None  # its own backward pass, on the same stage, comes first in the order
    if kind == FORWARD:
        if j > 0:
            return (j - 1, FORWARD, i, c)
        return (stages - 1, FORWARD, i, c - 1) if c > 0 else None
    if j < stages - 1:
        return (j + 1, BACKWARD, i, c)
    return (0, BACKWARD, i, c + 1) if c < chunks - 1 else (stages - 1, FORWARD, i, chunks - 1)


@dataclass(frozen=True)
class Pace:
    """The slots every stage's passes take: the bottleneck stage's load of a model-chunk microbatch,
    split into a forward and a backward slot that hold each stage's own work."""

    forward_slot_s: float
    backward_slot_s: float
    flush_s: float
    """When the last slot ends: L (m + (s - 1) / v), as the model computes it (ZB-H1: L m + its bubble)."""
    weight_slot_s: float | None = None
    """Under ZB-H1, the slot of the weight gradients each backward pass defers; None under 1F1B."""


def pace(figures: PlanFigures, chunks: int) -> Pace:
    """The slots of a plan. Each stage's forward work of a chunk (ZeRO-3's exposed gathers, the forward
    pass, its send across the cut) should fit the forward slot and its backward work (recompute, the
    backward pass, its send) the backward slot: the forward slot is the bottleneck stage's own forward
    work where that fits every stage, else the nearest length that does; where none does (one stage's
    forward work and another's backward work add up to more than the bottleneck's load), the
    backward slot holds every stage's backward work and a stage whose forward work is longer than its
    slot runs on into the idle time after it (`_Drawing.stage`): the model prices a stage by its
    whole load, not by its passes, and no stage's passes end after the flush (each suffix of a
    stage's order has as many backward passes as forward ones)."""
    top = figures.iteration.bottleneck_stage
    load_s = figures.placement.stages[top].load_s
    forward = [_forward_work_s(figures, j) / chunks for j in range(len(figures.times))]
    backward = [_backward_work_s(figures, j) / chunks for j in range(len(figures.times))]
    low, high = max(forward), load_s / chunks - max(backward)
    forward_slot_s = max(0.0, min(max(forward[top], low), high))
    stages = len(figures.times)
    microbatches = figures.placement.microbatches_per_pipeline
    flush_s = load_s * (microbatches + (stages - 1) / chunks)
    return Pace(forward_slot_s, load_s / chunks - forward_slot_s, flush_s)


def zero_bubble_pace(figures: PlanFigures) -> Pace:
    """ZB-H1's slots (one model chunk a stage): forward, backward and weight-gradient slots adding up
    to the bottleneck load L whose order (`pipeline_order`) ends at the model's L m + (s - 1) max(0,
    L - 2 W), W the stages' least credited weight-gradient time: each of them holds W, or more where
    L < 3 W, when the forward and backward slots are L - 2 W each and the weight slot 4 W - L (a slot
    order's time is L m + (s - 1) (L - 2 min(w, (min(f, b) + w) / 2)) for slots f, b, w, as the model's
    is for a stage's passes). Each stage runs in the weight slot as much of its credited weight
    gradients as it holds, the rest in its backward pass; the forward slot is the bottleneck stage's
    forward work where that fits every stage, else the nearest length that does, and the backward slot
    holds every stage's backward work, so no stage's passes end after the flush (each suffix of its
    order has at least as many backward and weight passes as forward ones).

    Raises:
        PhazecError: no such slots hold every stage's backward work at the model's pace.
    """
    top = figures.iteration.bottleneck_stage
    load_s = figures.placement.stages[top].load_s
    stages = len(figures.times)
    microbatches = figures.placement.microbatches_per_pipeline
    flush_s = load_s * microbatches + figures.iteration.bubble_s
    credit_s = (load_s - figures.iteration.bubble_s / (stages - 1)) / 2.0 if stages > 1 else 0.0
    if 3.0 * credit_s <= load_s:
        weight_slot_s = credit_s
        forward = [_forward_work_s(figures, j) for j in range(stages)]
        backward = [
            _backward_work_s(figures, j) - weight_work_s(figures, j, weight_slot_s) for j in range(stages)
        ]
        low = max(*forward, weight_slot_s)
        high = load_s - weight_slot_s - max(*backward, weight_slot_s)
        forward_slot_s = min(max(forward[top], low), high)
    else:
        forward_slot_s = load_s - 2.0 * credit_s
        weight_slot_s = 4.0 * credit_s - load_s
        backward = [
            _backward_work_s(figures, j) - weight_work_s(figures, j, weight_slot_s) for j in range(stages)
        ]
    backward_slot_s = load_s - forward_slot_s - weight_slot_s
    # Slots shorter than the weight slot would price it below its credit (the order then takes longer).
    short = 3.0 * credit_s <= load_s and min(forward_slot_s, backward_slot_s) < weight_slot_s * (1.0 - 1e-12)
    if short or max(backward) > backward_slot_s * (1.0 + 1e-12):
        raise PhazecError(
            "ZB-H1's slots cannot hold every stage's backward work at the bottleneck stage's pace (weight "
            "gradients longer than a stage's forward pass or input gradients); the plan's time stands, its "
            "timeline is not drawn"
        )
    return Pace(forward_slot_s, backward_slot_s, flush_s, weight_slot_s)


def weight_work_s(figures: PlanFigures, j: int, weight_slot_s: float | None) -> float:
    """What stage j runs in a weight-gradient slot of `weight_slot_s`: its credited weight gradients, at
    most the slot (0 under 1F1B: None)."""
    return 0.0 if weight_slot_s is None else min(figures.costs[j].weight_grad_s, weight_slot_s)


def _forward_work_s(figures: PlanFigures, j: int) -> float:
    t = figures.times[j]
    return t.shard_s + t.forward_s + t.p2p_s / 2


def _backward_work_s(figures: PlanFigures, j: int) -> float:
    t = figures.times[j]
    return t.recompute_s + t.backward_s + t.p2p_s / 2


@dataclass(frozen=True)
class TraceInfo:
    """What the trace says about the plan beside the figures: its name, stages and chunks."""

    title: str
    """e.g. the model and plan."""
    stages: Stages
    chunks: int
    """Model chunks per stage (`plan.interleave`)."""
    zero_bubble: bool
    """The plan runs ZB-H1 (`plan.pipeline_schedule=zb_h1`; one chunk a stage)."""
    band: dict[str, Any]
    """The iteration time's band (`phazec.hw.validation.band_record`)."""


def _ns(t_s: float) -> int:
    return round(t_s * 1e9)


def _us(ns: int) -> float:
    return ns / 1000


class _Events:
    """The trace's events, slices written with their ends on the nanosecond grid."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def name(self, pid: int, tid: int | None, text: str, sort: int) -> None:
        kind = "process" if tid is None else "thread"
        base = {"ph": "M", "pid": pid, **({} if tid is None else {"tid": tid})}
        self.events.append({**base, "name": f"{kind}_name", "args": {"name": text}})
        self.events.append({**base, "name": f"{kind}_sort_index", "args": {"sort_index": sort}})

    def slice(
        self, track: tuple[int, int], name: str, span_s: tuple[float, float], cat: str, **args: Any
    ) -> None:
        """A slice on the track (pid, tid) from and to the model's seconds `span_s`, unless it is
        shorter than a nanosecond."""
        pid, tid = track
        start_s, end_s = span_s
        start, end = _ns(start_s), _ns(end_s)
        if end > start:
            self.events.append({
                "ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": _us(start),
                "dur": _us(end - start), "args": {**args, "seconds": end_s - start_s},
            })  # fmt: skip

    def counter(self, pid: int, name: str, at_s: float, values: dict[str, int]) -> None:
        self.events.append({"ph": "C", "pid": pid, "name": name, "ts": _us(_ns(at_s)), "args": values})


def trace_events(figures: PlanFigures, info: TraceInfo, block: BottleneckBlock | None) -> dict[str, Any]:
    """The trace (`trace.json`'s content) of a plan's figures; with `block`, its layer's schedule.

    Raises:
        PhazecError: the plan's schedule cannot be drawn (`pipeline_slots`).
    """
    chunks = info.chunks
    stages = len(figures.times)
    microbatches = figures.placement.microbatches_per_pipeline
    timing = zero_bubble_pace(figures) if info.zero_bubble else pace(figures, chunks)
    slots = pipeline_slots(
        stages,
        chunks,
        microbatches,
        timing.forward_slot_s,
        timing.backward_slot_s,
        weight_slot_s=timing.weight_slot_s,
    )
    ended_s = max(stage[-1].end_s for stage in slots)
    if abs(ended_s - timing.flush_s) > 1e-9 * timing.flush_s:
        raise PhazecError(
            f"the pipeline's slots end at {ended_s:.6g} s, not at the model's {timing.flush_s:.6g} s; "
            "the plan's time stands, its timeline is not drawn"
        )
    last = figures.iteration.dp_sync_stage
    end_s = timing.flush_s + (figures.syncs[last].exposed_s + figures.syncs[last].step_s)
    drawing = _Drawing(_Events(), figures, timing, chunks, end_s)
    for j in range(stages):
        layers = info.stages[j]
        devices = f"{figures.costs[j].devices} device{'s' if figures.costs[j].devices > 1 else ''}"
        drawing.out.name(j + 1, None, f"stage {j}: layers {layers[0]}-{layers[-1]}, {devices}", j)
        drawing.out.name(j + 1, 0, f"stage {j}", 0)
        for c in range(chunks if chunks > 1 else 0):
            drawing.out.name(j + 1, c + 1, f"stage {j}, chunk {c}", c + 1)
        drawing.memory(j, slots[j], drawing.stage(j, slots[j]))
    if block is not None:
        _layer(drawing.out, stages + 1, block)
    return {
        "traceEvents": drawing.out.events,
        "otherData": {
            "title": info.title,
            "clock": "phazec's model of time (s): predicted, not measured",
            "time_per_batch_s": end_s,
            "band": info.band,
            "bottleneck_stage": figures.iteration.bottleneck_stage,
            "dp_sync_stage": last,
            "forward_slot_s": timing.forward_slot_s,
            "backward_slot_s": timing.backward_slot_s,
            "weight_slot_s": timing.weight_slot_s,
            "flush_s": timing.flush_s,
        },
    }


def kept_bytes(cost: StageCost, mode: int) -> int:
    """The activation bytes a stage keeps per microbatch in flight in its recompute mode (index into
    `RECOMPUTE_MODES`: none, selective, full, op, block): its stash, selective stash, layer inputs, op
    stash, or its rerun blocks' inputs and the others' stash."""
    return (cost.stash_bytes, cost.selective_bytes, cost.input_bytes, cost.op_bytes, cost.block_bytes)[mode]


@dataclass(frozen=True)
class _Drawing:
    """The stages of one plan being drawn."""

    out: _Events
    figures: PlanFigures
    timing: Pace
    chunks: int
    end_s: float
    """The iteration's end, as the model computes it."""

    def stage(self, j: int, slots: list[Slot]) -> list[tuple[float, float]]:
        """A stage's slots, each with its work, which starts at the slot's start or, after a pass longer
        than its slot, when that pass ends; its idle time within a slot (`wait` for the bottleneck's
        pace) and between slots (the bubble; all of the bottleneck stage's idle time is the bubble);
        then its DP sync, optimizer step and wait for the iteration's end. Returns each pass's work
        (start, end)."""
        figures, timing, chunks = self.figures, self.timing, self.chunks
        t = figures.times[j]
        stage_track = (j + 1, 0)
        at, slot_end, drawn = 0.0, 0.0, []
        for slot in slots:
            start = max(slot.start_s, at)
            self._idle(j, (at, start), slot_end)
            i, c = slot.microbatch, slot.chunk
            track = (j + 1, c + 1 if chunks > 1 else 0)
            weight_s = weight_work_s(figures, j, timing.weight_slot_s)
            forward = [("ZeRO-3 gathers", t.shard_s, "zero3"), (f"F {i}", t.forward_s, "forward")]
            backward = [
                (f"R {i}", t.recompute_s, "recompute"),
                (f"B {i}", t.backward_s - weight_s, "backward"),
            ]
            parts = [*(forward if slot.kind == FORWARD else backward), (f"p2p {i}", t.p2p_s / 2, "p2p")]
            if slot.kind == WEIGHT:
                parts = [(f"W {i}", weight_s, "weight_grad")]
            at = start
            for name, total_s, cat in parts:
                self.out.slice(track, name, (at, at + total_s / chunks), cat, microbatch=i, chunk=c)
                at += total_s / chunks
            drawn.append((start, at))
            slot_end = slot.end_s
        self._idle(j, (at, timing.flush_s), slot_end)
        sync = figures.syncs[j]
        synced_s = timing.flush_s + sync.exposed_s
        stepped_s = timing.flush_s + (sync.exposed_s + sync.step_s)
        self.out.slice(stage_track, "DP gradient sync (exposed)", (timing.flush_s, synced_s), "dp_sync")
        self.out.slice(stage_track, "optimizer step", (synced_s, stepped_s), "optimizer")
        last = figures.iteration.dp_sync_stage
        self.out.slice(stage_track, f"wait for stage {last}'s sync and step", (stepped_s, self.end_s), "wait")
        return drawn

    def _idle(self, j: int, span_s: tuple[float, float], slot_end_s: float) -> None:
        """A stage's idle time `span_s`: up to the end of the slot it is in, waiting for the
        bottleneck stage's pace; after it, the bubble (the bottleneck stage's is all bubble)."""
        start_s, end_s = span_s
        top = self.figures.iteration.bottleneck_stage
        split_s = start_s if j == top else min(max(start_s, slot_end_s), end_s)
        self.out.slice((j + 1, 0), f"wait (stage {top}'s pace)", (start_s, split_s), "wait")
        self.out.slice((j + 1, 0), "bubble", (split_s, end_s), "bubble")

    def memory(self, j: int, slots: list[Slot], drawn: list[tuple[float, float]]) -> None:
        """A stage's memory per device over time: its weights, gradients and optimizer state
        throughout; the activations of each model-chunk microbatch in flight, from its forward pass
        to the end of its backward pass, at the model's bytes for that many (ceil(kept x n / v)); the
        recompute working set during each backward pass's recompute and backward pass (`drawn`: each
        pass's work as `stage` drew it). It peaks at the stage's memory."""
        figures, chunks, pid = self.figures, self.chunks, j + 1
        memory, t = figures.memories[j], figures.times[j]
        backward_s = t.recompute_s + t.backward_s - weight_work_s(figures, j, self.timing.weight_slot_s)
        kept = kept_bytes(figures.costs[j], RECOMPUTE_MODES.index(figures.modes[j]))
        static = memory.weights_bytes + memory.gradients_bytes + memory.optimizer_state_bytes

        def point(at_s: float, in_flight: int, working: int) -> None:
            stash = (kept * in_flight + chunks - 1) // chunks
            parts = {"weights, gradients, optimizer state": static, "activation stash": stash}
            self.out.counter(pid, "memory (B)", at_s, {**parts, "working set": working})

        self.out.counter(pid, "HBM (B)", 0.0, {"capacity": figures.placement.hbm_bytes})
        in_flight = 0
        point(0.0, 0, 0)
        for slot, (start_s, _) in zip(slots, drawn, strict=True):
            if slot.kind == WEIGHT:
                continue  # ZB-H1's deferred weight gradients: the model keeps 1F1B's memory
            if slot.kind == FORWARD:
                in_flight += 1
                point(start_s, in_flight, 0)
            else:
                point(start_s, in_flight, memory.working_bytes)
                in_flight -= 1
                point(start_s + backward_s / chunks, in_flight, 0)
        point(self.end_s, 0, 0)
        self.out.counter(pid, "HBM (B)", self.end_s, {"capacity": figures.placement.hbm_bytes})


def _layer(out: _Events, pid: int, block: BottleneckBlock) -> None:
    """The operator schedule of the bottleneck block: a track per core an operator holds (and one
    per kind of core for operators spread over all of them), on its own clock."""
    problem, found = block.problem, block.schedule
    what = f"layer {block.layer} ({block.direction}), the slowest of stage {block.stage}"
    out.name(pid, None, f"{what}: its ILP schedule, own clock", pid)
    lanes: dict[tuple[str, int], int] = {}
    for i, op in enumerate(problem.ops):
        if found.duration_s[i] == 0:
            continue
        held = found.cores[i] if not found.spread[i] else tuple((r, -1) for r in problem.resources(i))
        for lane in held:
            tid = lanes.setdefault(lane, len(lanes))
            start = found.start_s[i]
            span = (start, start + found.duration_s[i])
            out.slice((pid, tid), op.name, span, op.kind.name.lower(), cores=_lane_name(lane))
    for lane, tid in lanes.items():
        out.name(pid, tid, _lane_name(lane), tid)


def _lane_name(lane: tuple[str, int]) -> str:
    """`tc 3`, or `tc all` for the operators spread over every tensor core."""
    resource, core = lane
    return f"{resource} {'all' if core < 0 else core}"


def write_trace(content: dict[str, Any], out_dir: Path) -> Path:
    """Write `out_dir/trace.json`."""
    path = out_dir / TRACE_JSON
    atomic.write_bytes(path, json.dumps(content, separators=(",", ":")).encode())
    return path


def write_plan_trace(
    evaluator: Evaluator,
    designs: Designs,
    candidate: Candidate,
    out_dir: Path,
    *,
    title: str,
    band: dict[str, Any],
) -> Path | None:
    """Write the trace of a plan (`candidate`, on `designs`) to `out_dir/trace.json`, with its bottleneck
    block's schedule, its `title` and the `band` of its time; a plan the trace cannot draw is logged as a
    warning and writes nothing."""
    stages, figures = explain_candidate(evaluator, designs, candidate)
    block = bottleneck_block(evaluator, designs, candidate)
    training = candidate.training
    info = TraceInfo(title, stages, training.interleave, training.pipeline_schedule == "zb_h1", band)
    try:
        content = trace_events(figures, info, block)
    except PhazecError as err:
        log.warning("no %s: %s.", TRACE_JSON, err)
        return None
    return write_trace(content, out_dir)
