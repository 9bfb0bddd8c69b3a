"""Mixture-of-Experts presets lowered through phazec's static MoE formulation: exact total and active
parameter counts against Hugging Face's model of the same config, and DeepSeek-V3's MoE block's
forward FLOPs per token derived by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.export import build_meta_model
from phazec.frontend.schema import ModelConfig, MoeConfig
from phazec.ir.core import LayerKind, Model, OpKind
from phazec.ir.ops import flops
from phazec.passes.pipeline import GraphSettings, training_graphs
from phazec.passes.tensor_parallel import weight_of
from tests.conftest import MOE_PRESETS, model_config

MODELS: dict[str, Model] = {}


@pytest.fixture(scope="module")
def moe_lowered(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Lower a MoE preset at its shallow depth (`conftest.SHALLOW`), once per module."""
    cache = tmp_path_factory.mktemp("moe-cache")

    def lower(name: str) -> Model:
        if name not in MODELS:
            MODELS[name] = load_model(model_config(name), cache)
        return MODELS[name]

    return lower


def hugging_face_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active) parameters of Hugging Face's model on the meta device: active leaves out
    (experts - top_k) / experts of the parameters of each `experts` module (its routed experts)."""
    model = build_meta_model(cfg)
    total = model.num_parameters()
    hf = cfg.hf_config
    experts = int(hf.get("num_experts", hf.get("num_local_experts", hf.get("n_routed_experts", 0))))
    top_k = int(hf["num_experts_per_tok"])
    routed = sum(
        p.numel()
        for name, module in model.named_modules()
        if name.endswith(".experts")
        for p in module.parameters()
    )
    return total, total - routed // experts * (experts - top_k)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_total_and_active_parameters_equal_hugging_face(name: str, moe_lowered: Any) -> None:
    model = moe_lowered(name)
    assert model.routing is not None
    assert (model.parameter_count, model.active_parameter_count) == hugging_face_counts(model_config(name))


def qwen3_moe_counts(hf: dict[str, Any], experts_key: str, qk_norm: bool) -> tuple[int, int]:
    """(total, active) of a Qwen3-MoE or Mixtral config by hand: untied embedding and head (2 V h), the
    final norm (h); per block Q, K, V, O (h d (2 H + 2 KV)), per-head Q and K norms (2 d, Qwen3), two
    norms (2 h), the router (E h) and E SwiGLU experts (3 E h f); a token uses k of the E experts."""
    h, v, layers = hf["hidden_size"], hf["vocab_size"], hf["num_hidden_layers"]
    heads, kv = hf["num_attention_heads"], hf["num_key_value_heads"]
    d = hf.get("head_dim", h // heads)
    e, k = hf[experts_key], hf["num_experts_per_tok"]
    f = hf.get("moe_intermediate_size", hf["intermediate_size"])
    block = h * d * (2 * heads + 2 * kv) + (2 * d if qk_norm else 0) + 2 * h + e * h + 3 * e * h * f
    total = 2 * v * h + h + layers * block
    return total, total - layers * 3 * h * f * (e - k)


def deepseek_counts(hf: dict[str, Any]) -> tuple[int, int]:
    """(total, active) of DeepSeek-V3 or V2 by hand (V2: 2 shared experts, the first block dense). Per
    block: MLA (q_a h x 1536 and its norm, q_b 1536 x H (nope + rope), kv_a h x (512 + rope) and its
    norm, kv_b 512 x H (nope + v), o H v x h), two norms;
    then a dense SwiGLU MLP (3 h F, the first blocks) or a MoE MLP (router E h, V3's score-correction
    bias a buffer; E routed and the shared SwiGLU experts of width f); embedding, head and final norm."""
    h, v, layers, dense = (
        hf["hidden_size"],
        hf["vocab_size"],
        hf["num_hidden_layers"],
        hf["first_k_dense_replace"],
    )
    heads, q_lora, kv_lora = hf["num_attention_heads"], hf["q_lora_rank"], hf["kv_lora_rank"]
    nope, rope, v_dim = hf["qk_nope_head_dim"], hf["qk_rope_head_dim"], hf["v_head_dim"]
    e, k, f, shared = (
        hf["n_routed_experts"],
        hf["num_experts_per_tok"],
        hf["moe_intermediate_size"],
        hf["n_shared_experts"],
    )
    attention = (
        h * q_lora + q_lora + q_lora * heads * (nope + rope) + h * (kv_lora + rope) + kv_lora
        + kv_lora * heads * (nope + v_dim) + heads * v_dim * h + 2 * h
    )  # fmt: skip
    dense_block = attention + 3 * h * hf["intermediate_size"]
    moe_block = attention + e * h + 3 * (e + shared) * h * f
    total = 2 * v * h + h + dense * dense_block + (layers - dense) * moe_block
    return total, total - (layers - dense) * 3 * h * f * (e - k)


def llama4_counts(hf: dict[str, Any]) -> tuple[int, int]:
    """(total, active) of Llama 4 Scout by hand: untied embedding and head (2 V h), the final norm (h);
    per block Q, K, V, O (h d (2 H + 2 KV); the query and key L2 norm has no weight), two norms (2 h),
    the router (E h), E routed SwiGLU experts (3 E h f) and a shared one (3 h f); a token uses k of
    the E routed experts."""
    h, v, layers = hf["hidden_size"], hf["vocab_size"], hf["num_hidden_layers"]
    heads, kv, d = hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"]
    e, k, f = hf["num_local_experts"], hf["num_experts_per_tok"], hf["intermediate_size"]
    block = h * d * (2 * heads + 2 * kv) + 2 * h + e * h + 3 * e * h * f + 3 * h * f
    total = 2 * v * h + h + layers * block
    return total, total - layers * 3 * h * f * (e - k)


def gpt_oss_counts(hf: dict[str, Any]) -> tuple[int, int]:
    """(total, active) of GPT-OSS by hand: Q, K, V and O with biases, an attention sink per head, two
    norms; the router with its bias (E h + E) and E SwiGLU experts with biases (gate and up 2 f (h + 1),
    down h (f + 1)); embedding, head and final norm."""
    h, v, layers = hf["hidden_size"], hf["vocab_size"], hf["num_hidden_layers"]
    heads, kv, d = hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"]
    e, k, f = hf["num_local_experts"], hf["num_experts_per_tok"], hf["intermediate_size"]
    attention = (h + 1) * heads * d + 2 * (h + 1) * kv * d + heads * d * h + h + heads
    expert = 2 * f * (h + 1) + h * (f + 1)
    total = 2 * v * h + h + layers * (attention + 2 * h + e * h + e + e * expert)
    return total, total - layers * (e - k) * expert


FULL_DEPTH: dict[str, tuple[int, int]] = {
    "qwen3_30b_a3b": (30_532_122_624, 3_353_032_704),
    "qwen3_235b_a22b": (235_093_634_560, 22_190_763_520),
    "mixtral_8x7b": (46_702_792_704, 12_879_925_248),
    "gpt_oss_120b": (116_829_156_672, 5_711_982_912),
    "deepseek_v3": (671_026_404_352, 37_552_282_624),
    "deepseek_v2": (235_741_434_880, 21_375_800_320),
    "llama4_scout": (107_769_861_120, 17_172_894_720),
    "gpt_oss_20b": (20_914_757_184, 4_187_440_704),
    "kimi_k2": (1_026_408_209_408, 32_861_477_888),
}
"""(total, active) parameters of each preset at full depth: 30.5B/3.3B, 235B/22B, 46.7B/12.9B,
116.8B/5.1B (5.7B with the embedding, which OpenAI's figure leaves out), 671B/37B, 236B/21B as
published, 107.8B/17.2B (Meta's 109B/17B is the multimodal model's; this is its text model),
20.9B/4.2B (3.6B without the embedding), and 1.03T/32.9B (Moonshot AI's 1T/32B)."""


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_full_depth_counts_by_hand_equal_hugging_face(name: str) -> None:
    full = typed_full_depth(name)
    hf = full.hf_config
    if name.startswith("deepseek") or name == "kimi_k2":
        by_hand = deepseek_counts(hf)
    elif name.startswith("gpt_oss"):
        by_hand = gpt_oss_counts(hf)
    elif name == "llama4_scout":
        by_hand = llama4_counts(hf)
    else:
        mixtral = name == "mixtral_8x7b"
        by_hand = qwen3_moe_counts(hf, "num_local_experts" if mixtral else "num_experts", not mixtral)
    assert by_hand == FULL_DEPTH[name] == hugging_face_counts(full)


def typed_full_depth(name: str) -> ModelConfig:
    """The preset at its full depth (no `SHALLOW` override)."""
    from phazec.config.settings import typed
    from tests.conftest import compose_config

    cfg = typed(ModelConfig, compose_config(f"model={name}").model, "model")
    assert isinstance(cfg, ModelConfig)
    return cfg


def test_deepseek_v3_moe_block_forward_flops_per_token(moe_lowered: Any) -> None:
    """One DeepSeek-V3 MoE block's forward GEMM FLOPs per token (s = 4096, a multiply-add 2 FLOPs):
    MLA projections 2 (h q_lora + q_lora H (nope + rope) + h (kv_lora + rope) + kv_lora H (nope + v)
    + H v h); attention scores and context over all s keys 2 H s (nope + rope) + 2 H s v (unfused:
    the causal mask does not skip work); the router 2 h E; 8 routed and 1 shared SwiGLU experts
    (8 + 1) x 2 x 3 h f."""
    model = moe_lowered("deepseek_v3")
    h, s, heads, e, f = 7168, 4096, 128, 256, 2048
    projections = 2 * (h * 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 * heads * 256 + heads * 128 * h)
    scores = 2 * heads * s * 192 + 2 * heads * s * 128
    experts = (8 + 1) * 2 * 3 * h * f
    per_token = projections + scores + 2 * h * e + experts
    assert per_token == 2 * (
        11_010_048 + 37_748_736 + 4_128_768 + 16_777_216 + 117_440_512 + 100_663_296 + 67_108_864 + 1_835_008
        + 396_361_728
    )  # fmt: skip
    moe_block = model.layers[4]  # embedding, 3 dense blocks, then the first MoE block
    assert moe_block.kind is LayerKind.BLOCK
    graph = model.graph_of(moe_block.index)
    gemm = sum(flops(op, graph) for op in graph.ops if op.kind is OpKind.GEMM)
    assert gemm == per_token * s
    assert model.routing is not None and model.routing.tokens_per_expert == s * 8 // e


def test_routing_weights_scale_the_experts_activation(moe_lowered: Any) -> None:
    """Each token copy's routing weight scales its SwiGLU product before the down projection, as
    Megatron-Core's fused weighted SwiGLU does: the combine is a plain sum, and the backward pass keeps
    no [s, top_k, h] expert output for the weights' gradient (Qwen3-30B-A3B, s = 4096: E = 128 experts
    of C = 4096 x 8 / 128 = 256 copies, f = 768, h = 2048)."""
    model = moe_lowered("qwen3_30b_a3b")
    block = model.layers[-2]  # the last block, before the head
    graph = model.graph_of(block.index)
    (weighted,) = [
        op
        for op in graph.ops
        if op.op_type == "Mul" and (128, 256, 1) in [graph.tensors[i].shape for i in op.inputs]
    ]
    assert graph.tensors[weighted.outputs[0]].shape == (128, 256, 768)
    (down,) = [op for op in graph.ops if weighted.outputs[0] in op.inputs]
    assert down.op_type == "MatMul" and str(weight_of(graph, down.inputs[1])).endswith("experts.down_proj")
    trained = training_graphs(model, [1], GraphSettings(attention="flash", causal=True))[1]
    cls = trained.classes[block.cls]
    assert cls.backward is not None
    kept = [cls.backward.tensors[n].shape for n in cls.backward.inputs if n in cls.graph.tensors]
    assert (4096, 8, 2048) not in kept
    assert (128, 256, 1) in kept  # the weights, for the activation's gradient


def test_llama4_scout_block_forward_flops_per_token(moe_lowered: Any) -> None:
    """One Llama 4 Scout block's forward GEMM FLOPs per token (s = 8192): Q, K, V, O 2 h d (2 H + 2 KV);
    scores and context over all s keys 2 x 2 H s d (unfused; chunks of 8192 are the whole sequence);
    the router 2 h E; one routed and the shared SwiGLU expert 2 x 2 x 3 h f. Each of the E = 16
    experts takes C = 8192 / 16 = 512 rows, scaled by their router scores before it."""
    model = moe_lowered("llama4_scout")
    h, d, heads, kv, s, e, f = 5120, 128, 40, 8, 8192, 16, 8192
    per_token = 2 * h * d * (2 * heads + 2 * kv) + 2 * 2 * heads * s * d + 2 * h * e + 2 * 2 * 3 * h * f
    assert per_token == 125_829_120 + 167_772_160 + 163_840 + 503_316_480
    block = model.layers[1]
    graph = model.graph_of(block.index)
    assert sum(flops(op, graph) for op in graph.ops if op.kind is OpKind.GEMM) == per_token * s
    assert model.routing is not None and model.routing.tokens_per_expert == 512
    (scaled,) = [
        op
        for op in graph.ops
        if op.op_type == "Mul" and (e, 512, 1) in [graph.tensors[i].shape for i in op.inputs]
    ]
    assert graph.tensors[scaled.outputs[0]].shape == (e, 512, h)  # the tokens, before the experts


def test_a_share_short_of_a_whole_token_is_rounded_up_for_every_expert(moe_lowered: Any) -> None:
    """Kimi K2 spreads 4096 x 8 token copies over 384 experts: 85 1/3 a sample, so an even spread gives
    the busiest expert 86, and every expert's grouped GEMMs run 86 rows (the MoE block's gate and up
    projection reads [384, 86, 7168], its down projection [384, 86, 2048])."""
    model = moe_lowered("kimi_k2")
    assert model.routing is not None and model.routing.tokens_per_expert == 86
    graph = model.graph_of(2)  # the embedding, the dense block, the MoE block
    shapes = [graph.tensors[op.inputs[0]].shape for op in graph.ops if op.op_type == "MatMul"]
    assert [shape for shape in shapes if shape[0] == 384] == [(384, 86, 7168), (384, 86, 2048)]


def test_capacity_factor_and_imbalance_scale_the_tokens_per_expert(tmp_path: Path) -> None:
    """Capacity factor 1.25 (dropping) and imbalance 2 give 1.25 and 2 x the balanced 4096 x 2 / 8 tokens
    per expert; the expert GEMMs' FLOPs scale with them."""
    base = model_config("mixtral_8x7b")
    shares = {}
    for moe in (MoeConfig(), MoeConfig(capacity_factor=1.25), MoeConfig(imbalance=2.0)):
        model = load_model(ModelConfig(**{**base.__dict__, "moe": moe}), tmp_path)
        assert model.routing is not None
        shares[(moe.imbalance, moe.capacity_factor)] = (
            model.routing.tokens_per_expert,
            model.routing.dropping,
        )
    assert shares == {(1.0, None): (1024, False), (1.0, 1.25): (1280, True), (2.0, None): (2048, False)}


@pytest.mark.parametrize(
    ("moe", "hf", "says"),
    [
        (MoeConfig(capacity_factor=0.0), {}, "model.moe.capacity_factor=0.0"),
        (MoeConfig(imbalance=0.5), {}, "model.moe.imbalance=0.5"),
        (MoeConfig(), {"num_experts_per_tok": 9}, "num_experts_per_tok=9"),
    ],
)
def test_bad_routing_is_one_paragraph(moe: MoeConfig, hf: dict[str, int], says: str, tmp_path: Path) -> None:
    base = model_config("mixtral_8x7b")
    cfg = ModelConfig(**{**base.__dict__, "moe": moe, "hf_config": {**base.hf_config, **hf}})
    with pytest.raises(PhazecError, match=r"^[^\n]*$") as err:
        load_model(cfg, tmp_path)
    assert says in str(err.value)


def test_an_moe_without_a_static_formulation_is_refused(tmp_path: Path) -> None:
    """JetMoE's experts are another module (parallel experts behind their own linear layers): refused
    before export rather than priced wrongly."""
    hf = {"hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 1, "vocab_size": 128,
          "kv_channels": 16}  # fmt: skip
    cfg = ModelConfig(name="tiny_jetmoe", arch="JetMoeForCausalLM", hf_config=hf, seq_len=64)
    with pytest.raises(
        PhazecError, match=r"^model 'tiny_jetmoe' \(JetMoeForCausalLM\) has experts .* not supported yet\.$"
    ):
        load_model(cfg, tmp_path)
    assert not list((tmp_path / "onnx").glob("*.onnx"))
