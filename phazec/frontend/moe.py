"""Mixture-of-Experts blocks as a static graph: phazec's own routing formulation, swapped in for export.

Hugging Face's expert modules route data-dependently (a loop over the experts a batch hits, `nonzero`,
`index_add_`), which neither exports to a static ONNX graph nor says what a training step costs. While
exporting, phazec replaces the forward of every expert module (a module holding the experts' stacked
weights, `gate_up_proj` or `up_proj` and `down_proj` of shape [experts, ...]) with this formulation of
Megatron-Core's dropless MoE layer, the router (GEMM, softmax, top-k: the model's own code) left as
it is:

1. permute: each token copied once per chosen expert and grouped by expert, [experts, C, h], where
   C = tokens x top_k / experts x factor tokens per expert (`Routing.factor`; 1: balanced);
2. grouped expert GEMMs: one batched product per projection (gate and up, then down), `experts`
   products of C x h by h x f (and C x f by f x h);
3. unpermute and combine: each token's top_k expert outputs summed. Each copy's routing weight is
   applied inside the experts, to the activation before the down projection, as Megatron-Core's
   grouped experts apply it in their fused SwiGLU (`weighted_bias_swiglu_impl`; the weights are
   permuted and dispatched with the tokens): the combine then keeps no expert output for the weights'
   gradient. Experts whose down projection has a bias (GPT-OSS) weight their outputs in the combine.

Shared experts (DeepSeek) are the model's own dense MLP beside it. The token-to-expert assignment is
the one routing assumption (`phazec.ir.core.Routing`): every expert gets the same number of tokens,
scaled by `model.moe.imbalance` (the busiest expert's share over the balanced one; every expert is
priced at it) or, with token dropping, exactly `model.moe.capacity_factor` times the balanced share,
rounded up to a whole token per sample (Megatron-Core's capacity, which it computes per microbatch:
the same at microbatch 1, at most a token per sample and expert more above it). Without dropping, a
share that is not a whole number of tokens a sample (Kimi K2's 4096 x 8 / 384 = 85.3) is rounded up
the same way: an even spread gives the busiest expert that many, and every expert is priced at it.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

from phazec.errors import PhazecError
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import Routing

EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
"""The `hf_config` keys that count a MoE model's routed experts (Qwen3-MoE, Mixtral and GPT-OSS, DeepSeek)."""


def check_expert_parallel(cfg: ModelConfig, group: str, ep: int, devices: int) -> None:
    """Before any work: expert parallelism `ep` (`<group>.ep`) against the model's routed experts as its
    `hf_config` names them, the top-k against the experts, and `ep` against the `devices` it must tile.

    Raises:
        PhazecError: ep > 1 on a model without experts, an ep that does not divide the experts or the
            devices, or a top-k above the experts.
    """
    named = [cfg.hf_config[k] for k in EXPERT_KEYS if k in cfg.hf_config]
    experts = int(named[0]) if named and cfg.source == "hf" else 0
    top_k = cfg.hf_config.get("num_experts_per_tok")
    if experts and isinstance(top_k, int):
        check_top_k(top_k, experts)
        check_expert_groups(*expert_groups(cfg.hf_config), top_k, experts)
    if ep == 1:
        return
    if not experts:
        raise PhazecError(
            f"{group}.ep={ep} (expert parallelism) does not apply to model {cfg.name!r}: it has no "
            f"Mixture-of-Experts layers (model.hf_config names none of {list(EXPERT_KEYS)}); use "
            f"{group}.ep=1, or a MoE model such as model=qwen3_30b_a3b."
        )
    if experts % ep:
        valid = [d for d in range(1, experts + 1) if experts % d == 0]
        raise PhazecError(
            f"{group}.ep={ep} does not divide the {experts} routed experts of model {cfg.name!r}: each "
            f"device of an expert-parallel group holds experts/ep of them; valid: {valid}."
        )
    if devices % ep:
        raise PhazecError(
            f"{group}.ep={ep} does not divide the {devices} devices (system.devices): the expert-parallel "
            "groups tile the devices; choose an ep that divides them."
        )


