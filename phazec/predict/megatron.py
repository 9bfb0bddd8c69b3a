"""What Megatron-LM runs: the one rule `phazec-plan` applies to a given plan and the search applies to
the model's fixed baseline plan, so a plan Megatron-LM would refuse is refused by the one and reported
"not applicable" by the other, with the same reason."""

from __future__ import annotations

from phazec.errors import PhazecError


def check_runs(
    where: str,
    widths: tuple[int, int, int],
    microbatch: int,
    *,
    devices: int,
    global_batch: int,
    microbatch_key: str,
) -> None:
    """Megatron-LM can run tensor, pipeline and data-parallel widths `widths` (tp, pp, dp, the keys
    `<where>.tp` ...) at `microbatch` (the key `microbatch_key`) on `devices` with `global_batch`
    samples per step: the widths' product divides the devices, the microbatch divides the global batch,
    and the data-parallel width divides the microbatches (every replica gets the same number).

    Raises:
        PhazecError: one of these fails; the message names the value and what would be valid.
    """
    tp, pp, dp = widths
    width = tp * pp * dp
    if devices % width:
        raise PhazecError(
            f"{where}.tp * {where}.pp * {where}.dp = {tp} * {pp} * {dp} = {width} does not divide the "
            f"{devices} devices (system.devices); choose widths whose product divides it, or set "
            f"system.devices={width}."
        )
    if global_batch % microbatch:
        raise PhazecError(
            f"{microbatch_key}={microbatch} does not divide the global batch {global_batch} "
            "(system.global_batch); choose a divisor of it."
        )
    microbatches = global_batch // microbatch
    if microbatches % dp:
        raise PhazecError(
            f"{where}.dp={dp} does not divide the {microbatches} microbatches of a batch (global batch "
            f"{global_batch} / microbatch {microbatch}): Megatron-LM gives every replica the same "
            f"number; choose a dp that divides {microbatches}, or a global batch divisible by microbatch "
            f"x dp = {microbatch * dp}."
        )
