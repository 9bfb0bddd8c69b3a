"""Memory: what one layer occupies on one device, from its (per-device) forward and backward graphs.

Parameters and gradients take their element type's bytes; the optimizer state is a rule table (plain
SGD keeps none; mixed-precision Adam keeps fp32 master weights and two fp32 moments, 12 bytes per
parameter, 16 with the bf16 weights and gradients). The activation stash is exactly the forward tensors
the backward graph reads (its inputs other than output gradients); the recompute figure is the layer's
inputs from other layers. Both are split into a fixed part and a per-sample part.

Megatron-LM's execution (Korthikanti et al. 2022, section 4) reads three more per-sample figures: the
attention core's part of the stash (tensors of score shape [b, a, seq, seq]: softmax output, its
dropout mask and output; selective recompute drops them), the part not split by tensor parallelism
(LayerNorm inputs, dropout masks, residuals; sequence parallelism splits it t ways) and the layer's
floating-point inputs (full recompute keeps them; masks and token ids are rebuilt from the batch).
For a GPT block the per-sample stash is exactly Korthikanti's 34sh + 5as^2 bytes at t = 1,
sh(10 + 24/t + 5as/(ht)) at width t, sh/t (34 + 5as/h) with sequence parallelism (`megatron_bytes`).
One more, signed, is the change when the linear layers run in FP8 and keep one-byte copies of their
inputs (`fp8_copy_bytes`): the GPT block then keeps sh(8 + 19/t + 5as/(ht)).

torchtitan's op-level selective activation checkpointing (`op_checkpoint`) keeps less: the layer's
inputs and the outputs of the operators its policy saves; the memory pass counts those the backward
pass needs (`LayerMemory.op_per_sample_bytes`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.errors import PhazecError
from phazec.ir.core import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    Graph,
    LayerClass,
    LayerMemory,
    Model,
    Op,
    OpKind,
    RerunBytes,
    Tensor,
)
from phazec.ir.ops import FLASH_PRODUCTS, GEMM_TYPES, VIEW_TYPES
from phazec.passes.attention import core_ops, core_scores
from phazec.passes.base import PassResult
from phazec.passes.norm_rope import RMS_NORM
from phazec.passes.tensor_parallel import per_expert_tokens, weight_of

OPTIMIZER_STATE_BYTES: dict[str, int] = {"sgd": 0, "adam": 12}
"""Optimizer-state bytes per parameter: none for SGD; fp32 master weight, momentum, variance for Adam."""


@dataclass(frozen=True, slots=True)
class Memory:
    """Attach a per-device `LayerMemory` to every layer class (needs the autodiff pass first)."""

    name: ClassVar[str] = "memory"
    optimizer: str = "sgd"
    """`sgd` or `adam`: whose state is counted."""

    def __call__(self, model: Model) -> PassResult:
        """Compute every class's memory; raises PhazecError for an unknown optimizer."""
        if self.optimizer not in OPTIMIZER_STATE_BYTES:
            raise PhazecError(
                f"optimizer {self.optimizer!r} has no memory rule; valid optimizers: "
                f"{sorted(OPTIMIZER_STATE_BYTES)}."
            )
        classes = [replace(cls, memory=layer_memory(model, cls, self.optimizer)) for cls in model.classes]
        return PassResult(replace(model, classes=classes), True)


def split_bytes(graph: Graph, names: Collection[str]) -> tuple[int, int]:
    """(fixed, per-sample) bytes of some of a graph's tensors."""
    fixed = sum(graph.tensors[n].nbytes() for n in names if graph.tensors[n].batch_axis is None)
    per_sample = sum(graph.tensors[n].nbytes() for n in names if graph.tensors[n].batch_axis is not None)
    return fixed, per_sample


