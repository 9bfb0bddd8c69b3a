"""phazec.hw: the accelerator template.

- `schema`: the `hw`, `system` and `cost` config schemas.
- `area`: the area model (phaze-facts section 3).
- `energy`: energy figures and peak power.
- `space`: search-space validation and vectorised enumeration into `designs.Designs`.
- `system`: devices, global batch, HBM capacities and network tiers.
"""
