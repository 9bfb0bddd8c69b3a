"""The search objective (`search.objective`): what every strategy maximises.

- `throughput`: samples per second of the design's best plan.
- `throughput_per_watt`: samples per second per watt of the design's peak power, the power of every
  MAC and vector lane busy each cycle and HBM at full bandwidth (`phazec.hw.energy.peak_power_w`, the
  design's TDP in this model; leakage and SRAM traffic are not counted).

Both are a time per batch to minimise, times a per-design weight: 1, or the peak power in watts (a
batch has a fixed number of samples, so the least time x power is the most samples/s per watt). A
design's plans all share its weight, so each design's best plan is the same under both objectives;
only the choice between designs changes. A lower bound on a design's time per batch, times its
weight, is a lower bound on its cost, so `bounded` stays exact under either objective.
"""

import numpy as np
from numpy.typing import NDArray

from phazec.hw.designs import Designs

OBJECTIVES = ("throughput", "throughput_per_watt")
"""Values of `search.objective`."""


def design_weights(designs: Designs, objective: str) -> NDArray[np.float64] | None:
    """Per design, the factor turning a time per batch into the objective's cost; None for throughput
    (the time itself, bit for bit)."""
    return None if objective == "throughput" else designs.peak_power_w.astype(np.float64)