def layer_memory(model: Model, cls: LayerClass, optimizer: str) -> LayerMemory:
    """Parameter, gradient, optimizer-state, stash and recompute-input bytes of one layer, per device."""
    if cls.backward is None:
        raise PhazecError(
            f"model {model.name!r}: the memory pass reads backward graphs; run the autodiff pass before it."
        )
    forward = cls.graph
    parameter_bytes = sum(forward.tensors[w].nbytes() for w in forward.weights)
    experts = model.routing.expert_parameters if model.routing is not None else ()
    expert_bytes = sum(forward.tensors[w].nbytes() for w in forward.weights if w in experts)
    linear = linear_weights(forward)
    count = forward.parameter_count()
    stash = [n for n in cls.backward.inputs if n in forward.tensors]
    stash_fixed, stash_per_sample = split_bytes(cls.backward, stash)
    input_fixed, input_per_sample = split_bytes(forward, forward.inputs)
    per_sample = [n for n in stash if cls.backward.tensors[n].batch_axis is not None]
    scores = core_scores(forward, model.seq_len)
    core = [n for n in per_sample if n in scores]
    replicated = {n for n in per_sample if not forward.tensors[n].tp_split}
    floats = [n for n in forward.inputs if forward.tensors[n].dtype in FLOAT_DTYPES]
    copies = fp8_copy_bytes(cls.backward, per_sample)
    kept = [n for n in op_checkpoint(forward, cls.backward).kept if forward.tensors[n].dtype in FLOAT_DTYPES]
    op_fixed, op_per_sample = split_bytes(forward, kept)
    reruns = []
    for module in SELECTIVE_MODULES:
        written = [n for n in per_sample if n in rerun_of(module, forward, model.seq_len).written]
        whole = [n for n in written if n in replicated]
        reruns.append(
            RerunBytes(
                module,
                per_sample_bytes=split_bytes(cls.backward, written)[1],
                replicated_per_sample_bytes=split_bytes(cls.backward, whole)[1],
                fp8_per_sample_bytes=sum(copies.get(n, 0) for n in written),
                fp8_replicated_per_sample_bytes=sum(copies.get(n, 0) for n in whole),
            )
        )
    return LayerMemory(
        parameter_count=count,
        parameter_bytes=parameter_bytes,
        gradient_bytes=parameter_bytes,
        optimizer=optimizer,
        optimizer_state_bytes=OPTIMIZER_STATE_BYTES[optimizer] * count,
        stash_fixed_bytes=stash_fixed,
        stash_per_sample_bytes=stash_per_sample,
        input_fixed_bytes=input_fixed,
        input_per_sample_bytes=input_per_sample,
        core_per_sample_bytes=split_bytes(cls.backward, core)[1],
        reruns=tuple(reruns),
        replicated_per_sample_bytes=split_bytes(cls.backward, replicated)[1],
        checkpoint_per_sample_bytes=split_bytes(forward, floats)[1],
        expert_parameter_bytes=expert_bytes,
        fp8_weight_bytes=sum(forward.tensors[w].nbytes() for w in linear),
        fp8_expert_weight_bytes=sum(forward.tensors[w].nbytes() for w in linear if w in experts),
        dummy_wgrad_bytes=sum(
            forward.tensors[w].nbytes() // (forward.tensors[w].shape[0] if w in experts else 1)
            for w in linear
        ),
        fp8_per_sample_bytes=sum(copies.values()),
        fp8_replicated_per_sample_bytes=sum(b for n, b in copies.items() if n in replicated),
        op_fixed_bytes=op_fixed,
        op_per_sample_bytes=op_per_sample,
        op_replicated_per_sample_bytes=split_bytes(
            forward, [n for n in kept if not forward.tensors[n].tp_split]
        )[1],
    )


UP_PROJECTION_WEIGHT = re.compile(r"(^|[./])(q_b_proj|kv_b_proj)([./]|$)")
"""Multi-head latent attention's up-projection weights, as Hugging Face's DeepSeek-V2 and V3 (and Kimi
K2) name them: the query's from its latent (absent without a query latent) and the keys' and values'."""


@dataclass(frozen=True, slots=True)
class Rerun:
    """What recomputing one of `SELECTIVE_MODULES` runs again (`RERUNS`)."""

    ops: tuple[int, ...]
    """Indices of the forward ops that run again, in graph order."""
    written: frozenset[str]
    """The tensors they write."""


NO_RERUN = Rerun((), frozenset())


