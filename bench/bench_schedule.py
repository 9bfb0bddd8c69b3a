"""Benchmark: the per-layer scheduling ILP on transformer blocks, solved with HiGHS.

Targets (issue 5): every solve proven optimal (gap <= 1e-6), median solve time <= 0.2 s and
maximum <= 5 s with HiGHS, over the forward and backward block of every model preset at its
smallest and largest tensor-parallel width, on the TPUv4 design and 20 random designs. The script
prints the model sizes and whether each model fits Gurobi's size-limited licence.

STAND-IN: the IR and cost passes are not written yet, so `block_problems()` builds block-shaped
problems from analytic latencies (an ideal GEMM rate of w*d MACs per cycle per tensor core, the
phaze-facts vector cycles per element, ring all-reduce over 4 GiB/s) and random designs are drawn
from a simple compute budget, not the tpu_area sampler. Swap in the real blocks and designs when
the passes exist; the measurement below stays the same.

Run: .venv/bin/python bench/bench_schedule.py
"""

import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from phazec.solvers.schedule import schedule
from phazec.solvers.schedule_problem import OpKind, ScheduleOp, ScheduleProblem
from phazec.solvers.schema import SolverConfig

CLOCK_HZ = 1.05e9
LINK_BYTES_PER_S = 4 * 2**30
BYTES_PER_ELEMENT = 2
SPREAD_OVERHEAD = 1.15
"""Stand-in inefficiency of an op spread over all cores, plus a fixed sync cost below."""
SPREAD_SYNC_CYCLES = 500
LICENCE_LIMIT = 2000
TARGET_MEDIAN_S = 0.2
TARGET_MAX_S = 5.0
TIME_LIMIT_S = 10.0
"""Per solve; a solve stopped by it counts as not proven optimal."""
CONF = Path(__file__).resolve().parent.parent / "conf" / "model"


@dataclass(frozen=True)
class Design:
    """An accelerator: core counts and tensor-core array (vector width = array width)."""

    name: str
    num_tc: int
    num_vc: int
    width: int
    depth: int


@dataclass(frozen=True)
class Block:
    """Transformer block dimensions of one preset at one tensor-parallel width (microbatch 1)."""

    name: str
    hidden: int
    heads: int
    ffn: int
    seq: int
    tp: int
    gated: bool
    """SwiGLU FFN (gate and up projections side by side)."""


TPUV4 = Design("tpuv4", num_tc=8, num_vc=2, width=128, depth=128)


def random_designs(count: int, seed: int = 0) -> list[Design]:
    """Random designs within TPUv4's tensor-core MACs per cycle (a stand-in for tpu_area samples)."""
    rng = random.Random(seed)
    designs: list[Design] = []
    while len(designs) < count:
        num_tc, num_vc = 2 ** rng.randint(0, 12), 2 ** rng.randint(0, 12)
        width, depth = 2 ** rng.randint(1, 8), 2 ** rng.randint(1, 8)
        macs = num_tc * width * depth
        if 0.3 * 8 * 128 * 128 <= macs <= 8 * 128 * 128 or num_tc == 1:
            designs.append(Design(f"random{len(designs)}", num_tc, num_vc, width, depth))
    return designs


def preset_blocks() -> list[Block]:
    """One block per model preset in conf/model at its smallest and largest tensor-parallel width."""
    blocks = []
    for path in sorted(CONF.glob("*.yaml")):
        cfg = OmegaConf.load(path)
        assert isinstance(cfg, DictConfig)
        if cfg.get("source", "hf") != "hf" or "hf_config" not in cfg:
            continue
        hf = cfg.hf_config
        hidden = hf.get("hidden_size", hf.get("n_embd"))
        heads = hf.get("num_attention_heads", hf.get("n_head"))
        ffn = hf.get("intermediate_size", hf.get("ffn_dim", hf.get("n_inner", 4 * hidden)))
        for tp in sorted({min(cfg.tp_widths), max(cfg.tp_widths)}):
            gated = cfg.arch.startswith("Llama")
            blocks.append(Block(f"{cfg.name}/t{tp}", hidden, heads, ffn, cfg.seq_len, tp, gated))
    return blocks


