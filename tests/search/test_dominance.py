"""Dominance pruning: the dominated designs against brute force, on PHAZE's space and on random ones."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phazec.config.settings import typed
from phazec.hw.designs import Designs
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from phazec.search.dominance import BLOCK, RESOURCES, dominated
from tests.conftest import compose_config


def brute_force(designs: Designs) -> list[bool]:
    """Per design, whether any earlier design has at least its every resource (pairwise)."""
    values = np.stack([getattr(designs, name) for name in RESOURCES], axis=1)
    return [bool(np.any(np.all(values[:i] >= values[i], axis=1))) for i in range(len(designs))]


def test_random_designs_across_blocks() -> None:
    rng = np.random.default_rng(0)
    n = 3 * BLOCK + 17

    def pick(*values: float) -> NDArray[np.float64]:
        return rng.choice(np.array(values, dtype=np.float64), n)

    designs = Designs.of(
        num_tc=pick(1, 2, 4, 8),
        tc_width=pick(32, 64, 128),
        tc_depth=pick(32, 64, 128),
        num_vc=pick(1, 2, 4),
        vc_width=pick(64, 128),
        glb_bytes=pick(2**21, 2**25),
        clock_hz=pick(1e9, 2e9),
        hbm_bytes_per_s=pick(1e12, 2e12),
    )
    found = dominated(designs)
    assert found.tolist() == brute_force(designs)
    assert 0 < found.sum() < n  # duplicates and real dominance both occur


def test_tpu_small_by_hand() -> None:
    designs = enumerate_designs(
        hw_space_from_config(typed(HwConfig, compose_config("hw=tpu_small").hw, "hw"))
    )
    found = dominated(designs)
    assert found.tolist() == brute_force(designs)
    # The largest-area designs are never dominated; every kept design is maximal among the earlier ones.
    assert not found[0]
    kept = designs.take(np.flatnonzero(~found))
    assert not any(brute_force(kept))