def up_projection(forward: Graph, seq_len: int) -> Rerun:
    """Megatron-Core's `mla_up_proj` recompute module on one layer's forward graph: the up-projection
    products (linear layers' products reading an `UP_PROJECTION_WEIGHT`) and every op after them on the
    way to the attention's queries, keys and values (the flash kernel's inputs, or an unfused core's
    inputs other than its scores): the head split, the rotary embedding of the query's rotary part,
    the concatenations. Their inputs, the latents (and the keys' shared rotary part), are kept; the
    heads' queries, keys and values are rebuilt from them in the backward pass. Empty on a layer without
    multi-head latent attention."""
    ops = forward.ops
    starts = [
        i
        for i, op in enumerate(ops)
        if _linear_product(op, forward)
        and any(UP_PROJECTION_WEIGHT.search(weight_of(forward, t) or "") for t in op.inputs if t)
    ]
    if not starts:
        return NO_RERUN
    scores = core_scores(forward, seq_len)
    core = {ops[i].name for i in core_ops(forward, seq_len)}
    attention = [op for op in ops if op.op_type in FLASH_PRODUCTS or op.name in core]
    needed = {t for op in attention for t in op.inputs if t and t not in scores}
    for op in reversed(ops):  # back from the attention's inputs
        if needed.intersection(op.outputs) and op.name not in core:
            needed.update(t for t in op.inputs if t)
    reached: set[str] = set()
    found: list[int] = []
    for i, op in enumerate(ops):  # forward from the products, topological order
        if (i in starts or reached.intersection(op.inputs)) and needed.intersection(op.outputs):
            found.append(i)
            reached.update(o for o in op.outputs if o)
    return Rerun(tuple(found), frozenset(reached))


def dense_mlp(forward: Graph) -> Rerun:
    """Megatron-Core's `mlp` recompute module on one layer's forward graph: a dense MLP's ops, from its
    up (and gate) projections to its down projection, the layer's last linear layer's product. Walking
    back from the down projection's input, every path meets a linear layer's product (the up and gate
    projections, where the MLP starts) before the layer's inputs. The normalisation before them runs
    again too where it is one op that feeds nothing else (`_pre_norm`: Transformer Engine's
    `LayerNormLinear`), and its input is kept; otherwise their input, the normalised hidden state, is
    kept. What they and the ops up to the down projection write is rebuilt in the backward pass, and the
    down projection runs again too. Empty on a layer whose last product is no such MLP's (the head's
    output layer), and on a MoE block (a weight of stacked experts, [E, ...]): Megatron-Core's `mlp`
    module leaves MoE layers alone."""
    ops = forward.ops
    products = {i for i, op in enumerate(ops) if _linear_product(op, forward)}
    if not products or any(len(forward.tensors[w].shape) == 3 for w in forward.weights):
        return NO_RERUN
    index = {op.name: i for i, op in enumerate(ops)}
    producers = forward.producers()
    constants = set(forward.constants)

    def activations(op: Op) -> list[str]:
        return [t for t in op.inputs if t and t not in constants and weight_of(forward, t) is None]

    down = max(products)
    region = {down}
    pending = activations(ops[down])[:1]  # its product's input, not a residual added in its epilogue
    while pending:
        producer = producers.get(pending.pop())
        if producer is None:  # the layer's input, reached without an up projection
            return NO_RERUN
        i = index[producer.name]
        if i not in region:
            region.add(i)
            if i not in products:
                pending.extend(activations(producer))
    if len(region & products) < 2:
        return NO_RERUN
    region |= _pre_norm(forward, region, products - {down}, index, producers)
    # The down projection's own outputs (a dropout fused into it writes its mask) are kept: its backward
    # pass reads its input, and whatever follows it in the layer is outside the MLP.
    written = frozenset(o for i in region - {down} for o in ops[i].outputs if o)
    return Rerun(tuple(sorted(region)), written)


def _expert_weights(forward: Graph) -> set[str]:
    """The layer's stacked expert weights ([E, ...]: a MoE block's routed experts) and their views."""
    stacked = {w for w in forward.weights if len(forward.tensors[w].shape) == 3}
    for op in forward.ops:
        if op.op_type in VIEW_TYPES and op.inputs and op.inputs[0] in stacked:
            stacked.update(o for o in op.outputs if o)
    return stacked