class _Latency:
    """Analytic single-core and all-cores latencies (s) on one design."""

    def __init__(self, design: Design) -> None:
        self.d = design

    def _split(self, one_core_cycles: float, cores: int) -> tuple[float, float]:
        spread = (
            one_core_cycles if cores == 1 else one_core_cycles / cores * SPREAD_OVERHEAD + SPREAD_SYNC_CYCLES
        )
        return one_core_cycles / CLOCK_HZ, spread / CLOCK_HZ

    def gemm(self, rows: int, reduction: int, cols: int) -> tuple[float, float]:
        return self._split(rows * reduction * cols / (self.d.width * self.d.depth), self.d.num_tc)

    def vector(self, elements: int, cycles_per_element: float) -> tuple[float, float]:
        return self._split(elements * cycles_per_element / self.d.width, self.d.num_vc)

    def allreduce(self, elements: int, tp: int) -> tuple[float, float]:
        time_s = 2 * (tp - 1) / tp * elements * BYTES_PER_ELEMENT / LINK_BYTES_PER_S
        return time_s, time_s


@dataclass(frozen=True)
class _FwdOp:
    name: str
    kind: OpKind
    inputs: tuple[str, ...]
    gemm: tuple[int, int, int] | None = None
    """(rows, reduction, cols) times a batch count for GEMMs; None for vector work."""
    batch: int = 1
    elements: int = 0
    cycles_per_element: tuple[float, float] = (1.0, 1.0)
    """Vector cycles per element, forward and backward."""
    weight: bool = False
    """A GEMM with a weight operand (gets a dW op in the backward)."""
    two_activation_inputs: bool = False
    """A batched matmul of two activations (two gradient GEMMs in the backward)."""
    bias: bool = False
    """An elementwise bias add (gets a dbias reduction in the backward)."""


