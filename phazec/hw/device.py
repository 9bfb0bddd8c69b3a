"""The device model: how close a chip's operators come to its peak, as plain frozen data.

The PHAZE template says how many cores of which size a chip has; the device model says how well real
kernels use them. It lives in the `device` node of an hw preset (`conf/hw/*.yaml`), where every value
says where it comes from, and `phazec.cost.tiled` applies it:

- `gemm_tiles`: a GEMM's output is cut into tiles of rows x cols, each computed by one core over its
  share of the reduction (a GPU thread block); the tiles run in waves over the cores, and a ragged last
  wave or a padded edge tile costs as much as a full one (NeuSight's tile-and-wave model). Tiles that
  fill less than one wave split their reduction over the idle cores, as many ways as fit (split-K;
  stream-K on Hopper's cuBLAS shares the reduction over every SM). Like cuBLAS's heuristics, the
  fastest tile is taken. None keeps the template's weight-stationary systolic
  tiling (`phazec.cost.tiled`).
- `gemm_utilisation`: the share of a core's peak a tile's main loop reaches (fitted per chip).
- `attention_utilisation`: the share of the cores' peak a fused attention kernel (flash attention)
  reaches over its work: its softmax, rescaling and causal blocks keep it below a GEMM's.
- `gemm_tile_overhead_cycles`: cycles each tile spends outside its main loop (prologue, epilogue), so
  small tiles and short reductions reach less of the peak than large ones.
- `memory_utilisation`: the share of HBM bandwidth streaming operators reach.
- `kernel_latency_s`: a fixed cost per on-chip operator (launch and ramp), whatever the design.
- `shared_cores`: tensor and vector work run on the same cores (a GPU's SMs), so the scheduling
  problem gets one kind of core for both; False for the template's separate MXUs and VPUs.
- `attention`: the attention kernel the chip's software runs (`unfused`, `fused_softmax`, `flash`;
  `phazec.passes.attention`): it shapes the training graph, not the per-op prices.
- `fuse_elementwise`: the software runs each group of elementwise ops as one kernel (Megatron-LM's
  fused bias-GELU and bias-dropout-add, a compiler's pointwise fusion), so the group reads its inputs
  and writes its results once and pays one kernel latency (`phazec.passes.fuse`); like `attention`,
  it shapes the training graph.
- `fuse_norm_rope`: the software runs each RMSNorm and rotary embedding the exporter wrote out step by
  step as one kernel (Transformer Engine's fused RMSNorm and RoPE), as the exporter already gives a
  LayerNorm (`phazec.passes.norm_rope`); like `attention`, it shapes the training graph.
- `collectives_hold_cores`: a collective inside a layer holds every core while it runs, so no
  independent compute runs beside it (a GPU's NCCL kernels run on its SMs, and Megatron-LM calls them
  on the compute stream); false leaves them on the network beside compute (the template's).
- `collective_sms`: the cores (SMs) a collective's kernels hold while it runs beside computation that
  is not its own layer's (a ZeRO-3 gather prefetched during the layer before, an overlapped DP sync or
  all-to-all): NCCL's channels, one thread block each. The computation beside it runs on the rest
  (`phazec.solvers.placement`, `phazec.predict.evaluator.overlapped`); 0 leaves every core to it.
- `hbm_shared`: operators a layer's schedule runs side by side share the HBM bandwidth
  (`phazec.solvers.schedule.problem`); false prices each as if it had the bandwidth to itself, as
  PHAZE's template does, which lets many cores each stream at the full bandwidth at once.
- `tp_comm_overlap`: the software splits each tensor-parallel collective into chunks that overlap
  the GEMM producing its input and the first GEMM using its result (Megatron-Core's
  `--tp-comm-overlap`), so only the part those GEMMs cannot hide is exposed
  (`phazec.predict.layer_costs.overlap_collectives`).
- `fp8_rate`, `mxfp8`, `fp8_relative_utilisation`: the chip's FP8 tensor cores (MACs per cycle as a
  multiple of BF16's; 0: none), whether they take MXFP8's block scales, and the share of that peak an
  FP8 GEMM's main loop reaches, as a multiple of `gemm_utilisation` (a power limit or a fit that
  lowers one lowers both); `precision` fp8 or mxfp8 prices the blocks' linear layers with them
  (`phazec.cost.tiled`, `phazec.predict.layer_costs.low_precision_gemm`).

Every value is a share of the peak or a non-negative cost, so no operator beats its compute or memory
bound, and no value makes an operator slower on a design with more or larger cores, more bandwidth or
a faster clock.
"""

from dataclasses import dataclass
from typing import Any

from phazec.errors import PhazecError
from phazec.hw.ranges import physical
from phazec.hw.schema import DeviceConfig
from phazec.util.checks import integer_at_least, non_negative

ATTENTION_KERNELS = ("unfused", "fused_softmax", "flash")
"""Values of `hw.device.attention`."""


def check_kernel(kernel: str) -> str:
    """`kernel` if it is an attention kernel; raises PhazecError naming the valid ones."""
    if kernel not in ATTENTION_KERNELS:
        raise PhazecError(
            f"hw.device.attention = {kernel!r} is not an attention kernel; valid kernels are "
            f"{', '.join(ATTENTION_KERNELS)}."
        )
    return kernel


