"""DeepSeek's multi-token prediction (MTP), built while exporting: `model.mtp_layers` modules after the
blocks.

DeepSeek-V3 (arXiv 2412.19437, section 2.2) trains D sequential modules beside the model: module k
predicts the token k + 1 places ahead. transformers builds none of them (its DeepSeek-V3 class leaves
the checkpoint's extra layer out), so phazec adds them to the exported model from the model's own
classes, as Megatron-Core's `MultiTokenPredictionLayer` runs them (`mtp_num_layers`):

1. the embedding of the input tokens shifted k places (the model's embedding weight, shared: the
   stage holding the modules keeps a copy of it, as Megatron-Core's does), normalised (`enorm`);
2. the hidden state of the depth before (the last block's output for k = 1), normalised (`hnorm`);
3. the two concatenated and projected from 2h back to h (`eh_proj`, no bias);
4. one transformer block built as the model's last one (DeepSeek-V3: multi-head latent attention and a
   MoE layer), under the model's causal mask and rotary tables;
5. a final norm, whose output goes through the model's output layer (shared) to a cross-entropy loss on
   the labels shifted k places, added to the main loss (its weight, 0.1 in Megatron-Bridge's recipes,
   costs nothing).

The lowering makes each module a layer of its own, `mtp.<k>` (`LayerKind.MTP`, found by its scope,
`MTP_SCOPE`), between the last block and the head; the head holds both output layers and both losses.
A plan puts them on the last pipeline stage with the head, where Megatron-Core's layouts put them ('m'
before 'L'). Only DeepSeek-V3's class (`MTP_ARCHS`) has them.
"""

from __future__ import annotations

import re
from typing import Any

MTP_ARCHS = ("DeepseekV3ForCausalLM",)
"""The Hugging Face classes whose models can train multi-token-prediction modules."""
MTP_SCOPE = re.compile(r"(?:^|\.)mtp\.depth(\d+)(?:\.|$)")
"""The module scope of MTP module k (`depth<k>` in the exported model's `mtp` dictionary)."""


def add_mtp(model: Any, depth: int) -> None:
    """Give a Hugging Face DeepSeek-V3 model `depth` MTP modules (module docstring), as `model.mtp`, in
    its dtype and on its device, in training mode."""
    import torch

    body = model.model
    config = model.config
    hidden = config.hidden_size
    norm = type(body.norm)
    block = type(body.layers[-1])

    class MtpModule(torch.nn.Module):
        def __init__(self, layer_idx: int) -> None:
            super().__init__()
            self.enorm = norm(hidden, eps=config.rms_norm_eps)
            self.hnorm = norm(hidden, eps=config.rms_norm_eps)
            self.eh_proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
            self.block = block(config, layer_idx)
            self.norm = norm(hidden, eps=config.rms_norm_eps)

        def forward(
            self, hidden_states: Any, input_ids: Any, embedding: Any, shift: int, **block_inputs: Any
        ) -> tuple[Any, Any]:
            tokens = shifted(input_ids, shift)
            embedded = torch.nn.functional.embedding(tokens, embedding)
            mixed = self.eh_proj(torch.cat((self.enorm(embedded), self.hnorm(hidden_states)), dim=-1))
            out = self.block(mixed, **block_inputs)
            return out, self.norm(out)

    parameter = next(model.parameters())
    with torch.device(parameter.device):
        modules = {f"depth{k}": MtpModule(config.num_hidden_layers + k - 1) for k in range(1, depth + 1)}
        model.mtp = torch.nn.ModuleDict(modules).to(parameter.dtype)
    model.train()


def shifted(tokens: Any, shift: int) -> Any:
    """[batch, s] token ids moved `shift` places to the left, the first ones wrapping round (a roll
    written as two static slices: the exporter leaves torch.roll's shapes unresolved)."""
    import torch

    return torch.cat((tokens[:, shift:], tokens[:, :shift]), dim=1)


def mtp_loss_of(model: Any) -> Any:
    """A module whose output is the training loss of a model given `add_mtp`'s modules: the model's own
    loss (its blocks run as its `forward` runs them) plus each MTP module's, on labels shifted as far."""
    import torch
    from transformers.masking_utils import create_causal_mask

    class LossWithMtp(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.m = inner

        def loss(self, hidden_states: Any, labels: Any) -> Any:
            logits = self.m.lm_head(hidden_states)
            return self.m.loss_function(logits=logits, labels=labels, vocab_size=self.m.config.vocab_size)

        def forward(self, input_ids: Any, labels: Any) -> Any:
            body = self.m.model
            embedded = body.embed_tokens(input_ids)
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            mask = create_causal_mask(
                config=body.config, inputs_embeds=embedded, attention_mask=None, cache=None,
                position_ids=positions,
            )  # fmt: skip
            block_inputs = {
                "attention_mask": mask,
                "position_ids": positions,
                "position_embeddings": body.rotary_emb(embedded, positions),
            }
            hidden = embedded
            for layer in body.layers[: body.config.num_hidden_layers]:
                hidden = layer(hidden, **block_inputs)
            total = self.loss(body.norm(hidden), labels)
            weight = body.embed_tokens.weight
            for shift, module in enumerate(self.m.mtp.values(), start=1):
                hidden, normed = module(hidden, input_ids, weight, shift, **block_inputs)
                total = total + self.loss(normed, shifted(labels, shift))
            return total

    return LossWithMtp(model)
