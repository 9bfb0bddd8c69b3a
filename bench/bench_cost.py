"""Benchmark: cost one GPT-3 175B block (t = 8, forward and backward) on all 29,360 `tpu_area` designs.

The block is the real lowered one: HF config -> ONNX -> IR -> tensor parallel (t = 8) -> autodiff ->
fusion, priced by the cost pass (`phazec.predict.layer_costs.class_costs`), which builds the operator tables
and costs them on every design. Target: at most 3 s on the 2-core machine for the default `tiled`
model. Prints the median of 5 runs and its ratio to the target for both latency models.
"""

import statistics
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from phazec.config.schema import register
from phazec.config.settings import typed
from phazec.cost.model import MODELS
from phazec.frontend import default_cache_dir, load_model
from phazec.frontend.schema import ModelConfig
from phazec.hw.schema import HwConfig, SystemConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from phazec.ir.core import LayerKind
from phazec.passes.pipeline import training_pipeline
from phazec.predict.layer_costs import Split, class_costs

TARGET_S = 3.0
RUNS = 5
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def main() -> None:
    """Print the median time to cost the block on every design, per latency model."""
    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["hw=tpu_area", "system=phaze_1024", "model=gpt3_175b"])
    model_cfg = typed(ModelConfig, cfg.model, "model")
    assert isinstance(model_cfg, ModelConfig)
    trained, _ = training_pipeline(8).run(load_model(model_cfg, default_cache_dir()))
    block = next(trained.classes[layer.cls] for layer in trained.layers if layer.kind is LayerKind.BLOCK)
    assert block.backward is not None
    start = time.perf_counter()
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    print(f"enumerate {len(designs)} designs: {time.perf_counter() - start:.3f} s")
    system = system_from_config(typed(SystemConfig, cfg.system, "system"))
    ops = len(block.graph.ops) + len(block.backward.ops)
    for name, model in MODELS.items():
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            class_costs(block, designs, system, model, Split(1))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(
            f"cost={name}: GPT-3 block t=8, {ops} fwd+bwd ops x {len(designs)} designs, "
            f"runs {[round(x, 3) for x in times]} s, median {median:.3f} s = "
            f"{median / TARGET_S:.2f} x the {TARGET_S:.0f} s target"
        )


if __name__ == "__main__":
    main()
