"""Training systems: presets, tier choice and validation."""

from typing import Any

import pytest
from omegaconf import OmegaConf

from phazec.config.settings import typed
from phazec.errors import PhazecError
from phazec.hw.schema import SystemConfig
from phazec.hw.system import NetworkTier, System, system_from_config
from tests.conftest import REPO

CONF_DIR = REPO / "conf"


def _preset(name: str) -> dict[str, Any]:
    values = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "system" / f"{name}.yaml"))
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}


def test_phaze_1024() -> None:
    system = system_from_config(typed(SystemConfig, _preset("phaze_1024"), "system"))
    assert system == System(
        name="phaze_1024",
        devices=1024,
        global_batch=4096,
        hbm_bytes=(32e9, 64e9, 80e9),
        tiers=(
            NetworkTier(
                group_size=1024, bandwidth_bytes_per_s=0.77 * 4 * 2**30, latency_s=2e-6, call_latency_s=1.5e-5
            ),
        ),
    )


def test_dgx_a100_picks_nvlink_inside_a_node_and_infiniband_across() -> None:
    system = system_from_config(typed(SystemConfig, _preset("dgx_a100"), "system"))
    # The bandwidths collectives reach: NVLink at 77 % of 300 GB/s, InfiniBand at 90 % of 25 GB/s.
    assert system.tier_for(1).bandwidth_bytes_per_s == 0.77 * 300e9
    assert system.tier_for(8).bandwidth_bytes_per_s == 0.77 * 300e9
    assert system.tier_for(9).bandwidth_bytes_per_s == 0.9 * 25e9
    assert system.tier_for(1024).bandwidth_bytes_per_s == 0.9 * 25e9
    with pytest.raises(PhazecError, match="A collective over 2048 devices is larger than every network tier"):
        system.tier_for(2048)


def test_jean_zay_a100_has_omni_path_between_nodes() -> None:
    system = system_from_config(typed(SystemConfig, _preset("jean_zay_a100"), "system"))
    # BLOOM's cluster: 4 Omni-Path links of 100 Gb/s per 8 GPUs, at 90 % of the line rate.
    assert (system.devices, system.global_batch) == (384, 2048)
    assert system.tier_for(8).bandwidth_bytes_per_s == 0.77 * 300e9
    assert system.tier_for(9).bandwidth_bytes_per_s == 0.9 * 4 * 100e9 / 8 / 8
    assert system.tier_for(384).bandwidth_bytes_per_s == 0.9 * 6.25e9


@pytest.mark.parametrize(
    ("name", "domain", "nvlink_gb_s", "scale_out_gb_s", "hbm_gb"),
    [
        ("dgx_h200", 8, 450, 50, 148.0),  # NVLink 4; ConnectX-7 NDR 400 Gb/s per GPU
        ("dgx_h800", 8, 200, 50, 82.8),  # NVLink 4 cut to 400 GB/s a GPU; ConnectX-7 NDR 400 Gb/s per GPU
        ("dgx_b200", 8, 900, 50, 189.5),  # NVLink 5; ConnectX-7 400 Gb/s per GPU
        ("gb200_nvl72", 72, 900, 50, 195.9),  # 72-GPU NVLink 5 domain; ConnectX-7 400 Gb/s per GPU
        ("gb300_nvl72", 72, 900, 100, 295.3),  # 72-GPU NVLink 5 domain; ConnectX-8 800 Gb/s per GPU
    ],
)
def test_2024_25_systems_pick_nvlink_inside_a_domain(
    name: str, domain: int, nvlink_gb_s: int, scale_out_gb_s: int, hbm_gb: float
) -> None:
    """NVLink at 75 % of its nominal bandwidth up to the domain (8 GPUs a DGX, 72 a rack: no 4-GPU tray
    tier, the tray's GPUs talk over the same switches), the NIC at 90 % of its line rate beyond it."""
    system = system_from_config(typed(SystemConfig, _preset(name), "system"))
    assert system.hbm_bytes == (hbm_gb * 1e9,)
    assert [tier.group_size for tier in system.tiers] == [domain, system.devices]
    for group in (2, 4, domain):
        assert system.tier_for(group).bandwidth_bytes_per_s == 0.75 * nvlink_gb_s * 1e9
    assert system.tier_for(domain + 1).bandwidth_bytes_per_s == 0.9 * scale_out_gb_s * 1e9


NVIDIA_SMI_MIB = {"dgx_h100": 81_559, "dgx_h800": 81_559, "dgx_h200": 143_771, "dgx_b200": 183_359,
                  "gb200_nvl72": 189_471, "gb300_nvl72": 284_208}  # fmt: skip
"""Each 2024-25 system's GPU memory as nvidia-smi reports it (H100 80GB HBM3, the H800's the same, H200,
B200, GB200, GB300)."""


@pytest.mark.parametrize(("name", "total_mib"), NVIDIA_SMI_MIB.items())
def test_2024_25_capacities_are_the_device_total_less_the_runtime_reserve(name: str, total_mib: int) -> None:
    """docs/devices.md, HBM capacity: nvidia-smi's total less 2.5 GiB, rounded down to 0.1 GB."""
    system = system_from_config(typed(SystemConfig, _preset(name), "system"))
    usable_bytes = (total_mib * 2**20) - round(2.5 * 2**30)
    assert system.hbm_bytes == (usable_bytes // 10**8 * 10**8,)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"devices": 0}, r"system.devices = 0 is not valid: it must be a positive integer"),
        ({"global_batch": -4}, r"system.global_batch = -4 is not valid"),
        ({"hbm_gb": []}, "system.hbm_gb is empty"),
        ({"hbm_gb": [32, 0]}, r"system.hbm_gb\[1\] = 0.0 is not valid"),
        ({"tiers": []}, "system.tiers is empty"),
        (
            {"tiers": [{"group_size": 8, "bandwidth_bytes_per_s": 0.0, "latency_s": 0.0}]},
            r"system.tiers\[0\].bandwidth_bytes_per_s = 0.0 is not valid",
        ),
        (
            {"tiers": [{"group_size": 0, "bandwidth_bytes_per_s": 1e9, "latency_s": 0.0}]},
            r"system.tiers\[0\].group_size = 0 is not valid",
        ),
        (
            {"tiers": [{"group_size": 1024, "bandwidth_bytes_per_s": 1e9, "latency_s": -1e-6}]},
            r"system.tiers\[0\].latency_s = -1e-06 is not valid",
        ),
        (
            {"tiers": [{"group_size": 512, "bandwidth_bytes_per_s": 1e9, "latency_s": 0.0}]},
            r"group sizes \[512\] are not valid: .* cover all 1024 devices",
        ),
        (
            {
                "tiers": [
                    {"group_size": 1024, "bandwidth_bytes_per_s": 1e9, "latency_s": 0.0},
                    {"group_size": 8, "bandwidth_bytes_per_s": 1e9, "latency_s": 0.0},
                ]
            },
            r"group sizes \[1024, 8\] are not valid: they must be strictly ascending",
        ),
        ({"devices": "many"}, "The system config does not fit its schema SystemConfig"),
    ],
)
def test_bad_values_are_clear_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PhazecError, match=message):
        system_from_config(typed(SystemConfig, {**_preset("phaze_1024"), **change}, "system"))


def test_missing_tiers_is_a_clear_error() -> None:
    values = _preset("phaze_1024")
    del values["tiers"]
    with pytest.raises(PhazecError, match=r"The system config is missing system\.tiers"):
        system_from_config(typed(SystemConfig, values, "system"))