def expert_activation(forward: Graph) -> Rerun:
    """Megatron-Core's `moe_act` recompute module on one layer's forward graph: the routed experts'
    activation, every op between their first products' outputs (gate and up) and their last product's
    input (down), the routing weights' scaling included (Megatron-Core applies the weights in its
    activation). Walking back from the down product's input through per-expert token features ([E', C,
    f], E' the device's experts, f > 1) until the expert products; what comes from elsewhere (the
    routing weights, one a token copy, and constants) is kept, as are the first products' outputs.
    Empty on a layer without routed experts."""
    experts = _expert_weights(forward)
    ops = forward.ops
    products = [
        i
        for i, op in enumerate(ops)
        if op.kind in (OpKind.GEMM, OpKind.FUSED) and any(t in experts for t in op.inputs if t)
    ]
    if len(products) < 2:
        return NO_RERUN
    local = forward.tensors[next(t for t in ops[products[-1]].inputs if t in experts)].shape[0]
    index = {op.name: i for i, op in enumerate(ops)}
    producers = forward.producers()
    region: set[int] = set()
    pending = [t for t in ops[products[-1]].inputs if t and t not in experts]
    while pending:
        name = pending.pop()
        producer = producers.get(name)
        tensor = forward.tensors[name]
        if producer is None or index[producer.name] in products or not _per_expert(tensor, local):
            continue  # the routing weights ([E', C, 1]) are kept, as Megatron-Core keeps its probs
        if index[producer.name] not in region:
            region.add(index[producer.name])
            pending.extend(t for t in producer.inputs if t)
    written = frozenset(o for i in region for o in ops[i].outputs if o)
    return Rerun(tuple(sorted(region)), written)


def _per_expert(tensor: Tensor, experts: int) -> bool:
    """Whether a tensor holds per-expert tokens' features, [experts, tokens, features > 1]
    (`per_expert_tokens` with more than one feature: not the routing weights)."""
    return per_expert_tokens(tensor, experts) and len(tensor.shape) == 3 and tensor.shape[2] > 1


def moe_pre_norm(forward: Graph) -> Rerun:
    """Megatron-Core's `layernorm` recompute module on one layer's forward graph, as it runs with
    Transformer Engine's layers: a MoE block's normalisation before its router and experts (a norm of
    its own, `TENorm`; the block's other normalisation is fused into the first linear layer of the
    attention, `LayerNormLinear`, where the module reruns nothing), found as the single norm op whose
    output reaches the router's product (a GEMM reading a `ROUTER_WEIGHT`) through views and casts. Its
    input is kept; its output and those views and casts, which the router's weight gradient reads, are
    rebuilt. Empty on a layer without routed experts, or whose norm is written out step by step
    (`fuse_norm_rope` off)."""
    if not _expert_weights(forward):
        return NO_RERUN
    producers = forward.producers()
    index = {op.name: i for i, op in enumerate(forward.ops)}
    through = VIEW_TYPES | {"Cast"}
    for op in forward.ops:
        if op.kind not in (OpKind.GEMM, OpKind.FUSED) or len(op.inputs) < 2:
            continue
        starts = [_back_through(t, through, index, producers) for t in op.inputs[:2]]
        if not any(name in forward.weights and ROUTER_WEIGHT.search(name) for _, name, _ in starts):
            continue
        for chain, _, producer in starts:
            if producer is not None and producer.op_type in NORM_TYPES:
                chain.add(index[producer.name])
                written = frozenset(o for k in chain for o in forward.ops[k].outputs if o)
                return Rerun(tuple(sorted(chain)), written)
    return NO_RERUN


RERUNS: dict[str, Callable[[Graph, int], Rerun]] = {
    "mla_up_proj": up_projection,
    "mlp": lambda forward, _seq_len: dense_mlp(forward),
    "layernorm": lambda forward, _seq_len: moe_pre_norm(forward),
    "moe_act": lambda forward, _seq_len: expert_activation(forward),
}
"""What each of Megatron-Core's `recompute_modules` that selective recompute can rerun beside the
attention core (`core_attn`, always) runs again on a layer's forward graph (and its sequence length):
multi-head latent attention's up-projections (`up_projection`), a dense block's MLP (`dense_mlp`), a MoE
block's normalisation before its router (`moe_pre_norm`) and its routed experts' activation
(`expert_activation`)."""

