"""The exporters' metric names and labels → the telemetry contract, in one
declarative place for the scrape files (`imports.scrape`) and a live
Prometheus (`imports.prometheus`).

dcgm-exporter (NVIDIA/dcgm-exporter, its default and `dcp-metrics`
counters) names series after DCGM fields, `DCGM_FI_DEV_POWER_USAGE{gpu="0",
UUID="GPU-...", Hostname="node1", modelName="NVIDIA H100 80GB HBM3", ...}`;
nvidia_gpu_exporter (utkuozdemir/nvidia_gpu_exporter) after nvidia-smi's
query fields in base units, `nvidia_smi_power_draw_watts{uuid="..."}`, with
the index as its own series (`nvidia_smi_index`) and the model on
`nvidia_smi_gpu_info`.
"""

from __future__ import annotations

from dataclasses import dataclass

_MIB = 1 << 20


@dataclass(frozen=True)
class Metric:
    """One series' column, and the factor from its unit to the column's."""

    column: str
    scale: float = 1.0


# Where two names give one column, the first listed wins (a limit that is
# the enforced one over the management one, the newer name over the older).
DCGM_METRICS: dict[str, Metric] = {
    "DCGM_FI_DEV_POWER_USAGE": Metric("power_w"),  # W
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": Metric("power_instant_w"),  # W
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": Metric("power_limit_w"),  # W
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": Metric("power_limit_w"),  # W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Metric("energy_j", 1e-3),  # mJ since the driver loaded
    "DCGM_FI_DEV_GPU_UTIL": Metric("gpu_util_pct"),  # %
    "DCGM_FI_DEV_MEM_COPY_UTIL": Metric("mem_util_pct"),  # %
    "DCGM_FI_PROF_SM_ACTIVE": Metric("sm_active_pct", 100.0),  # ratio 0-1
    "DCGM_FI_DEV_SM_CLOCK": Metric("sm_clock_mhz"),  # MHz
    "DCGM_FI_DEV_MEM_CLOCK": Metric("mem_clock_mhz"),  # MHz
    "DCGM_FI_DEV_GPU_TEMP": Metric("temp_c"),  # °C
    "DCGM_FI_DEV_MEMORY_TEMP": Metric("mem_temp_c"),  # °C
    "DCGM_FI_DEV_FB_USED": Metric("mem_used_bytes", _MIB),  # MiB
    "DCGM_FI_DEV_FB_TOTAL": Metric("mem_total_bytes", _MIB),  # MiB
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": Metric("throttle_reasons_mask"),  # NVML bit mask
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Metric("throttle_reasons_mask"),
    "DCGM_FI_DEV_POWER_VIOLATION": Metric("power_violation_ns", 1e3),  # µs
    "DCGM_FI_DEV_THERMAL_VIOLATION": Metric("thermal_violation_ns", 1e3),  # µs
    "DCGM_FI_PROF_PCIE_TX_BYTES": Metric("pcie_tx_bytes_per_s"),  # B/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": Metric("pcie_rx_bytes_per_s"),  # B/s
    "DCGM_FI_PROF_NVLINK_TX_BYTES": Metric("link_tx_bytes_per_s"),  # B/s
    "DCGM_FI_PROF_NVLINK_RX_BYTES": Metric("link_rx_bytes_per_s"),  # B/s
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Metric("pcie_replay_count"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Metric("ecc_corrected_count"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Metric("ecc_uncorrected_count"),
}

# dcgm-exporter's labels → keys and devices columns.
DCGM_LABELS = {"gpu": "gpu_index", "UUID": "gpu_uuid", "Hostname": "host", "modelName": "model",
               "pci_bus_id": "pci_bus_id", "DCGM_FI_DRIVER_VERSION": "driver_version"}

NVIDIA_GPU_EXPORTER_METRICS: dict[str, Metric] = {
    "nvidia_smi_power_draw_watts": Metric("power_w"),
    "nvidia_smi_power_draw_average_watts": Metric("power_w"),
    "nvidia_smi_power_draw_instant_watts": Metric("power_instant_w"),
    "nvidia_smi_enforced_power_limit_watts": Metric("power_limit_w"),
    "nvidia_smi_power_limit_watts": Metric("power_limit_w"),
    "nvidia_smi_utilization_gpu_ratio": Metric("gpu_util_pct", 100.0),
    "nvidia_smi_utilization_memory_ratio": Metric("mem_util_pct", 100.0),
    "nvidia_smi_clocks_current_sm_clock_hz": Metric("sm_clock_mhz", 1e-6),
    "nvidia_smi_clocks_current_memory_clock_hz": Metric("mem_clock_mhz", 1e-6),
    "nvidia_smi_temperature_gpu": Metric("temp_c"),
    "nvidia_smi_temperature_memory": Metric("mem_temp_c"),
    "nvidia_smi_memory_used_bytes": Metric("mem_used_bytes"),
    "nvidia_smi_memory_total_bytes": Metric("mem_total_bytes"),
    "nvidia_smi_clocks_event_reasons_active": Metric("throttle_reasons_mask"),
    "nvidia_smi_clocks_throttle_reasons_active": Metric("throttle_reasons_mask"),
    "nvidia_smi_clocks_event_reasons_counters_sw_power_cap_seconds": Metric("power_violation_ns", 1e9),
    "nvidia_smi_clocks_event_reasons_counters_sw_thermal_slowdown_seconds": Metric("thermal_violation_ns", 1e9),
    "nvidia_smi_ecc_errors_corrected_volatile_total": Metric("ecc_corrected_count"),
    "nvidia_smi_ecc_errors_uncorrected_volatile_total": Metric("ecc_uncorrected_count"),
}

# nvidia_gpu_exporter's per-GPU series that are inventory, not telemetry.
NVIDIA_GPU_EXPORTER_DEVICE_METRICS: dict[str, Metric] = {
    "nvidia_smi_power_default_limit_watts": Metric("power_limit_default_w"),
    "nvidia_smi_power_min_limit_watts": Metric("power_limit_min_w"),
    "nvidia_smi_power_max_limit_watts": Metric("power_limit_max_w"),
    "nvidia_smi_pcie_link_gen_max": Metric("pcie_gen"),
    "nvidia_smi_pcie_link_width_max": Metric("pcie_width"),
}
NVIDIA_GPU_EXPORTER_INDEX = "nvidia_smi_index"
NVIDIA_GPU_EXPORTER_INFO = "nvidia_smi_gpu_info"
# nvidia_smi_gpu_info's labels → devices columns.
NVIDIA_GPU_EXPORTER_INFO_LABELS = {"name": "model", "pci_bus_id": "pci_bus_id", "serial": "serial",
                                   "driver_version": "driver_version", "index": "gpu_index"}

ALL_METRICS: dict[str, Metric] = {**DCGM_METRICS, **NVIDIA_GPU_EXPORTER_METRICS}
# Rank of each name among those giving its column (0 wins).
PREFERENCE: dict[str, int] = {}
for _table in (DCGM_METRICS, NVIDIA_GPU_EXPORTER_METRICS):
    _seen: dict[str, int] = {}
    for _name, _metric in _table.items():
        PREFERENCE[_name] = _seen.get(_metric.column, 0)
        _seen[_metric.column] = PREFERENCE[_name] + 1


def gpu_uuid(value: str | None) -> str | None:
    """NVML's form, `GPU-<uuid>` (nvidia_gpu_exporter drops the prefix)."""
    if not value:
        return None
    return value if value.startswith(("GPU-", "MIG-")) else f"GPU-{value}"
