"""The fused cross entropy (`phazec.passes.loss`): on a tiny Llama the loss reads the output layer's bf16
logits and the head keeps 2 bytes a logit for the backward pass instead of 4."""

from __future__ import annotations

from pathlib import Path

from phazec.config.settings import typed
from phazec.frontend import load_model
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import LayerKind
from phazec.passes.loss import LOSS
from phazec.passes.pipeline import GraphSettings, training_pipeline
from phazec.passes.training import rows_at
from tests.conftest import compose_config

S, V = 16, 256


def test_the_fused_loss_reads_and_keeps_bf16_logits(cache_dir: Path) -> None:
    # s = 16 tokens, a vocabulary of 256: the exported loss casts the bf16 logits to fp32 and keeps
    # the fp32 ones (4 s v bytes a sample); fused, it keeps the bf16 ones (2 s v): 2 x 16 x 256 = 8,192
    # bytes a sample less, and no fp32 logits are written.
    dims = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 128, "vocab_size": V, "max_position_embeddings": S}  # fmt: skip
    overrides = [f"model.hf_config.{key}={value}" for key, value in dims.items()]
    cfg = compose_config("model=llama3_8b", f"model.seq_len={S}", *overrides)
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    model = load_model(model_cfg, cache_dir)
    kept = {}
    for fused in (False, True):
        trained, _ = training_pipeline(1, GraphSettings(fused_cross_entropy=fused)).run(model)
        (head,) = [c for c in trained.classes if trained.layers[c.members[0]].kind is LayerKind.HEAD]
        (loss,) = [op for op in head.graph.ops if op.op_type == LOSS]
        logits = head.graph.tensors[loss.inputs[0]]
        assert logits.numel() == S * V and logits.dtype == ("bfloat16" if fused else "float32")
        graph = head.graph
        written = [graph.tensors[name] for op in graph.ops for name in op.outputs if name]
        fp32_logits = [t for t in written if t.numel() == S * V and t.dtype == "float32"]
        assert bool(fp32_logits) is not fused
        (row,) = [r for r in rows_at(trained, 1) if r.kind == LayerKind.HEAD]
        kept[fused] = row.memory.stash_per_sample_bytes
    assert kept[False] - kept[True] == 2 * S * V
