"""phazec's IR: tensors, operators, per-layer operator graphs and the layer graph.

Shapes are stored at microbatch 1; a tensor's `batch_axis` (if any) is the axis that scales with the
microbatch, so one lowering serves every microbatch size (`Tensor.shape_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...]

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
"""Bytes per element of every element type the IR accepts."""

FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})
"""Element types that carry gradients."""


class OpKind(StrEnum):
    """What executes an operator."""

    GEMM = "gemm"
    """A matrix product on tensor cores."""
    VECTOR = "vector"
    """Elementwise, normalisation, reduction or loss work on vector cores."""
    FUSED = "fused"
    """A GEMM and the elementwise op that consumes it, on a paired tensor and vector core."""
    COLLECTIVE = "collective"
    """Communication among tensor-parallel devices (all-reduce)."""
    DATA = "data"
    """A view, copy or index computation that costs no compute (reshape, transpose, gather, ...)."""


class LayerKind(StrEnum):
    """The role of a layer in the layer graph."""

    EMBEDDING = "embedding"
    BLOCK = "block"
    MTP = "mtp"
    """A multi-token-prediction module after the blocks (`phazec.frontend.mtp`)."""
    HEAD = "head"


@dataclass(frozen=True, slots=True)
class Tensor:
    """A value with a static shape."""

    name: str
    shape: tuple[int, ...]
    """Shape at microbatch 1."""
    dtype: str
    """Element type, a key of `DTYPE_BYTES`."""
    batch_axis: int | None = None
    """The axis whose size is multiplied by the microbatch, or None if the tensor is per batch."""
    tp_split: bool = False
    """Split over the tensor-parallel group (set by the tensor-parallel pass); sequence parallelism
    splits the other per-sample activations of a tensor-parallel layer."""

    def shape_at(self, microbatch: int) -> tuple[int, ...]:
        """The shape at a given microbatch size."""
        if self.batch_axis is None or microbatch == 1:
            return self.shape
        dims = list(self.shape)
        dims[self.batch_axis] *= microbatch
        return tuple(dims)

    def numel(self, microbatch: int = 1) -> int:
        """Number of elements at a given microbatch size."""
        return math.prod(self.shape_at(microbatch))

    def nbytes(self, microbatch: int = 1) -> int:
        """Bytes at a given microbatch size."""
        return self.numel(microbatch) * DTYPE_BYTES[self.dtype]


@dataclass(slots=True)
class Op:
    """One operator of a layer's graph."""

    name: str
    op_type: str
    """ONNX operator type (MatMul, Softmax, ...) or a phazec type (AllReduce, ...)."""
    kind: OpKind
    inputs: tuple[str, ...]
    """Input tensor names; an empty name is an omitted optional input."""
    outputs: tuple[str, ...]
    attrs: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(slots=True)
class Graph:
    """The operator graph of one layer, ops in topological order."""

    tensors: dict[str, Tensor]
    ops: list[Op]
    inputs: list[str]
    """Tensors produced outside the layer (other layers or the model's data inputs)."""
    weights: list[str]
    """Trainable parameters the layer reads."""
    constants: list[str]
    """Non-trainable values known before the run (ONNX constants, buffers)."""
    outputs: list[str]
    """Tensors read outside the layer (other layers or the model's outputs)."""

    def producers(self) -> dict[str, Op]:
        """Map from tensor name to the op producing it."""
        return {out: op for op in self.ops for out in op.outputs if out}

    def consumers(self) -> dict[str, list[Op]]:
        """Map from tensor name to the ops reading it, in op order."""
        result: dict[str, list[Op]] = {}
        for op in self.ops:
            for name in op.inputs:
                if name:
                    result.setdefault(name, []).append(op)
        return result

    def parameter_count(self) -> int:
        """Elements of the layer's trainable parameters."""
        return sum(self.tensors[w].numel() for w in self.weights)


@dataclass(frozen=True, slots=True)
class Layer:
    """A node of the layer graph."""

    index: int
    name: str
    """`embedding`, `block.<i>` or `head`."""
    kind: LayerKind
    cls: int
    """Index of the layer's class in `Model.classes`."""