def _forward_ops(b: Block) -> list[_FwdOp]:
    n, h, hp, fp = b.seq, b.hidden, b.hidden // b.tp, b.ffn // b.tp
    heads, dh = max(1, b.heads // b.tp), b.hidden // b.heads
    act, score = n * hp, heads * n * n
    ops = [_FwdOp("ln1", OpKind.VC, (), elements=n * h, cycles_per_element=(1, 1))]
    for x in "qkv":
        ops.append(_FwdOp(f"{x}_proj", OpKind.TC, ("ln1",), gemm=(n, h, hp), weight=True))
        ops.append(_FwdOp(f"{x}_bias", OpKind.VC, (f"{x}_proj",), elements=act, bias=True))
    ops += [
        _FwdOp(
            "qk", OpKind.TC, ("q_bias", "k_bias"), gemm=(n, dh, n), batch=heads, two_activation_inputs=True
        ),
        _FwdOp("scale", OpKind.VC, ("qk",), elements=score),
        _FwdOp("mask", OpKind.VC, ("scale",), elements=score),
        _FwdOp("softmax", OpKind.VC, ("mask",), elements=score, cycles_per_element=(10, 5)),
        _FwdOp("attn_drop", OpKind.VC, ("softmax",), elements=score, cycles_per_element=(2, 1)),
        _FwdOp(
            "av", OpKind.TC, ("attn_drop", "v_bias"), gemm=(n, n, dh), batch=heads, two_activation_inputs=True
        ),
        _FwdOp("out_proj", OpKind.TC, ("av",), gemm=(n, hp, h), weight=True),
    ]
    last = "out_proj"
    if b.tp > 1:
        ops.append(_FwdOp("out_allreduce", OpKind.COLLECTIVE, (last,), elements=n * h))
        last = "out_allreduce"
    ops += [
        _FwdOp("out_bias", OpKind.VC, (last,), elements=n * h, bias=True),
        _FwdOp("drop1", OpKind.VC, ("out_bias",), elements=n * h, cycles_per_element=(2, 1)),
        _FwdOp("add1", OpKind.VC, ("drop1",), elements=n * h),
        _FwdOp("ln2", OpKind.VC, ("add1",), elements=n * h),
    ]
    if b.gated:
        ops += [
            _FwdOp(
                "gate_silu",
                OpKind.FUSED,
                ("ln2",),
                gemm=(n, h, fp),
                weight=True,
                elements=n * fp,
                cycles_per_element=(12, 22),
            ),
            _FwdOp("up", OpKind.TC, ("ln2",), gemm=(n, h, fp), weight=True),
            _FwdOp("mul", OpKind.VC, ("gate_silu", "up"), elements=n * fp),
        ]
        last = "mul"
    else:
        ops.append(_FwdOp("fc1_gelu", OpKind.FUSED, ("ln2",), gemm=(n, h, fp), weight=True, elements=n * fp))
        last = "fc1_gelu"
    ops.append(_FwdOp("fc2", OpKind.TC, (last,), gemm=(n, fp, h), weight=True))
    last = "fc2"
    if b.tp > 1:
        ops.append(_FwdOp("fc2_allreduce", OpKind.COLLECTIVE, (last,), elements=n * h))
        last = "fc2_allreduce"
    ops += [
        _FwdOp("fc2_bias", OpKind.VC, (last,), elements=n * h, bias=True),
        _FwdOp("drop2", OpKind.VC, ("fc2_bias",), elements=n * h, cycles_per_element=(2, 1)),
        _FwdOp("add2", OpKind.VC, ("drop2", "add1"), elements=n * h),
    ]
    return ops


def _latency(lat: _Latency, b: Block, op: _FwdOp, backward: bool) -> tuple[float, float]:
    if op.kind is OpKind.COLLECTIVE:
        return lat.allreduce(op.elements, b.tp)
    vec = lat.vector(op.elements, op.cycles_per_element[backward]) if op.elements else (0.0, 0.0)
    if op.gemm is None:
        return vec
    rows, reduction, cols = op.gemm
    gemm = lat.gemm(rows * op.batch, reduction, cols)
    return gemm[0] + vec[0], gemm[1] + vec[1]


def block_problems(b: Block, design: Design) -> tuple[ScheduleProblem, ScheduleProblem]:
    """STAND-IN for the IR: forward and backward scheduling problems of one block on one design.

    Backward: ops in reverse with edges reversed; a weight GEMM gives dX (in the chain) and dW (a
    sink), a batched matmul of two activations gives two gradient GEMMs, a bias add gives a dbias
    reduction (a sink), and with t > 1 an all-reduce of dX precedes each layer norm's backward.
    """
    lat = _Latency(design)
    fwd = _forward_ops(b)
    index = {op.name: i for i, op in enumerate(fwd)}
    ops = tuple(ScheduleOp(op.name, op.kind, *_latency(lat, b, op, False)) for op in fwd)
    deps = tuple((index[src], i) for i, op in enumerate(fwd) for src in op.inputs)
    forward = ScheduleProblem(ops, deps, design.num_tc, design.num_vc)

    bops: list[ScheduleOp] = []
    bdeps: list[tuple[int, int]] = []
    chain: dict[str, list[int]] = {}  # forward op -> backward ops whose output flows to its inputs
    consumers = {op.name: [c.name for c in fwd if op.name in c.inputs] for op in fwd}

    def add(name: str, kind: OpKind, latency: tuple[float, float], after: list[int]) -> int:
        bops.append(ScheduleOp(name, kind, *latency))
        bdeps.extend((a, len(bops) - 1) for a in after)
        return len(bops) - 1

    for op in reversed(fwd):
        after = [k for c in consumers[op.name] for k in chain[c]]
        if op.kind is OpKind.COLLECTIVE:
            chain[op.name] = after  # identity in the backward
            continue
        if op.name.startswith("ln") and b.tp > 1:
            after = [
                add(f"d{op.name}_allreduce", OpKind.COLLECTIVE, lat.allreduce(b.seq * b.hidden, b.tp), after)
            ]
        latency = _latency(lat, b, op, True)
        if op.two_activation_inputs:
            chain[op.name] = [
                add(f"d{op.name}_a", op.kind, latency, after),
                add(f"d{op.name}_b", op.kind, latency, after),
            ]
        else:
            chain[op.name] = [add(f"d{op.name}", op.kind, latency, after)]
        if op.weight:
            rows, reduction, cols = op.gemm or (0, 0, 0)
            add(f"d{op.name}_w", OpKind.TC, lat.gemm(reduction, rows, cols), after)
        if op.bias:
            add(f"d{op.name}_sum", OpKind.VC, lat.vector(op.elements, 1.0), after)
    backward = ScheduleProblem(tuple(bops), tuple(bdeps), design.num_tc, design.num_vc)
    return forward, backward


def cases() -> Iterator[tuple[str, ScheduleProblem]]:
    """Every (label, problem) the benchmark solves."""
    for design in [TPUV4, *random_designs(20)]:
        for b in preset_blocks():
            forward, backward = block_problems(b, design)
            yield f"{b.name}/{design.name}/fwd", forward
            yield f"{b.name}/{design.name}/bwd", backward


def main() -> None:
    highs = SolverConfig(backend="highs", time_limit_s=TIME_LIMIT_S)
    gurobi = SolverConfig(backend="gurobi", time_limit_s=TIME_LIMIT_S)
    times_s: list[float] = []
    worst: tuple[float, str] = (0.0, "")
    vars_max = rows_max = not_fitting = not_optimal = disagree = n_ops_max = 0
    for label, problem in cases():
        begin = time.perf_counter()
        found = schedule(problem, highs)
        elapsed_s = time.perf_counter() - begin
        times_s.append(elapsed_s)
        worst = max(worst, (elapsed_s, label))
        n_ops_max = max(n_ops_max, len(problem.ops))
        for record in found.solves:
            vars_max, rows_max = max(vars_max, record.num_vars), max(rows_max, record.num_constraints)
        last = found.solves[-1]
        if not (found.optimal and last.gap <= 1e-6):
            not_optimal += 1
            print(f"  {label}: not proven optimal by HiGHS, gap {last.gap:.2e}")
        if any(r.num_vars > LICENCE_LIMIT or r.num_constraints > LICENCE_LIMIT for r in found.solves):
            not_fitting += 1
            print(f"  {label}: exceeds Gurobi's size-limited licence")
            continue
        other = schedule(problem, gurobi)
        gaps_s = [r.objective_s - r.bound_s for r in (last, other.solves[-1])]
        tolerance_s = max(gaps_s) + 1e-6 * found.makespan_s
        if abs(other.makespan_s - found.makespan_s) > tolerance_s:
            disagree += 1
            print(f"  {label}: Gurobi {other.makespan_s:.9e} s vs HiGHS {found.makespan_s:.9e} s")
    median_s, max_s = statistics.median(times_s), max(times_s)
    fitting = len(times_s) - not_fitting
    print(f"problems: {len(times_s)} (up to {n_ops_max} ops)")
    print(f"largest model: {vars_max} variables, {rows_max} constraints")
    print(f"fit Gurobi's size-limited licence (2000 vars, 2000 constraints): {fitting} of {len(times_s)}")
    print(f"Gurobi and HiGHS makespans agree within the gap: {fitting - disagree} of {fitting}")
    print(f"proven optimal by HiGHS (gap <= 1e-6): {len(times_s) - not_optimal} of {len(times_s)}")
    print(
        f"HiGHS schedule time: median {median_s:.4f} s (target <= {TARGET_MEDIAN_S}), "
        f"max {max_s:.4f} s (target <= {TARGET_MAX_S}) at {worst[1]}"
    )
    ok = not_optimal == 0 and disagree == 0 and median_s <= TARGET_MEDIAN_S and max_s <= TARGET_MAX_S
    print("targets met" if ok else "targets NOT met")


if __name__ == "__main__":
    main()
