"""Nominal interconnect peaks per GPU model, per direction.

A declarative table: one `GpuSpec` per part, each citing where its figures
come from. Every bandwidth here is bytes per second in ONE direction: a
vendor's "900 GB/s NVLink" is the sum of both directions, so it appears as
450e9. Link figures are summed over all of the GPU's links. Peaks are
nominal (signalling rate after line encoding), never measured; achieved
bandwidth is lower (protocol headers, flow control, routing).

`lookup_gpu` matches the marketing names that NVML (`nvmlDeviceGetName`),
amdsmi (`asic_info["market_name"]`) and PyTorch
(`torch.cuda.get_device_properties().name`) report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GB = 1e9  # vendors quote link bandwidth in decimal gigabytes


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's nominal figures; bandwidths are per direction.

    `link_peak_bytes_per_s` is the GPU-to-GPU fabric (NVLink, XGMI) summed
    over `link_count` links, one direction. `c2c_peak_bytes_per_s` is a
    chip-to-chip link to a CPU (NVLink-C2C on Grace Hopper), one direction.
    `tdp_w` is the board/module thermal design power the datasheet gives.
    """

    model: str
    vendor: str  # nvidia | amd
    link_kind: str | None  # nvlink | xgmi | None (no GPU-to-GPU fabric)
    link_count: int | None
    link_peak_bytes_per_s: float | None
    pcie_gen: int | None
    pcie_width: int | None
    tdp_w: float | None
    source: str
    c2c_peak_bytes_per_s: float | None = None

    @property
    def link_peak_per_link_bytes_per_s(self) -> float | None:
        """One link's nominal peak, one direction."""
        if self.link_peak_bytes_per_s is None or not self.link_count:
            return None
        return self.link_peak_bytes_per_s / self.link_count

    @property
    def pcie_peak_bytes_per_s(self) -> float | None:
        """The host PCIe link's nominal peak, one direction."""
        if self.pcie_gen is None or self.pcie_width is None:
            return None
        return pcie_peak_bytes_per_s(self.pcie_gen, self.pcie_width)


# --- NVIDIA -----------------------------------------------------------------
# NVLink per link, per direction: NVLink2/3/4 25 GB/s, NVLink5 50 GB/s.

V100_SXM2 = GpuSpec(
    model="Tesla V100 SXM2",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=6,  # NVLink2: 6 x 25 GB/s each way = 300 GB/s both ways
    link_peak_bytes_per_s=150 * GB,
    pcie_gen=3,
    pcie_width=16,
    tdp_w=300.0,
    source="NVIDIA Tesla V100 GPU Architecture whitepaper (WP-08608-001, 2017); V100 datasheet",
)

V100_PCIE = GpuSpec(
    model="Tesla V100 PCIe",
    vendor="nvidia",
    link_kind=None,
    link_count=None,
    link_peak_bytes_per_s=None,
    pcie_gen=3,
    pcie_width=16,
    tdp_w=250.0,
    source="NVIDIA Tesla V100 datasheet (PCIe form factor)",
)

A100_SXM4 = GpuSpec(
    model="A100 SXM4",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=12,  # NVLink3: 12 x 25 GB/s each way = 600 GB/s both ways
    link_peak_bytes_per_s=300 * GB,
    pcie_gen=4,
    pcie_width=16,
    tdp_w=400.0,
    source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020); A100 datasheet (SXM4 40GB/80GB)",
)

# The PCIe cards reach NVLink only through an NVLink bridge to one peer
# (600 GB/s both ways); without a bridge NVML reports no active links.
A100_PCIE_40GB = GpuSpec(
    model="A100 PCIe 40GB",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=12,
    link_peak_bytes_per_s=300 * GB,
    pcie_gen=4,
    pcie_width=16,
    tdp_w=250.0,
    source="NVIDIA A100 datasheet (PCIe 40GB; NVLink bridge for 2 GPUs: 600 GB/s)",
)

A100_PCIE_80GB = GpuSpec(
    model="A100 PCIe 80GB",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=12,
    link_peak_bytes_per_s=300 * GB,
    pcie_gen=4,
    pcie_width=16,
    tdp_w=300.0,
    source="NVIDIA A100 80GB PCIe datasheet (NVLink bridge for 2 GPUs: 600 GB/s)",
)

H100_SXM5 = GpuSpec(
    model="H100 SXM5",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=18,  # NVLink4: 18 x 25 GB/s each way = 900 GB/s both ways
    link_peak_bytes_per_s=450 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=700.0,
    source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022); H100 datasheet (SXM5)",
)

H100_PCIE = GpuSpec(
    model="H100 PCIe",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=12,  # via NVLink bridge: 600 GB/s both ways
    link_peak_bytes_per_s=300 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=350.0,
    source="NVIDIA H100 datasheet (PCIe 80GB; NVLink bridge 600 GB/s)",
)

