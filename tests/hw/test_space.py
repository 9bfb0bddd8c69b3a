"""Hardware search spaces: presets, validation, vectorised enumeration against a plain loop."""

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from phazec.config.schema import register
from phazec.config.settings import typed
from phazec.cost.model import latency_model_from_config
from phazec.errors import PhazecError
from phazec.hw.area import CORE_SRAM_UM2, GLB_SRAM_UM2, MIB, tpuv4_area_mm2
from phazec.hw.designs import Designs
from phazec.hw.schema import CostConfig, HwConfig, SystemConfig
from phazec.hw.space import HwSpace, enumerate_designs, hw_space_from_config
from phazec.hw.system import system_from_config
from tests.conftest import REPO

CONF_DIR = REPO / "conf"


def _compose(*overrides: str) -> DictConfig:
    register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


def _preset(name: str) -> dict[str, Any]:
    values = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "hw" / f"{name}.yaml"))
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}


@pytest.fixture(scope="module")
def tpu_area() -> Designs:
    return enumerate_designs(hw_space_from_config(typed(HwConfig, _compose("hw=tpu_area").hw, "hw")))


def test_tpu_area_reproduces_the_paper_space(tpu_area: Designs) -> None:
    assert len(tpu_area) == 29360
    assert round(float(tpu_area.area_mm2[0]), 3) == 278.827
    assert round(float(tpu_area.area_mm2[-1]), 3) == 3.355
    assert (np.diff(tpu_area.area_mm2) <= 0).all()
    assert (tpu_area.vc_width == tpu_area.tc_width).all()


def test_tpu_area_floor_is_waived_only_for_one_core_designs(tpu_area: Designs) -> None:
    below = tpu_area.area_mm2 < 0.3 * tpuv4_area_mm2()
    assert below.any()
    assert ((tpu_area.num_tc[below] == 1) | (tpu_area.num_vc[below] == 1)).all()


def test_tpuv4_is_the_largest_design_of_tpu_area(tpu_area: Designs) -> None:
    top = tpu_area.row(0)
    assert {k: top[k] for k in ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes")} == {
        "num_tc": 8,
        "tc_width": 128,
        "tc_depth": 128,
        "num_vc": 2,
        "vc_width": 128,
        "glb_bytes": 128 * MIB,
    }


def _reference_area_mm2(design: tuple[int, int, int, int, int, int]) -> float:
    num_tc, w, d, num_vc, v, glb = design
    tc = 760.041386 * w * d + CORE_SRAM_UM2[max(1024, 16 * w * d)]
    vc = 759.823853 * v + CORE_SRAM_UM2[max(1024, 16 * v)]
    return (num_tc * tc + num_vc * vc + GLB_SRAM_UM2[glb]) / 1e6


def test_enumeration_matches_a_plain_loop() -> None:
    values = {**_preset("tpu_area"), "num_tc": {"pow2": [1, 64]}, "num_vc": {"pow2": [1, 64]}}
    space = hw_space_from_config(typed(HwConfig, values, "hw"))
    designs = enumerate_designs(space)
    budget = tpuv4_area_mm2()
    expected = set()
    for num_tc, w, d, num_vc, glb in itertools.product(
        space.num_tc, space.tc_width, space.tc_depth, space.num_vc, space.glb_bytes
    ):
        area = _reference_area_mm2((num_tc, w, d, num_vc, w, glb))
        if area <= budget and (area >= 0.3 * budget or num_tc == 1 or num_vc == 1):
            expected.add((num_tc, w, d, num_vc, w, glb))
    columns = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes")
    got = list(zip(*(getattr(designs, name).tolist() for name in columns), strict=True))
    assert len(got) == len(expected) and set(got) == expected
    reference = [_reference_area_mm2(row) for row in got]
    assert designs.area_mm2.tolist() == pytest.approx(reference, rel=1e-14)


def test_equal_areas_are_ordered_by_knobs() -> None:
    values = {**_preset("tpuv4"), "tc_width": [2, 4], "tc_depth": [2, 4], "vc_width": [2], "num_tc": [1]}
    designs = enumerate_designs(hw_space_from_config(typed(HwConfig, values, "hw")))
    pairs = list(zip(designs.tc_width.tolist(), designs.tc_depth.tolist(), strict=True))
    assert pairs == [(4, 4), (2, 4), (4, 2), (2, 2)]
    assert designs.area_mm2[1] == designs.area_mm2[2]