SELECTIVE_MODULES = tuple(RERUNS)
"""The modules of `RERUNS`, in order; `Training.selective_modules` names those a plan reruns."""


def rerun_of(module: str, forward: Graph, seq_len: int) -> Rerun:
    """What rerunning `module` (one of `SELECTIVE_MODULES`) runs again on one layer's forward graph."""
    return RERUNS[module](forward, seq_len)


NORM_TYPES = frozenset({"LayerNormalization", RMS_NORM})
"""Normalisations exported (or fused, `phazec.passes.norm_rope`) as one op."""


def _back_through(
    name: str, through: Collection[str], index: dict[str, int], producers: dict[str, Op]
) -> tuple[set[int], str, Op | None]:
    """Back from tensor `name` through the ops of types `through` (views, casts): their positions in the
    graph (`index`), the tensor where they start, and the op writing it (None for a layer input or
    weight)."""
    chain: set[int] = set()
    while (producer := producers.get(name)) is not None and producer.op_type in through:
        chain.add(index[producer.name])
        name = producer.inputs[0]
    return chain, name, producer


def _pre_norm(
    forward: Graph, region: set[int], up: set[int], index: dict[str, int], producers: dict[str, Op]
) -> set[int]:
    """The ops of the normalisation before an MLP whose `region` of ops is found, `up` its up and gate
    projections: the norm op whose output reaches those projections, through views, and nothing else.
    Transformer Engine fuses that norm into the first linear layer (`LayerNormLinear`), so Megatron-Core
    reruns it with the MLP and keeps its input, not its output; none when the norm is written out step by
    step (`fuse_norm_rope` off) or another op reads its output. `index` and `producers` are the graph's
    op positions by name and ops by output (`dense_mlp` has them)."""
    ops = forward.ops
    consumers = forward.consumers()
    found: set[int] = set()
    for read in {op_input for i in up for op_input in ops[i].inputs[:1]}:
        chain, _, producer = _back_through(read, VIEW_TYPES, index, producers)
        if producer is None or producer.op_type not in NORM_TYPES:
            continue
        chain.add(index[producer.name])
        readers = {
            index[op.name]
            for t in (o for i in chain for o in ops[i].outputs if o)
            for op in consumers.get(t, [])
        }
        if readers <= region | chain:
            found |= chain
    return found


def selective_ops(forward: Graph, seq_len: int, modules: Collection[str] = ()) -> list[int]:
    """Indices of the forward ops selective recompute runs again in the backward pass: the attention
    core's (`core_ops`), and those of the `modules` of `SELECTIVE_MODULES` it also reruns (`rerun_of`),
    in graph order."""
    again = set(core_ops(forward, seq_len))
    for module in modules:
        again.update(rerun_of(module, forward, seq_len).ops)
    return sorted(again)


@dataclass(frozen=True, slots=True)
class OpCheckpoint:
    """What torchtitan's op-level selective activation checkpointing keeps of one layer, and what it runs
    again in the backward pass."""

    kept: frozenset[str]
    """The forward tensors kept for the backward pass: the layer's inputs and saved operators' outputs
    that the backward pass reads or rebuilds its reads from."""
    recomputed: tuple[int, ...]
    """Indices into the forward graph's ops of those run again before the backward pass, ascending."""