H100_NVL = GpuSpec(
    model="H100 NVL",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=12,  # via NVLink bridge: 600 GB/s both ways
    link_peak_bytes_per_s=300 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=400.0,
    source="NVIDIA H100 datasheet (H100 NVL 94GB; NVLink bridge 600 GB/s)",
)

H200_SXM = GpuSpec(
    model="H200 SXM",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=18,  # NVLink4, as H100 SXM5: 900 GB/s both ways
    link_peak_bytes_per_s=450 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=700.0,
    source="NVIDIA H200 Tensor Core GPU datasheet (SXM)",
)

H200_NVL = GpuSpec(
    model="H200 NVL",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=18,  # 2- or 4-way NVLink bridge: 900 GB/s both ways
    link_peak_bytes_per_s=450 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=600.0,
    source="NVIDIA H200 Tensor Core GPU datasheet (H200 NVL)",
)

# The Hopper GPU of a GH200 reaches its Grace CPU over NVLink-C2C, not PCIe,
# so it has no host PCIe link of its own. The datasheet's 450-1000 W is the
# programmable power of the whole superchip (CPU + GPU + memory), not of the
# GPU, so tdp_w stays unknown.
GH200 = GpuSpec(
    model="GH200",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=18,  # NVLink4: 900 GB/s both ways to other GPUs
    link_peak_bytes_per_s=450 * GB,
    pcie_gen=None,
    pcie_width=None,
    tdp_w=None,
    source="NVIDIA Grace Hopper Superchip Architecture whitepaper (2023); GH200 datasheet (NVLink-C2C 900 GB/s)",
    c2c_peak_bytes_per_s=450 * GB,
)

# The Blackwell GPU's host interface in HGX B200 is PCIe Gen5 x16 (the HGX
# B200 / DGX B200 datasheets list "PCIe Gen5: 128 GB/s", i.e. both ways).
B200 = GpuSpec(
    model="B200",
    vendor="nvidia",
    link_kind="nvlink",
    link_count=18,  # NVLink5: 18 x 50 GB/s each way = 1.8 TB/s both ways
    link_peak_bytes_per_s=900 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=1000.0,
    source="NVIDIA Blackwell architecture technical brief (2024); HGX B200 / DGX B200 datasheets",
)

# --- AMD --------------------------------------------------------------------
# amdsmi sees each MI250X Graphics Compute Die (GCD) as its own GPU, so the
# figures are per GCD. The datasheet gives 8 Infinity Fabric links per OAM at
# 100 GB/s each (both ways); each GCD has 8 link endpoints: 4 to its sibling
# GCD in the package and 4 to other packages (the OLCF Frontier node diagram
# shows 4 links between sibling GCDs, 200 GB/s each way). The two parts share
# the market name "MI250X / MI250"; MI250 systems may wire fewer external
# links. The 560 W TDP is per OAM (both GCDs).
MI250X = GpuSpec(
    model="AMD Instinct MI250X (per GCD)",
    vendor="amd",
    link_kind="xgmi",
    link_count=8,  # 8 x 50 GB/s each way
    link_peak_bytes_per_s=400 * GB,
    pcie_gen=4,
    pcie_width=16,
    tdp_w=560.0,
    source="AMD Instinct MI250X datasheet; AMD CDNA 2 architecture whitepaper (2021); OLCF Frontier user guide",
)

MI300X = GpuSpec(
    model="AMD Instinct MI300X",
    vendor="amd",
    link_kind="xgmi",
    link_count=7,  # 7 x 128 GB/s both ways = 896 GB/s aggregate peer-to-peer
    link_peak_bytes_per_s=448 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=750.0,
    source="AMD Instinct MI300X datasheet; AMD CDNA 3 architecture whitepaper (2023)",
)

MI325X = GpuSpec(
    model="AMD Instinct MI325X",
    vendor="amd",
    link_kind="xgmi",
    link_count=7,  # same fabric as MI300X: 896 GB/s both ways
    link_peak_bytes_per_s=448 * GB,
    pcie_gen=5,
    pcie_width=16,
    tdp_w=1000.0,
    source="AMD Instinct MI325X datasheet (2024)",
)

