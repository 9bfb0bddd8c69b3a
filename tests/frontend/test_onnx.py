"""Lowering hand-built ONNX files: layers from module scopes, classes, edges, and every bad input."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from phazec.errors import PhazecError
from phazec.frontend import load_model
from phazec.frontend.export import QUIET_LOGGERS, exporter_logs_to_files
from phazec.frontend.lower import lower_onnx
from phazec.frontend.schema import ModelConfig
from phazec.ir.core import LayerKind, OpKind
from phazec.ir.ops import flops
from phazec.ir.printer import format_model
from phazec.ir.verify import verify

GOLDEN = Path(__file__).parent / "golden"
H = 8  # hidden width of the toy model
B = 4  # batch of the toy file


def toy_mlp(path: Path, blocks: int = 2, op: str = "Relu", dim: int | str = B) -> Path:
    """x[B,H] -> `blocks` x (MatMul by w_i[H,H], `op`) -> ReduceMean, with torchscript-style names."""
    nodes = []
    inits = []
    prev = "x"
    for i in range(blocks):
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [H, H], [0.0] * H * H))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"/layers.{i}/fc/MatMul"))
        nodes.append(helper.make_node(op, [f"mm{i}"], [f"act{i}"], name=f"/layers.{i}/act/{op}"))
        prev = f"act{i}"
    nodes.append(helper.make_node("ReduceMean", [prev], ["loss"], name="/head/ReduceMean", keepdims=0))
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, H])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [dim])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_toy_layers_classes_edges_and_flops(tmp_path: Path) -> None:
    model = lower_onnx(toy_mlp(tmp_path / "toy.onnx", blocks=3), "toy")
    verify(model)
    assert [layer.name for layer in model.layers] == ["block.0", "block.1", "block.2", "head"]
    assert [layer.kind for layer in model.layers][-1] is LayerKind.HEAD
    assert [c.count for c in model.classes] == [3, 1]
    assert model.parameter_count == 3 * H * H
    # Each block sends its activation act_i[B, H] fp32 to the next: 4 * 8 * 4 = 128 bytes.
    assert [(e.src, e.dst, e.fixed_bytes) for e in model.edges] == [(0, 1, 128), (1, 2, 128), (2, 3, 128)]
    block = model.classes[0].graph
    gemm = next(op for op in block.ops if op.kind is OpKind.GEMM)
    assert flops(gemm, block) == 2 * B * H * H


def test_toy_printer_golden(tmp_path: Path) -> None:
    text = format_model(lower_onnx(toy_mlp(tmp_path / "toy.onnx"), "toy"))
    assert text == (GOLDEN / "toy.txt").read_text()


def test_unscoped_graph_is_one_block(tmp_path: Path) -> None:
    path = toy_mlp(tmp_path / "toy.onnx", blocks=1)
    proto = onnx.load(str(path))
    for node in proto.graph.node:
        node.name = node.op_type
    onnx.save(proto, str(path))
    model = lower_onnx(path, "flat")
    assert [layer.name for layer in model.layers] == ["block.0"]
    assert model.edges == []


def toy_attention(path: Path, lengths: tuple[int, ...]) -> Path:
    """One attention core per length s: q[1,2,s,4] x kT[1,2,4,s] -> Softmax -> x v[1,2,s,4]."""
    nodes, inputs = [], []
    for i, s in enumerate(lengths):
        for name, shape in ((f"q{i}", [1, 2, s, 4]), (f"kT{i}", [1, 2, 4, s]), (f"v{i}", [1, 2, s, 4])):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        nodes += [
            helper.make_node("MatMul", [f"q{i}", f"kT{i}"], [f"scores{i}"], name=f"/layers.{i}/qk/MatMul"),
            helper.make_node("Softmax", [f"scores{i}"], [f"probs{i}"], name=f"/layers.{i}/Softmax", axis=-1),
            helper.make_node("MatMul", [f"probs{i}", f"v{i}"], [f"out{i}"], name=f"/layers.{i}/av/MatMul"),
        ]
    outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None) for i in range(len(lengths))]
    graph = helper.make_graph(nodes, "attention", inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


@pytest.mark.parametrize(("lengths", "given", "seq_len"), [((16,), 0, 16), ((16, 16), 0, 16), ((16, 8), 0, 0),
                                                           ((16, 8), 8, 8)])  # fmt: skip
def test_the_sequence_length_is_read_from_the_attention_scores(
    tmp_path: Path, lengths: tuple[int, ...], given: int, seq_len: int
) -> None:
    """A user's ONNX file: s of the products [.., s, d] x [.., d, s] when they agree, else what
    model.seq_len gives (0 when neither says: no scores to find)."""
    path = toy_attention(tmp_path / "attention.onnx", lengths)
    assert load_model(
        ModelConfig(name="att", source="onnx", path=str(path), seq_len=given), tmp_path
    ).seq_len == (seq_len)
    assert lower_onnx(toy_mlp(tmp_path / "toy.onnx"), "toy").seq_len == 0  # [B, H] x [H, H]: no scores
    with pytest.raises(PhazecError, match=r"model.seq_len=-1 is not valid: give the ONNX model's sequence"):
        load_model(ModelConfig(name="att", source="onnx", path=str(path), seq_len=-1), tmp_path)


def test_a_given_sequence_length_its_scores_disagree_with_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = toy_attention(tmp_path / "attention.onnx", (16,))
    with caplog.at_level(logging.WARNING, logger="phazec.frontend"):
        model = load_model(ModelConfig(name="att", source="onnx", path=str(path), seq_len=8), tmp_path)
    assert model.seq_len == 8
    assert "model.seq_len=8, but the ONNX model's attention scores are 16 long" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="phazec.frontend"):
        load_model(ModelConfig(name="att", source="onnx", path=str(path), seq_len=16), tmp_path)
    assert not caplog.text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PhazecError, match=r"does not exist; give model.path"):
        load_model(ModelConfig(name="onnx", source="onnx", path=str(tmp_path / "nope.onnx")), tmp_path)


def test_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x08\x07this is not an onnx protobuf\xff\xff")
    with pytest.raises(PhazecError, match=r"could not be read as an ONNX model"):
        lower_onnx(path, "corrupt")


def test_dynamic_shapes(tmp_path: Path) -> None:
    with pytest.raises(PhazecError, match=r"dynamic shapes \(e.g. x.*every dimension static"):
        lower_onnx(toy_mlp(tmp_path / "dyn.onnx", dim="batch"), "dyn")


def test_unknown_operators_are_listed(tmp_path: Path) -> None:
    with pytest.raises(
        PhazecError, match=r"cannot lower: HardSwish \(x2\)\. The lowering knows: Abs, .*MatMul, .*Softmax"
    ):
        lower_onnx(toy_mlp(tmp_path / "unknown.onnx", op="HardSwish"), "unknown")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("seq_len", 0, r"model.seq_len=0 is not valid: give a positive number of tokens"),
        ("seq_len", -5, r"model.seq_len=-5 is not valid: give a positive"),
        ("source", "tf", r"model.source='tf' is not a model source; valid: \['hf', 'onnx'\]"),
        ("arch", "BertModel", r"model.arch='BertModel' is not supported: .* BertModel has no loss head"),
        ("arch", "NoSuchModel", r"model.arch='NoSuchModel' is not supported: .* has no class NoSuchModel"),
        (
            "hf_config",
            {"n_embdd": 8},
            r"model.hf_config has keys that GPT2Config \(GPT2LMHeadModel\) does not define: 'n_embdd' "
            r"\(did you mean 'n_embd'\?\)\. Its keys are ",
        ),
        ("seq_len", 4096, r"model.seq_len=4096 exceeds the GPT2LMHeadModel config's 1024 positions"),
    ],
)
def test_bad_model_config(tmp_path: Path, field: str, value: object, message: str) -> None:
    cfg = ModelConfig(name="bad", arch="GPT2LMHeadModel", seq_len=1024, hf_config={"n_layer": 1})
    with pytest.raises(PhazecError, match=message):
        load_model(dataclasses.replace(cfg, **{field: value}), tmp_path)  # type: ignore[arg-type]


def test_an_architecture_the_exporter_fails_on_is_named_unsupported(tmp_path: Path) -> None:
    """A one-block PhiMoE (a Mixture-of-Experts phazec has no static formulation of): torch's exporter
    cannot convert its router's `aten::add` of a float and a tensor. The message names that operator and
    the whole chain of causes in plain text (the exporter's own carries colour codes), and does not
    blame the model's dimensions."""
    cfg = ModelConfig(
        name="phimoe_tiny", arch="PhimoeForCausalLM", seq_len=32,
        hf_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
                   "num_local_experts": 4, "num_experts_per_tok": 2},
    )  # fmt: skip
    with pytest.raises(PhazecError) as raised:
        load_model(cfg, tmp_path)
    message = str(raised.value)
    assert message.startswith("model 'phimoe_tiny' (PhimoeForCausalLM) is not supported: torch ")
    assert "ONNX exporter fails on the operator aten::add (ConversionError: RuntimeError: " in message
    assert "Cannot find a compatible OpOverload for aten.add with the provided arguments" in message
    assert "\x1b" not in message and "\n" not in message
    assert "hidden_size" not in message
    assert str(raised.value.__cause__).count("\x1b[") > 0  # what the exporter said, in colour