def op_checkpoint(forward: Graph, backward: Graph) -> OpCheckpoint:
    """torchtitan's op-level selective activation checkpointing of one layer (its llama3 configs'
    `selective_ac_option = "op"`, torchtitan 9dec370 to e7c0cae, `_apply_ac_to_transformer_block`).

    Its policy saves the outputs of the operators on its save list (`aten.mm`, the flash and
    memory-efficient attention kernels, `reduce_scatter_tensor`, `max`) except every second `mm`,
    counted in forward order within the block, and recomputes every other operator in the backward
    pass. Here the saved operators are the layer's linear layers' products (a GEMM reading a weight),
    all but the 2nd, 4th, ...; the flash-attention kernels (`FLASH_PRODUCTS`); and the tensor-parallel
    collectives (phazec's all-reduce stands for the reduce-scatter torchtitan's sequence-parallel
    linear layers end with). The attention products of an unfused core (`bmm`), the normalisations and
    the elementwise chains are recomputed. The stash the backward graph reads is rebuilt from the
    layer's inputs and the saved outputs: what it needs of them is kept, and the ops between are
    recomputed (as torch.compile's partitioner runs the policy: only what the backward pass reads)."""
    saved: set[str] = set()
    linear = 0
    for op in forward.ops:
        if op.op_type in FLASH_PRODUCTS or op.kind is OpKind.COLLECTIVE:
            saved.update(o for o in op.outputs if o)
        elif _linear_product(op, forward):
            linear += 1
            if linear % 2 == 1:
                saved.update(o for o in op.outputs if o)
    roots = saved | set(forward.inputs) | set(forward.weights) | set(forward.constants)
    producers = forward.producers()
    index = {op.name: i for i, op in enumerate(forward.ops)}
    kept: set[str] = set()
    recomputed: set[int] = set()
    pending = [n for n in backward.inputs if n in forward.tensors]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = producers.get(name)
        if name in roots or producer is None:
            if name not in forward.weights and name not in forward.constants:
                kept.add(name)
            continue
        recomputed.add(index[producer.name])
        pending.extend(i for i in producer.inputs if i)
    return OpCheckpoint(frozenset(kept), tuple(sorted(recomputed)))


def _linear_product(op: Op, graph: Graph) -> bool:
    """Whether an op is a linear layer's product: a GEMM (alone or fused) that reads a weight."""
    if op.kind not in (OpKind.GEMM, OpKind.FUSED) or op.op_type in FLASH_PRODUCTS:
        return False
    gemm_type = op.attrs.get("gemm_type") if op.kind is OpKind.FUSED else op.op_type
    return gemm_type in GEMM_TYPES and any(t and weight_of(graph, t) is not None for t in op.inputs)


def fp8_copy_bytes(backward: Graph, stash: list[str]) -> dict[str, int]:
    """Per stashed tensor of `stash` (per sample), how its bytes change when the layer's linear layers
    run in FP8 (signed; tensors that do not change are left out).

    Transformer Engine keeps a linear layer's input for its weight gradient as the FP8 copy its forward
    cast wrote (one byte an element; on Hopper the transposed copy the backward GEMM reads), not the
    bf16 tensor (its `_Linear` saves the quantized input). A stashed tensor whose every reader in the
    backward graph (through views) is such a weight-gradient GEMM (`low_precision_gemm`) is kept as
    that copy alone: its bytes fall to one per element. One that other backward operators read too
    (the attention output, which the flash kernel's backward reads beside the output projection's
    weight gradient) is kept in its own type and as the copy: one byte per element more. Block-scaled
    MXFP8's scales (one byte per 32 elements) are left out."""
    consumers = backward.consumers()
    changes: dict[str, int] = {}
    for name in stash:
        tensor = backward.tensors[name]
        if tensor.dtype not in FLOAT_DTYPES or DTYPE_BYTES[tensor.dtype] == 1:
            continue
        readers = view_readers(consumers, name)
        copied = any(low_precision_gemm(op, backward) for op in readers)
        if copied:
            kept = any(not low_precision_gemm(op, backward) for op in readers)
            changes[name] = tensor.numel() - (0 if kept else tensor.nbytes())
    return changes


def view_readers(consumers: dict[str, list[Op]], name: str) -> list[Op]:
    """The operators that read tensor `name`, through views (`VIEW_TYPES`: a reshape of it is it)."""
    found: list[Op] = []
    pending = [name]
    while pending:
        for op in consumers.get(pending.pop(), []):
            if op.op_type in VIEW_TYPES:
                pending.extend(op.outputs)
            else:
                found.append(op)
    return found


def low_precision_gemm(op: Op, graph: Graph) -> bool:
    """Whether a GEMM of a low-precision layer runs in FP8: a linear layer's product (it reads a weight,
    or, in the backward pass, makes a weight's gradient); the attention products and a Mixture-of-Experts
    router's (`ROUTER_WEIGHT`: Transformer Engine and torchao leave it in bf16) stay in bf16."""
    if op.kind not in (OpKind.GEMM, OpKind.FUSED) or op.op_type in FLASH_PRODUCTS:
        return False
    weights = [w for t in op.inputs if t and (w := weight_of(graph, t)) is not None]
    if any(ROUTER_WEIGHT.search(w) for w in weights) or ROUTER_WEIGHT.search(op.name):
        return False
    return op.attrs.get("grad") == "weight" or bool(weights)


