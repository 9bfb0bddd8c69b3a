"""The predicted iteration as a timeline (`trace.json`, issue 43): the 1F1B and interleaved schedules by
hand, then real plans read back as Perfetto's JSON importer reads them.

Why not Perfetto's own trace processor: the `perfetto` package on PyPI (0.59.1) ships no
trace_processor_shell; its `TraceProcessor` downloads the binary from Google's storage at first use,
and CI reaches the package registries only (no PyPI or npm package ships the binary, checked for
issue 43). So `read_trace` below reads the file as the importer defines the format
(src/trace_processor/importers/json in Perfetto's tree): `ph: M` names a process or thread (one track
per thread), `ph: X` is a complete slice whose `ts` and `dur` in microseconds become nanoseconds as
round(value x 1000); slices on one track must nest (a slice that starts inside another and ends
after it is dropped); `ph: C` gives one counter track per argument, named `<name> <argument>`. The
queries then ask what the issue asks of the trace processor: slices per track, where every stage's
track ends, the memory counters' peak.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phazec.cli import run_plan
from phazec.config.settings import settings_from_config
from phazec.errors import PhazecError
from phazec.predict.plan_report import PlanReport
from phazec.report.trace import TRACE_JSON, TraceInfo, pipeline_order, pipeline_slots, trace_events
from phazec.solvers.placement.evaluate import plan_figures
from tests.commands.test_plan import toy, toy_variant
from tests.conftest import compose_config


def test_1f1b_by_hand() -> None:
    # Two stages, three microbatches, forward 1 s, backward 2 s. Stage 0 warms up with one forward
    # pass (stage 1 with none), then alternates; each pass waits for its neighbour:
    #   stage 0: F0 0-1  F1 1-2  B0 4-6  F2 6-7  B1 7-9  B2 10-12
    #   stage 1: F0 1-2  B0 2-4  F1 4-5  B1 5-7  F2 7-8  B2 8-10
    # It ends at (m + s - 1)(f + b) = 4 x 3 = 12 s, the model's L (m + (s - 1) / v).
    assert pipeline_order(0, 2, 1, 3) == [
        ("F", 0, 0),
        ("F", 1, 0),
        ("B", 0, 0),
        ("F", 2, 0),
        ("B", 1, 0),
        ("B", 2, 0),
    ]
    assert pipeline_order(1, 2, 1, 3) == [
        ("F", 0, 0),
        ("B", 0, 0),
        ("F", 1, 0),
        ("B", 1, 0),
        ("F", 2, 0),
        ("B", 2, 0),
    ]
    slots = pipeline_slots(2, 1, 3, 1.0, 2.0)
    spans = [[(s.kind, s.microbatch, s.start_s, s.end_s) for s in stage] for stage in slots]
    assert spans == [
        [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 4, 6), ("F", 2, 6, 7), ("B", 1, 7, 9), ("B", 2, 10, 12)],
        [("F", 0, 1, 2), ("B", 0, 2, 4), ("F", 1, 4, 5), ("B", 1, 5, 7), ("F", 2, 7, 8), ("B", 2, 8, 10)],
    ]


def test_interleaved_order_by_hand() -> None:
    # Two stages, two chunks, two microbatches (Megatron's groups of s = 2): the k-th forward pass goes
    # through chunk (k mod 4) // 2, so microbatches 0, 1 in chunk 0, then 0, 1 in chunk 1. Stage 0 warms
    # up 2 (q - 1) + (v - 1) s = 4 passes: all of them; stage 1, 0 + 2 = 2.
    forward = [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    assert pipeline_order(0, 2, 2, 2) == [*forward, ("B", 0, 1), ("B", 1, 1), ("B", 0, 0), ("B", 1, 0)]
    assert pipeline_order(1, 2, 2, 2)[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("B", 0, 1)]


@pytest.mark.parametrize(
    ("stages", "chunks", "groups"), [(1, 1, 3), (2, 1, 1), (3, 1, 4), (4, 2, 2), (3, 3, 2), (8, 4, 1)]
)
def test_the_slots_end_at_the_models_flush_and_hold_its_microbatches_in_flight(
    stages: int, chunks: int, groups: int
) -> None:
    # With slots of 0.25 and 0.5 s (exact in binary) the first stage's last slot ends at
    # L (m + (s - 1) / v), L = v (0.25 + 0.5), no slot later, and stage j holds at most the model's
    # in-flight count:
    # q = s - j, min(q, m) at v = 1, else min(2 (q - 1) + (v - 1) s + 1, m v).
    microbatches = groups * stages
    slots = pipeline_slots(stages, chunks, microbatches, 0.25, 0.5)
    load_s = chunks * 0.75
    flush_s = load_s * (microbatches + (stages - 1) / chunks)
    assert slots[0][-1].end_s == max(stage[-1].end_s for stage in slots) == flush_s
    for j, stage in enumerate(slots):
        q = stages - j
        model = (
            min(q, microbatches)
            if chunks == 1
            else min(2 * (q - 1) + (chunks - 1) * stages + 1, microbatches * chunks)
        )
        in_flight, peak = 0, 0
        for slot in stage:
            in_flight += 1 if slot.kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == model
        assert len(stage) == 2 * microbatches * chunks


def test_zero_bubble_order_by_hand() -> None:
    # ZB-H1 on 2 stages, 3 microbatches: 1F1B's order, each backward pass followed by its weight
    # gradients, stage j deferring those of its first j backward passes to its end. With F = 1, B = 1,
    # W = 0.5 s: stage 0 F0 0-1 F1 1-2 B0 3-4 W0 4-4.5 F2 4.5-5.5 B1 5.5-6.5 W1 6.5-7 B2 7.5-8.5 W2 8.5-9;
    # stage 1 F0 1-2 B0 2-3 F1 3-4 B1 4-5 W1 5-5.5 F2 5.5-6.5 B2 6.5-7.5 W2 7.5-8 W0 8-8.5. It ends at 9 s,
    # the model's L m + (s - 1)(L - 2 W) = 2.5 x 3 + 1.5.
    assert pipeline_order(1, 2, 1, 3, zero_bubble=True) == [
        ("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0), ("W", 1, 0), ("F", 2, 0), ("B", 2, 0),
        ("W", 2, 0), ("W", 0, 0),
    ]  # fmt: skip
    slots = pipeline_slots(2, 1, 3, 1.0, 1.0, weight_slot_s=0.5)
    spans = [[(s.kind, s.microbatch, s.start_s, s.end_s) for s in stage] for stage in slots]
    assert spans == [
        [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 3, 4), ("W", 0, 4, 4.5), ("F", 2, 4.5, 5.5),
         ("B", 1, 5.5, 6.5), ("W", 1, 6.5, 7), ("B", 2, 7.5, 8.5), ("W", 2, 8.5, 9)],
        [("F", 0, 1, 2), ("B", 0, 2, 3), ("F", 1, 3, 4), ("B", 1, 4, 5), ("W", 1, 5, 5.5),
         ("F", 2, 5.5, 6.5), ("B", 2, 6.5, 7.5), ("W", 2, 7.5, 8), ("W", 0, 8, 8.5)],
    ]  # fmt: skip


@pytest.mark.parametrize(("stages", "microbatches"), [(1, 3), (2, 2), (3, 7), (4, 4), (8, 16)])
def test_zero_bubble_slots_end_at_the_models_time(stages: int, microbatches: int) -> None:
    # Slots f, b, w (quarters: exact in binary), W above f or b too: the order ends at the model's
    # L m + (s - 1) max(0, L - 2 W'), W' = min(w, (min(f, b) + w) / 2), and holds 1F1B's in flight.
    for f, b, w in itertools.product((0.25, 0.75, 1.5), repeat=3):
        slots = pipeline_slots(stages, 1, microbatches, f, b, weight_slot_s=w)
        load, credit = f + b + w, min(w, (min(f, b) + w) / 2)
        assert max(stage[-1].end_s for stage in slots) == load * microbatches + (stages - 1) * (
            load - 2 * credit
        )
        for j, stage in enumerate(slots):
            flight = list(itertools.accumulate((s.kind == "F") - (s.kind == "B") for s in stage))
            assert max(flight) == min(stages - j, microbatches)


def test_zero_bubble_slots_that_cannot_hold_a_stage_are_refused() -> None:
    # Two equal stages whose weight gradients (3 s) exceed their forward pass and input gradients (1 s
    # each): the model credits W' = (1 + 3) / 2 = 2 s, so L = 5 s < 3 W' and the slots are 1, 1 and
    # 4 W' - L = 3 s; each stage runs its credited 2 s there and 2 s in a 1 s backward slot: refused,
    # the plan's time standing (the trace is then not written, with a warning).
    problem = toy(
        1,
        backward_latency_s=np.array([[4.0, 4.0]]),
        weight_grad_latency_s=np.array([[3.0, 3.0]]),
        edge_bytes=np.array([0]),
    )
    variant = toy_variant(1, pipeline_schedule=1)
    figures = plan_figures(problem, variant, ((0,), (1,)), 1)
    assert figures.placement.time_per_batch_s == 5.0 * 2 + 1.0
    refused = r"ZB-H1's slots cannot hold every stage's backward work .* \(weight gradients longer"
    with pytest.raises(PhazecError, match=refused):
        trace_events(figures, TraceInfo("toy", ((0,), (1,)), 1, True, {}), None)


def test_an_interleaved_schedule_needs_microbatches_in_groups_of_the_stages() -> None:
    with pytest.raises(
        PhazecError, match="runs microbatches in groups of 4, and the plan gives each pipeline 6"
    ):
        pipeline_slots(4, 2, 6, 1.0, 1.0)


# --- Real plans, read back as Perfetto's JSON importer reads them ------------------------------------


@dataclass
class Trace:
    """A trace as the importer sees it: tracks by (process name, thread name) holding slices
    (start ns, end ns, name, args), counter tracks by (process name, counter name) holding
    (ns, value)."""

    slices: dict[tuple[str, str], list[tuple[int, int, str, dict[str, Any]]]] = field(default_factory=dict)
    counters: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    other: dict[str, Any] = field(default_factory=dict)


def read_trace(path: Path) -> Trace:
    """Read `path` as Perfetto's JSON importer does (the module docstring); fails on what it would
    drop or refuse."""
    content = json.loads(path.read_text())
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for event in content["traceEvents"]:
        if event["ph"] == "M" and event["name"] == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        if event["ph"] == "M" and event["name"] == "thread_name":
            threads[(event["pid"], event["tid"])] = event["args"]["name"]
    out = Trace(other=content["otherData"])
    slices: dict[tuple[str, str], list[tuple[int, int, str, dict[str, Any]]]] = defaultdict(list)
    counters: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for event in content["traceEvents"]:
        assert event["ph"] in "MXC", event
        if event["ph"] == "X":
            start = round(event["ts"] * 1000)
            end = start + round(event["dur"] * 1000)
            track = (processes[event["pid"]], threads[(event["pid"], event["tid"])])
            slices[track].append((start, end, event["name"], event["args"]))
        if event["ph"] == "C":
            for key, value in event["args"].items():
                counters[(processes[event["pid"]], f"{event['name']} {key}")].append(
                    (round(event["ts"] * 1000), value)
                )
    for track, found in slices.items():
        found.sort(key=lambda s: (s[0], -s[1]))
        for before, after in itertools.pairwise(found):
            assert after[0] >= before[1] or after[1] <= before[1], (
                f"{track}: {before} and {after} do not nest"
            )
    out.slices, out.counters = dict(slices), dict(counters)
    return out


def stage_tracks(trace: Trace, stages: int) -> list[dict[str, list[tuple[int, int, str, dict[str, Any]]]]]:
    """Per stage, its tracks by thread name."""
    found: list[dict[str, list[tuple[int, int, str, dict[str, Any]]]]] = [{} for _ in range(stages)]
    for (process, thread), slices in trace.slices.items():
        if process.startswith("stage "):
            found[int(process.split()[1].rstrip(":"))][thread] = slices
    return found


def check_trace(trace: Trace, report: PlanReport, chunks: int) -> None:
    """What every trace must show: the model's iteration time, each stage's tracks tiling it, its
    microbatches (under ZB-H1 their weight-gradient passes too), the bottleneck stage's parts and memory
    peaking at the model's."""
    zero_bubble = report.plan.training.pipeline_schedule == "zb_h1"
    time_s = report.time_per_batch_s
    assert trace.other["time_per_batch_s"] == time_s  # the model's own figure, to the bit
    end = round(time_s * 1e9)
    stages = len(report.layers_per_stage)
    m = report.microbatches_per_pipeline
    per_stage = stage_tracks(trace, stages)
    for j, tracks in enumerate(per_stage):
        names = [f"stage {j}"] + ([f"stage {j}, chunk {c}" for c in range(chunks)] if chunks > 1 else [])
        assert sorted(tracks) == sorted(names)
        assert tracks[f"stage {j}"][-1][1] == end  # the stage's track ends at time_per_batch_s
        everything = sorted(s[:2] for track in tracks.values() for s in track)
        assert everything[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(everything))
        assert sum(b - a for a, b in everything) == end  # the tracks tile the iteration, no gap, no overlap
        work = [s for track in tracks.values() for s in track]
        for letter in ("F", "B", "W") if zero_bubble else ("F", "B"):
            passes = [s for s in work if s[2].split()[0] == letter]
            assert len(passes) == m * chunks
            assert {s[3]["microbatch"] for s in passes} == set(range(m))
            if chunks > 1:
                assert {s[3]["chunk"] for s in passes} == set(range(chunks))
    b = report.breakdown
    top = per_stage[b.bottleneck_stage]
    parts: dict[str, float] = defaultdict(float)
    for track in top.values():
        for _, _, name, args in track:
            parts[name.split()[0]] += args["seconds"]
    forward_s = b.forward_s + b.backward_s + b.tp_communication_s + b.ep_communication_s
    assert parts["F"] + parts["B"] + parts.get("W", 0.0) == pytest.approx(forward_s, rel=1e-12)
    assert parts.get("R", 0.0) == pytest.approx(b.recompute_s, rel=1e-12)
    assert parts["bubble"] == pytest.approx(b.bubble_s, rel=1e-9, abs=1e-12)
    assert parts.get("p2p", 0.0) == pytest.approx(b.pipeline_p2p_s, rel=1e-12)
    sync = per_stage[b.dp_sync_stage][f"stage {b.dp_sync_stage}"]
    assert [s[2] for s in sync][-2:] == ["DP gradient sync (exposed)", "optimizer step"] or b.dp_sync_s == 0
    assert sync[-1][2] == "optimizer step" and sync[-1][3]["seconds"] == pytest.approx(
        b.optimizer_s, rel=1e-9
    )
    # Memory: each stage's counters add up, at their peak, to the memory table's total of the fullest.
    peaks = []
    for j in range(stages):
        process = next(p for p, _ in trace.counters if p.startswith(f"stage {j}:"))
        series = [trace.counters[(process, f"memory (B) {part}")] for part in
                  ("weights, gradients, optimizer state", "activation stash", "working set")]  # fmt: skip
        peaks.append(max(sum(value for _, value in row) for row in zip(*series, strict=True)))
        assert {v for _, v in trace.counters[(process, "HBM (B) capacity")]} == {report.memory.hbm_bytes}
    assert max(peaks) == report.memory.total_bytes
    assert peaks.index(max(peaks)) == report.memory.stage


