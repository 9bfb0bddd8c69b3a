"""The loss as the run computes it: a fused cross entropy reads the logits in the output layer's type.

Hugging Face's causal-LM loss casts the logits to fp32 before its softmax cross entropy, as
Megatron-Core's native vocabulary-parallel cross entropy does, so the exported graph writes the fp32
logits and keeps them for the backward pass (4 bytes a logit). Transformer Engine's parallel cross
entropy (Megatron-Core's `cross_entropy_fusion_impl="te"`, which Megatron-Bridge's performance recipes
set) reads the logits as the output layer writes them, computes in fp32 inside the kernel, and keeps
its input for the backward pass (2 bytes a logit in bf16; Transformer Engine's
`pytorch/cross_entropy.py`). With `fused`, the cast that feeds a `SoftmaxCrossEntropyLoss` through
views, read by nothing else, is removed: the loss and the views before it take the cast's input and
its type.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from phazec.ir.core import Graph, Model
from phazec.ir.ops import VIEW_TYPES
from phazec.passes.attention import live
from phazec.passes.base import PassResult, rewrite_forward_graphs

LOSS = "SoftmaxCrossEntropyLoss"


@dataclass(frozen=True, slots=True)
class FusedCrossEntropy:
    """Run each softmax cross entropy on the logits as written (switchable; run before autodiff)."""

    name: ClassVar[str] = "loss"
    fused: bool = False
    """False leaves the loss as exported (on fp32 logits)."""

    def __call__(self, model: Model) -> PassResult:
        """Drop the cast before every class's loss."""
        if not self.fused:
            return PassResult(model, False)
        return rewrite_forward_graphs(model, fused_loss_graph)


def fused_loss_graph(graph: Graph) -> Graph:
    """`graph` with the cast before each softmax cross entropy's logits removed (module docstring)."""
    producers, consumers = graph.producers(), graph.consumers()
    tensors = dict(graph.tensors)
    rewired: dict[str, tuple[str, str]] = {}  # op name -> (cast output it read, cast input it reads)
    for loss in (op for op in graph.ops if op.op_type == LOSS):
        name, views = loss.inputs[0], []
        while (op := producers.get(name)) is not None and op.op_type in VIEW_TYPES:
            if len(consumers.get(name, [])) != 1:
                break
            views.append(op)
            name = op.inputs[0]
        cast = producers.get(name)
        if cast is None or cast.op_type != "Cast" or len(consumers.get(name, [])) != 1:
            continue
        source = cast.inputs[0]
        reader = views[-1] if views else loss
        rewired[reader.name] = (name, source)
        for view in views:
            out = view.outputs[0]
            tensors[out] = replace(tensors[out], dtype=tensors[source].dtype)
    if not rewired:
        return graph
    ops = [
        replace(op, inputs=tuple(rewired[op.name][1] if i == rewired[op.name][0] else i for i in op.inputs))
        if op.name in rewired
        else op
        for op in graph.ops
    ]
    return live(replace(graph, ops=ops, tensors=tensors))
