"""The collector's OpenMetrics endpoint: `gpulens collect --metrics-address`.

`MetricsEndpoint` is the daemon's `TickObserver`: the loop hands it each
tick's rows once the tick is whole, and it keeps them as one immutable
snapshot. A scrape of `/metrics` turns the latest snapshot into metric
families; it makes no driver call of its own, and every GPU of a scrape
comes from the same tick (so a sum over a node's GPUs is coincident power).

Names follow Prometheus conventions: base units (watts, joules, hertz,
celsius, bytes, seconds), fractions as `_ratio` (0-1, never percent),
counters end in `_total`. Every series has the labels `host`, `gpu`,
`uuid`, `model` and `vendor`. With `--metrics-names dcgm` the endpoint
serves dcgm-exporter's names, units and labels instead (`DCGM_NAMES`), so
that dashboards and alerts written for dcgm-exporter read it unchanged.

This module imports prometheus_client (and with it the standard library's
HTTP server and ssl): the command line imports it only when
`--metrics-address` is given.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpulens.collector.backend import DeviceInfo
from gpulens.collector.errors import UsageError
from gpulens.collector.throttle import AMD_LIMITING_REASONS, CLOCK_EVENT_REASONS

# Outside 9100-9999, the range Prometheus's "Default port allocations" wiki
# hands out to exporters and which is full (dcgm-exporter 9400,
# node_exporter 9100, nvidia_gpu_exporter 9835 are in it), and below
# Linux's ephemeral ports (32768 on): a reminder of dcgm-exporter's 9400.
DEFAULT_METRICS_PORT = 19400
METRICS_NAMES = ("gpulens", "dcgm")

LABELS = ("host", "gpu", "uuid", "model", "vendor")


@dataclass(frozen=True)
class MetricSpec:
    """One telemetry column as one metric family: `value * scale`, or
    `value / -scale` where scale is negative (a division rounds 97 % to
    0.97 exactly; a multiplication by 0.01 may not)."""

    column: str
    name: str  # without `_total` for counters (prometheus_client adds it)
    kind: str  # gauge | counter
    unit: str  # OpenMetrics unit, a suffix of `name` ("" for none)
    scale: float
    help: str


_PCT = -100  # divide: % -> ratio
_MHZ = 1e6
_NS = -1e9  # divide: ns -> s

# Every column of TELEMETRY_METRIC_FIELDS but `throttle_reasons`, which is
# served as one series per reason (`gpulens_gpu_throttle_reason`).
GPULENS_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("power_w", "gpulens_gpu_power_watts", "gauge", "watts", 1, "Board power, driver-averaged (1 s window on Ampere and newer)."),
    MetricSpec("power_instant_w", "gpulens_gpu_power_instant_watts", "gauge", "watts", 1, "Instantaneous board power."),
    MetricSpec("power_max_w", "gpulens_gpu_power_max_watts", "gauge", "watts", 1, "Highest power in the driver's sample buffer since the previous sample."),
    MetricSpec("power_limit_w", "gpulens_gpu_power_limit_watts", "gauge", "watts", 1, "Enforced power limit."),
    MetricSpec("energy_j", "gpulens_gpu_energy_joules", "counter", "joules", 1, "Energy since the driver loaded."),
    MetricSpec("gpu_util_pct", "gpulens_gpu_utilization_ratio", "gauge", "ratio", _PCT, "Fraction of time a kernel ran (0-1)."),
    MetricSpec("mem_util_pct", "gpulens_gpu_memory_utilization_ratio", "gauge", "ratio", _PCT, "Fraction of time device memory was read or written (0-1)."),
    MetricSpec("sm_active_pct", "gpulens_gpu_sm_active_ratio", "gauge", "ratio", _PCT, "Fraction of SM cycles with a warp resident (0-1)."),
    MetricSpec("sm_clock_mhz", "gpulens_gpu_sm_clock_hertz", "gauge", "hertz", _MHZ, "SM clock."),
    MetricSpec("mem_clock_mhz", "gpulens_gpu_memory_clock_hertz", "gauge", "hertz", _MHZ, "Memory clock."),
    MetricSpec("temp_c", "gpulens_gpu_temperature_celsius", "gauge", "celsius", 1, "GPU temperature (AMD: the hotspot)."),
    MetricSpec("mem_temp_c", "gpulens_gpu_memory_temperature_celsius", "gauge", "celsius", 1, "Memory temperature."),
    MetricSpec("mem_used_bytes", "gpulens_gpu_memory_used_bytes", "gauge", "bytes", 1, "Device memory in use."),
    MetricSpec("mem_total_bytes", "gpulens_gpu_memory_total_bytes", "gauge", "bytes", 1, "Device memory in all."),
    MetricSpec("throttle_reasons_mask", "gpulens_gpu_throttle_reasons_mask", "gauge", "", 1, "Raw clock-event (throttle) reason bits, as the driver reports them."),
    MetricSpec("power_violation_ns", "gpulens_gpu_power_violation_seconds", "counter", "seconds", _NS, "Time held back by the power limit."),
    MetricSpec("thermal_violation_ns", "gpulens_gpu_thermal_violation_seconds", "counter", "seconds", _NS, "Time held back by the thermal limit."),
    MetricSpec("pcie_tx_bytes_per_s", "gpulens_gpu_pcie_tx_bytes_per_second", "gauge", "bytes_per_second", 1, "PCIe bytes sent."),
    MetricSpec("pcie_rx_bytes_per_s", "gpulens_gpu_pcie_rx_bytes_per_second", "gauge", "bytes_per_second", 1, "PCIe bytes received."),
    MetricSpec("pcie_bytes_per_s", "gpulens_gpu_pcie_bytes_per_second", "gauge", "bytes_per_second", 1, "PCIe bytes both ways, where the device does not split them."),
    MetricSpec("pcie_replay_count", "gpulens_gpu_pcie_replays", "counter", "", 1, "PCIe replays (retries)."),
    MetricSpec("link_tx_bytes_per_s", "gpulens_gpu_link_tx_bytes_per_second", "gauge", "bytes_per_second", 1, "NVLink or XGMI bytes sent, over all links."),
    MetricSpec("link_rx_bytes_per_s", "gpulens_gpu_link_rx_bytes_per_second", "gauge", "bytes_per_second", 1, "NVLink or XGMI bytes received, over all links."),
    MetricSpec("ecc_corrected_count", "gpulens_gpu_ecc_corrected_errors", "counter", "", 1, "Corrected ECC errors since the driver loaded."),
    MetricSpec("ecc_uncorrected_count", "gpulens_gpu_ecc_uncorrected_errors", "counter", "", 1, "Uncorrected ECC errors since the driver loaded."),
)

_MIB = -(2**20)  # divide: bytes -> MiB

# dcgm-exporter's names (etc/default-counters.csv and dcp-metrics-included.csv)
# in its units; columns with no dcgm-exporter field there are left out.
# All are served as gauges under the exact name (dcgm-exporter declares some
# counters but names them without `_total`; PromQL reads either alike).
DCGM_NAMES: tuple[tuple[str, str, float], ...] = (
    ("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", 1),  # MHz
    ("mem_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", 1),
    ("mem_temp_c", "DCGM_FI_DEV_MEMORY_TEMP", 1),  # C
    ("temp_c", "DCGM_FI_DEV_GPU_TEMP", 1),
    ("power_w", "DCGM_FI_DEV_POWER_USAGE", 1),  # W
    ("energy_j", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1000),  # mJ
    ("pcie_replay_count", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1),
    ("gpu_util_pct", "DCGM_FI_DEV_GPU_UTIL", 1),  # %
    ("mem_util_pct", "DCGM_FI_DEV_MEM_COPY_UTIL", 1),  # %
    ("mem_used_bytes", "DCGM_FI_DEV_FB_USED", _MIB),  # MiB
    ("ecc_corrected_count", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1),
    ("ecc_uncorrected_count", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1),
    ("sm_active_pct", "DCGM_FI_PROF_SM_ACTIVE", _PCT),  # ratio
    ("pcie_tx_bytes_per_s", "DCGM_FI_PROF_PCIE_TX_BYTES", 1),  # bytes/s
    ("pcie_rx_bytes_per_s", "DCGM_FI_PROF_PCIE_RX_BYTES", 1),
)
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

# The reasons served for a GPU before any was seen on it (each 0 or 1);
# a reason seen once is served from then on.
_REASONS_BY_VENDOR: dict[str, tuple[str, ...]] = {
    "nvidia": tuple(name for _, name in CLOCK_EVENT_REASONS),
    "sim": tuple(name for _, name in CLOCK_EVENT_REASONS),
    "amd": tuple(sorted(AMD_LIMITING_REASONS)),
}


def _scaled(value: float, scale: float) -> float:
    if scale == 1:
        return value
    return value * scale if scale > 0 else value / -scale


def parse_metrics_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` (port `DEFAULT_METRICS_PORT`), `:PORT` (every
    interface) or `[IPV6]:PORT` → (host, port)."""
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        rest = text[end + 1:] if end > 0 else "?"
        if rest and not rest.startswith(":"):
            raise UsageError(f"--metrics-address {text!r}: an IPv6 address goes in brackets, as [::1]:{DEFAULT_METRICS_PORT}")
        host, port_text = text[1:end], rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise UsageError(f"--metrics-address {text!r}: put an IPv6 address in brackets, as [::1]:{DEFAULT_METRICS_PORT}")
    if not port_text:
        port = DEFAULT_METRICS_PORT
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise UsageError(f"--metrics-address {text!r}: the port must be a number from 1 to 65535")
    return host or "0.0.0.0", port


