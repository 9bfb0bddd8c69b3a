"""Config schema of the `search` group: the strategy, its processes and its saved state (checked by
`phazec.search.driver.check_search`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class RayConfig:
    """The Ray cluster of `search.executor=ray`."""

    address: str = ""
    """`auto` (the cluster `ray start` began on this machine), `host:port` of a head's GCS, `ray://host:10001`
    (Ray client), or empty for a local Ray on 127.0.0.1 started for the run and stopped after it."""
    retries: int = 3
    """Times Ray runs a batch again after it raised, its worker process died or its node died (Ray's
    `max_retries`, exceptions included); a batch failing once more stops the search."""


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """Architecture search strategy, its processes and its saved state."""

    strategy: str = "phaze"
    """`phaze` (area bins, largest first, early stop), `exhaustive`, `bounded` (exhaustive's answer,
    skipping designs a proven bound rules out), `bo` (Bayesian optimisation of one block's forward
    latency, then the chosen design placed) or `wham` (WHAM's critical-path local search per stage,
    then the placement DP over the union of each stage's top-k designs)."""
    objective: str = "throughput"
    """`throughput` (samples/s) or `throughput_per_watt` (samples/s per watt of the design's peak power,
    `phazec.hw.energy.peak_power_w`): what every strategy maximises."""
    top_k: int = 4
    """Designs the wham strategy keeps per pipeline stage in its local search."""
    bin_mm2: float = 0.01
    """Width of an area bin (phaze strategy)."""
    patience: int = 5
    """Consecutive non-improving bins after which the phaze strategy stops."""
    batch_designs: int = 8
    """Designs per batch of the exhaustive and bounded strategies (phaze's batches are its bins): the
    unit handed to a worker process and saved for resuming."""
    workers: int | None = None
    """Processes evaluating designs; None means one per core, 1 evaluates in this process. With
    `executor=ray`: batches running at once; None means one per CPU of the cluster."""
    executor: str = "local"
    """`local` (`workers` processes on this machine) or `ray` (Ray tasks on the cluster of `ray`)."""
    ray: RayConfig = field(default_factory=RayConfig)
    resume: bool = True
    """Continue from the state a killed run with the same config saved; false starts afresh."""
    max_designs: int = 1_000_000
    """Most candidate designs a hardware space may have (the product of its knobs' value counts, before
    the budgets); a larger space is refused before any work, naming the knobs that multiply it. PHAZE's
    space (`hw=tpu_area`) has 75,712."""
    trials: int = 100
    """Trials of the bo strategy's sampler."""
    seed: int = 0
    """Seed of the bo strategy's sampler."""
