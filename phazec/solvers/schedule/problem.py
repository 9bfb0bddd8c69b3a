"""The scheduling problem: one layer's operator graph on one accelerator, as plain frozen data.

An operator runs on the resources its kind names: a tensor-core (TC) op holds one tensor core, a
vector-core (VC) op one vector core, a fused op a TC and a VC core at once, and a collective holds
the network (at most one collective at a time, on no core, so it may overlap compute). An op may
instead be *spread* over all cores of its type(s) (intra-op parallelism): it then takes its
all-cores latency and holds every core of those types, so no other op needing them runs beside it.

Every op also holds a share of the HBM bandwidth: its HBM traffic time over its latency in the mode
it runs in (`hbm_units`, in HBM_UNITS-ths, rounded up), and the ops running at any instant hold at
most the whole bandwidth. So operators side by side on different cores never move more bytes than
HBM can; an op's latency already assumes the whole bandwidth, so its own traffic always fits.
"""

import hashlib
import json
import math
from dataclasses import dataclass
from enum import StrEnum

from phazec.errors import PhazecError
from phazec.ir.graph import topological_order
from phazec.solvers.schema import SolverConfig

TC = "tc"
VC = "vc"
NET = "net"
HBM = "hbm"

HBM_UNITS = 1 << 20
"""The HBM bandwidth in units: an op holds ceil(its traffic time / its latency * HBM_UNITS) of them.
Rounding up keeps every schedule within the bandwidth; 2^20 keeps the rounding below 1e-6 of it."""


class OpKind(StrEnum):
    """What an operator runs on."""

    TC = "tc"
    VC = "vc"
    FUSED = "fused"
    COLLECTIVE = "collective"


_RESOURCES = {
    OpKind.TC: (TC,),
    OpKind.VC: (VC,),
    OpKind.FUSED: (TC, VC),
    OpKind.COLLECTIVE: (NET,),
}


@dataclass(frozen=True)
class ScheduleOp:
    """One operator to schedule."""

    name: str
    kind: OpKind
    latency_s: float
    """Latency on one core of its type (for a fused op: one TC and one VC core); for a collective,
    its latency on the network."""
    latency_io_s: float
    """Latency when spread over all cores of its type(s); ignored for a collective on the network."""
    hbm_s: float = 0.0
    """Seconds of HBM traffic at the whole bandwidth, in either mode; at most either latency."""


@dataclass(frozen=True)
class ScheduleProblem:
    """One operator graph and the cores it may use; construction validates everything.

    Ops are listed in any order; `deps` holds (before, after) index pairs and must be acyclic.
    """

    ops: tuple[ScheduleOp, ...]
    deps: tuple[tuple[int, int], ...]
    """(i, j): op j starts only after op i has finished."""
    num_tc: int
    num_vc: int
    collectives_as_vector: bool = False
    """Treat a collective as vector work that holds a vector core (the reference's behaviour)."""
    collectives_hold_cores: bool = False
    """A collective holds every tensor core while it runs, so nothing computes beside it (NCCL's
    kernels run on a GPU's SMs, and Megatron-LM calls them on the compute stream)."""

    def __post_init__(self) -> None:
        _validate(self)

    def resources(self, i: int) -> tuple[str, ...]:
        """The resources op `i` holds while it runs: a subset of ("tc", "vc", "net")."""
        kind = self.ops[i].kind
        if kind is OpKind.COLLECTIVE and self.collectives_hold_cores:
            return (TC,)
        if kind is OpKind.COLLECTIVE and self.collectives_as_vector:
            return (VC,)
        return _RESOURCES[kind]

    def capacity(self, resource: str) -> int:
        """How many ops may hold `resource` at once (its core count; 1 for the network)."""
        return {TC: self.num_tc, VC: self.num_vc, NET: 1}[resource]

    def modes(self, i: int) -> tuple[bool, ...]:
        """The spread settings worth considering for op `i` (False: one core, True: all cores).

        A mode is dropped when the other is no slower on no more cores and holds no more of the HBM:
        spreading when it is no faster (it would hold more cores for no less time), unless it is slower
        and the op moves HBM traffic (the same bytes over a longer time hold less of the bandwidth);
        one core when spreading takes no time (then it holds nothing), or when every resource of the
        op has a single core (then both hold the same core) and spreading is faster with no HBM
        traffic. A collective on the network has no all-cores form; one that holds the cores holds all
        of them.
        """
        op = self.ops[i]
        if op.kind is OpKind.COLLECTIVE and self.collectives_hold_cores:
            return (True,)
        single, spread, hbm = op.latency_s, op.latency_io_s, op.hbm_s
        if self.resources(i) == (NET,) or (spread >= single and (hbm == 0 or spread == single)):
            return (False,)
        one_core = all(self.capacity(r) == 1 for r in self.resources(i))
        if spread == 0 or (one_core and spread < single and hbm == 0):
            return (True,)
        return (False, True)

    def duration_s(self, i: int, spread: bool) -> float:
        """Op `i`'s latency in the given mode."""
        op = self.ops[i]
        return op.latency_io_s if spread else op.latency_s

    def hbm_units(self, i: int, spread: bool) -> int:
        """The HBM bandwidth op `i` holds in the given mode, in HBM_UNITS-ths (module docstring)."""
        duration_s, hbm_s = self.duration_s(i, spread), self.ops[i].hbm_s
        if duration_s <= 0 or hbm_s <= 0:
            return 0
        return min(HBM_UNITS, math.ceil(hbm_s / duration_s * HBM_UNITS))