def test_enumeration_is_deterministic(tpu_area: Designs) -> None:
    again = enumerate_designs(hw_space_from_config(typed(HwConfig, _compose("hw=tpu_area").hw, "hw")))
    for name in ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "glb_bytes", "area_mm2"):
        assert np.array_equal(getattr(again, name), getattr(tpu_area, name))


def test_single_design_presets() -> None:
    tpuv4 = enumerate_designs(hw_space_from_config(typed(HwConfig, _compose("hw=tpuv4").hw, "hw")))
    assert len(tpuv4) == 1 and round(float(tpuv4.area_mm2[0]), 3) == 278.827
    a100 = enumerate_designs(hw_space_from_config(typed(HwConfig, _compose("hw=a100").hw, "hw")))
    # 108 SMs of 32x32 at 1.41 GHz: 2 * 108 * 1024 * 1.41e9 = 311.9 TFLOP/s dense bf16.
    assert 2 * a100.num_tc[0] * a100.tc_width[0] * a100.tc_depth[0] * a100.clock_hz[0] == pytest.approx(
        311.9e12, rel=1e-3
    )
    h100 = enumerate_designs(hw_space_from_config(typed(HwConfig, _compose("hw=h100").hw, "hw")))
    assert 2 * h100.num_tc[0] * h100.tc_width[0] * h100.tc_depth[0] * h100.clock_hz[0] == pytest.approx(
        989e12, rel=1e-3
    )


DENSE_BF16_FLOPS = {"h200": 989e12, "b200": 2.25e15, "gb200": 2.5e15, "gb300": 2.5e15, "h100_500w": 989e12}
"""The published dense BF16 peak of each 2024-25 GPU preset (the sources are in its conf/hw file; the
500 W H100's is the 700 W part's: its power limit is in its fitted utilisations)."""

CHIP_SYSTEMS = {
    "h200": "dgx_h200", "b200": "dgx_b200", "gb200": "gb200_nvl72", "gb300": "gb300_nvl72",
    "h100_500w": "dgx_h100",
}  # fmt: skip


