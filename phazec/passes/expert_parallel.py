"""Expert parallelism: each MoE block's routed experts spread over `width` devices (Megatron-Core's
all-to-all token dispatcher, expert tensor parallelism 1).

The static MoE formulation (`phazec.frontend.moe`) permutes each device's tokens into one [E, C, h]
tensor, grouped by expert, and runs the grouped expert GEMMs on it. With ep devices per expert group,
each device holds E/ep experts: the permuted tokens go through an all-to-all (the dispatch) that
leaves each device [E/ep, C ep, h], the tokens of its own experts from every device of the group; the
expert GEMMs run on those (E/ep products of C ep rows instead of E of C: the same FLOPs under
balanced routing) and their output goes back through a second all-to-all (the combine) to [E, C, h]
before the unpermute. Each all-to-all carries the routing it serves (experts, top-k and the
router's expert groups), which a deduplicating dispatcher's price reads
(`phazec.cost.network.tier_bytes`). The experts' weights on each device are 1/ep of them, and so are their
gradients and optimizer state (the memory pass counts the per-device graph). The backward pass runs
the two all-to-alls again, in reverse (the autodiff pass derives them).

The expert region is found from the graph, not from names: the expert GEMMs are the products whose
weight views one of the experts' stacked weights (`Routing.expert_parameters`); the region is every
[E, C, x] tensor reached from the first expert GEMM's token input, and every [E, ...] view of an
expert weight.

At every width (1 included) the permute is a kernel of its own, as in every framework: the broadcast
that copies each token once per chosen expert (the static formulation's `repeat_interleave`, exported
as a view) becomes a `Permute` op that reads the tokens and writes the [E, C, h] copies (Megatron-Core's
`permute`; its gradient, the unpermute that sums each token's copies, is a `Permute` back). Above width
1, where a device holds more than one expert, the tokens it receives arrive grouped by the device that
sent them and are regrouped by local expert before the expert GEMMs, and back before the combine
(Megatron-Core's all-to-all dispatcher's `sort_chunks_by_idxs`, forward and backward): a `Permute` with
attr `reorder` after the tokens' dispatch and before each combine. A deduplicating dispatcher runs no
such regrouping (its own permute after the dispatch and unpermute before the combine are the block's
permute and combine moved across the all-to-all), so the cost pass prices a `reorder` op as free under
it (`phazec.predict.layer_costs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.errors import PhazecError
from phazec.ir.core import AttrValue, Graph, LayerClass, Model, Op, OpKind, Routing
from phazec.ir.ops import BROADCAST_TYPES, GEMM_TYPES, VIEW_TYPES, reads_elements
from phazec.passes.base import PassResult
from phazec.passes.tensor_parallel import fresh_name, per_expert_tokens, weight_of


@dataclass(frozen=True, slots=True)
class ExpertParallel:
    """Permute every MoE block's tokens as a kernel and spread its routed experts over `width` devices
    (all-to-alls inserted, and the regrouping by local expert)."""

    name: ClassVar[str] = "expert-parallel"
    width: int
    """Expert-parallel width ep (1 keeps every expert on each device: only the permute becomes a kernel)."""

    def __call__(self, model: Model) -> PassResult:
        """Permute every MoE block's tokens as a kernel and split its experts; raises PhazecError for a
        width that cannot apply."""
        routing = model.routing
        if routing is None and self.width == 1:
            return PassResult(model, False)
        if routing is None:
            raise PhazecError(
                f"ep={self.width} (expert parallelism) does not apply to model {model.name!r}: it has no "
                "Mixture-of-Experts layers; use ep=1, or a MoE model such as model=qwen3_30b_a3b."
            )
        check_expert_width(routing, self.width)
        classes = [split_class(cls, routing, self.width) for cls in model.classes]
        return PassResult(replace(model, classes=classes), True)


def check_expert_width(routing: Routing, width: int) -> None:
    """Reject an expert-parallel width that does not divide the routed experts."""
    if width >= 1 and routing.experts % width == 0:
        return
    valid = [d for d in range(1, routing.experts + 1) if routing.experts % d == 0]
    raise PhazecError(
        f"ep={width} does not divide the model's {routing.experts} routed experts: each device of an "
        f"expert-parallel group holds experts/ep of them; valid widths: {', '.join(map(str, valid))}."
    )


def split_class(cls: LayerClass, routing: Routing, width: int) -> LayerClass:
    """A layer class with its experts split `width` ways (unchanged when it has no expert GEMM)."""
    graph = cls.graph
    experts = [
        op
        for op in graph.ops
        if op.op_type in GEMM_TYPES and weight_of(graph, op.inputs[1]) in routing.expert_parameters
    ]
    if not experts:
        return cls
    dispatched = experts[0].inputs[0]
    graph = permute_tokens(graph, dispatched)
    if width > 1:
        graph = split_graph(graph, dispatched, routing, width)
    return replace(cls, graph=graph)


PERMUTE = "Permute"
"""A copy of token rows into a new order (a MoE block's permute, unpermute and regrouping)."""

PERMUTE_PATH = VIEW_TYPES | {"Slice", "Concat"}
"""Ops between the broadcast that copies each token and the expert GEMMs' token input: views, the
busiest expert's share concatenated on, dropped copies sliced off (`phazec.frontend.moe`)."""


def permute_tokens(graph: Graph, dispatched: str) -> Graph:
    """The graph with the broadcast that copies each token once per chosen expert (found from the
    expert GEMMs' token input `dispatched` back through `PERMUTE_PATH` ops and their first inputs) run
    as a `Permute` of the tokens; where there is none (top-1 routing exported without one), a
    `Permute` of `dispatched` itself before the expert GEMMs."""
    producers = graph.producers()
    name = dispatched
    while (op := producers.get(name)) is not None and op.op_type in PERMUTE_PATH:
        name = op.inputs[0]
    if op is not None and op.op_type in BROADCAST_TYPES:
        permute = Op(op.name, PERMUTE, OpKind.VECTOR, op.inputs[:1], op.outputs)
        return replace(graph, ops=[permute if o is op else o for o in graph.ops])
    tensors = dict(graph.tensors)
    source = fresh_name(tensors, f"{dispatched}.unpermuted")
    tensors[source] = replace(graph.tensors[dispatched], name=source)
    ops = [replace(o, outputs=tuple(source if t == dispatched else t for t in o.outputs)) for o in graph.ops]
    at = next(i for i, o in enumerate(ops) if source in o.outputs) + 1
    ops.insert(at, Op(f"{dispatched}.permute", PERMUTE, OpKind.VECTOR, (source,), (dispatched,)))
    return replace(graph, tensors=tensors, ops=ops)


def split_graph(graph: Graph, dispatched: str, routing: Routing, width: int) -> Graph:
    """The graph with its expert region at E/width experts and C width tokens each, between a dispatch
    and a combine all-to-all (module docstring); a region tensor comes back through a combine where
    an op outside reads its elements (not where it reads its type or shape alone, as GPT-OSS's clamp
    casts its limit like the gate's projection: `phazec.ir.ops.reads_elements`). Every other [E, C, x]
    tensor from outside the region that the region reads (the routing weights of each token copy,
    which Megatron-Core sends beside the tokens and applies inside the experts) gets a dispatch of its
    own."""
    experts = routing.experts
    tokens = expert_region(graph, dispatched, experts)
    region = {op.name for op in graph.ops if tokens.intersection(op.outputs)}
    beside = {
        i
        for op in graph.ops
        if op.name in region
        for i in op.inputs
        if i and i != dispatched and i not in tokens and per_expert_tokens(graph.tensors[i], experts)
    }
    sent = [dispatched, *sorted(beside)]
    tensors = dict(graph.tensors)
    received = {name: fresh_name(tensors, f"{name}.dispatched") for name in sent}
    for name, local in [*((received[n], n) for n in sent), *((t, t) for t in tokens)]:
        t = graph.tensors[local]
        tensors[name] = replace(t, name=name, shape=(experts // width, t.shape[1] * width, *t.shape[2:]))
    for name in weight_views(graph, routing):
        t = graph.tensors[name]
        tensors[name] = replace(t, shape=(experts // width, *t.shape[1:]))
    outside = [op for op in graph.ops if op.name not in region]
    combined = {
        name: fresh_name(tensors, f"{name}.combined")
        for name in sorted(tokens)
        if any(reads_elements(op, name) for op in outside) or name in graph.outputs
    }
    for name, out in combined.items():
        tensors[out] = replace(graph.tensors[name], name=out)
    group: dict[str, AttrValue] = {
        "group": width,
        "experts": experts,
        "top_k": routing.top_k,
        "expert_groups": routing.expert_groups,
        "group_top_k": routing.group_top_k,
    }
    regroup = experts // width > 1
    regrouped = {name: fresh_name(tensors, f"{name}.sorted") for name in [dispatched, *combined] if regroup}
    for name, out in regrouped.items():
        source = received[name] if name == dispatched else name
        tensors[out] = replace(tensors[source], name=out)
    reorder: dict[str, AttrValue] = {"reorder": 1}
    read = {**received, **{n: regrouped[n] for n in regrouped if n == dispatched}}
    ops: list[Op] = []
    pending = list(sent)
    for op in graph.ops:
        if op.name not in region:
            ops.append(replace(op, inputs=tuple(combined.get(i, i) for i in op.inputs)))
            continue
        for name in [n for n in pending if n in op.inputs]:
            pending.remove(name)
            ops.append(
                Op(f"{name}.dispatch", "AllToAll", OpKind.COLLECTIVE, (name,), (received[name],), dict(group))
            )
            if name in regrouped:
                ops.append(
                    Op(f"{name}.sort", PERMUTE, OpKind.VECTOR, (received[name],), (regrouped[name],), reorder)
                )
        ops.append(replace(op, inputs=tuple(read.get(i, i) for i in op.inputs)))
        for name in [o for o in op.outputs if o in combined]:
            sent_back = name
            if name in regrouped:
                ops.append(Op(f"{name}.unsort", PERMUTE, OpKind.VECTOR, (name,), (regrouped[name],), reorder))
                sent_back = regrouped[name]
            ops.append(
                Op(
                    f"{name}.combine",
                    "AllToAll",
                    OpKind.COLLECTIVE,
                    (sent_back,),
                    (combined[name],),
                    dict(group),
                )
            )
    outputs = [combined.get(o, o) for o in graph.outputs]
    return replace(graph, tensors=tensors, ops=ops, outputs=outputs)


def expert_region(graph: Graph, dispatched: str, experts: int) -> set[str]:
    """The per-expert token tensors, [E, C, x] with the tokens C on the batch axis, reached from the
    dispatched tokens (not included) through ops whose outputs keep that layout."""
    reached = {dispatched}
    for op in graph.ops:
        if reached.intersection(op.inputs):
            reached.update(o for o in op.outputs if o and per_expert_tokens(graph.tensors[o], experts))
    return reached - {dispatched}


def weight_views(graph: Graph, routing: Routing) -> set[str]:
    """The experts' stacked weights ([E, ...]) the graph holds, and their views."""
    stacked = {w for w in graph.weights if w in routing.expert_parameters}
    for op in graph.ops:
        if op.op_type in VIEW_TYPES and op.inputs and op.inputs[0] in stacked:
            stacked.update(o for o in op.outputs if o and graph.tensors[o].shape[:1] == (routing.experts,))
    return stacked
