"""Area model: phaze-facts section 3 tables and formula, off-table sizes, interpolation."""

import logging

import numpy as np
import pytest

from phazec.config.settings import typed
from phazec.errors import PhazecError
from phazec.hw.area import (
    CORE_SRAM_UM2,
    GLB_SRAM_UM2,
    KIB,
    MIB,
    area_mm2,
    sram_um2,
    tc_buffer_bytes,
    tpuv4_area_mm2,
    vc_buffer_bytes,
)
from phazec.hw.schema import HwConfig
from phazec.hw.space import enumerate_designs, hw_space_from_config
from tests.conftest import compose_config


def _one(**knobs: int) -> float:
    arrays = {key: np.array([value], dtype=np.int64) for key, value in knobs.items()}
    return float(
        area_mm2(
            num_tc=arrays["num_tc"],
            tc_width=arrays["tc_width"],
            tc_depth=arrays["tc_depth"],
            num_vc=arrays["num_vc"],
            vc_width=arrays["vc_width"],
            glb_bytes=arrays["glb_bytes"],
        )[0]
    )


def test_tpuv4_area_is_the_paper_budget() -> None:
    # 8 * (760.041386 * 128^2 + 446565) + 2 * (759.823853 * 128 + 8248.43) + 175423000 um^2
    expected_um2 = 8 * (760.041386 * 128 * 128 + 446565) + 2 * (759.823853 * 128 + 8248.43) + 175423000
    assert tpuv4_area_mm2() == pytest.approx(expected_um2 / 1e6, rel=1e-15)
    assert round(tpuv4_area_mm2(), 3) == 278.827


def test_smallest_design_area() -> None:
    # 1 TC of 2x2 (buffer 64 B -> 1 KiB), 1 VC of 2 lanes (1 KiB), 2 MiB GLB.
    expected_um2 = (760.041386 * 4 + 6133.98) + (759.823853 * 2 + 6133.98) + 3338220
    area = _one(num_tc=1, tc_width=2, tc_depth=2, num_vc=1, vc_width=2, glb_bytes=2 * MIB)
    assert area == pytest.approx(expected_um2 / 1e6, rel=1e-15)
    assert round(area, 3) == 3.355


def test_buffer_sizes_follow_the_template() -> None:
    assert tc_buffer_bytes(np.array([2, 8, 128]), np.array([2, 8, 256])).tolist() == [1024, 1024, 524288]
    assert vc_buffer_bytes(np.array([2, 64, 256])).tolist() == [1024, 1024, 4096]


def test_table_sizes_price_exactly() -> None:
    sizes = np.array(sorted(CORE_SRAM_UM2), dtype=np.int64)
    assert sram_um2(sizes, CORE_SRAM_UM2, "buffer").tolist() == [CORE_SRAM_UM2[int(s)] for s in sizes]
    sizes = np.array(sorted(GLB_SRAM_UM2), dtype=np.int64)
    assert sram_um2(sizes, GLB_SRAM_UM2, "global buffer").tolist() == [GLB_SRAM_UM2[int(s)] for s in sizes]


def test_off_table_size_is_a_clear_error() -> None:
    with pytest.raises(PhazecError, match=r"global buffer size 41943040 bytes is not in the SRAM area table"):
        sram_um2(np.array([40 * MIB]), GLB_SRAM_UM2, "global buffer")
    with pytest.raises(PhazecError, match="sram_interpolation"):
        sram_um2(np.array([3 * KIB]), CORE_SRAM_UM2, "tensor-core buffer")


def test_out_of_range_size_is_an_error_even_with_interpolation() -> None:
    with pytest.raises(PhazecError, match=r"268435456 bytes"):
        sram_um2(np.array([256 * MIB]), GLB_SRAM_UM2, "global buffer", interpolate=True)


def test_interpolation_is_linear_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    area = sram_um2(np.array([48 * MIB]), GLB_SRAM_UM2, "global buffer", interpolate=True)
    assert area.tolist() == [(46750900.0 + 88605700.0) / 2]
    with caplog.at_level(logging.INFO, logger="phazec.hw"):
        enumerate_designs(
            hw_space_from_config(typed(HwConfig, compose_config("hw=a100").hw, "hw"))
        )  # a 40 MiB L2
    (line,) = [r.getMessage() for r in caplog.records if "interpolated" in r.getMessage()]
    assert line == (
        "hw space a100: global buffer sizes [41943040] bytes are between area-table entries: area "
        "interpolated linearly"
    )
