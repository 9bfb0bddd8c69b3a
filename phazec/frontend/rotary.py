"""Complex-valued rotary embeddings exported as their real-valued equivalent.

transformers' DeepSeek-V2 and Llama 4 build their rotary embeddings from complex numbers
(`torch.polar`, then products of `view_as_complex` views), which torch's ONNX exporter cannot export.
While exporting, phazec gives such a model's rotary module a forward that returns the cosines and sines
of the same angles, stacked on a last axis of 2 and scaled as the original scales its complex numbers,
and its modeling module an `apply_rotary_emb` that turns each pair (a, b) = (x_2i, x_2i+1) of the
query's and the key's rotary features into (a cos - b sin, a sin + b cos): the real and imaginary parts
of the complex product. The values are the original's (`tests/frontend/test_rotary.py`); the work is a
rotary embedding's elementwise products.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

COMPLEX_ROTARY: dict[str, tuple[str, str, int]] = {
    "DeepseekV2ForCausalLM": (
        "transformers.models.deepseek_v2.modeling_deepseek_v2",
        "DeepseekV2RotaryEmbedding",
        1,
    ),
    "Llama4ForCausalLM": ("transformers.models.llama4.modeling_llama4", "Llama4TextRotaryEmbedding", 2),
}
"""Architecture -> (its modeling module, its rotary module's class, the heads axis of the query and key
its `apply_rotary_emb` rotates): the models whose rotary embedding is complex-valued."""


@contextmanager
def real_rotary(model: Any) -> Iterator[None]:
    """Within the block, `model`'s complex rotary embedding (if it has one, `COMPLEX_ROTARY`) computes
    in real numbers; the modeling module's function is restored after it."""
    found = COMPLEX_ROTARY.get(type(model).__name__)
    if found is None:
        yield
        return
    modeling = importlib.import_module(found[0])
    rotary_class = getattr(modeling, found[1])
    for module in model.modules():
        if isinstance(module, rotary_class):
            module.forward = types.MethodType(cos_sin, module)
    saved = getattr(modeling, "apply_rotary_emb")  # noqa: B009 (a module transformers defines)
    setattr(modeling, "apply_rotary_emb", functools.partial(apply_real_rotary, heads_axis=found[2]))  # noqa: B010
    try:
        yield
    finally:
        setattr(modeling, "apply_rotary_emb", saved)  # noqa: B010


def cos_sin(self: Any, x: Any, position_ids: Any) -> Any:
    """A rotary module's angles as [batch, seq, dim / 2, 2]: their cosines and sines, scaled by its
    `attention_scaling` (the original's `torch.polar(1, angles) * attention_scaling`)."""
    import torch

    angles = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
    return torch.stack((angles.cos(), angles.sin()), dim=-1) * self.attention_scaling


def apply_real_rotary(query: Any, key: Any, rotation: Any, heads_axis: int) -> tuple[Any, Any]:
    """Rotate the query's and the key's feature pairs ([batch, heads, seq, dim], or [batch, seq, heads,
    dim] with `heads_axis` 2) by `rotation` ([batch, seq, dim / 2, 2], `cos_sin`), in float32 and back
    to their own type, as the original."""
    import torch

    cos, sin = rotation.unsqueeze(heads_axis).unbind(-1)

    def rotated(x: Any) -> Any:
        a, b = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(3).type_as(x)

    return rotated(query), rotated(key)
