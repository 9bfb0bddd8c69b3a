"""Config schema of the `model` group."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class BaselinePlan:
    """A fixed Megatron-style plan (phaze-facts section 8): layers split evenly, embedding first."""

    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel width."""
    tp: int = 1
    """Tensor-parallel width."""


@dataclass(frozen=True, kw_only=True)
class MoeConfig:
    """How a Mixture-of-Experts model's tokens spread over its experts (`phazec.frontend.moe`); a dense
    model ignores it."""

    imbalance: float = 1.0
    """The busiest expert's tokens over the balanced share tokens x top_k / experts (1: balanced, as
    the published benchmarks force it); every expert is priced at the busiest one's tokens."""
    capacity_factor: float | None = None
    """Token dropping at this capacity factor: each expert processes exactly capacity_factor x the
    balanced share, rounded up to a whole token per sample (Megatron's pad-to-capacity); null:
    dropless (then `imbalance` applies)."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A model to lower: a Hugging Face architecture built from its config, or a user's ONNX file."""

    name: str
    """Preset name, used in tables and results."""
    source: str = "hf"
    """`hf` (build `arch` from `hf_config`, export to ONNX) or `onnx` (lower the file at `path`)."""
    arch: str = ""
    """Hugging Face model class, e.g. `LlamaForCausalLM` (source=hf)."""
    hf_config: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the architecture's config class (source=hf); with `config_json`, they
    override the file's."""
    config_json: str = ""
    """A Hugging Face config.json (or its directory) to build the model from, as it is (source=hf):
    `arch` from its `architectures`, the config's keys from the file, `seq_len` (when 0) its position
    count; no download (`phazec.frontend.config_json`)."""
    seq_len: int = 0
    """Sequence length in tokens (source=hf; source=onnx: 0 reads it from the attention scores)."""
    dtype: str = "bfloat16"
    """Element type of weights and activations (source=hf): `bfloat16`, `float16` or `float32`."""
    tp_widths: list[int] = field(default_factory=lambda: [1])
    """Tensor-parallel widths the model allows."""
    baseline: BaselinePlan = field(default_factory=BaselinePlan)
    """The model's fixed Megatron-style plan, compared against in every result."""
    path: str = ""
    """ONNX file to lower (source=onnx); its shapes must be static."""
    moe: MoeConfig = field(default_factory=MoeConfig)
    """The routing assumption of a Mixture-of-Experts model."""
    mtp_layers: int = 0
    """DeepSeek's multi-token prediction: that many MTP modules trained after the last block, each a
    transformer block like the model's last with its own loss (Megatron-Core's `mtp_num_layers`;
    `phazec.frontend.mtp`); 0: none, as transformers builds the model. DeepSeek-V3's class only."""
    causal: bool | None = None
    """Whether the attention is causal (a fused kernel masks by position and skips masked tiles);
    None: from `arch` (`phazec.passes.attention.is_causal`), false for an ONNX file."""
