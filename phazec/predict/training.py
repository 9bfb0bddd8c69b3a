"""The training knobs, each declared once: a field of `Training`.

A knob's field gives its name, its type, its value for one plan (`phazec-plan`'s `plan.<knob>`) and,
in the docstring under it, what it means; `knob()` adds what the search does with it (`train.<knob>`:
a list of values it tries, or one setting for every plan), its valid values and whether the compiled
model of time and memory reads it. Everything else comes from this one declaration:
- the `train` and `plan` config schemas (`phazec.config.schema`) and their range checks (`check_knob`);
- the settings a search tries, in the order ties between equally fast plans are broken (`Knobs`);
- the settings the compiled core receives (`core_settings`);
- the plan of result.json, the columns of explored.csv and the plan fields of plan.json (`SEARCHED`,
  `RECORDED`);
- the configuration reference of the docs.

Adding a knob is adding a field here, plus its use: where it changes a training graph or a layer's
cost, there; where the compiled core reads it (`core=True`), one line of `PHAZEC_PLAN_SETTINGS` in
ext/include/phazec/placement.hpp and its use in ext/src/placement.cpp.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from phazec.errors import PhazecError
from phazec.passes.memory import OPTIMIZER_STATE_BYTES
from phazec.solvers.placement.problem import PIPELINE_SCHEDULES, RECOMPUTE_MODES

PRECISIONS = ("bf16", "fp8", "mxfp8")
"""Values of the `precision` knob."""
ZERO_STAGES = (0, 1, 2, 3)
"""Values of the `zero_stage` knob."""
TOKEN_DISPATCHERS = ("alltoall", "flex")
"""Values of the `moe_token_dispatcher` knob."""
CP_COMM_TYPES = ("p2p", "a2a")
"""Values of the `cp_comm_type` knob."""
SELECTIVE_KNOBS = {
    "recompute_mla_up_proj": "mla_up_proj",
    "recompute_mlp": "mlp",
    "recompute_layernorm": "layernorm",
    "recompute_moe_act": "moe_act",
}
"""Each knob that adds one of `phazec.passes.memory.SELECTIVE_MODULES` to selective recompute, and its
module (`Training.selective_modules`)."""


@dataclass(frozen=True)
class KnobSpec:
    """What the search does with a knob, and its valid values (a `Training` field's metadata)."""

    search: Any
    """The search's default (`train.<knob>`): a list of values to try for a searched knob, or the one
    value every plan of a search gets (it can differ from `phazec-plan`'s, as for PHAZE's rules)."""
    searched: bool
    """Whether `train.<knob>` is a list of values the search tries."""
    in_plan: bool
    """Whether `phazec-plan` takes it as `plan.<knob>` (else from `train.<knob>`)."""
    recorded: bool
    """Whether plan.json names it beside the plan's widths."""
    core: bool
    """Whether the compiled model of time and memory reads it (`core_settings`)."""
    choices: tuple[Any, ...] | None
    """Its valid values (None: any value of its type)."""
    legacy: Mapping[Any, Any]
    """Old spellings the search's lists still take, and the value each means."""
    minimum: int | None
    """Its least valid value (None: no bound)."""
    layers: bool
    """Whether it changes a layer's cost or bytes, so that a search prices the layers once per value
    (`phazec.predict.evaluator.OUTER_KNOBS`); every searched knob the compiled core does not read
    does."""


def knob(
    plan: Any,
    *,
    search: Any = MISSING,
    in_plan: bool = True,
    recorded: bool | None = None,
    core: bool = False,
    choices: Sequence[Any] | None = None,
    legacy: Mapping[Any, Any] | None = None,
    minimum: int | None = None,
    layers: bool = False,
) -> Any:
    """A `Training` field: `plan` is its value for one plan; the rest is `KnobSpec` (`search` defaults to
    `plan`; a list makes the knob searched; `recorded` defaults to `searched`)."""
    default = plan if search is MISSING else search
    searched = isinstance(default, list)
    spec = KnobSpec(
        search=default,
        searched=searched,
        in_plan=in_plan,
        recorded=searched if recorded is None else recorded,
        core=core,
        choices=None if choices is None else tuple(choices),
        legacy=dict(legacy or {}),
        minimum=minimum,
        layers=layers or not core,
    )
    return field(default=plan, metadata={"knob": spec})


@dataclass(frozen=True, kw_only=True)
class Training:
    """One setting of every training knob: the plan `phazec-plan` times (`plan.*`), or one of the
    plans a search tries (every combination of the lists of `train.*`)."""

    microbatch: int = knob(1, search=[1, 2, 4, 8], minimum=1)
    """Microbatch size (samples); it must divide `system.global_batch`."""
    recompute: str = knob(
        "none",
        search=[False, True],
        core=True,
        choices=RECOMPUTE_MODES,
        legacy={False: "none", True: "full"},
    )
    """Activation recomputation: `none`, `selective` (Megatron's: the attention core), `full` (every
    layer), `op` (torchtitan's op-level selective activation checkpointing, `selective_ac_option =
    "op"`: every second linear layer's product and the elementwise and normalisation ops recomputed,
    `phazec.passes.memory.op_checkpoint`) or `block` (Megatron-Core's `recompute_granularity=full` with
    `recompute_method=block`: the first `recompute_layers` transformer blocks of each model chunk
    recomputed in full, the others keeping their activations); in a search's list, false and true mean
    none and full."""
    recompute_layers: int = knob(1, search=[1], core=True, minimum=1)
    """Under `recompute` block, the transformer blocks of each model chunk (each pipeline stage's, each
    virtual stage's under `interleave`) recomputed: its first ones (Megatron-Core's
    `recompute_num_layers`); more than a chunk holds recomputes all of them. Set only with block among
    the recompute modes; a search tries each value of its list with block recompute (the other modes
    once)."""
    sequence_parallel: bool = knob(False, search=[False], core=True, layers=True)
    """Megatron's sequence parallelism: activations outside the attention and MLP GEMMs split over the
    tensor-parallel group, and so are a stage's pipeline sends (Megatron-Core's pipeline tensor is s /
    (cp t) tokens long under it)."""
    interleave: int = knob(1, search=[1], core=True, minimum=1)
    """Model chunks (virtual stages) per pipeline stage: Megatron's interleaved 1F1B when > 1; it must
    divide the blocks of each stage."""
    pipeline_schedule: str = knob("1f1b", core=True, recorded=True, choices=PIPELINE_SCHEDULES)
    """The pipeline schedule: `1f1b` (Megatron-LM's 1F1B, interleaved when `interleave` > 1) or `zb_h1`
    (Qi et al.'s ZB-H1, "Zero Bubble Pipeline Parallelism", ICLR 2024: 1F1B's microbatches in flight, so
    1F1B's memory, with each backward pass split into its input gradients, run in place, and its weight
    gradients, deferred into the bubble: a bubble of (s - 1) max(0, L - 2 W) instead of (s - 1) L, L the
    bottleneck load and W the stages' least weight-gradient time, `phazec.solvers.placement`). Needs
    `interleave` 1. One
    setting for a whole search: under the model ZB-H1 is never slower than 1F1B at the same plan and
    memory, so a search trying both would only ever keep it."""
    optimizer: str = knob("sgd", in_plan=False, recorded=True, choices=tuple(OPTIMIZER_STATE_BYTES))
    """`sgd` (no state) or `adam` (mixed-precision Adam: 16 bytes per parameter with bf16 weights and
    gradients, 18 with fp32 gradients, `grad_reduce_in_fp32`); `phazec-plan` reads it here too."""
    zero_stage: int = knob(0, search=[0], core=True, choices=ZERO_STAGES)
    """What is sharded over the data-parallel replicas: 0 nothing; 1 the optimizer state (Megatron's
    distributed optimizer, ZeRO-1: the gradients reduce-scattered and the weights all-gathered after
    the step); 2 the gradients too (ZeRO-2); 3 the weights too (FSDP2, Megatron-FSDP, ZeRO-3: each
    stage's weights all-gathered before its forward and backward passes of each microbatch and its
    gradients reduce-scattered after, prefetched behind the passes)."""
    grad_reduce_in_fp32: bool = knob(False, core=True)
    """Keep the gradients in fp32 and reduce them in fp32 (Megatron-Core's `grad_reduce_in_fp32`:
    Megatron-LM sets it under `--bf16` unless `--grad-reduce-in-bf16`, and SimuMax's runs pass
    `--accumulate-allreduce-grads-in-fp32`; Megatron-Bridge's performance recipes turn it off): each
    device's gradient buffer holds 4 bytes a parameter, not 2, the DP all-reduce or reduce-scatter (and
    ZeRO-3's reduce-scatters) move twice the weights' bytes, and the optimizer step reads and zeroes
    them; a distributed optimizer's weight all-gather stays bf16. False: bf16 gradients, PHAZE's 2 bytes
    a parameter."""
    gradient_accumulation_fusion: bool = knob(False, core=True)
    """Megatron-Core's fused weight-gradient accumulation with Transformer Engine's linear layers
    (`gradient_accumulation_fusion`, Megatron-LM's default where the fused kernel is built): each
    weight gradient is accumulated into the gradient buffer, and the backward pass gets instead a dummy
    tensor of the weight's shape and element type that Transformer Engine allocates once per shape and
    keeps (`get_dummy_wgrad`), so each device also holds one bf16 copy of a block's linear weights (of
    the routed experts, one expert's), its stage's largest layer's. False: nothing more, as in PHAZE."""
    last_stage_recomputes: bool = knob(True, search=False, core=True)
    """Megatron-LM's rule (true: every stage recomputes) or PHAZE's (false: the last stage never does);
    the search follows PHAZE by default."""
    overlap_grad_reduce: bool = knob(False, core=True)
    """Overlap the data-parallel gradient reduction with the backward pass (Megatron's
    `--overlap-grad-reduce`; off by default, as in Megatron-LM); under `interleave` > 1 model chunk by
    model chunk, as Megatron-Core syncs them (`phazec.solvers.placement`)."""
    overlap_param_gather: bool = knob(False, core=True)
    """With a distributed optimizer, gather the updated weights during the first stage's next forward
    pass (Megatron-Core's `--overlap-param-gather`; off by default); under `interleave` > 1 model chunk
    by model chunk."""
    overlap_p2p_comm: bool = knob(False, core=True)
    """Under interleaving (`interleave` > 1), run each model chunk's pipeline send and receive beside the
    next chunk's pass, so a stage exposes only the part of a microbatch's sends that outlasts its
    computation (Megatron-Core's `overlap_p2p_comm`: Megatron-LM's default since 2023, set by
    Megatron-Bridge wherever pp > 1 and vp > 1). No effect at `interleave` 1, whose 1F1B blocks on
    each send, as Megatron-Core's does."""
    pipeline_sends_masks: bool = knob(False)
    """A pipeline stage also sends the next the tensors built from the model's inputs and constants
    alone (attention mask, rotary tables), as Megatron-DeepSpeed's pipeline engine sends each layer's
    outputs; false: every stage builds its own, as Megatron-LM's and Megatron-Core's stages do."""
    optimizer_step: bool = knob(True, search=False)
    """Time the optimizer step at HBM bandwidth: the replica's shard of the weights, gradients and state
    read and written once (all of them without a distributed optimizer), every gradient zeroed; the
    search leaves it out by default, as PHAZE does."""
    precision: str = knob("bf16", search=["bf16"], choices=PRECISIONS)
    """The GEMM precision of the transformer blocks' linear layers: `bf16`, `fp8` (Transformer Engine's
    and torchao's per-tensor scaled FP8: the chip's FP8 rate, one-byte operands, each activation cast
    before its GEMM, each linear layer's input kept for the backward pass as that one-byte copy) or
    `mxfp8` (Blackwell's block-scaled FP8, priced as fp8); attention, the embedding, the output layer
    and the optimizer keep their precision. The chip must have FP8 tensor cores (`hw.device.fp8_rate`,
    and `hw.device.mxfp8` for mxfp8)."""
    fp8_param_gather: bool = knob(False)
    """Under ZeRO-3 (`zero_stage` 3) in `precision` fp8 or mxfp8, gather each block's linear layers'
    weights as their one-byte FP8 copies (Megatron-Core's `fp8_param_gather`, torchtitan's
    `enable_fsdp_float8_all_gather`): the all-gathers move, and a gathered layer holds, half those
    weights' bytes; the norms', biases' and a router's weights, the embedding and the output layer stay
    two-byte, and the gradients are reduce-scattered in bf16 as before."""
    cp: int = knob(1, search=[1], core=True, layers=True, minimum=1)
    """Context parallelism: each sample's sequence split over `cp` devices (ranks after the tensor-parallel
    ones), causal work balanced between them, keys and values passed round a ring while attention
    computes (Megatron-Core's and torchtitan's ring attention); it must divide `model.seq_len` and
    needs a fused attention kernel (`hw.device.attention=flash`). The gradients are reduced, and a
    sharded optimizer sharded, over the data-parallel and context-parallel devices together."""
    cp_comm_type: str = knob("p2p", choices=CP_COMM_TYPES)
    """How context parallelism's attention exchanges its tokens (Megatron-Core's `cp_comm_type`): `p2p`
    passes each device's keys and values round a ring of the cp devices while the attention kernel
    computes (ring attention, torchtitan's too); `a2a` is the all-to-all variant (DeepSpeed-Ulysses):
    an all-to-all before the kernel trades each device's tokens of every head for every token of
    1/cp of the heads (queries, keys and values), the kernel attends over the whole sequence, and an
    all-to-all after it trades its output back (the backward pass the same for the gradients), none of
    it beside the kernel. `a2a` needs the attention heads and the key-value heads of each
    tensor-parallel rank to divide by cp."""
    ep: int = knob(1, core=True, recorded=True, minimum=1)
    """Expert parallelism of a Mixture-of-Experts model: each MoE block's routed experts spread over ep
    devices of a stage, with a dispatch and a combine all-to-all per block (forward and backward);
    experts / ep experts per device. It must divide the experts and every stage's devices (tp x dp)."""
    overlap_moe_expert_parallel_comm: bool = knob(False)
    """Overlap a MoE layer's expert-parallel all-to-alls with another microbatch's computation
    (Megatron-Core's `overlap_moe_expert_parallel_comm`, Megatron-Bridge's `moe_a2a_overlap`; DeepSeek's
    DualPipe overlaps the same way): one microbatch's forward pass runs beside another's backward
    all-to-alls, and its backward pass beside the forward all-to-alls, so a layer's forward takes
    max(F - F_a, B_a) and its backward max(B - B_a, F_a), F_a and B_a their all-to-alls
    (`phazec.predict.evaluator.overlapped`). Needs ep > 1."""
    moe_token_dispatcher: str = knob("alltoall", choices=TOKEN_DISPATCHERS)
    """How the expert-parallel all-to-alls send a MoE layer's tokens (Megatron-Core's
    `moe_token_dispatcher_type`): `alltoall` sends each token once per expert it goes to (Megatron-Core's
    all-to-all dispatcher, its default); `flex` once per device holding one of its experts, and across
    the scale-out network once per node, the node forwarding it over NVLink (`flex` with DeepEP or
    HybridEP, `moe_flex_dispatcher_backend`; `phazec.cost.network.tier_bytes`). Needs ep > 1."""
    moe_flex_sms: int = knob(20, minimum=0)
    """The streaming multiprocessors the flex dispatcher's kernels hold while they run (Megatron-Core's
    `moe_deepep_num_sms`, 20 by default; `moe_hybridep_num_sms` for HybridEP): under
    `overlap_moe_expert_parallel_comm` the computation beside them runs on the other cores, so it takes
    that share of the all-to-alls' time longer (`phazec.predict.evaluator.overlapped`); 0 leaves every
    core to the computation. Without the overlap the dispatcher runs alone and this changes nothing."""
    fused_cross_entropy: bool = knob(False)
    """The loss as Transformer Engine's fused cross entropy computes it (Megatron-Core's
    `cross_entropy_fusion_impl="te"`, set by Megatron-Bridge's performance recipes): it reads the
    logits in the output layer's precision and keeps them for the backward pass (2 bytes a logit in
    bf16); false: they are cast to fp32 first and kept in fp32, as Hugging Face's loss and
    Megatron-Core's native cross entropy do (`phazec.passes.loss`)."""
    recompute_mla_up_proj: bool = knob(False)
    """Selective recompute also recomputes multi-head latent attention's up-projections (Megatron-Core's
    `recompute_modules` `mla_up_proj`, which Megatron-Bridge's DeepSeek-V3 and Kimi K2 recipes set):
    each layer keeps its query and key-value latents instead of the heads' queries, keys and values,
    and runs the up-projections again in the backward pass (`phazec.passes.memory.up_projection`).
    Needs `recompute` selective (in a search, among the modes tried) and a model with multi-head latent
    attention."""
    recompute_mlp: bool = knob(False)
    """Selective recompute also reruns each dense block's MLP (Megatron-Core's `recompute_modules` `mlp`,
    which Megatron-Bridge's DeepSeek-V3 recipes set): the layer runs the MLP again in the backward pass,
    from the norm before it (which Transformer Engine fuses into its first linear layer) or its up
    projections to its down projection, and keeps that input (`phazec.passes.memory.dense_mlp`); MoE
    blocks are left alone, as Megatron-Core leaves them. Needs
    `recompute` selective (in a search, among the modes tried). Under a fused attention kernel
    (`hw.device.attention=flash`) selective recompute reruns nothing of the attention core, so
    `recompute=selective` with this alone is Megatron-Core's `recompute_modules=["mlp"]`."""
    recompute_layernorm: bool = knob(False)
    """Selective recompute also reruns each MoE block's normalisation before its router and experts
    (Megatron-Core's `recompute_modules` `layernorm`, which Megatron-Bridge's GPT-OSS recipes set): the
    layer keeps the norm's input and rebuilds its output in the backward pass
    (`phazec.passes.memory.moe_pre_norm`). With Transformer Engine's layers Megatron-Core's other norms
    are fused into the next linear layer and rerun nothing, so dense blocks are left alone. Needs
    `recompute` selective (in a search, among the modes tried) and a Mixture-of-Experts model."""
    recompute_moe_act: bool = knob(False)
    """Selective recompute also reruns each MoE block's routed experts' activation (Megatron-Core's
    `recompute_modules` `moe_act`, which Megatron-Bridge's GPT-OSS recipes set): the layer keeps the
    experts' first products' outputs and the routing weights, and rebuilds what their activation
    writes up to the down projection's input in the backward pass
    (`phazec.passes.memory.expert_activation`). Needs `recompute` selective (in a search, among the
    modes tried) and a Mixture-of-Experts model."""
    offload_layers: int = knob(0, recorded=True, minimum=0)
    """Activation offloading (Megatron-Core's `--cpu-offloading-num-layers`, activations only): the
    activations the model's first `offload_layers` transformer blocks keep for their backward pass are
    copied to the host's memory after their forward pass and back before their backward pass, each copy
    overlapped with the next block's pass (`phazec.predict.offload`). At most the blocks less 2; needs a
    host link (`system.host_link_bytes_per_s`) and no recompute, as in Megatron-Core."""

    @property
    def deduplicates_tokens(self) -> bool:
        """Whether the expert-parallel all-to-alls send each token once per device and node holding one
        of its experts (`moe_token_dispatcher` flex)."""
        return self.moe_token_dispatcher == "flex"

    @property
    def cp_all_to_all(self) -> bool:
        """Whether context parallelism exchanges tokens by all-to-all (`cp_comm_type` a2a)."""
        return self.cp_comm_type == "a2a"

    @property
    def selective_modules(self) -> frozenset[str]:
        """The `phazec.passes.memory.SELECTIVE_MODULES` selective recompute also reruns here."""
        return frozenset(module for knob, module in SELECTIVE_KNOBS.items() if getattr(self, knob))


KNOB_FIELDS: tuple[Field[Any], ...] = fields(Training)
"""Every knob, in declaration order."""


def spec(name: str) -> KnobSpec:
    """The `KnobSpec` of knob `name`."""
    found: KnobSpec = Training.__dataclass_fields__[name].metadata["knob"]
    return found


SEARCHED = tuple(f.name for f in KNOB_FIELDS if spec(f.name).searched)
"""The knobs a search tries lists of, in declaration order: the plan entry of result.json and the
columns of explored.csv."""
RECORDED = tuple(f.name for f in KNOB_FIELDS if spec(f.name).recorded)
"""The knobs plan.json names beside the plan's widths."""
CORE = tuple(f.name for f in KNOB_FIELDS if spec(f.name).core)
"""The knobs the compiled core reads."""


def check_knob(group: str, name: str, value: Any, listed: Sequence[Any] | None = None) -> Any:
    """One setting of knob `name` given as `<group>.<name>` (`plan.<name>`, or an element of the list
    `listed` of `train.<name>`), in its normal spelling (a legacy spelling translated).

    Raises:
        PhazecError: the value is not one of the knob's choices or is below its minimum.
    """
    knob_spec = spec(name)
    value = next((v for k, v in knob_spec.legacy.items() if type(k) is type(value) and k == value), value)
    if listed is None:
        where, it = f"{group}.{name}={value!r} is not valid:", "it must be"
    else:
        where, it = f"{group}.{name}={list(listed)!r} is not valid: {value!r}", "is not"
    if knob_spec.choices is not None and value not in knob_spec.choices:
        legacy = ", ".join(f"{k!r} means {v!r}" for k, v in knob_spec.legacy.items())
        raise PhazecError(
            f"{where} {it} one of {list(knob_spec.choices)}"
            + (f" ({legacy})." if legacy and listed is not None else ".")
        )
    least = knob_spec.minimum
    if least is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        what = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise PhazecError(f"{where} {it} {what}.")
    return value


@dataclass(frozen=True)
class Knobs:
    """The training settings one search covers: the values of each searched knob, one value of every
    other knob, and the HBM sizes (`system.hbm_gb`) each plan is tried with."""

    values: tuple[tuple[str, tuple[Any, ...]], ...]
    """(knob, its values in the order tried) for each searched knob, in declaration order."""
    fixed: Training
    """Every knob's setting; a searched knob holds its first value."""
    hbm_bytes: tuple[int, ...]
    """HBM sizes to try, in the order given."""

    @classmethod
    def searching(cls, hbm_bytes: Sequence[int], **given: Any) -> Knobs:
        """A search's knobs: `train.*`'s defaults but for the knobs `given` (a list of values for a
        searched knob, one setting for any other), each checked (a searched knob's list non-empty)."""
        values = []
        for name in SEARCHED:
            listed = list(given.get(name, spec(name).search))
            if not listed:
                raise PhazecError(
                    f"train.{name}=[] is not valid: list at least one setting to search, e.g. "
                    f"{spec(name).search}."
                )
            values.append((name, tuple(check_knob("train", name, v, listed) for v in listed)))
        fixed = {
            k.name: check_knob("train", k.name, given.get(k.name, spec(k.name).search))
            for k in KNOB_FIELDS
            if not spec(k.name).searched
        }
        first = {name: settings[0] for name, settings in values}
        return cls(tuple(values), Training(**fixed, **first), tuple(int(h) for h in hbm_bytes))

    @classmethod
    def single(cls, training: Training, hbm_bytes: int) -> Knobs:
        """One plan's settings and one HBM size (what `phazec-plan` times)."""
        values = tuple((name, (getattr(training, name),)) for name in SEARCHED)
        return cls(values, training, (hbm_bytes,))

    def tried(self, name: str) -> tuple[Any, ...]:
        """The values tried of knob `name` (one for a knob not searched)."""
        return dict(self.values).get(name, (getattr(self.fixed, name),))

    def settings(self, names: Sequence[str]) -> Iterator[dict[str, Any]]:
        """Every combination of the tried values of `names`, the last varying fastest."""
        for combination in itertools.product(*(self.tried(name) for name in names)):
            yield dict(zip(names, combination, strict=True))

    @property
    def time_can_fall(self) -> bool:
        """Whether a plan's time can fall as a layer's latency grows (`phazec.solvers.placement`): a DP
        sync hides behind a pass, or ZB-H1's bubble shrinks as a weight-gradient latency grows."""
        fixed = self.fixed
        return (
            fixed.overlap_grad_reduce
            or fixed.pipeline_schedule == "zb_h1"
            or (fixed.overlap_param_gather and any(zero in (1, 2) for zero in self.tried("zero_stage")))
        )


def core_settings(training: Training) -> dict[str, int | bool]:
    """The settings the compiled core reads, by name (a mode as its index among the knob's choices)."""
    out: dict[str, int | bool] = {}
    for name in CORE:
        value = getattr(training, name)
        choices = spec(name).choices
        out[name] = choices.index(value) if choices is not None else value
    return out