def check_moe_tensor_parallel(
    cfg: ModelConfig, widths_key: str, widths: Sequence[int], sp_key: str, sequence_parallel: Sequence[bool]
) -> None:
    """Before any work: a tensor-parallel width above 1 (`widths_key`: `plan.tp` or `model.tp_widths`) on
    a MoE model, which Megatron-Core runs only with sequence parallelism (each tensor-parallel rank
    routes its own s/t tokens, expert tensor parallelism 1; `sp_key` gives the values tried) and which
    phazec splits only in blocks without shared experts on the flattened tokens.

    Raises:
        PhazecError: a width above 1 on a MoE model without sequence parallelism, or with shared experts
            on the flattened tokens (Llama 4, Qwen2-MoE).
    """
    wide = [t for t in widths if t > 1]
    if not (wide and cfg.source == "hf" and any(k in cfg.hf_config for k in EXPERT_KEYS)):
        return
    shown = f"{widths_key}={widths[0] if widths_key.startswith('plan') else list(widths)}"
    if cfg.arch in FLAT_SHARED_EXPERT_ARCHS or "shared_expert_intermediate_size" in cfg.hf_config:
        raise PhazecError(
            f"{shown} on model {cfg.name!r}: its shared experts run on the flattened tokens the router "
            "reads, and their split over the tensor-parallel ranks is not modelled yet: use tp 1 "
            "(plan.tp=1, model.tp_widths=[1]) and expert parallelism (plan.ep, train.ep)."
        )
    if not all(sequence_parallel):
        tried = ", ".join(str(v).lower() for v in sequence_parallel)
        tried = f"[{tried}]" if sp_key.startswith("train") else tried
        raise PhazecError(
            f"{shown} on the Mixture-of-Experts model {cfg.name!r} needs sequence parallelism, which "
            f"{sp_key}={tried} "
            "leaves off: Megatron-Core runs a MoE layer at tensor-parallel width t > 1 only with it (each "
            "tensor-parallel rank routes its own s/t tokens to the experts). Set "
            f"{sp_key}={'[true]' if sp_key.startswith('train') else 'true'}, or use tp 1."
        )


FLAT_SHARED_EXPERT_ARCHS = frozenset({"Llama4ForCausalLM", "Qwen2MoeForCausalLM"})
"""Architectures whose shared experts run on the flattened tokens the router reads (Llama 4's, one in
every MoE block; Qwen2-MoE's, `shared_expert_intermediate_size` wide), which phazec does not split over
tensor-parallel ranks; DeepSeek's run on the block's hidden states and are split as a dense MLP."""


def check_top_k(top_k: int, experts: int) -> None:
    """Each token picks between 1 and all of the experts."""
    if not 0 < top_k <= experts:
        raise PhazecError(
            f"model.hf_config.num_experts_per_tok={top_k} is not valid for {experts} experts: each token "
            f"picks between 1 and {experts} experts (top-k at most the experts)."
        )


def expert_groups(config: Any) -> tuple[int, int]:
    """(groups, groups chosen) of a router that limits each token's experts to the best `topk_group` of
    `n_group` groups of consecutive experts (DeepSeek-V2 and V3's `n_group` and `topk_group`, which
    Megatron-Core reads as `moe_router_num_groups` and `moe_router_group_topk`); (1, 1) for any other.
    `config` is a Hugging Face config object or its dict."""
    keys = ("n_group", "topk_group")
    groups, chosen = (config.get(k) if isinstance(config, dict) else getattr(config, k, None) for k in keys)
    if isinstance(groups, int) and isinstance(chosen, int) and groups > 1:
        return groups, chosen
    return 1, 1