@dataclass(frozen=True, slots=True)
class Edge:
    """Bytes of the tensors one layer reads from another, per microbatch: the activations, and apart
    from them the tensors built from the model's inputs and constants alone (an attention mask, rotary
    tables, position ids), which a stage can build for itself instead of receiving them."""

    src: int
    dst: int
    fixed_bytes: int
    """Activation bytes that do not depend on the microbatch."""
    per_sample_bytes: int
    """Activation bytes per sample of the microbatch."""
    built_fixed_bytes: int = 0
    """Bytes of tensors built from inputs and constants that do not depend on the microbatch."""
    built_per_sample_bytes: int = 0
    """Bytes per sample of tensors built from inputs and constants."""

    def nbytes(self, microbatch: int, built: bool = False, context_parallel: int = 1) -> int:
        """Bytes crossing the edge for one microbatch: the activations, and with `built` the tensors
        built from inputs and constants too; each device of `context_parallel` sends 1/cp of the
        per-sample bytes (rounded up)."""
        per_sample = self.per_sample_bytes + (self.built_per_sample_bytes if built else 0)
        fixed = self.fixed_bytes + (self.built_fixed_bytes if built else 0)
        return fixed + -(-per_sample * microbatch // context_parallel)


@dataclass(frozen=True, slots=True)
class RerunBytes:
    """The stash per sample that one module of selective recompute writes on a layer, which it drops and
    rebuilds in the backward pass (`phazec.passes.memory.rerun_of`)."""

    module: str
    """Megatron-Core's name of the module (`phazec.passes.memory.SELECTIVE_MODULES`)."""
    per_sample_bytes: int = 0
    """Its stash per sample."""
    replicated_per_sample_bytes: int = 0
    """Of that, the tensors tensor parallelism leaves whole (a normalisation's output), which sequence
    parallelism splits."""
    fp8_per_sample_bytes: int = 0
    """How `per_sample_bytes` change when the layer's linear layers run in FP8 (signed, the part of
    `LayerMemory.fp8_per_sample_bytes` that falls on them)."""
    fp8_replicated_per_sample_bytes: int = 0
    """The part of that change that falls on the replicated ones."""


@dataclass(frozen=True, slots=True)
class LayerMemory:
    """Bytes one layer occupies on one device; activations split into fixed and per-sample parts."""

    parameter_count: int
    """Trainable parameters held by one device (tensor-parallel shards, replicated ones in full)."""
    parameter_bytes: int
    """Bytes of those parameters in their own element type."""
    gradient_bytes: int
    """Bytes of their gradients (the parameters' element type)."""
    optimizer: str
    """The optimizer whose state is counted: `sgd` or `adam`."""
    optimizer_state_bytes: int
    """Optimizer state: 0 for plain SGD; fp32 master weights and two fp32 moments for mixed-precision
    Adam (12 bytes per parameter, 16 with the bf16 weights and gradients)."""
    stash_fixed_bytes: int
    """Activations the backward pass reads that do not scale with the microbatch (e.g. masks)."""
    stash_per_sample_bytes: int
    """Activations the backward pass reads, per sample of the microbatch (dropout masks 1 byte each)."""
    input_fixed_bytes: int
    """Layer inputs from other layers that do not scale with the microbatch."""
    input_per_sample_bytes: int
    """Layer inputs from other layers per sample: what a stage keeps when it recomputes activations."""
    core_per_sample_bytes: int = 0
    """Stash per sample of the attention core (tensors of score shape [b, a, seq, seq]): what selective
    recompute drops."""
    reruns: tuple[RerunBytes, ...] = ()
    """What selective recompute also drops when it reruns each of `phazec.passes.memory.SELECTIVE_MODULES`
    on the layer (`Training.selective_modules`), one entry per module, in that order (`rerun`)."""
    replicated_per_sample_bytes: int = 0
    """Stash per sample of tensors not split by tensor parallelism: what sequence parallelism splits."""
    checkpoint_per_sample_bytes: int = 0
    """Floating-point layer inputs per sample: what full recompute keeps of each layer."""
    expert_parameter_bytes: int = 0
    """Of the parameter bytes, those of a Mixture-of-Experts block's routed experts held by one device
    (`Routing.expert_parameters`, 1/ep of them after the expert-parallel pass): a distributed optimizer
    shards them over the expert-data-parallel group, not the data-parallel one."""
    fp8_weight_bytes: int = 0
    """Of the parameter bytes, the weights its linear layers' GEMMs read (`low_precision_gemm`): what a
    layer running in FP8 gathers as one-byte copies under ZeRO-3 with `fp8_param_gather` (the norms',
    biases' and a router's weights stay two-byte)."""
    fp8_expert_weight_bytes: int = 0
    """Of those, the routed experts' (all of `expert_parameter_bytes` but their biases)."""
    dummy_wgrad_bytes: int = 0
    """Bytes of the dummy weight gradients Transformer Engine keeps for the layer under fused gradient
    accumulation (`get_dummy_wgrad`: one tensor of each linear weight's shape, in its element type,
    allocated once per shape): its linear layers' weights, of the routed experts one expert's, as a
    grouped linear layer's experts share a shape."""
    fp8_per_sample_bytes: int = 0
    """How the stash per sample changes when the layer's linear layers run in FP8 (signed: each linear
    layer's input kept as a one-byte copy for its weight gradient, `phazec.passes.memory.fp8_copy_bytes`)."""
    fp8_replicated_per_sample_bytes: int = 0
    """Of that change, the part on tensors not split by tensor parallelism: what sequence parallelism
    splits."""
    op_fixed_bytes: int = 0
    """Activations kept under op recompute (torchtitan's op-level selective activation checkpointing,
    `phazec.passes.memory.op_checkpoint`) that do not scale with the microbatch."""
    op_per_sample_bytes: int = 0
    """Activations kept under op recompute per sample: the layer's floating-point inputs and its saved
    operators' outputs that the backward pass needs."""
    op_replicated_per_sample_bytes: int = 0
    """Of those, the part on tensors not split by tensor parallelism: what sequence parallelism splits."""

    def rerun(self, module: str) -> RerunBytes:
        """What rerunning `module` drops (nothing for a module absent from `reruns`)."""
        return next((r for r in self.reruns if r.module == module), RerunBytes(module))

    def stash_bytes(self, microbatch: int) -> int:
        """Activation bytes stashed for the backward pass of one microbatch (no recompute)."""
        return self.stash_fixed_bytes + self.stash_per_sample_bytes * microbatch

    def input_bytes(self, microbatch: int) -> int:
        """Input bytes kept for one microbatch when activations are recomputed."""
        return self.input_fixed_bytes + self.input_per_sample_bytes * microbatch

    @property
    def state_bytes(self) -> int:
        """Parameters, gradients and optimizer state: the bytes that do not depend on the microbatch."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_state_bytes


@dataclass(slots=True)
class LayerClass:
    """Structurally identical layers share one representative operator graph."""

    graph: Graph
    members: tuple[int, ...]
    """Indices of the layers in the class, ascending; the first is the representative."""
    tp_width: int = 1
    """Devices the layer is split over by tensor parallelism (1: the layer is not split)."""
    backward: Graph | None = None
    """The backward operator graph for one microbatch, once the autodiff pass has run."""
    update: Graph | None = None
    """The optimizer update of the layer's parameters, once per batch (autodiff pass, optional)."""
    memory: LayerMemory | None = None
    """Per-device memory of one layer of the class, once the memory pass has run."""

    @property
    def count(self) -> int:
        """Number of layers in the class."""
        return len(self.members)


@dataclass(frozen=True, slots=True)
class Routing:
    """How a Mixture-of-Experts model's tokens spread over its experts: a static assumption, since
    routing depends on the data (`phazec.frontend.moe`)."""

    experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Experts each token is sent to."""
    tokens_per_expert: int
    """Tokens each expert processes per sample of the microbatch: seq_len x top_k / experts x `factor`."""
    factor: float = 1.0
    """The busiest expert's tokens over the balanced share (`model.moe.imbalance`), every expert priced
    at it; or, with `dropping`, the capacity factor: each expert processes exactly that share."""
    dropping: bool = False
    """Tokens beyond the capacity are dropped (`model.moe.capacity_factor` set)."""
    expert_groups: int = 1
    """Groups of consecutive experts the router limits each token to (DeepSeek's `n_group`; 1: none)."""
    group_top_k: int = 1
    """Groups each token's experts are chosen from (DeepSeek's `topk_group`)."""
    expert_parameters: tuple[str, ...] = ()
    """The experts' stacked weights ([experts, ...]), every MoE layer's: what expert parallelism splits."""
    expert_parameter_count: int = 0
    """Elements of those weights, every MoE layer's."""

    @property
    def inactive_parameter_count(self) -> int:
        """Routed-expert parameters one token does not use: (experts - top_k) / experts of them."""
        return self.expert_parameter_count // self.experts * (self.experts - self.top_k)


@dataclass(slots=True)
class Model:
    """A lowered model: its layer graph and one operator graph per class of identical layers."""

    name: str
    layers: list[Layer]
    edges: list[Edge]
    classes: list[LayerClass]
    parameter_count: int
    """Unique trainable parameters of the whole model (a tied weight counts once)."""
    seq_len: int
    tp_width: int = 1
    """Tensor-parallel width the model's graphs are lowered for (per-device shapes when > 1)."""
    routing: Routing | None = None
    """The routing assumption of a Mixture-of-Experts model; None for a dense one."""

    @property
    def active_parameter_count(self) -> int:
        """Parameters one token uses: every parameter but the routed experts it is not sent to."""
        inactive = self.routing.inactive_parameter_count if self.routing is not None else 0
        return self.parameter_count - inactive

    def graph_of(self, layer: int) -> Graph:
        """The operator graph of a layer (its class representative's)."""
        return self.classes[self.layers[layer].cls].graph