# Patterns over the normalised name (lower case, runs of anything but
# letters and digits turned into one space), most specific first.
_NAME_PATTERNS: list[tuple[str, GpuSpec]] = [
    (r"\bgh200\b", GH200),
    (r"\bh200 nvl\b", H200_NVL),
    (r"\bh200\b", H200_SXM),
    (r"\bh100 nvl\b", H100_NVL),
    (r"\bh100 pcie\b", H100_PCIE),
    (r"\bh100\b", H100_SXM5),  # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (r"\bb200\b", B200),
    (r"\ba100\b.*\b80gb\b.*\bpcie\b|\ba100\b.*\bpcie\b.*\b80gb\b", A100_PCIE_80GB),
    (r"\ba100\b.*\bpcie\b", A100_PCIE_40GB),
    (r"\ba100\b.*\bsxm", A100_SXM4),  # A100-SXM4-40GB, A100-SXM4-80GB, A100-SXM-64GB
    # PG509 is the HGX A100 SXM4 board; some drivers report its board id
    # ("NVIDIA A100-PG509-200") instead of the SXM4 name.
    (r"\ba100\b.*\bpg509\b", A100_SXM4),
    (r"\bv100\b.*\bsxm2\b", V100_SXM2),
    (r"\bv100s?\b.*\bpcie\b", V100_PCIE),
    (r"\bmi250x\b", MI250X),  # includes "MI250X / MI250"
    (r"\bmi300x\b", MI300X),
    (r"\bmi325x\b", MI325X),
]


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).strip()


def lookup_gpu(model_name: str) -> GpuSpec | None:
    """The spec for a reported device name, or None for a part not in the table."""
    normalised = _normalise(model_name)
    for pattern, spec in _NAME_PATTERNS:
        if re.search(pattern, normalised):
            return spec
    return None


# --- PCIe -------------------------------------------------------------------
# Per lane, one direction, after line encoding: Gen1/2 use 8b/10b, Gen3-5
# 128b/130b. Gen6/7 send 256-byte FLITs of which 242 bytes are data (the
# rest is FEC and CRC), so their efficiency is 242/256; the often-quoted
# 7.877 GB/s for Gen6 wrongly applies 128b/130b to it.
_PCIE_GT_PER_S_AND_EFFICIENCY: dict[int, tuple[float, float]] = {
    1: (2.5e9, 8 / 10),
    2: (5e9, 8 / 10),
    3: (8e9, 128 / 130),
    4: (16e9, 128 / 130),
    5: (32e9, 128 / 130),
    6: (64e9, 242 / 256),
    7: (128e9, 242 / 256),
}


def pcie_lane_peak_bytes_per_s(gen: int) -> float:
    """One lane's nominal peak, one direction (Gen5: 3.938 GB/s)."""
    if gen not in _PCIE_GT_PER_S_AND_EFFICIENCY:
        raise ValueError(f"unknown PCIe generation {gen}; known: 1-7")
    transfers_per_s, efficiency = _PCIE_GT_PER_S_AND_EFFICIENCY[gen]
    return transfers_per_s * efficiency / 8


def pcie_peak_bytes_per_s(gen: int, width: int) -> float:
    """A PCIe link's nominal peak, one direction (Gen5 x16: 63.0 GB/s)."""
    if width < 1:
        raise ValueError(f"PCIe width must be at least x1, got x{width}")
    return pcie_lane_peak_bytes_per_s(gen) * width


# --- Networks between nodes ---------------------------------------------------
# Nominal data rate of one port, one direction (the marketed Gb/s is already
# after the PHY's encoding), before transport headers. Sources: InfiniBand
# Trade Association roadmap (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s per 4x
# port); IEEE 802.3 (100/200/400/800GbE) for RoCE.
_NETWORK_GBIT_PER_S: dict[str, float] = {
    "ib_edr": 100,
    "ib_hdr100": 100,
    "ib_hdr": 200,
    "ib_ndr200": 200,
    "ib_ndr": 400,
    "ib_xdr": 800,
    "roce_100g": 100,
    "roce_200g": 200,
    "roce_400g": 400,
    "roce_800g": 800,
}
_NETWORK_ALIASES: dict[str, str] = {
    "edr": "ib_edr",
    "hdr": "ib_hdr",
    "hdr100": "ib_hdr100",
    "ndr": "ib_ndr",
    "ndr200": "ib_ndr200",
    "xdr": "ib_xdr",
    "100gbe": "roce_100g",
    "200gbe": "roce_200g",
    "400gbe": "roce_400g",
    "800gbe": "roce_800g",
}
NETWORK_KINDS = tuple(_NETWORK_GBIT_PER_S)


def network_peak_bytes_per_s(kind: str) -> float | None:
    """One network port's nominal peak, one direction; None for an unknown kind.

    `kind` is one of NETWORK_KINDS ("ib_ndr", "roce_400g", ...) or a short
    alias ("NDR", "400GbE"), in any case.
    """
    key = re.sub(r"[^a-z0-9]+", "_", kind.lower()).strip("_")
    key = _NETWORK_ALIASES.get(key, key)
    gbit_per_s = _NETWORK_GBIT_PER_S.get(key)
    return None if gbit_per_s is None else gbit_per_s * 1e9 / 8