def check_expert_groups(groups: int, chosen: int, top_k: int, experts: int) -> None:
    """The router's groups split the experts evenly, and the chosen ones hold at least top-k experts."""
    if experts % groups or not 0 < chosen <= groups or top_k > chosen * (experts // groups):
        raise PhazecError(
            f"model.hf_config.n_group={groups} and topk_group={chosen} are not valid for {experts} experts "
            f"and num_experts_per_tok={top_k}: n_group must divide the experts, topk_group lie in "
            f"1..n_group, and the topk_group groups chosen hold at least num_experts_per_tok experts "
            f"(topk_group x experts / n_group >= {top_k})."
        )


def expert_modules(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every expert module of a Hugging Face model: stacked expert weights
    ([experts, ...]) behind the `use_experts_implementation` interface (`stacked_experts`), or a Llama 4
    MoE layer's (`llama4_layers`)."""
    return stacked_experts(model) + [
        (f"{name}.experts", layer.experts) for name, layer in llama4_layers(model)
    ]


def stacked_experts(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every expert module behind transformers' `use_experts_implementation`
    interface (Qwen3-MoE, Mixtral, GPT-OSS, DeepSeek)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if hasattr(module, "num_experts") and hasattr(module, "down_proj") and hasattr(module, "has_gate")
    ]


def llama4_layers(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every Llama 4 MoE layer: a router, a shared expert, and experts with stacked
    gate-and-up ([E, h, 2f]) and down ([E, f, h]) weights, which transformers runs on every token (each
    scaled by its router score, zero for the experts it did not choose)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if hasattr(module, "router") and hasattr(module, "shared_expert") and hasattr(module, "experts")
        and hasattr(module.experts, "gate_up_proj")
    ]  # fmt: skip


def routing_of(model: Any, cfg: ModelConfig) -> Routing | None:
    """The routing assumption of a model whose expert modules `static_experts` will replace (None for a
    dense model); checks the top-k against the experts."""
    found = expert_modules(model)
    if not found:
        named = [k for k in EXPERT_KEYS if (getattr(model.config, k, 0) or 0) > 1]
        if named:
            raise PhazecError(
                f"model {cfg.name!r} ({cfg.arch}) has experts ({named[0]}="
                f"{getattr(model.config, named[0])}) but no expert module phazec can export as a static "
                "graph (stacked expert weights behind transformers' experts interface, as Qwen3-MoE, "
                "Mixtral, GPT-OSS and DeepSeek have, or Llama 4's MoE layer); this architecture's MoE is "
                "not supported yet."
            )
        return None
    config = model.config
    experts = int(found[0][1].num_experts)
    top_k = int(config.num_experts_per_tok)
    check_top_k(top_k, experts)
    groups, chosen = expert_groups(config)
    check_expert_groups(groups, chosen, top_k, experts)
    moe = cfg.moe
    dropping = moe.capacity_factor is not None
    factor = float(moe.capacity_factor) if moe.capacity_factor is not None else float(moe.imbalance)
    share = cfg.seq_len * top_k * factor / experts
    # A whole share is kept as it is (up to the float rounding of the factor); any other is rounded up:
    # Megatron-Core's capacity (`get_capacity`) with dropping, and without it the busiest expert's
    # share of an even spread, ceil(s k / E) tokens a sample, at which every expert is priced.
    per_sample = round(share) if abs(share - round(share)) <= 1e-9 * share else math.ceil(share)
    stacked = {
        f"m.{name}.{p}": value.numel()
        for name, module in found
        for p, value in module.named_parameters(recurse=False)
        if value.shape[0] == experts
    }
    return Routing(
        experts=experts,
        top_k=top_k,
        expert_groups=groups,
        group_top_k=chosen,
        tokens_per_expert=int(per_sample),
        factor=factor,
        dropping=dropping,
        expert_parameters=tuple(sorted(stacked)),
        expert_parameter_count=sum(stacked.values()),
    )


def static_experts(model: Any, routing: Routing, seq_len: int) -> None:
    """Replace the forward of every expert module by the static formulation (module docstring), and of
    every Llama 4 MoE layer by its router, the static experts with each token copy scaled by its router
    score before its expert (as Llama 4 scales its experts' input), and its shared expert."""
    for _, module in stacked_experts(model):
        module.forward = types.MethodType(_static_forward(routing, seq_len), module)
    for _, layer in llama4_layers(model):
        experts = layer.experts  # SwiGLU experts, gate first, weights stored [E, in, out]
        experts.has_gate, experts.is_transposed, experts.has_bias = True, True, False
        experts.forward = types.MethodType(_static_forward(routing, seq_len, weigh_input=True), experts)
        layer.forward = types.MethodType(_llama4_forward, layer)


def _llama4_forward(self: Any, hidden_states: Any) -> Any:
    import torch

    hidden = hidden_states.reshape(-1, self.hidden_dim)
    # the router's GEMM, its top-k logits and their sigmoid: transformers' scores without scattering
    # them into a [tokens, experts] tensor of zeros
    logits = torch.nn.functional.linear(hidden, self.router.weight)
    top, index = logits.topk(self.top_k, dim=1)
    weights = torch.sigmoid(top.float()).to(hidden.dtype)
    return self.shared_expert(hidden) + self.experts(hidden, index, weights), logits


def static_latent_attention(model: Any) -> None:
    """Give every multi-head latent attention module (DeepSeek's, with `expand_kv`) a key built by one
    concatenation instead of copies into slices of an empty tensor, which export with shapes the ONNX
    shape inference cannot resolve; the values and the work are the same."""
    import torch

    def expand_kv(self: Any, kv_nope: Any, k_rot: Any) -> tuple[Any, Any]:
        batch, _, seq, _ = kv_nope.shape
        shape = (batch, seq, -1, self.qk_nope_head_dim + self.v_head_dim)
        kv = self.kv_b_proj(kv_nope).view(shape).transpose(1, 2)
        k_nope, value = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        return torch.cat((k_nope, k_rot.expand(-1, k_nope.shape[1], -1, -1)), dim=-1), value

    for module in model.modules():
        if hasattr(module, "expand_kv"):
            module.expand_kv = types.MethodType(expand_kv, module)


def _static_forward(routing: Routing, seq_len: int, weigh_input: bool = False) -> Any:
    import torch

    def forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
        tokens, hidden = hidden_states.shape
        top_k, experts = routing.top_k, routing.experts
        assigned = tokens // seq_len * routing.tokens_per_expert * experts
        # permute: one copy of each token per chosen expert, grouped by expert, and its routing weight
        copies = hidden_states.repeat_interleave(top_k, dim=0)
        weights = top_k_weights.reshape(-1, 1)
        if assigned > copies.shape[0]:  # the busiest expert's share, every expert
            copies = torch.cat([copies, copies[: assigned - copies.shape[0]]])
            weights = torch.cat([weights, weights[: assigned - weights.shape[0]]])
        if assigned < weights.shape[0]:  # dropped copies
            weights = weights[:assigned]
        dispatched = copies[:assigned].reshape(experts, assigned // experts, hidden)
        if weigh_input:  # Llama 4: each copy scaled before its expert
            dispatched = dispatched * weights.reshape(experts, assigned // experts, 1).to(dispatched.dtype)
        up_weight = self.gate_up_proj if self.has_gate else self.up_proj
        out = torch.bmm(dispatched, up_weight if self.is_transposed else up_weight.transpose(1, 2))
        if self.has_bias:
            bias = self.gate_up_proj_bias if self.has_gate else self.up_proj_bias
            out = out + bias.unsqueeze(1)
        if self.has_gate and default_gate(self):
            half = out.shape[-1] // 2
            out = self.act_fn(out[..., :half]) * out[..., half:]
        else:
            out = self._apply_gate(out) if self.has_gate else self.act_fn(out)
        if not self.has_bias and not weigh_input:  # weighted inside the experts, before the down projection
            out = out * weights.reshape(experts, assigned // experts, 1).to(out.dtype)
        out = torch.bmm(out, self.down_proj if self.is_transposed else self.down_proj.transpose(1, 2))
        if self.has_bias:
            out = out + self.down_proj_bias.unsqueeze(1)
        # unpermute and combine: each token's expert outputs summed (weighted first where the down
        # projection has a bias)
        out = out.reshape(assigned, hidden)
        if assigned < tokens * top_k:  # dropped copies contribute nothing
            out = torch.cat([out, out.new_zeros(tokens * top_k - assigned, hidden)])
        out = out[: tokens * top_k].reshape(tokens, top_k, hidden)
        if self.has_bias:
            out = out * top_k_weights.unsqueeze(-1).to(out.dtype)
        return out.sum(dim=1)

    return forward


def default_gate(module: Any) -> bool:
    """Whether an expert module gates as transformers' default (the activation of the first half times
    the second): its `_apply_gate` is `_default_apply_gate`, or it has none (Llama 4's, which does so)."""
    apply = getattr(type(module), "_apply_gate", None)
    return apply is None or apply.__name__ == "_default_apply_gate"
