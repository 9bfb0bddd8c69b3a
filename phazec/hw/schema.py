"""Config schemas of the `hw`, `system` and `cost` groups.

Hydra checks key names and types against these dataclasses at composition (through their mutable
twins, `phazec.config.schema`); a field without a default must be set. Value ranges are checked by
`phazec.hw.space.hw_space_from_config`, `phazec.hw.system.system_from_config` and
`phazec.cost.model.latency_model_from_config`, which turn these settings into the objects the rest of
phazec uses.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    """The device model of a chip (`phazec.hw.device`): how well kernels use its cores and memory."""

    shared_cores: bool = False
    """Tensor and vector work run on the same cores (GPU SMs: true; the template's MXUs and VPUs: false)."""
    gemm_tiles: Any = None
    """GEMM output tiles [[rows, cols], ...] a core may compute at a time (GPU thread blocks; the fastest
    is taken), or null for the template's weight-stationary systolic tiling."""
    gemm_utilisation: float = 1.0
    """Share of a core's peak reached in a tile's main loop, in (0, 1]."""
    gemm_tile_overhead_cycles: float = 0.0
    """Cycles each output tile spends outside its main loop (prologue, epilogue), >= 0."""
    attention_utilisation: float = 1.0
    """Share of the tensor cores' peak a fused attention kernel (flash) reaches, in (0, 1]."""
    memory_utilisation: float = 1.0
    """Share of HBM bandwidth an operator's memory traffic reaches, in (0, 1]."""
    kernel_latency_s: float = 0.0
    """Fixed latency of every on-chip operator (launch, ramp), in seconds."""
    attention: str = "unfused"
    """The attention kernel: `unfused` (op by op), `fused_softmax` (Megatron's scale-mask-softmax) or
    `flash` (FlashAttention-2; `phazec.passes.attention`)."""
    collectives_hold_cores: bool = False
    """A collective inside a layer holds every core while it runs (a GPU's NCCL kernels on its SMs,
    called on the compute stream); false: it runs on the network beside independent compute."""
    collective_sms: int = 0
    """Tensor cores (SMs on a GPU preset) a collective's kernels hold while it runs beside computation
    (a ZeRO-3 gather or reduce-scatter, an overlapped DP sync, an overlapped all-to-all): NCCL's
    channels, one thread block each; 0: the collectives take no cores (the template's network)."""
    fuse_elementwise: bool = False
    """Each group of elementwise ops runs as one kernel (Megatron-LM's fused bias-GELU and
    bias-dropout-add; `phazec.passes.fuse`); false: op by op, as the template prices them."""
    fuse_norm_rope: bool = False
    """Each RMSNorm and rotary embedding the exporter wrote out step by step runs as one kernel
    (Transformer Engine's fused RMSNorm and RoPE; `phazec.passes.norm_rope`); false: step by step, as
    the template prices them."""
    hbm_shared: bool = False
    """Operators a layer's schedule runs side by side share the HBM bandwidth; false: each has it to
    itself (PHAZE's template), so many cores can each stream at the full bandwidth at once."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives are split into chunks that overlap the GEMMs next to them
    (Megatron-Core's `--tp-comm-overlap`; `phazec.predict.layer_costs.overlap_collectives`)."""
    fp8_rate: float = 0.0
    """FP8 tensor-core MACs per cycle as a multiple of BF16's (2 on Hopper and Blackwell); 0: the chip
    has no FP8 tensor cores, so `precision` fp8 and mxfp8 are refused."""
    mxfp8: bool = False
    """The tensor cores run MXFP8, FP8 with a shared scale per 32 elements (Blackwell), at `fp8_rate`."""
    fp8_relative_utilisation: float = 1.0
    """An FP8 GEMM tile's main loop reaches this multiple of `gemm_utilisation` of the FP8 peak, in
    (0, 1] (1: the same share of its peak as a BF16 GEMM of its own)."""


@dataclass(frozen=True, kw_only=True)
class HwConfig:
    """A hardware search space in the PHAZE template (a single design is a space with every knob fixed).

    A knob (`num_tc`, `tc_width`, `tc_depth`, `num_vc`, `vc_width`, `glb_bytes`) is either a list of
    values, e.g. `[8]` or `[64, 128]`, or a range of powers of two, e.g. `{pow2: [2, 256]}` (both ends
    included, both powers of two).
    """

    name: str
    """Preset name, used in tables and results."""
    num_tc: Any
    """Tensor-core counts."""
    tc_width: Any
    """Systolic-array widths (output columns per cycle)."""
    tc_depth: Any
    """Systolic-array depths (reduction length per cycle)."""
    num_vc: Any
    """Vector-core counts."""
    vc_width: Any = "tied"
    """Vector-core widths (lanes), or `tied`: equal to the tensor-core width of the same design."""
    glb_bytes: Any
    """On-chip global-buffer sizes in bytes (the area table has 2 MiB .. 128 MiB, powers of two)."""
    area_budget_mm2: Any = "tpuv4"
    """Largest area kept, in mm^2: a number, `tpuv4` (the TPUv4-like design's area) or null (no budget)."""
    area_floor: float = 0.3
    """Smallest area kept, as a fraction of the budget (PHAZE: 0.3); 0 keeps everything."""
    floor_exempt_single_core: bool = True
    """Keep designs with one tensor core or one vector core even below the floor (as PHAZE does)."""
    power_budget_w: float | None = None
    """Largest peak power kept, in watts (`phazec.hw.energy.peak_power_w`); null for no power budget."""
    hbm_bytes_per_s: float
    """HBM bandwidth in bytes/s."""
    clock_hz: float
    """Core clock in Hz."""
    sram_interpolation: bool = False
    """Allow SRAM sizes between the area table's entries, priced by linear interpolation (logged)."""
    device: DeviceConfig = field(default_factory=DeviceConfig)
    """The device model (defaults: the ideal chip)."""


@dataclass(frozen=True, kw_only=True)
class TierConfig:
    """One level of the network: groups of up to `group_size` devices talk over these links."""

    group_size: int
    """Largest group of devices this tier connects (e.g. 8 GPUs of a node)."""
    bandwidth_bytes_per_s: float
    """Link bandwidth per device and direction, in bytes/s."""
    latency_s: float = 0.0
    """Latency of one message step, in seconds."""
    efficiency: float = 1.0
    """Share of the nominal bandwidth collectives and transfers reach, in (0, 1]."""
    call_latency_s: float = 0.0
    """Fixed latency of each collective call inside a layer (launch, synchronisation), in seconds."""


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """The training system: devices, global batch, HBM capacities to try and network tiers."""

    name: str
    """Preset name, used in tables and results."""
    devices: int
    """Number of accelerators."""
    global_batch: int
    """Samples per training step."""
    hbm_gb: list[float] = field(default_factory=lambda: [32.0, 64.0, 80.0])
    """HBM capacities to search over, in GB (1e9 bytes): for a real GPU's system, what a training process
    can use (its memory as nvidia-smi reports it, less a runtime reserve: docs/devices.md, HBM capacity)."""
    tiers: list[TierConfig]
    """Network tiers from the smallest group to the whole system; a collective uses the first tier whose
    group size covers its group."""
    host_link_bytes_per_s: float = 0.0
    """Bandwidth per device and direction between a device's HBM and its host's memory, in bytes/s: what
    `train.offload_layers` copies activations over (0: no host link to offload to)."""


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    """The per-operator latency model."""

    name: str = "tiled"
    """`tiled` (phazec's model) or `phaze` (the PHAZE reference's closed form)."""