class MetricsEndpoint:
    """The latest tick of one node, as metric families (a `TickObserver`
    and a prometheus_client collector)."""

    def __init__(self, host: str, names: str = "gpulens") -> None:
        if names not in METRICS_NAMES:
            raise UsageError(f"--metrics-names must be one of {', '.join(METRICS_NAMES)}, got {names!r}")
        self.host = host
        self.names = names
        self._lock = threading.Lock()  # the event counters, written by the loop, read by scrapes
        # Replaced whole, never changed in place: a scrape reads one reference.
        self._tick: tuple[int, tuple[tuple[DeviceInfo, dict[str, Any]], ...]] | None = None
        self._devices: tuple[DeviceInfo, ...] = ()
        self._peaks: dict[int, dict[str, float | None]] = {}
        self._reasons: dict[int, tuple[str, ...]] = {}
        self._lost_total: dict[int, int] = {}
        self._lost_now: set[int] = set()
        self._xid_total: dict[int, int] = {}
        self._last_xid: dict[int, int] = {}
        self._failures: dict[int, int] = {}
        self._ticks_skipped = 0

    # --- TickObserver (the loop's thread) -------------------------------------

    def devices(self, devices: list[DeviceInfo], peaks: dict[int, dict[str, float | None]]) -> None:
        with self._lock:
            for device in devices:
                self._lost_total.setdefault(device.gpu_index, 0)
                self._xid_total.setdefault(device.gpu_index, 0)
                self._failures.setdefault(device.gpu_index, 0)
                self._reasons.setdefault(device.gpu_index, _REASONS_BY_VENDOR.get(device.vendor, ()))
        self._peaks = dict(peaks)
        self._devices = tuple(devices)

    def tick(self, ts_ns: int, rows: list[tuple[DeviceInfo, dict[str, Any]]]) -> None:
        for device, row in rows:
            known = self._reasons.get(device.gpu_index, ())
            new = [reason for reason in row.get("throttle_reasons") or () if reason not in known]
            if new:
                self._reasons[device.gpu_index] = known + tuple(new)  # a new tuple: scrapes hold the old one
        self._tick = (ts_ns, tuple(rows))

    def event(self, kind: str, device: DeviceInfo | None, value: int | None) -> None:
        with self._lock:
            if kind == "ticks_skipped":
                self._ticks_skipped += value or 0
            if device is None:
                return
            gpu = device.gpu_index
            if kind == "gpu_lost":
                self._lost_total[gpu] = self._lost_total.get(gpu, 0) + 1
                self._lost_now.add(gpu)
            elif kind == "gpu_recovered":
                self._lost_now.discard(gpu)
            elif kind == "xid":
                self._xid_total[gpu] = self._xid_total.get(gpu, 0) + 1
                if value is not None:
                    self._last_xid[gpu] = value
            elif kind == "sample_failed":
                self._failures[gpu] = self._failures.get(gpu, 0) + 1

    # --- prometheus_client collector (a scrape's thread) ------------------------

    def describe(self) -> list[Metric]:
        return []  # families vary with the GPUs seen: no registration-time check

    def collect(self) -> Iterator[Metric]:
        if self.names == "dcgm":
            yield from self._dcgm_families()
        else:
            yield from self._gpulens_families()

    def _labels(self, device: DeviceInfo) -> list[str]:
        return [self.host, str(device.gpu_index), device.gpu_uuid, device.model, device.vendor]

    def _gpulens_families(self) -> Iterator[Metric]:
        tick = self._tick
        rows = () if tick is None else tick[1]
        for spec in GPULENS_METRICS:
            family_type = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            family = family_type(spec.name, spec.help, labels=LABELS, unit=spec.unit)
            for device, row in rows:
                value = row.get(spec.column)
                if value is not None:
                    family.add_metric(self._labels(device), _scaled(value, spec.scale))
            yield family

        reasons = GaugeMetricFamily("gpulens_gpu_throttle_reason",
                                    "1 while this clock-event (throttle) reason is active, else 0.",
                                    labels=(*LABELS, "reason"))
        for device, row in rows:
            active = row.get("throttle_reasons")
            if active is None:
                continue
            labels = self._labels(device)
            for reason in self._reasons.get(device.gpu_index, ()):
                reasons.add_metric([*labels, reason], 1 if reason in active else 0)
        yield reasons

        stamp = GaugeMetricFamily("gpulens_sample_timestamp_seconds",
                                  "When the served sample was taken (the tick's time, as the Parquet `ts`).",
                                  labels=("host",), unit="seconds")
        if tick is not None:
            stamp.add_metric([self.host], tick[0] / 1e9)
        yield stamp
        yield from self._inventory_families()
        yield from self._event_families()

    def _inventory_families(self) -> Iterator[Metric]:
        devices, peaks = self._devices, self._peaks
        info = GaugeMetricFamily("gpulens_gpu_info", "Constant 1, labelled with the GPU's inventory.",
                                 labels=(*LABELS, "pci_bus_id", "driver_version", "link_kind"))
        link_peak = GaugeMetricFamily("gpulens_gpu_link_peak_bytes_per_second",
                                      "Nominal NVLink or XGMI peak per direction, over all links.",
                                      labels=LABELS, unit="bytes_per_second")
        pcie_peak = GaugeMetricFamily("gpulens_gpu_pcie_peak_bytes_per_second",
                                      "Nominal PCIe peak per direction at the link's generation and width.",
                                      labels=LABELS, unit="bytes_per_second")
        for device in devices:
            labels = self._labels(device)
            info.add_metric([*labels, device.pci_bus_id or "", device.driver_version or "", device.link_kind or ""], 1)
            gpu_peaks = peaks.get(device.gpu_index, {})
            if gpu_peaks.get("link_peak_bytes_per_s") is not None:
                link_peak.add_metric(labels, gpu_peaks["link_peak_bytes_per_s"])
            if gpu_peaks.get("pcie_peak_bytes_per_s") is not None:
                pcie_peak.add_metric(labels, gpu_peaks["pcie_peak_bytes_per_s"])
        yield from (info, link_peak, pcie_peak)

    def _event_families(self) -> Iterator[Metric]:
        with self._lock:
            lost_total, lost_now = dict(self._lost_total), set(self._lost_now)
            xid_total, last_xid, failures = dict(self._xid_total), dict(self._last_xid), dict(self._failures)
            ticks_skipped = self._ticks_skipped
        up = GaugeMetricFamily("gpulens_gpu_up", "1 while the GPU answers, 0 once lost (until it answers again).", labels=LABELS)
        lost = CounterMetricFamily("gpulens_gpu_lost", "Times the GPU was lost (fell off the bus, stopped answering).", labels=LABELS)
        xid = CounterMetricFamily("gpulens_gpu_xid_errors", "XID errors the driver reported since the collector started.", labels=LABELS)
        xid_code = GaugeMetricFamily("gpulens_gpu_last_xid", "Code of the latest XID error (present once one happened).", labels=LABELS)
        failed = CounterMetricFamily("gpulens_gpu_sample_failures", "Samples of the GPU that failed (other than a lost GPU).", labels=LABELS)
        for device in self._devices:
            labels, gpu = self._labels(device), device.gpu_index
            up.add_metric(labels, 0 if gpu in lost_now else 1)
            lost.add_metric(labels, lost_total.get(gpu, 0))
            xid.add_metric(labels, xid_total.get(gpu, 0))
            failed.add_metric(labels, failures.get(gpu, 0))
            if gpu in last_xid:
                xid_code.add_metric(labels, last_xid[gpu])
        skipped = CounterMetricFamily("gpulens_collector_ticks_skipped",
                                      "Ticks the collector skipped because a tick overran the next.", labels=("host",))
        skipped.add_metric([self.host], ticks_skipped)
        yield from (up, lost, xid, xid_code, failed, skipped)

    def _dcgm_families(self) -> Iterator[Metric]:
        tick = self._tick
        rows = () if tick is None else tick[1]

        def labels(device: DeviceInfo) -> list[str]:
            return [str(device.gpu_index), device.gpu_uuid, device.pci_bus_id or "", f"nvidia{device.gpu_index}",
                    device.model, self.host]

        for column, name, scale in DCGM_NAMES:
            family = GaugeMetricFamily(name, f"gpulens {column} in dcgm-exporter's units.", labels=DCGM_LABELS)
            for device, row in rows:
                value = row.get(column)
                if value is not None:
                    family.add_metric(labels(device), _scaled(value, scale))
            yield family
        free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "gpulens mem_total_bytes - mem_used_bytes in MiB.", labels=DCGM_LABELS)
        for device, row in rows:
            used, total = row.get("mem_used_bytes"), row.get("mem_total_bytes")
            if used is not None and total is not None:
                free.add_metric(labels(device), _scaled(total - used, _MIB))
        yield free
        with self._lock:
            last_xid = dict(self._last_xid)
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Code of the latest XID error (0: none yet).", labels=DCGM_LABELS)
        for device in self._devices:
            xid.add_metric(labels(device), last_xid.get(device.gpu_index, 0))
        yield xid


class MetricsServer:
    """The HTTP server of one endpoint, on its own daemon thread."""

    def __init__(self, endpoint: MetricsEndpoint, address: str) -> None:
        host, port = parse_metrics_address(address)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(endpoint)
        ProcessCollector(registry=self.registry)  # the collector's own CPU and memory
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise UsageError(f"--metrics-address {address}: cannot listen on {host} port {port}: {error.strerror or error}") from None
        self.port = self._server.server_address[1]
        self.host = host

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
