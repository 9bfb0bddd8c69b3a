"""Attention kernels: the attention core as the kernel a run uses (`hw.device.attention`).

The core is the chain from the scores product QK^T to the product with V: every op between them writes
a tensor of score shape [b, a, s, s] (scale, mask, softmax, its NaN guard, dropout), or, in a core with
attention sinks (GPT-OSS), rows of [b, a, s, s + 1] with a sink logit concatenated, their maxima and
the slice that drops the sink's column again (`in_core`). Lowered, each is
its own operator and every s x s tensor goes through HBM (`unfused`, the template's, unchanged).

- `fused_softmax` (Megatron-LM's scale-mask-softmax kernel): the core's vector ops other than dropout
  (and a scale of Q or K by a scalar) become one `ScaleMaskSoftmax` op that reads the scores once and
  writes the probabilities once; its backward is one op reading the probabilities and their gradient.
  QK^T, dropout and AV stay as they are.
- `flash` (FlashAttention-2, Dao 2023): QK^T through AV become one `FlashAttention` op reading Q, K and
  V and writing O, and no s x s tensor reaches HBM. O is written in the layout its consumer reads (the
  head transpose and reshapes that follow are absorbed). It counts the two products' MACs in tiles of
  FLASH_BLOCK x FLASH_BLOCK (`phazec.ir.ops.flash_dims`); its backward (`FlashAttentionGrad`, from the
  autodiff pass) recomputes the scores: five products, 2.5x the forward FLOPs as FlashAttention-2
  counts them. Its backward reads Q, K, V, O and dO: the stash of selective recompute, no s^2 bytes.
  The softmax statistics (4 bytes per row, 2/d of O) are not counted. Under grouped-query attention
  it reads K and V with their own key-value heads, before Hugging Face's `repeat_kv` copies them over
  the query heads (`unrepeated`), as FlashAttention-2's, cuDNN's and Transformer Engine's kernels do.

A causal model (`causal`) has its mask applied by position inside the kernel: the mask tensor is not
read, and a causal flash kernel skips the tiles above the diagonal. Otherwise the kernel reads the
mask as the graph gives it. Ops left without a reader (the mask's construction) are removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.hw.device import check_kernel
from phazec.ir.core import AttrValue, Graph, Model, Op, OpKind
from phazec.ir.ops import ELEMENTWISE_TYPES, GEMM_TYPES, VIEW_TYPES
from phazec.passes.base import PassResult, rewrite_forward_graphs

PRODUCT_KINDS = (OpKind.GEMM, OpKind.FUSED)
"""Kinds of a core's products: a GEMM, or on a fused graph a GEMM with its epilogue."""

SOFTMAX_TYPES = ("Softmax", "ScaleMaskSoftmax")
"""The softmax of a core: ONNX's, or the `fused_softmax` kernel's (which also scales and masks)."""

CAUSAL_ARCH_SUFFIXES = ("ForCausalLM", "LMHeadModel")
"""Hugging Face architectures whose attention is causal (GPT-2's `GPT2LMHeadModel`, `*ForCausalLM`)."""


def is_causal(arch: str, given: bool | None = None) -> bool:
    """Whether a model's attention is causal: `given` (`model.causal`) if set, else whether the Hugging
    Face architecture name is a causal (decoder) language model."""
    return arch.endswith(CAUSAL_ARCH_SUFFIXES) if given is None else given


@dataclass(frozen=True, slots=True)
class Attention:
    """Price every class's attention core as `kernel` (run before autodiff)."""

    name: ClassVar[str] = "attention"
    kernel: str = "unfused"
    causal: bool = False

    def __call__(self, model: Model) -> PassResult:
        """Rewrite each forward graph's attention cores; `unfused` leaves the model unchanged."""
        check_kernel(self.kernel)
        if self.kernel == "unfused":
            return PassResult(model, False)
        return rewrite_forward_graphs(
            model, lambda graph: attention_graph(graph, model.seq_len, self.kernel, self.causal)
        )


@dataclass(frozen=True, slots=True)
class Core:
    """One attention core of a forward graph."""

    qk: Op
    """The scores product QK^T."""
    vector: list[Op]
    """The ops between the two products, in graph order."""
    av: Op
    """The product of the probabilities with V."""
    scales: list[Op]
    """Scalings of Q or K by a scalar, absorbed into the kernel."""
    q: str
    k: str
    v: str


def score_shaped(shape: tuple[int, ...], seq_len: int) -> bool:
    """Whether a tensor has the attention scores' shape [batch, heads, seq, seq]."""
    return len(shape) == 4 and seq_len > 1 and shape[-1] == shape[-2] == seq_len


def is_score(graph: Graph, name: str, seq_len: int) -> bool:
    """Whether a tensor has the scores' shape [b, a, seq, seq]."""
    return score_shaped(graph.tensors[name].shape, seq_len)


