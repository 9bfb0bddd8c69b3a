"""phazec.cost: per-operator latency and energy for many designs at once.

- `ops`: operator descriptors (`OpWork`, `OpTable`) and the ONNX op-type rules.
- `tiled`: phazec's model (`cost=tiled`); `phaze`: the PHAZE reference's closed form (`cost=phaze`).
- `network`: collectives over the system's tiers; `energy`: per-operator energy.
- `model`: `op_costs` (all designs) and `design_op_costs` (one design).
"""