def linear_weights(forward: Graph) -> set[str]:
    """The weights a forward graph's linear layers multiply (an operand of a `low_precision_gemm`, its
    first two inputs): those that run in FP8 when the layer does; a bias a fused GEMM adds is not one."""
    operands = (t for op in forward.ops if low_precision_gemm(op, forward) for t in op.inputs[:2] if t)
    return {w for t in operands if (w := weight_of(forward, t)) is not None}


ROUTER_WEIGHT = re.compile(r"(^|[./_])(gate|router)([./]|$)")
"""A Mixture-of-Experts router's weight (or a backward op named after it): `mlp.gate.weight`
(Qwen3-MoE, DeepSeek-V3), `block_sparse_moe.gate` (Mixtral), `router` (GPT-OSS); not a dense MLP's
`gate_proj`."""


@dataclass(frozen=True, slots=True)
class MegatronBytes:
    """Activation bytes of one layer and one microbatch under each recompute mode."""

    stash_bytes: int
    """Kept for the backward pass without recompute."""
    selective_bytes: int
    """Kept under selective recompute: the stash without the attention core (and without what the
    other modules it reruns write, `SELECTIVE_MODULES`)."""
    checkpoint_bytes: int
    """Kept under full recompute: the layer's floating-point inputs."""
    op_bytes: int
    """Kept under op recompute: the layer's floating-point inputs and its saved operators' outputs that
    the backward pass needs (`op_checkpoint`); never more than the stash."""


def megatron_bytes(
    memory: LayerMemory,
    microbatch: int,
    sequence_parallel: int,
    context_parallel: int = 1,
    low_precision: bool = False,
    *,
    modules: Collection[str] = (),
) -> MegatronBytes:
    """A layer's activation bytes per recompute mode; `sequence_parallel` is the width that splits the
    replicated activations and the inputs (the layer's tensor-parallel width, or 1 when off),
    `context_parallel` splits every per-sample byte (each device holds 1/cp of each sample's tokens;
    rounded up), and `low_precision` (the layer's linear layers run in FP8) keeps their inputs as FP8
    copies (`fp8_copy_bytes`; op recompute keeps the layer's inputs and saved outputs, not the copies,
    which it casts again, so its bytes do not change). Selective recompute also drops what the `modules`
    of `SELECTIVE_MODULES` it reruns write (`LayerMemory.reruns`, their FP8 copies with them)."""

    def per_sample(bytes_per_sample: int) -> int:
        return -(-bytes_per_sample * microbatch // context_parallel)

    fp8 = memory.fp8_per_sample_bytes if low_precision else 0
    fp8_replicated = memory.fp8_replicated_per_sample_bytes if low_precision else 0
    replicated = per_sample(memory.replicated_per_sample_bytes + fp8_replicated)
    stash = memory.stash_fixed_bytes + per_sample(memory.stash_per_sample_bytes + fp8)
    stash += -(-replicated // sequence_parallel) - replicated
    op_replicated = per_sample(memory.op_replicated_per_sample_bytes)
    op_bytes = memory.op_fixed_bytes + per_sample(memory.op_per_sample_bytes)
    op_bytes += -(-op_replicated // sequence_parallel) - op_replicated
    dropped = per_sample(memory.core_per_sample_bytes)
    for module in modules:  # as the stash: each one's replicated part split by sequence parallelism
        rerun, low = memory.rerun(module), low_precision
        whole = per_sample(
            rerun.replicated_per_sample_bytes + (rerun.fp8_replicated_per_sample_bytes if low else 0)
        )
        dropped += per_sample(rerun.per_sample_bytes + (rerun.fp8_per_sample_bytes if low else 0))
        dropped += -(-whole // sequence_parallel) - whole
    return MegatronBytes(
        stash_bytes=stash,
        selective_bytes=stash - dropped,
        checkpoint_bytes=-(-per_sample(memory.checkpoint_per_sample_bytes) // sequence_parallel),
        op_bytes=min(stash, op_bytes),
    )