@dataclass(frozen=True)
class DeviceModel:
    """How well a chip's kernels use its cores and memory (see the module docstring)."""

    shared_cores: bool = False
    """Tensor and vector work share the same cores."""
    gemm_tiles: tuple[tuple[int, int], ...] | None = None
    """Output tiles (rows, cols) a core may compute at a time; None: the template's systolic tiling."""
    gemm_utilisation: float = 1.0
    """Share of a core's peak MACs per cycle reached in a tile's main loop, in (0, 1]."""
    gemm_tile_overhead_cycles: float = 0.0
    """Cycles each output tile spends outside its main loop, >= 0."""
    memory_utilisation: float = 1.0
    """Share of HBM bandwidth reached by an operator's memory traffic, in (0, 1]."""
    kernel_latency_s: float = 0.0
    """Fixed latency of each on-chip operator, >= 0."""
    attention: str = "unfused"
    """The attention kernel (`ATTENTION_KERNELS`)."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives overlap the GEMMs next to them."""
    attention_utilisation: float = 1.0
    """Share of the cores' peak a fused attention kernel reaches, in (0, 1]."""
    collectives_hold_cores: bool = False
    """A collective inside a layer holds every core while it runs."""
    collective_sms: int = 0
    """Cores an overlapped collective's kernels hold while it runs, >= 0."""
    fuse_elementwise: bool = False
    """Each group of elementwise ops runs as one kernel."""
    fuse_norm_rope: bool = False
    """Each RMSNorm and rotary embedding runs as one kernel."""
    hbm_shared: bool = False
    """Operators run side by side share the HBM bandwidth."""
    fp8_rate: float = 0.0
    """FP8 tensor-core MACs per cycle as a multiple of BF16's, >= 0 (0: no FP8 tensor cores)."""
    mxfp8: bool = False
    """The tensor cores run MXFP8."""
    fp8_relative_utilisation: float = 1.0
    """An FP8 GEMM's main loop reaches this multiple of `gemm_utilisation` of the FP8 peak, in (0, 1]."""

    def precisions(self) -> tuple[str, ...]:
        """The GEMM precisions the chip runs (`phazec.predict.training.PRECISIONS` order)."""
        return (
            ("bf16",)
            + (("fp8",) if self.fp8_rate > 0 else ())
            + (("mxfp8",) if self.mxfp8 and self.fp8_rate > 0 else ())
        )


IDEAL = DeviceModel()
"""Every core at its peak, no per-kernel cost: the template's ideal chip."""


def is_template(device: DeviceModel) -> bool:
    """Whether a device model is of the template's kind of chip, as the TPU-like presets': separate
    tensor and vector cores and systolic tiling (no `gemm_tiles`); a GPU preset's is not."""
    return device.gemm_tiles is None and not device.shared_cores


def _share(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise PhazecError(
            f"hw.device.{name} = {value!r} is not valid: it must be a share of the peak in (0, 1]."
        )
    return float(value)


def _is_tile(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    )


def _tiles(value: Any) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value or not all(_is_tile(tile) for tile in value):
        raise PhazecError(
            f"hw.device.gemm_tiles = {value!r} is not valid: give a non-empty list of GEMM output tiles "
            f"[rows, cols] of positive integers (e.g. [[256, 128], [128, 128]]), or null for the template's "
            f"systolic tiling."
        )
    return tuple((int(tile[0]), int(tile[1])) for tile in value)


def device_from_config(config: DeviceConfig) -> DeviceModel:
    """The validated device model of an hw preset's `device` settings.

    Raises:
        PhazecError: a value is out of range.
    """
    sms = integer_at_least("hw.device.collective_sms", config.collective_sms, 0)
    return DeviceModel(
        shared_cores=config.shared_cores,
        gemm_tiles=_tiles(config.gemm_tiles),
        gemm_utilisation=_share("gemm_utilisation", config.gemm_utilisation),
        gemm_tile_overhead_cycles=physical(
            "hw.device.gemm_tile_overhead_cycles",
            non_negative("hw.device.gemm_tile_overhead_cycles", config.gemm_tile_overhead_cycles),
        ),
        attention_utilisation=_share("attention_utilisation", config.attention_utilisation),
        memory_utilisation=_share("memory_utilisation", config.memory_utilisation),
        kernel_latency_s=physical(
            "hw.device.kernel_latency_s", non_negative("hw.device.kernel_latency_s", config.kernel_latency_s)
        ),
        attention=check_kernel(config.attention),
        tp_comm_overlap=config.tp_comm_overlap,
        collectives_hold_cores=config.collectives_hold_cores,
        collective_sms=int(physical("hw.device.collective_sms", sms)),
        fuse_elementwise=config.fuse_elementwise,
        fuse_norm_rope=config.fuse_norm_rope,
        hbm_shared=config.hbm_shared,
        fp8_rate=non_negative("hw.device.fp8_rate", config.fp8_rate),
        mxfp8=config.mxfp8,
        fp8_relative_utilisation=_share("fp8_relative_utilisation", config.fp8_relative_utilisation),
    )