def run_ir_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`phazec-ir ARGS` in a fresh interpreter."""
    command = [sys.executable, "-c", "from phazec.cli import ir_main; ir_main()", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.seq_len=0", "model.seq_len=0 is not valid: give a positive number of tokens"),
        ("train.microbatch=[2,0]", "train.microbatch=[2, 0] is not valid: 0 is not a positive integer"),
        ("model=onnx", "model.path"),
    ],
)
def test_cli_errors_are_one_paragraph_without_traceback(tmp_path: Path, override: str, message: str) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from phazec.cli import ir_main; ir_main()",
            override,
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert message in run.stderr
    assert "Traceback" not in run.stderr


def test_cli_unknown_model_lists_presets(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from phazec.cli import ir_main; ir_main()",
            "model=llama3",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert "Could not find 'model/llama3'" in run.stderr
    assert "llama2_7b" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_exporters_log_records_reach_the_log_file_not_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """torch's exporter and transformers log while a model is exported ("torchvision is not installed",
    "loss_type=None ..."): a run's log file keeps them, the terminal (or an API caller's stderr) never
    sees them, and the loggers are as they were afterwards."""
    before = [(logging.getLogger(n).handlers, logging.getLogger(n).propagate) for n in QUIET_LOGGERS]
    log_file = logging.FileHandler(tmp_path / "run.log")
    logging.getLogger().addHandler(log_file)
    try:
        with exporter_logs_to_files():
            for name in QUIET_LOGGERS:
                logging.getLogger(f"{name}.inner").warning("from %s", name)
    finally:
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    root = logging.getLogger()
    kept = root.handlers
    root.handlers = [h for h in kept if not isinstance(h, logging.FileHandler)]  # pytest's, to /dev/null
    try:
        with exporter_logs_to_files():  # no log file, as under the Python API
            for name in QUIET_LOGGERS:
                logging.getLogger(f"{name}.inner").warning("nowhere")
    finally:
        root.handlers = kept
    assert capfd.readouterr().err == ""
    assert (tmp_path / "run.log").read_text() == "from torch.onnx\nfrom transformers\n"
    assert [(logging.getLogger(n).handlers, logging.getLogger(n).propagate) for n in QUIET_LOGGERS] == before