TINY = (
    "model=gpt2_xl", "model.hf_config.n_layer=4", "model.hf_config.n_embd=64", "model.hf_config.n_head=4",
    "model.seq_len=32", "model.hf_config.n_positions=32", "tracking=none", "hw=a100", "system=dgx_a100",
    "system.devices=8", "system.global_batch=16", "train.optimizer=adam", "plan.trace=true",
)  # fmt: skip


@pytest.mark.parametrize(
    ("plan", "chunks"),
    [
        (("plan.tp=2", "plan.pp=2", "plan.dp=2", "plan.microbatch=1", "plan.recompute=full",
          "plan.interleave=2", "plan.zero_stage=1"), 2),
        (("plan.tp=1", "plan.pp=2", "plan.dp=4", "plan.microbatch=2", "plan.recompute=selective"), 1),
        # One stage's forward work and another's backward work exceed the bottleneck's load: the
        # backward slot holds every backward pass, a longer forward pass runs on past its slot.
        (("plan.tp=1", "plan.pp=4", "plan.dp=2", "plan.microbatch=2", "plan.recompute=none"), 1),
        # ZB-H1: weight-gradient passes in their own slots, the bubble shorter than 1F1B's.
        (("plan.tp=1", "plan.pp=2", "plan.dp=4", "plan.microbatch=1", "plan.pipeline_schedule=zb_h1"), 1),
        (("plan.tp=2", "plan.pp=4", "plan.dp=1", "plan.microbatch=2", "plan.recompute=full",
          "plan.pipeline_schedule=zb_h1"), 1),
    ],
)  # fmt: skip
def test_a_tiny_plans_trace_is_the_models(
    plan: tuple[str, ...], chunks: int, cache_dir: Path, tmp_path: Path
) -> None:
    report = run_plan(compose_config(*TINY, *plan, f"cache_dir={cache_dir}"), tmp_path)
    trace = read_trace(tmp_path / TRACE_JSON)
    check_trace(trace, report, chunks)
    layer = [track for (process, _), track in trace.slices.items() if process.startswith("layer ")]
    assert layer and all(len(track) > 0 for track in layer)


