"""What Megatron-LM runs: the one rule `phazec-plan` applies to a given plan and the search applies to
the model's fixed baseline plan, so a plan Megatron-LM would refuse is refused by the one and reported
"not applicable" by the other, with the same reason."""

from __future__ import annotations

import math

from phazec.errors import PhazecError


def check_runs(
    where: str,
    widths: tuple[int, int, int],
    microbatch: int,
    *,
    devices: int,
    global_batch: int,
    microbatch_key: str,
    cp: int = 1,
) -> None:
    """Megatron-LM can run tensor, pipeline and data-parallel widths `widths` (tp, pp, dp, the keys
    `<where>.tp` ...) at `microbatch` (the key `microbatch_key`) on `devices` with `global_batch` samples
    per step: the widths' product (times the context-parallel width `cp`) divides the devices, the
    microbatch divides the global batch, and the data-parallel width divides the microbatches (every
    replica gets the same number).

    Raises:
        PhazecError: one of these fails; the message names the value and what would be valid.
    """
    tp, pp, dp = widths
    named = {"tp": tp, "pp": pp, "dp": dp, **({"cp": cp} if cp > 1 else {})}
    width = math.prod(named.values())
    if devices % width:
        names = " * ".join(f"{where}.{name}" for name in named)
        values = " * ".join(str(value) for value in named.values())
        raise PhazecError(
            f"{names} = {values} = {width} does not divide the {devices} devices (system.devices); choose "
            f"widths whose product divides it, or set system.devices={width}."
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