SINK_TYPES = frozenset({"Concat", "Slice", "Identity"})
"""Data ops an attention core with sinks runs between its products (GPT-OSS: one logit per head
concatenated to each row of scores before the softmax, and sliced off after it)."""


def in_core(graph: Graph, op: Op, seq_len: int) -> bool:
    """Whether an op reading a core's scores belongs to the core: a vector op writing score-shaped
    tensors, or, for a core with attention sinks, [b, a, seq, seq + 1] rows (a sink concatenated, its
    data ops included) and their row maxima [b, a, seq, 1]."""
    if op.kind is not OpKind.VECTOR and op.op_type not in SINK_TYPES:
        return False
    for name in op.outputs:
        shape = graph.tensors[name].shape if name else ()
        sink_row = len(shape) == 4 and shape[-2] == seq_len > 1 and shape[-1] in (seq_len + 1, 1)
        if name and not (is_score(graph, name, seq_len) or sink_row):
            return False
    return True


def core_scores(graph: Graph, seq_len: int) -> set[str]:
    """The s x s tensors of the graph's attention cores: each core's scores, what its vector ops write
    (scale, mask, softmax, dropout and its mask) and the s x s mask they apply (rebuilt by position,
    as a flash kernel does, when the core is recomputed). Found by the core's structure, not by shape
    alone, so Q, K, V and the context [b, a, s, d] are never among them, even when d = s."""
    found: set[str] = set()
    for op in graph.ops:
        core = find_core(graph, op, seq_len)
        if core is None:
            continue
        written = {core.qk.outputs[0], *(o for v in core.vector for o in v.outputs if o)}
        read = (*core.qk.inputs[2:], *external_inputs(graph, core.vector, written))
        found |= written | {n for n in read if is_score(graph, n, seq_len)}
    return found


def core_ops(graph: Graph, seq_len: int) -> list[int]:
    """Indices of the ops that read or write an attention core's scores (`core_scores`: QK^T, mask,
    softmax, dropout, AV): what selective recompute repeats in the backward pass."""
    scores = core_scores(graph, seq_len)
    return [i for i, op in enumerate(graph.ops) if scores & {*op.inputs, *op.outputs}]


def unscaled(graph: Graph, name: str, consumers: dict[str, list[Op]], producers: dict[str, Op]) -> Op | None:
    """The elementwise op that scales `name` by a scalar for the scores product alone, or None."""
    op = producers.get(name)
    if op is None or op.kind is not OpKind.VECTOR or op.op_type not in ELEMENTWISE_TYPES:
        return None
    others = [i for i in op.inputs if i and graph.tensors[i].numel() != 1]
    return op if len(others) == 1 and len(consumers.get(name, [])) == 1 else None


def find_core(graph: Graph, qk: Op, seq_len: int) -> Core | None:
    """The attention core that starts at the product `qk`, or None if `qk` does not start one. On a
    fused graph (`phazec.passes.fuse`) the product may carry the mask's add as a `Fused` op."""
    gemm_type = qk.attrs.get("gemm_type") if qk.kind is OpKind.FUSED else qk.op_type
    if (
        qk.kind not in PRODUCT_KINDS
        or gemm_type not in GEMM_TYPES
        or not is_score(graph, qk.outputs[0], seq_len)
    ):
        return None
    consumers, producers = graph.consumers(), graph.producers()
    region: dict[str, Op] = {}
    products: set[str] = set()
    frontier = [qk.outputs[0]]
    while frontier:
        for reader in consumers.get(frontier.pop(), []):
            if reader.kind in PRODUCT_KINDS:
                products.add(reader.name)
            elif in_core(graph, reader, seq_len):
                if reader.name not in region:
                    region[reader.name] = reader
                    frontier.extend(o for o in reader.outputs if o)
            else:
                return None
    scores = {qk.outputs[0], *(o for op in region.values() for o in op.outputs)}
    if (
        len(products) != 1
        or scores & set(graph.outputs)
        or all(op.op_type not in SOFTMAX_TYPES for op in region.values())
    ):
        return None
    av = next(op for op in graph.ops if op.name in products)
    if av.inputs[1] in scores:
        return None
    scales: list[Op] = []
    operands: list[str] = []
    for operand in qk.inputs[:2]:
        scale = unscaled(graph, operand, consumers, producers)
        if scale is not None:
            scales.append(scale)
        source = operand if scale is None else next(i for i in scale.inputs if graph.tensors[i].numel() != 1)
        operands.append(source)
    vector = [op for op in graph.ops if op.name in region]
    return Core(qk, vector, av, scales, operands[0], operands[1], av.inputs[1])


