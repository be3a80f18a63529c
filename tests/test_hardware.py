import pytest

from gpulens.collector import hardware
from gpulens.collector.hardware import lookup_gpu, network_peak_bytes_per_s, pcie_peak_bytes_per_s


@pytest.mark.parametrize(
    ("reported_name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", hardware.H100_SXM5),
        ("NVIDIA H100 PCIe", hardware.H100_PCIE),
        ("NVIDIA H100 NVL", hardware.H100_NVL),
        ("NVIDIA A100-SXM4-80GB", hardware.A100_SXM4),
        ("NVIDIA A100-PG509-200", hardware.A100_SXM4),
        ("NVIDIA A100-SXM4-40GB", hardware.A100_SXM4),
        ("NVIDIA A100-PCIE-40GB", hardware.A100_PCIE_40GB),
        ("NVIDIA A100 80GB PCIe", hardware.A100_PCIE_80GB),
        ("Tesla V100-SXM2-16GB", hardware.V100_SXM2),
        ("Tesla V100-PCIE-32GB", hardware.V100_PCIE),
        ("NVIDIA H200", hardware.H200_SXM),
        ("NVIDIA H200 NVL", hardware.H200_NVL),
        ("NVIDIA GH200 480GB", hardware.GH200),
        ("NVIDIA B200", hardware.B200),
        ("AMD Instinct MI300X", hardware.MI300X),
        ("AMD Instinct MI250X / MI250", hardware.MI250X),
        ("AMD Instinct MI325X", hardware.MI325X),
    ],
)
def test_lookup_gpu_resolves_reported_names(reported_name, expected):
    assert lookup_gpu(reported_name) is expected


def test_lookup_gpu_unknown_name_is_none():
    assert lookup_gpu("NVIDIA GeForce RTX 4090") is None


def test_lookup_gpu_does_not_take_gb200_for_b200():
    assert lookup_gpu("NVIDIA GB200") is None


def test_h100_sxm5_link_peak_is_half_of_900_gb_per_s():
    spec = lookup_gpu("NVIDIA H100 80GB HBM3")
    assert (spec.link_kind, spec.link_count, spec.link_peak_bytes_per_s) == ("nvlink", 18, 450e9)
    assert spec.link_peak_per_link_bytes_per_s == 25e9


def test_a100_sxm4_has_12_nvlink3_links_at_300_gb_per_s_per_direction():
    spec = lookup_gpu("NVIDIA A100-SXM4-40GB")
    assert (spec.link_count, spec.link_peak_bytes_per_s, spec.pcie_gen) == (12, 300e9, 4)


def test_b200_nvlink5_is_900_gb_per_s_per_direction_on_pcie_gen5():
    spec = lookup_gpu("NVIDIA B200")
    assert (spec.link_peak_bytes_per_s, spec.link_count, spec.pcie_gen, spec.pcie_width) == (900e9, 18, 5, 16)


def test_mi300x_seven_xgmi_links_give_448_gb_per_s_per_direction():
    spec = lookup_gpu("AMD Instinct MI300X")
    assert (spec.link_kind, spec.link_count, spec.link_peak_bytes_per_s, spec.tdp_w) == ("xgmi", 7, 448e9, 750.0)
    assert spec.link_peak_per_link_bytes_per_s == 64e9


def test_gh200_has_c2c_to_grace_and_no_host_pcie():
    spec = lookup_gpu("NVIDIA GH200 480GB")
    assert (spec.c2c_peak_bytes_per_s, spec.pcie_gen, spec.pcie_peak_bytes_per_s) == (450e9, None, None)


def test_v100_pcie_has_no_gpu_fabric():
    spec = lookup_gpu("Tesla V100-PCIE-32GB")
    assert (spec.link_kind, spec.link_peak_bytes_per_s, spec.link_peak_per_link_bytes_per_s) == (None, None, None)


def test_pcie_gen5_x16_per_direction_after_128b130b_encoding():
    assert pcie_peak_bytes_per_s(5, 16) == pytest.approx(63_015_384_615.38, abs=0.01)


def test_pcie_gen4_x16_per_direction():
    assert pcie_peak_bytes_per_s(4, 16) == pytest.approx(31_507_692_307.69, abs=0.01)


def test_pcie_gen6_uses_flit_efficiency_not_128b130b():
    assert pcie_peak_bytes_per_s(6, 16) == 121e9  # 64 GT/s x 242/256 / 8 x 16


def test_spec_pcie_peak_matches_function():
    assert hardware.H100_SXM5.pcie_peak_bytes_per_s == pcie_peak_bytes_per_s(5, 16)


def test_pcie_unknown_generation_raises():
    with pytest.raises(ValueError, match="generation 9"):
        pcie_peak_bytes_per_s(9, 16)


@pytest.mark.parametrize(
    ("kind", "expected_bytes_per_s"),
    [("ib_hdr", 25e9), ("NDR", 50e9), ("ib_xdr", 100e9), ("roce_100g", 12.5e9), ("400GbE", 50e9)],
)
def test_network_peak_per_port_per_direction(kind, expected_bytes_per_s):
    assert network_peak_bytes_per_s(kind) == expected_bytes_per_s


def test_network_unknown_kind_is_none():
    assert network_peak_bytes_per_s("omnipath") is None