@pytest.mark.parametrize("hw", DENSE_BF16_FLOPS)
def test_gpu_presets_give_their_published_peak(hw: str) -> None:
    """2 * SMs * array width * depth * clock is the datasheet's dense BF16 figure (within the rounding
    of the clock to 1 MHz), and the preset composes with its system."""
    cfg = _compose(f"hw={hw}", f"system={CHIP_SYSTEMS[hw]}")
    design = enumerate_designs(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")))
    assert len(design) == 1
    peak = 2 * design.num_tc[0] * design.tc_width[0] * design.tc_depth[0] * design.clock_hz[0]
    assert peak == pytest.approx(DENSE_BF16_FLOPS[hw], rel=5e-4)
    assert system_from_config(typed(SystemConfig, cfg.system, "system")).name == CHIP_SYSTEMS[hw]


@pytest.mark.parametrize("hw", ["tpu_area", "tpuv4", "a100", "h100"])
@pytest.mark.parametrize("system", ["phaze_1024", "dgx_a100"])
@pytest.mark.parametrize("cost", ["phaze", "tiled"])
def test_every_preset_composes(hw: str, system: str, cost: str) -> None:
    cfg = _compose(f"hw={hw}", f"system={system}", f"cost={cost}")
    assert isinstance(hw_space_from_config(typed(HwConfig, cfg.hw, "hw")), HwSpace)
    assert system_from_config(typed(SystemConfig, cfg.system, "system")).devices == 1024
    assert latency_model_from_config(typed(CostConfig, cfg.cost, "cost")).name == cost


def test_power_budget_keeps_designs_within_it() -> None:
    # TPUv4 peak: 1.05 GHz * (8 * 128^2 MACs * 1.5 pJ + 256 lanes * 1 pJ) + 1.2 TB/s * 31.2 pJ = 244.1472 W
    tpuv4_w = 1.05e9 * (8 * 128 * 128 * 1.5e-12 + 256 * 1e-12) + 1.2e12 * 31.2e-12
    designs = enumerate_designs(
        hw_space_from_config(
            typed(HwConfig, {**_preset("tpuv4"), "power_budget_w": tpuv4_w * 1.000001}, "hw")
        )
    )
    assert designs.peak_power_w.tolist() == [pytest.approx(tpuv4_w, rel=1e-12)]
    with pytest.raises(PhazecError, match="No design of hw space 'tpuv4' fits its budgets"):
        enumerate_designs(
            hw_space_from_config(
                typed(HwConfig, {**_preset("tpuv4"), "power_budget_w": tpuv4_w * 0.999999}, "hw")
            )
        )
    limited = enumerate_designs(
        hw_space_from_config(typed(HwConfig, {**_preset("tpu_area"), "power_budget_w": 100.0}, "hw"))
    )
    assert 0 < len(limited) < 29360 and (limited.peak_power_w <= 100.0).all()


def test_floor_without_exemption_drops_small_designs() -> None:
    designs = enumerate_designs(
        hw_space_from_config(
            typed(HwConfig, {**_preset("tpu_area"), "floor_exempt_single_core": False}, "hw")
        )
    )
    assert (designs.area_mm2 >= 0.3 * tpuv4_area_mm2()).all()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num_tc", [0], r"hw.num_tc = \[0\] is not valid"),
        ("num_vc", [-2], r"hw.num_vc = \[-2\] is not valid"),
        ("tc_width", [], r"hw.tc_width = \[\] is not valid"),
        ("tc_depth", [2.5], r"hw.tc_depth = \[2.5\] is not valid"),
        ("num_tc", {"pow2": [3, 8]}, r"hw.num_tc = \{'pow2': \[3, 8\]\} is not a valid range"),
        ("num_tc", {"pow2": [8, 2]}, "is not a valid range"),
        ("num_tc", {"range": [1, 8]}, "is not a valid range"),
        ("glb_bytes", [3 * MIB], "global buffer size 3145728 bytes is not in the SRAM area table"),
        ("tc_width", [96], "tensor-core buffer size 196608 bytes is not in the SRAM area table"),
        ("clock_hz", 0, r"hw.clock_hz = 0.0 is not valid: it must be a finite number greater than 0"),
        ("hbm_bytes_per_s", -1.0e12, r"hw.hbm_bytes_per_s = -1000000000000.0 is not valid"),
        ("area_budget_mm2", "big", r"hw.area_budget_mm2 = 'big' is not valid"),
        ("area_budget_mm2", -5, r"hw.area_budget_mm2 = -5 is not valid"),
        ("area_floor", 1.5, r"hw.area_floor = 1.5 is not valid"),
        ("power_budget_w", 0.0, r"hw.power_budget_w = 0.0 is not valid"),
    ],
)
def test_bad_values_are_clear_errors(key: str, value: object, message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        hw_space_from_config(typed(HwConfig, {**_preset("tpuv4"), key: value}, "hw"))


def test_missing_field_in_a_hardware_file(tmp_path: Path) -> None:
    text = (CONF_DIR / "hw" / "tpuv4.yaml").read_text()
    path = tmp_path / "mine.yaml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("clock_hz")))
    with pytest.raises(PhazecError, match=r"The hw config is missing hw.clock_hz"):
        hw_space_from_config(typed(HwConfig, OmegaConf.load(path), "hw"))


def test_unknown_key_and_wrong_type_are_clear_errors() -> None:
    with pytest.raises(PhazecError, match="num_tcs"):
        hw_space_from_config(typed(HwConfig, {**_preset("tpuv4"), "num_tcs": [8]}, "hw"))
    with pytest.raises(PhazecError, match="area_floor"):
        hw_space_from_config(typed(HwConfig, {**_preset("tpuv4"), "area_floor": "low"}, "hw"))


def test_pow2_range_expands_inclusively() -> None:
    space = hw_space_from_config(
        typed(
            HwConfig,
            {**_preset("tpuv4"), "num_tc": {"pow2": [1, 16]}, "glb_bytes": [4 * MIB, 2 * MIB, 4 * MIB]},
            "hw",
        )
    )
    assert space.num_tc == (1, 2, 4, 8, 16)
    assert space.glb_bytes == (2 * MIB, 4 * MIB)
