"""Activation offloading (`offload_layers`): what the model's first transformer blocks keep for their
backward pass waits in the host's memory instead of HBM.

Megatron-Core's `--cpu-offloading` with activations only (`cpu_offloading_weights=False`, as
Megatron-Bridge's perf recipes set it) runs each transformer layer under Transformer Engine's CPU-offload
context: the tensors the first `cpu_offloading_num_layers` layers save for their backward pass are
copied to pinned host memory on a side stream, and copied back before their backward pass; at most
layers - k layers' saved tensors are on the device at once (Transformer Engine's CPU-offloading guide;
Megatron-Core's transformer_block.py, NVIDIA/Megatron-LM@d98e8a6). phazec applies it to the figures of
the layers the placement reads (`offloaded_problem`), so every command times it the same way:

- memory: an offloaded block keeps nothing in HBM between its passes (its stash goes to the host).
  With k <= blocks - 2 the peak holds the blocks - k kept blocks' activations (at the start of the
  backward pass); the offloaded block whose copy is in flight, with the block after it computing, and
  the block being reloaded, with the block after it in its backward pass, are two blocks' activations
  at once, never more than the kept ones. The embedding and the output layer keep theirs.
- time: block i's copy to the host, its stash bytes over `system.host_link_bytes_per_s`, runs while
  block i + 1 computes its forward pass, and its reload while block i + 1 computes its backward pass
  (Transformer Engine's double buffering); a pass shorter than the copy it hides waits for it, so
  block i + 1's forward and backward latencies become max(its latency, block i's copy). The copies'
  share of HBM bandwidth is not modelled.

Megatron-Core runs it with one pipeline stage and no recompute; phazec refuses recompute with it
(`check_offload`) and, in a pipeline, applies the same figures to every microbatch in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from phazec.errors import PhazecError
from phazec.solvers.placement.problem import PlacementProblem


def check_offload(
    name: str, offload_layers: int, host_link_bytes_per_s: float, recompute: Sequence[str], blocks: int | None
) -> None:
    """Before any work: `offload_layers` (knob `name`, e.g. `plan.offload_layers`) on a system whose host
    link is `host_link_bytes_per_s`, with the recompute modes `recompute` tried, on a model of `blocks`
    transformer blocks (None: not known before lowering; `offloaded_problem` checks it then).

    Raises:
        PhazecError: more blocks than blocks - 2, no host link, or a recompute mode other than none.
    """
    if offload_layers == 0:
        return
    if blocks is not None:
        check_offload_blocks(name, offload_layers, blocks)
    if host_link_bytes_per_s == 0:
        raise PhazecError(
            f"{name}={offload_layers} offloads activations to the host, but the system has no host link "
            "(system.host_link_bytes_per_s = 0): give the bandwidth per device and direction between a "
            "device and its host's memory (PCIe Gen5 x16: 64.0e9; GB200's NVLink-C2C: 450.0e9), use a "
            f"system preset that has one (dgx_h100, dgx_b200, gb200_nvl72), or set {name}=0."
        )
    others = [mode for mode in recompute if mode != "none"]
    if others:
        group = name.split(".", maxsplit=1)[0]
        raise PhazecError(
            f"{name}={offload_layers} does not combine with {group}.recompute {others[0]!r}: Megatron-Core "
            'refuses CPU offloading with activation recomputation ("CPU offloading does not work when '
            f'activation recomputation is enabled"); set {group}.recompute='
            f"{'[none]' if group == 'train' else 'none'}, or {name}=0."
        )


def check_offload_blocks(name: str, offload_layers: int, blocks: int) -> None:
    """`offload_layers` blocks of a model of `blocks` transformer blocks leave at least two on the device.

    Raises:
        PhazecError: more than blocks - 2.
    """
    if offload_layers > blocks - 2:
        raise PhazecError(
            f"{name}={offload_layers} is not valid for a model of {blocks} transformer blocks: it must be "
            f"0 to {max(blocks - 2, 0)}. Transformer Engine keeps the activations of blocks - k blocks on "
            "the device; at k = blocks - 1 it keeps one and can overlap no copy with compute (it warns), a "
            "schedule phazec does not model, and it cannot offload every block."
        )


def offloaded_problem(
    problem: PlacementProblem, blocks: Sequence[int], offload_layers: int, host_link_bytes_per_s: float
) -> PlacementProblem:
    """`problem` with the first `offload_layers` of `blocks` (the transformer blocks' layer ids, in
    order) offloaded to the host over a link of `host_link_bytes_per_s` per direction (module
    docstring): their kept bytes 0, the next block's forward and backward latencies at least their
    copy's time.

    Raises:
        PhazecError: more than blocks - 2 blocks, or no host link.
    """
    if offload_layers == 0:
        return problem
    check_offload_blocks("offload_layers", offload_layers, len(blocks))
    check_offload("offload_layers", offload_layers, host_link_bytes_per_s, (), None)
    offloaded = np.array(blocks[:offload_layers], dtype=np.int64)
    hiding = np.array(blocks[1 : offload_layers + 1], dtype=np.int64)
    copy_s = problem.stash_bytes[:, offloaded] / host_link_bytes_per_s
    forward_s, backward_s = problem.forward_latency_s.copy(), problem.backward_latency_s.copy()
    forward_s[:, hiding] = np.maximum(forward_s[:, hiding], copy_s)
    backward_s[:, hiding] = np.maximum(backward_s[:, hiding], copy_s)

    def kept(figures: NDArray[np.int64]) -> NDArray[np.int64]:
        out = figures.copy()
        out[:, offloaded] = 0
        return out

    return replace(
        problem,
        forward_latency_s=forward_s,
        backward_latency_s=backward_s,
        stash_bytes=kept(problem.stash_bytes),
        selective_stash_bytes=kept(problem.selective_stash),
        op_stash_bytes=kept(problem.op_stash),
        input_bytes=kept(problem.input_bytes),
    )
