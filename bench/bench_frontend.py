"""Export and lower full-depth Llama2-7B: cold (empty cache) and from the cache.

Targets (issue 2): cold at most 30 s and 2 GB peak memory; from the cache at most 3 s.
Each measurement runs in a fresh process so imports and peak memory are its own.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, resource, sys, time
from pathlib import Path
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from phazec.cli import conf_dir
from phazec.frontend import load_model
from phazec.config.settings import typed
from phazec.frontend.schema import ModelConfig
start = time.perf_counter()
with initialize_config_dir(config_dir=conf_dir(), version_base=None):
    cfg = typed(ModelConfig, compose("config", overrides=["model=llama2_7b"]).model, "model")
model = load_model(cfg, Path(sys.argv[1]))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak_bytes": peak, "layers": len(model.layers)}))
"""


def measure(cache_dir: str) -> dict[str, float]:
    """One run of the child in a fresh interpreter: wall seconds (after imports) and peak RSS bytes."""
    out = subprocess.run([sys.executable, "-c", CHILD, cache_dir], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Three cold runs (each with a new cache) and three cached runs; prints medians and the targets."""
    cold, cached = [], []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(measure(cache))
            cached.append(measure(cache))
    cold_s = statistics.median(r["seconds"] for r in cold)
    cold_gb = max(r["peak_bytes"] for r in cold) / 1e9
    cached_s = statistics.median(r["seconds"] for r in cached)
    print(f"llama2_7b full depth ({int(cold[0]['layers'])} layers), median of 3")
    print(f"cold export+lower: {cold_s:.1f} s (target 30 s, {cold_s / 30:.2f}x)")
    print(f"cold peak memory:  {cold_gb:.2f} GB (target 2 GB, {cold_gb / 2:.2f}x)")
    print(f"from cache:        {cached_s:.2f} s (target 3 s, {cached_s / 3:.2f}x)")


if __name__ == "__main__":
    main()