def _validate(problem: ScheduleProblem) -> None:
    names = [op.name for op in problem.ops]
    for op in problem.ops:
        if not isinstance(op.kind, OpKind):
            valid = ", ".join(k.value for k in OpKind)
            raise PhazecError(f"Operator {op.name!r} has kind {op.kind!r}; valid kinds are {valid}.")
        for field, value in (
            ("latency_s", op.latency_s),
            ("latency_io_s", op.latency_io_s),
            ("hbm_s", op.hbm_s),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise PhazecError(
                    f"Operator {op.name!r} has {field}={value!r}; times must be finite and >= 0 seconds."
                )
        if op.hbm_s > 0 and (op.kind is OpKind.COLLECTIVE or op.hbm_s > min(op.latency_s, op.latency_io_s)):
            raise PhazecError(
                f"Operator {op.name!r} has hbm_s={op.hbm_s!r} s of HBM traffic with latencies "
                f"{op.latency_s!r} / {op.latency_io_s!r} s; the traffic time must be at most both latencies "
                "(an operator's latency includes moving its bytes), and 0 for a collective."
            )
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PhazecError(f"Operator name {dup!r} appears more than once; every operator needs its own name.")
    for field, count in (("num_tc", problem.num_tc), ("num_vc", problem.num_vc)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PhazecError(f"The design has {field}={count!r}; core counts must be integers >= 0.")
    for i in range(len(problem.ops)):
        for resource in problem.resources(i):
            if problem.capacity(resource) == 0:
                kind = problem.ops[i].kind.value
                held = {VC: " (treated as vector work)", TC: " (holding every tensor core)"}[resource]
                as_vector = held if problem.ops[i].kind is OpKind.COLLECTIVE else ""
                raise PhazecError(
                    f"Operator {names[i]!r} of type {kind}{as_vector} needs a {resource} core, but the "
                    f"design has num_{resource}=0; give the design at least one {resource} core or "
                    f"remove {kind} operators."
                )
    n = len(problem.ops)
    for dep in problem.deps:
        if len(dep) != 2 or not all(isinstance(k, int) and 0 <= k < n for k in dep) or dep[0] == dep[1]:
            raise PhazecError(
                f"Dependency {dep!r} is not a pair of two different operator indices in 0..{n - 1}."
            )
    topological_order(n, problem.deps, names)


def descendants(problem: ScheduleProblem) -> tuple[int, ...]:
    """Per op, a bitmask of every op reachable from it along dependencies (itself excluded)."""
    n = len(problem.ops)
    succs: list[set[int]] = [set() for _ in range(n)]
    for a, b in problem.deps:
        succs[a].add(b)
    reach = [0] * n
    for i in reversed(topological_order(n, problem.deps)):
        for j in succs[i]:
            reach[i] |= reach[j] | (1 << j)
    return tuple(reach)


def independent_pairs(problem: ScheduleProblem) -> tuple[tuple[int, int], ...]:
    """Pairs i < j that share a resource and where neither depends on the other, even indirectly."""
    reach = descendants(problem)
    pairs = []
    for i in range(len(problem.ops)):
        for j in range(i + 1, len(problem.ops)):
            related = (reach[i] >> j) & 1 or (reach[j] >> i) & 1
            shared = set(problem.resources(i)) & set(problem.resources(j))
            if shared and not related:
                pairs.append((i, j))
    return tuple(pairs)


def contract_free_ops(problem: ScheduleProblem) -> ScheduleProblem:
    """Remove ops with zero latency in both modes, linking each one's predecessors to its successors.

    Orderings through removed ops are kept: if a -> free -> b, the result has a -> b. Kept ops keep
    their names and relative order.
    """
    n = len(problem.ops)
    free = {i for i, op in enumerate(problem.ops) if op.latency_s == 0 and op.latency_io_s == 0}
    if not free:
        return problem
    succs: list[set[int]] = [set() for _ in range(n)]
    for a, b in problem.deps:
        succs[a].add(b)
    kept_succs: list[set[int]] = [set() for _ in range(n)]
    for i in reversed(topological_order(n, problem.deps)):
        for j in succs[i]:
            kept_succs[i] |= kept_succs[j] if j in free else {j}
    new_index = {old: new for new, old in enumerate(i for i in range(n) if i not in free)}
    deps = sorted((new_index[a], new_index[b]) for a in new_index for b in kept_succs[a])
    return ScheduleProblem(
        ops=tuple(problem.ops[i] for i in new_index),
        deps=tuple(deps),
        num_tc=problem.num_tc,
        num_vc=problem.num_vc,
        collectives_as_vector=problem.collectives_as_vector,
        collectives_hold_cores=problem.collectives_hold_cores,
    )


def canonical_key(problem: ScheduleProblem, config: SolverConfig) -> str:
    """A hash of what determines the schedule: graph structure, latencies, core counts, and the
    solver settings a schedule stopped by the node limit depends on.

    Operator names are left out, so identical blocks under different names share one key.
    """
    canonical = {
        "version": 9,
        "ops": [
            [op.kind.value, float(op.latency_s).hex(), float(op.latency_io_s).hex(), float(op.hbm_s).hex()]
            for op in problem.ops
        ],
        "deps": sorted(set(problem.deps)),
        "num_tc": problem.num_tc,
        "num_vc": problem.num_vc,
        "collectives_as_vector": problem.collectives_as_vector,
        "collectives_hold_cores": problem.collectives_hold_cores,
        "solver": [
            config.backend,
            float(config.mip_gap).hex(),
            config.node_limit,
            config.seed,
            config.search_node_limit,
            config.ilp_max_ops,
        ],
    }
    return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()