def external_inputs(graph: Graph, ops: list[Op], skip: set[str]) -> tuple[str, ...]:
    """The non-scalar tensors `ops` read that none of them writes (and not in `skip`), in order."""
    written = {o for op in ops for o in op.outputs}
    names = (i for op in ops for i in op.inputs if i and i not in written and i not in skip)
    return tuple(dict.fromkeys(n for n in names if graph.tensors[n].numel() != 1))


def flash_op(graph: Graph, core: Core, causal: bool) -> tuple[Op, list[Op]]:
    """The FlashAttention op of a core, and the ops it replaces (the views after AV included)."""
    consumers = graph.consumers()
    views: list[Op] = []
    out = core.av.outputs[0]
    while (
        out not in graph.outputs
        and len(consumers.get(out, [])) == 1
        and consumers[out][0].op_type in VIEW_TYPES
    ):
        views.append(consumers[out][0])
        out = views[-1].outputs[0]
    mask = () if causal else external_inputs(graph, core.vector, {core.qk.outputs[0]})
    q = graph.tensors[core.q].shape
    attrs: dict[str, AttrValue] = {
        "heads": math.prod(q[:-2]), "seq": q[-2], "head_dim": q[-1], "causal": int(causal)
    }  # fmt: skip
    inputs = (core.q, unrepeated(graph, core.k), unrepeated(graph, core.v), *mask)
    op = Op(f"{core.av.name}.flash", "FlashAttention", OpKind.GEMM, inputs, (out,), attrs)
    return op, [*core.scales, core.qk, *core.vector, core.av, *views]


def unrepeated(graph: Graph, name: str) -> str:
    """The keys or values `name` a flash kernel reads before grouped-query attention repeats them over
    the query heads (Hugging Face's `repeat_kv`: an unsqueeze, an `Expand` and reshapes, then the key's
    transpose): the `Expand`'s input where `name` is that expansion through views read by nothing
    else (but `Shape`), else `name`. FlashAttention-2, cuDNN's and Transformer Engine's kernels read
    the key-value heads as they are, so the repeated copy is neither written nor kept for the backward
    pass, and its gradient's sum over the repeats is the kernel's."""
    consumers, producers = graph.consumers(), graph.producers()
    current = name
    while (op := producers.get(current)) is not None and op.op_type in (*VIEW_TYPES, "Expand"):
        readers = [r for r in consumers.get(current, []) if r.op_type != "Shape"]
        if current != name and len(readers) != 1:
            break
        if op.op_type == "Expand":
            return op.inputs[0]
        current = op.inputs[0]
    return name


def softmax_op(graph: Graph, core: Core, causal: bool) -> tuple[Op, list[Op]] | None:
    """The ScaleMaskSoftmax op of a core and the ops it replaces, or None if dropout comes first."""
    fused = [op for op in core.vector if op.op_type != "Dropout"]
    written = {o for op in fused for o in op.outputs}
    read_after = {i for op in (*core.vector, core.av) if op not in fused for i in op.inputs} & written
    if len(read_after) != 1:
        return None
    scores = core.qk.outputs[0]
    mask = () if causal else external_inputs(graph, fused, {scores})
    op = Op(f"{fused[-1].name}.fused", "ScaleMaskSoftmax", OpKind.VECTOR, (scores, *mask), tuple(read_after))
    return op, fused


def attention_graph(graph: Graph, seq_len: int, kernel: str, causal: bool) -> Graph:
    """`graph` with every attention core as `kernel` (`fused_softmax` or `flash`)."""
    replaced: dict[str, Op] = {}
    dropped: set[str] = set()
    for qk in graph.ops:
        core = find_core(graph, qk, seq_len)
        if core is None:
            continue
        found = flash_op(graph, core, causal) if kernel == "flash" else softmax_op(graph, core, causal)
        if found is None:
            continue
        op, old = found
        if kernel == "fused_softmax":
            replaced[qk.name] = replace(qk, inputs=(core.q, core.k, *qk.inputs[2:]))
            old = [*core.scales, *old]
        replaced[old[-1].name] = op
        dropped.update(o.name for o in old[:-1])
    if not replaced:
        return graph
    ops = [replaced.get(op.name, op) for op in graph.ops if op.name not in dropped]
    return live(replace(graph, ops=ops))


def live(graph: Graph) -> Graph:
    """`graph` without the ops whose results nothing reads, and without unused tensors."""
    needed = set(graph.outputs)
    kept: list[Op] = []
    for op in reversed(graph.ops):
        if needed.intersection(op.outputs):
            kept.append(op)
            needed.update(i for i in op.inputs if i)
    ops = kept[::-1]
    used = {n for op in ops for n in (*op.inputs, *op.outputs) if n}
    used.update(graph.inputs, graph.weights, graph.constants, graph.outputs)
    return replace(graph, tensors={n: t for n, t in graph.tensors.items() if n in used}, ops=ops)