def test_no_trace_without_the_knob(cache_dir: Path, tmp_path: Path) -> None:
    cfg = compose_config(*TINY[:-1], "plan.pp=2", "plan.dp=4", f"cache_dir={cache_dir}")
    assert not settings_from_config(cfg).plan.trace
    run_plan(cfg, tmp_path)
    assert not (tmp_path / TRACE_JSON).exists()


ACCEPTANCE = {
    "gpt2_xl": (
        ("model=gpt2_xl", "hw=a100", "system=dgx_a100", "system.devices=8", "system.global_batch=64",
         "train.optimizer=adam", "plan.pp=2", "plan.dp=4", "plan.microbatch=4", "plan.recompute=selective",
         "plan.interleave=2"),
        2,
    ),
    "gpt3_175b": (
        ("model=gpt3_175b", "hw=a100", "system=dgx_a100", "train.optimizer=adam", "plan.tp=8", "plan.pp=8",
         "plan.dp=16", "plan.microbatch=1", "plan.recompute=selective", "plan.sequence_parallel=true",
         "plan.interleave=3"),
        3,
    ),
}  # fmt: skip
"""The README's GPT-2 XL plan and `phazec-plan --help`'s interleaved GPT-3 plan (1024 A100s, 256
microbatches a pipeline, 3 model chunks a stage), at full depth."""


@pytest.mark.slow
@pytest.mark.parametrize("name", ACCEPTANCE)
def test_the_readme_and_gpt3_plans_trace_as_the_model_times_them(
    name: str, cache_dir: Path, tmp_path: Path
) -> None:
    overrides, chunks = ACCEPTANCE[name]
    cfg = compose_config(*overrides, "tracking=none", "plan.trace=true", f"cache_dir={cache_dir}")
    report = run_plan(cfg, tmp_path)
    trace = read_trace(tmp_path / TRACE_JSON)
    check_trace(trace, report, chunks)
    stages = len(report.layers_per_stage)
    tracks = stage_tracks(trace, stages)
    m = report.microbatches_per_pipeline
    # Slices per track: each chunk's track holds a forward and a backward pass of every microbatch.
    for j in range(stages):
        for c in range(chunks):
            names = [s[2].split()[0] for s in tracks[j][f"stage {j}, chunk {c}"]]
            assert names.count("F") == names.count("B") == m
