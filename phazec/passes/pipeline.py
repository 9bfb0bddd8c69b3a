"""Pass pipelines as data: a pipeline is a list of passes, run in order with the verifier between them.

The training pipeline's list (`TRAINING_PASSES`) names each pass and builds it from one
`GraphSettings`, the options a command derives from its settings (the device's attention kernel and
fusions, the model's causality, the optimizer, vocabulary parallelism): nothing threads a pass's flag
through the commands. An error in a pass names it and the passes that already ran.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from phazec.errors import PhazecError
from phazec.ir.core import Model
from phazec.ir.verify import verify
from phazec.passes.attention import Attention
from phazec.passes.autodiff import Autodiff
from phazec.passes.base import Pass
from phazec.passes.expert_parallel import ExpertParallel
from phazec.passes.fuse import Fuse
from phazec.passes.loss import FusedCrossEntropy
from phazec.passes.memory import Memory
from phazec.passes.norm_rope import NormRope
from phazec.passes.tensor_parallel import TensorParallel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassTiming:
    """Wall time of one pass in a pipeline run."""

    name: str
    seconds: float
    modified: bool


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Passes run in order, with the verifier after each."""

    passes: tuple[Pass, ...]

    def run(self, model: Model) -> tuple[Model, list[PassTiming]]:
        """Run every pass; returns the final model and per-pass timings.

        Raises:
            PhazecError: a pass refused the model; the message names it and the passes run before it.
        """
        verify(model)
        timings: list[PassTiming] = []
        for p in self.passes:
            start = time.perf_counter()
            try:
                result = p(model)
            except PhazecError as err:
                raise PhazecError(f"{err} (pass {p.name}, after {_ran(timings)})") from err
            except Exception as err:
                err.add_note(f"phazec: in pass {p.name}, after {_ran(timings)}")
                raise
            verify(result.model)
            timings.append(PassTiming(p.name, time.perf_counter() - start, result.modified))
            log.debug("pass %s: %.3f s, modified=%s", p.name, timings[-1].seconds, result.modified)
            model = result.model
        return model, timings


def _ran(timings: Sequence[PassTiming]) -> str:
    """The passes already run, for an error message."""
    return ", ".join(t.name for t in timings) if timings else "no other pass"


@dataclass(frozen=True, kw_only=True)
class GraphSettings:
    """How a lowered model becomes its per-device training graphs: the options of the training passes."""

    optimizer: str = "sgd"
    """`sgd` or `adam`: the optimizer state the memory pass counts (and the update op)."""
    vocab_parallel: bool = False
    """Split the embedding and the LM head over the vocabulary too."""
    attention: str = "unfused"
    """The attention kernel (`unfused`, `fused_softmax`, `flash`; `phazec.passes.attention`)."""
    causal: bool = False
    """The model's attention is causal (the kernel masks by position and skips masked tiles)."""
    fuse: bool = True
    """Fuse each GEMM with its single elementwise consumer."""
    fuse_elementwise: bool = False
    """Fuse each group of elementwise ops into one kernel (`phazec.passes.fuse`)."""
    fuse_norm_rope: bool = False
    """Run each RMSNorm and rotary-embedding chain as one kernel (`phazec.passes.norm_rope`)."""
    update: bool = False
    """Attach each layer's once-per-batch optimizer update graph."""
    expert_parallel: int = 1
    """Expert-parallel width ep: each MoE block's routed experts over ep devices (`ExpertParallel`)."""
    fused_cross_entropy: bool = False
    """The loss reads the logits in the output layer's type (`phazec.passes.loss`)."""


TRAINING_PASSES: tuple[tuple[str, Callable[[GraphSettings, int], Pass]], ...] = (
    ("norm-rope", lambda s, width: NormRope(s.fuse_norm_rope)),
    ("tensor-parallel", lambda s, width: TensorParallel(width, s.vocab_parallel)),
    ("expert-parallel", lambda s, width: ExpertParallel(s.expert_parallel)),
    ("loss", lambda s, width: FusedCrossEntropy(s.fused_cross_entropy)),
    ("attention", lambda s, width: Attention(s.attention, s.causal)),
    ("autodiff", lambda s, width: Autodiff(s.optimizer if s.update else None)),
    ("fuse", lambda s, width: Fuse(s.fuse, s.fuse_elementwise)),
    ("memory", lambda s, width: Memory(s.optimizer)),
)
"""The passes that turn a lowered model into a per-device training graph with memory figures, in
order, each built from the settings and the tensor-parallel width."""


def training_pipeline(width: int, settings: GraphSettings = GraphSettings()) -> Pipeline:
    """The training pipeline at tensor-parallel width `width`."""
    return Pipeline(tuple(build(settings, width) for _, build in TRAINING_PASSES))


def training_graphs(model: Model, widths: Sequence[int], settings: GraphSettings) -> dict[int, Model]:
    """The per-device training graph of a lowered model at each tensor-parallel width (the input model
    is not changed: it is shared across widths)."""
    return {t: training_pipeline(t, settings).run(model)[0] for t in sorted(set(widths))}
