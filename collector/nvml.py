"""NVML sampling backend for NVIDIA GPUs (nvidia-ml-py, `import pynvml`).

This is the only module that imports pynvml, and it does so lazily, in the
constructor, so the rest of gpulens runs on machines without the driver.

Every NVML call goes through one guarded helper (`_call`/`_query`), so no
caller writes try/except:

- NotSupported or NoPermission: the metric is None and is not asked for
  again on that device (permissions do not change while we run).
- FunctionNotFound (a driver older than the bindings): None, logged once,
  and the function is not called again; readers then use an older variant
  (clock-event reasons -> throttle reasons, memory info v2 -> v1, running
  processes v3 -> v2).
- GPU is lost / GPU not found / reset required (and Unknown while a GPU is
  coming back): `GpuLost` is raised and the handle dropped; the next
  `sample` asks for a fresh handle by UUID, so a recovered GPU comes back.
- Anything else (timeout, no data): None for this read only.

Call budget. A fast tick makes at most 3 device calls per GPU:

1. one batched `nvmlDeviceGetFieldValues`: average and instant power,
   enforced limit, memory temperature, power violation time, the NVLink
   data TX/RX counters and, on GPUs without GPM, the PCIe TX/RX byte
   counters. Each entry carries its own return code: a field the device does
   not support makes only its metric None and is dropped from later batches.
   NVLink throughput fields take a link id as scopeId (the binding passes
   `(fieldId, scopeId)` tuples); nvml.h documents scopeId UINT_MAX as the sum
   over all links, so the batch asks for that: two entries, not two per
   link. A driver that answers the sum with an error gets one TX and one RX
   entry per link found active at discovery instead, and the backend sums
   the per-link rates.
2. `nvmlDeviceGetUtilizationRates`.
3. one read from a round robin over the values NVML has no field for:
   clock-event reasons, GPU temperature, SM clock, memory clock, memory
   used/total, and the power sample buffer (`power_max_w`). Each keeps the
   last value read until its turn comes again (at 10 Hz, at most 0.6 s old),
   so a row never shows NULL for a supported metric. A read the device does
   not support leaves the rotation, so the others come round sooner.

Once a second (every tick at the default 1 s interval), the batch also
asks for the energy counter, thermal violation time and PCIe replays, and
a GPU with GPM (Hopper and newer) takes a GPM sample, 2 calls more. On an
H100 (driver 580.159, bench/nvml_read_costs.py) the energy field alone took
2.4-3.5 ms of CPU a read and thermal violation 0.5-1.0 ms, against 3-5 us
for each power field: read every tick at 10 Hz they were over 80 % of the
collector's CPU (8.7 ms a GPU-sample before, 1.5 ms after). Both are
running totals, so reading them once a second loses nothing over any
longer window; they are carried forward in between (at most 1 s old).

PCIe throughput. An H100's PCIe byte counters are 32-bit (NVML answers
UNSIGNED_INT) and wrap every 73 ms at the 59 GB/s a pinned copy moves: read
every 0.25 s they reported those 59 GB/s as 1-16 GB/s. So:
- with GPM, the rates are GPM's PCIe TX/RX over the last second (MiB/s),
  and `sm_active_pct` is GPM's SM activity over the same second. GPM
  attributes traffic with a lag of about 0.1-0.2 s, which a one-second
  window hides;
- without GPM, the byte counters are read every tick and give a rate only
  when the interval is too short for a whole wrap at the link's peak
  (`RateFromCounter.max_per_s`: Gen4 x16 below 136 ms). Where they cannot,
  a slow tick samples `nvmlDeviceGetPcieThroughput` (20 ms per direction, as
  nvidia-smi dmon does), and that sample stands for the slow tick alone.

Why the throttle mask and the power buffer may rotate: time spent throttled
is measured exactly by the violation counters in the batch (power every
tick, thermal every second); the mask only names the reason.
`nvmlDeviceGetSamples` returns every sample since the last timestamp read,
so reading it less often loses no peak: `power_max_w` is the highest sample
since the previous read of the buffer.

The first sample of a GPU (and the first after it recovers) and every slow
tick read the whole rotation at once; a slow tick also reads the ECC
volatile totals (carried forward on fast ticks) and the compute processes.
Process names come from `nvmlSystemGetProcessName`, once per pid.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from gpulens.collector.backend import BackendEvent, DeviceInfo, DeviceSample, GpuLost, ProcessSample, RateFromCounter
from gpulens.collector.errors import BackendUnavailable
from gpulens.collector.hardware import pcie_peak_bytes_per_s
from gpulens.collector.throttle import CLOCK_EVENT_REASONS, decode_clock_event_reasons  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)


# Metrics this backend can fill; sm_active_pct needs GPM (Hopper and newer).
NVML_METRICS: tuple[str, ...] = (
    "power_w", "power_instant_w", "power_max_w", "power_limit_w", "energy_j",
    "gpu_util_pct", "mem_util_pct", "sm_active_pct", "sm_clock_mhz", "mem_clock_mhz", "temp_c",
    "mem_temp_c", "mem_used_bytes", "mem_total_bytes", "throttle_reasons",
    "throttle_reasons_mask", "power_violation_ns", "thermal_violation_ns",
    "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "pcie_replay_count",
    "link_tx_bytes_per_s", "link_rx_bytes_per_s", "ecc_corrected_count",
    "ecc_uncorrected_count",
)

# Gauges and running totals in the field batch: (pynvml constant, metric,
# divisor to the contract's unit, or None to keep the integer).
_VALUE_FIELDS: tuple[tuple[str, str, int | None], ...] = (
    ("NVML_FI_DEV_POWER_AVERAGE", "power_w", 1000),  # mW
    ("NVML_FI_DEV_POWER_INSTANT", "power_instant_w", 1000),  # mW
    ("NVML_FI_DEV_POWER_CURRENT_LIMIT", "power_limit_w", 1000),  # mW
    ("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 1000),  # mJ since driver load
    ("NVML_FI_DEV_MEMORY_TEMP", "mem_temp_c", 1),  # °C, as a float
    ("NVML_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_count", None),
    ("NVML_FI_DEV_PERF_POLICY_POWER", "power_violation_ns", None),
    ("NVML_FI_DEV_PERF_POLICY_THERMAL", "thermal_violation_ns", None),
)

# Cumulative counters turned into rates: (constant, metric, bytes per unit, per link).
_COUNTER_FIELDS: tuple[tuple[str, str, int, bool], ...] = (
    ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "pcie_tx_bytes_per_s", 1, False),
    ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", "pcie_rx_bytes_per_s", 1, False),
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "link_tx_bytes_per_s", 1024, True),  # KiB
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", "link_rx_bytes_per_s", 1024, True),  # KiB
)

# Fields the batch asks for once a second rather than every tick (costly; see the module docstring).
_ONCE_A_SECOND_FIELDS = frozenset({
    "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "NVML_FI_DEV_PERF_POLICY_THERMAL", "NVML_FI_DEV_PCIE_REPLAY_COUNTER",
})
_ONCE_A_SECOND_METRICS = frozenset(metric for const, metric, _ in _VALUE_FIELDS if const in _ONCE_A_SECOND_FIELDS)
_SECOND_NS = 1_000_000_000

# GPM metrics read once a second on GPUs that have GPM: (pynvml constant, metric, scale to the contract's unit).
_GPM_METRICS: tuple[tuple[str, str, float], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", "sm_active_pct", 1.0),  # % of SMs busy, averaged over the window
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "pcie_tx_bytes_per_s", 2**20),  # MiB/s
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "pcie_rx_bytes_per_s", 2**20),  # MiB/s
)

# The PCIe link assumed where NVML does not report one, to bound the byte counters' wraps.
_DEFAULT_PCIE = (5, 16)

# Each field value type (pynvml constant) and the member of the value union that holds it.
VALUE_TYPE_ATTRS: dict[str, str] = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}

# scopeId asking an NVLink field for the sum over all links (UINT_MAX in nvml.h).
_ALL_LINKS = 0xFFFFFFFF

# The reads that take turns on fast ticks, in rotation order.
_ROTATED_READS: tuple[str, ...] = (
    "clock_event_reasons", "temperature", "sm_clock", "mem_clock", "memory", "power_samples",
)

# Function names behind each rotated read, newest first (for the support check).
_READ_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "clock_event_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    "temperature": ("nvmlDeviceGetTemperature",),
    "sm_clock": ("nvmlDeviceGetClockInfo",),
    "mem_clock": ("nvmlDeviceGetClockInfo",),
    "memory": ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"),
    "power_samples": ("nvmlDeviceGetSamples",),
}


def gpm_metrics_request(nv: ModuleType, first: Any, second: Any, metric_ids: list[int]) -> Any:
    """The `nvmlGpmMetricsGet` argument asking for `metric_ids` between two GPM samples."""
    request = nv.c_nvmlGpmMetricsGet_t()
    request.version = nv.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1, request.sample2 = first, second
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    return request


def _load_pynvml() -> ModuleType:
    import pynvml

    return pynvml


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _milli(value: int | None) -> float | None:
    return None if value is None else value / 1000


@dataclass
class _Device:
    """What the backend keeps per GPU between samples."""

    index: int
    uuid: str | None
    handle: Any | None
    fields: list[tuple[int, int]] = field(default_factory=list)  # (field id, scope id) asked every tick
    second_fields: list[tuple[int, int]] = field(default_factory=list)  # and those asked once a second
    nvlinks: list[int] = field(default_factory=list)  # active link ids at discovery
    unsupported: set[str] = field(default_factory=set)  # read keys never asked again
    rates: dict[tuple[int, int], RateFromCounter] = field(default_factory=dict)
    carried: dict[str, Any] = field(default_factory=dict)  # last rotated and slow values
    rotation: int = 0
    primed: bool = False
    recovering: bool = False
    power_samples_after_us: int = 0  # CPU timestamp of the newest power sample read
    second_read_ns: int | None = None  # tick of the last once-a-second read
    gpm_samples: list[Any] | None = None  # two GPM sample buffers: [previous, next]
    gpm_primed: bool = False  # the previous buffer holds a sample
    pcie_max_bytes_per_s: float | None = None  # the link's peak, bounding the PCIe counters' wraps
    xid_registered: bool = False
    info: DeviceInfo | None = None


class NvmlBackend:
    """Samples NVIDIA GPUs through NVML; see the module docstring for the call budget."""

    name = "nvml"

    def __init__(self, nvml_module: ModuleType | None = None) -> None:
        try:
            nv = nvml_module if nvml_module is not None else _load_pynvml()
        except ImportError as error:
            raise BackendUnavailable(f"NVML: the nvidia-ml-py package is not installed ({error})") from None
        try:
            nv.nvmlInit()
        except nv.NVMLError as error:
            raise BackendUnavailable(f"NVML: {error} (is the NVIDIA driver installed and loaded?)") from None
        self._nv = nv
        self._missing: set[str] = set()  # functions this driver lacks
        self._logged: set[tuple[str, int]] = set()
        self._devices: dict[int, _Device] = {}
        self._process_names: dict[int, str | None] = {}
        self._event_set: Any | None = None
        self._event_set_tried = False
        self._closed = False
        self._lost_codes = {
            nv.NVML_ERROR_GPU_IS_LOST,
            getattr(nv, "NVML_ERROR_GPU_NOT_FOUND", -1),
            nv.NVML_ERROR_RESET_REQUIRED,
        }
        # Width of each unsigned field value type: a counter of a narrow type wraps.
        self._value_bits = {
            nv.NVML_VALUE_TYPE_UNSIGNED_SHORT: 16,
            nv.NVML_VALUE_TYPE_UNSIGNED_INT: 32,
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG: ctypes.sizeof(ctypes.c_ulong) * 8,
        }
        self._value_attr = {getattr(nv, const): attr for const, attr in VALUE_TYPE_ATTRS.items()}
        self._value_field_ids = {getattr(nv, const): (metric, div) for const, metric, div in _VALUE_FIELDS}
        self._counter_field_ids = {
            getattr(nv, const): (metric, scale, per_link) for const, metric, scale, per_link in _COUNTER_FIELDS
        }
        self._once_a_second_ids = {getattr(nv, const) for const in _ONCE_A_SECOND_FIELDS}
        # Bindings older than GPM (nvidia-ml-py 11.x) lack these: then no GPU gets GPM.
        gpm_names = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "c_nvmlGpmMetricsGet_t")
        self._gpm_metrics = (
            [(getattr(nv, const), metric, scale) for const, metric, scale in _GPM_METRICS]
            if all(hasattr(nv, name) for name in gpm_names) else []
        )

    # --- the guarded call ---------------------------------------------------------

    def _call(
        self, dev: _Device | None, key: str, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Call `fn`; None for an unsupported or failed read, GpuLost for a lost GPU.

        `key` names the read for the per-device unsupported set; `label` names
        the driver function for the missing-function set and the logs.
        """
        if label in self._missing or (dev is not None and key in dev.unsupported):
            return None
        try:
            return fn(*args, **kwargs)
        except self._nv.NVMLError as error:
            self._on_error(dev, key, label, error.value, str(error))
            return None

    def _query(self, dev: _Device | None, func_name: str, *args: Any, key: str | None = None) -> Any:
        return self._call(dev, key or func_name, func_name, getattr(self._nv, func_name), *args)

    def _on_error(self, dev: _Device | None, key: str, label: str, code: int, text: str) -> None:
        nv = self._nv
        if dev is not None and (code in self._lost_codes or (code == nv.NVML_ERROR_UNKNOWN and dev.recovering)):
            dev.handle = None
            raise GpuLost(dev.index, f"{label}: {text}")
        if code == nv.NVML_ERROR_FUNCTION_NOT_FOUND:
            self._missing.add(label)
            self._log_once(logging.INFO, label, code, "NVML: %s is not in this driver; not calling it again", label)
        elif code in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION):
            level = logging.WARNING if code == nv.NVML_ERROR_NO_PERMISSION else logging.DEBUG
            self._log_once(level, key, code, "NVML: %s: %s; not asking again", key, text)
            if dev is not None:
                dev.unsupported.add(key)
        else:
            self._log_once(logging.DEBUG, label, code, "NVML: %s failed: %s", label, text)

    def _log_once(self, level: int, what: str, code: int, message: str, *args: Any) -> None:
        if (what, code) not in self._logged:
            self._logged.add((what, code))
            log.log(level, message, *args)

    # --- inventory ----------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        """The GPUs NVML sees, in NVML index order.

        A GPU that is lost keeps its last known inventory, so the sampler keeps
        retrying it; one never seen before is left out.
        """
        count = self._query(None, "nvmlDeviceGetCount")
        if count is None:
            raise BackendUnavailable("NVML: cannot count the GPUs")
        driver_version = _text(self._query(None, "nvmlSystemGetDriverVersion"))
        nvml_version = _text(self._query(None, "nvmlSystemGetNVMLVersion"))
        infos = []
        for index in range(count):
            dev = self._devices.get(index)
            if dev is not None and dev.handle is None:
                if dev.info is not None:
                    infos.append(dev.info)  # lost: sample() retries it, not the inventory
                continue
            try:
                if dev is None:
                    dev = _Device(index=index, uuid=None, handle=self._handle_by_index(index))
                info = self._device_info(dev, driver_version, nvml_version)
                if dev.uuid is not None and info.gpu_uuid != dev.uuid:  # another board at this index
                    self._free_gpm(dev)
                    dev = _Device(index=index, uuid=None, handle=dev.handle)
                    info = self._device_info(dev, driver_version, nvml_version)
            except GpuLost:
                if dev is not None and dev.info is not None:
                    infos.append(dev.info)
                continue
            dev.uuid, dev.info = info.gpu_uuid, info
            self._devices[index] = dev
            infos.append(info)
        if not self._event_set_tried:
            self._event_set_tried = True
            self._event_set = self._query(None, "nvmlEventSetCreate")
        for dev in self._devices.values():
            self._register_xid(dev)
        return infos

    def _handle_by_index(self, index: int) -> Any:
        try:
            return self._nv.nvmlDeviceGetHandleByIndex(index)
        except self._nv.NVMLError as error:
            raise GpuLost(index, f"nvmlDeviceGetHandleByIndex: {error}") from None

    def _device_info(self, dev: _Device, driver_version: str | None, nvml_version: str | None) -> DeviceInfo:
        h = dev.handle
        uuid = _text(self._query(dev, "nvmlDeviceGetUUID", h))
        pci = self._query(dev, "nvmlDeviceGetPciInfo", h)
        memory = self._query(dev, "nvmlDeviceGetMemoryInfo", h)
        constraints = self._query(dev, "nvmlDeviceGetPowerManagementLimitConstraints", h) or (None, None)
        links = self._active_nvlinks(dev)
        pcie_gen = self._query(dev, "nvmlDeviceGetMaxPcieLinkGeneration", h)
        pcie_width = self._query(dev, "nvmlDeviceGetMaxPcieLinkWidth", h)
        if dev.info is None:  # first sight: later batches only shrink
            gpm = self._open_gpm(dev)
            dev.nvlinks = links
            dev.fields, dev.second_fields = self._field_lists(links, gpm)
            try:
                dev.pcie_max_bytes_per_s = pcie_peak_bytes_per_s(*(
                    (pcie_gen, pcie_width) if pcie_gen and pcie_width else _DEFAULT_PCIE))
            except ValueError:  # a generation newer than we know
                dev.pcie_max_bytes_per_s = None
        return DeviceInfo(
            gpu_index=dev.index,
            gpu_uuid=uuid or f"nvml-index-{dev.index}",
            vendor="nvidia",
            model=_text(self._query(dev, "nvmlDeviceGetName", h)) or "unknown NVIDIA GPU",
            pci_bus_id=None if pci is None else _text(pci.busId),
            serial=_text(self._query(dev, "nvmlDeviceGetSerial", h)),
            driver_version=driver_version,
            backend_library_version=nvml_version,
            mem_total_bytes=None if memory is None else int(memory.total),
            power_limit_min_w=_milli(constraints[0]),
            power_limit_default_w=_milli(self._query(dev, "nvmlDeviceGetPowerManagementDefaultLimit", h)),
            power_limit_max_w=_milli(constraints[1]),
            power_limit_w=_milli(self._query(dev, "nvmlDeviceGetEnforcedPowerLimit", h)),
            pcie_gen=pcie_gen,
            pcie_width=pcie_width,
            link_kind="nvlink" if links else None,
            link_count=len(links),
        )

    def _active_nvlinks(self, dev: _Device) -> list[int]:
        """Ids of the active NVLinks; the first link id that errors ends the list."""
        nv, active = self._nv, []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            state = self._query(dev, "nvmlDeviceGetNvLinkState", dev.handle, link)
            if state is None:
                break
            if state == nv.NVML_FEATURE_ENABLED:
                active.append(link)
        return active

    def _field_lists(self, links: list[int], gpm: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(fields asked every tick, fields asked once a second)."""
        fields = [(field_id, 0) for field_id in self._value_field_ids if field_id not in self._once_a_second_ids]
        second = [(field_id, 0) for field_id in self._value_field_ids if field_id in self._once_a_second_ids]
        if not gpm:  # with GPM, PCIe throughput comes from GPM
            fields += self._pcie_counter_fields()
        if links:
            fields += [(field_id, _ALL_LINKS) for field_id, (_, _, per_link) in self._counter_field_ids.items() if per_link]
        return fields, second

    def _pcie_counter_fields(self) -> list[tuple[int, int]]:
        return [(field_id, 0) for field_id, (_, _, per_link) in self._counter_field_ids.items() if not per_link]

    def _open_gpm(self, dev: _Device) -> bool:
        """Whether this GPU has GPM; if so, allocate its two sample buffers."""
        if not self._gpm_metrics:
            return False
        support = self._query(dev, "nvmlGpmQueryDeviceSupport", dev.handle, key="gpm")
        if support is None or not support.isSupportedDevice:
            return False
        samples = [self._query(dev, "nvmlGpmSampleAlloc", key="gpm") for _ in range(2)]
        dev.gpm_samples = [sample for sample in samples if sample is not None]
        if len(dev.gpm_samples) < 2:
            self._free_gpm(dev)
            return False
        return True

    # --- sampling -------------------------------------------------------------------

    def sample(self, gpu_index: int, ts_ns: int, slow: bool) -> DeviceSample:
        dev = self._devices.get(gpu_index)
        if dev is None:
            self.discover()
            dev = self._devices.get(gpu_index)
            if dev is None:
                raise GpuLost(gpu_index, "NVML does not see this GPU")
        if dev.handle is None:
            self._reacquire(dev)
        values: dict[str, Any] = dict.fromkeys(NVML_METRICS)
        each_second = (slow or not dev.primed or dev.second_read_ns is None
                       or ts_ns - dev.second_read_ns >= _SECOND_NS)
        fields = self._read_fields(dev, ts_ns, each_second)
        for metric in _ONCE_A_SECOND_METRICS & fields.keys():
            dev.carried[metric] = fields.pop(metric)
        values.update(fields)
        if each_second:
            dev.second_read_ns = ts_ns
            dev.carried.update(self._read_gpm(dev))
        if slow and dev.gpm_samples is None:
            values.update(self._read_pcie_throughput(dev, values))
        values.update(self._read_utilization(dev))
        live = [read for read in _ROTATED_READS if self._read_supported(dev, read)]
        if slow or not dev.primed:
            due = live
        elif live:
            due = [live[dev.rotation % len(live)]]
            dev.rotation += 1
        else:
            due = []
        for read in due:
            result = getattr(self, f"_read_{read}")(dev)
            if result is not None:
                dev.carried.update(result)
        processes = None
        if slow:
            dev.carried.update(self._read_ecc(dev))
            processes = self._read_processes(dev)
        values.update(dev.carried)
        dev.primed, dev.recovering = True, False
        return DeviceSample(values=values, processes=processes)

    def _reacquire(self, dev: _Device) -> None:
        """Ask NVML for the GPU again by UUID (handles die with a lost GPU)."""
        if dev.uuid is None:
            raise GpuLost(dev.index, "GPU was lost before its UUID was read")
        try:
            dev.handle = self._nv.nvmlDeviceGetHandleByUUID(dev.uuid)
        except self._nv.NVMLError as error:
            raise GpuLost(dev.index, f"nvmlDeviceGetHandleByUUID: {error}") from None
        dev.recovering, dev.primed, dev.xid_registered = True, False, False
        dev.rates.clear()  # counters may have reset with the driver's view of the GPU
        dev.gpm_primed, dev.second_read_ns = False, None
        dev.power_samples_after_us = 0
        self._register_xid(dev)

    def _read_supported(self, dev: _Device, read: str) -> bool:
        return read not in dev.unsupported and any(f not in self._missing for f in _READ_FUNCTIONS[read])

    def _read_fields(self, dev: _Device, ts_ns: int, each_second: bool) -> dict[str, Any]:
        asked = dev.fields + dev.second_fields if each_second else dev.fields
        if not asked:
            return {}
        result = self._query(dev, "nvmlDeviceGetFieldValues", dev.handle, asked, key="field_values")
        if result is None:
            return {}
        nv, values = self._nv, {}
        link_rates: dict[str, list[float]] = {}
        dropped, added = [], []
        for key, entry in zip(asked, result):  # NVML answers in the order asked
            code = entry.nvmlReturn
            if code == nv.NVML_SUCCESS:
                value_type = entry.valueType
                value = getattr(entry.value, self._value_attr[value_type])
            else:
                value_type = value = None
                text = str(nv.NVMLError(code))
                self._on_error(dev, f"field {key[0]}/{key[1]}", "nvmlDeviceGetFieldValues", code, text)
                if key[1] == _ALL_LINKS:  # this driver cannot sum the links: ask each one
                    dropped.append(key)
                    added.extend((key[0], link) for link in dev.nvlinks)
                elif code in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION):
                    dropped.append(key)
            gauge = self._value_field_ids.get(key[0])
            if gauge is not None:
                metric, divisor = gauge
                values[metric] = value if value is None or divisor is None else value / divisor
                continue
            metric, scale, per_link = self._counter_field_ids[key[0]]
            rate = dev.rates.get(key)
            if rate is None:
                rate = dev.rates[key] = RateFromCounter(scale=scale, max_per_s=None if per_link else dev.pcie_max_bytes_per_s)
            if value_type is not None:
                bits = self._value_bits.get(value_type, 64)
                rate.wrap_at = 2**bits if bits < 64 else None  # a 64-bit counter going down was reset
            per_second = rate.update(value, ts_ns)
            if not per_link or key[1] == _ALL_LINKS:
                values[metric] = per_second
            elif per_second is not None:
                link_rates.setdefault(metric, []).append(per_second)
            else:
                link_rates.setdefault(metric, [])
        for metric, rates in link_rates.items():
            values[metric] = sum(rates) if rates else None
        if dropped:
            dev.fields = [key for key in dev.fields if key not in dropped] + added
            dev.second_fields = [key for key in dev.second_fields if key not in dropped]
        return values

    def _read_gpm(self, dev: _Device) -> dict[str, Any]:
        """GPM's metrics between the previous once-a-second read and this one."""
        if dev.gpm_samples is None:
            return {}
        nv = self._nv
        previous, latest = dev.gpm_samples
        if self._call(dev, "gpm", "nvmlGpmSampleGet", nv.nvmlGpmSampleGet, dev.handle, latest) is None:
            dev.gpm_primed = False
            for _, metric, _ in self._gpm_metrics:  # the last window's rates are not this second's
                dev.carried.pop(metric, None)
            if "gpm" in dev.unsupported:
                self._drop_gpm(dev)
            return {}
        dev.gpm_samples = [latest, previous]
        if not dev.gpm_primed:  # one sample is not a window yet
            dev.gpm_primed = True
            return {}
        request = gpm_metrics_request(nv, previous, latest, [metric_id for metric_id, _, _ in self._gpm_metrics])
        if self._call(dev, "gpm", "nvmlGpmMetricsGet", nv.nvmlGpmMetricsGet, request) is None:
            return {}
        values = {}
        for i, (_, metric, scale) in enumerate(self._gpm_metrics):
            entry = request.metrics[i]
            values[metric] = entry.value * scale if entry.nvmlReturn == nv.NVML_SUCCESS else None
        return values

    def _free_gpm(self, dev: _Device) -> None:
        for gpm_sample in dev.gpm_samples or ():
            self._query(None, "nvmlGpmSampleFree", gpm_sample)
        dev.gpm_samples = None

    def _drop_gpm(self, dev: _Device) -> None:
        """GPM refused after discovery: free its buffers, back to the PCIe byte counters."""
        self._free_gpm(dev)
        dev.fields += self._pcie_counter_fields()

    def _read_pcie_throughput(self, dev: _Device, values: dict[str, Any]) -> dict[str, Any]:
        """PCIe rates the byte counters could not give this tick, sampled over 20 ms (KB/s)."""
        nv, rates = self._nv, {}
        for metric, counter in (("pcie_tx_bytes_per_s", "NVML_PCIE_UTIL_TX_BYTES"),
                                ("pcie_rx_bytes_per_s", "NVML_PCIE_UTIL_RX_BYTES")):
            if values.get(metric) is None:
                kb_per_s = self._query(dev, "nvmlDeviceGetPcieThroughput", dev.handle, getattr(nv, counter),
                                       key="pcie_throughput")
                if kb_per_s is not None:
                    # KB/s of 1000 bytes: so it matched the byte counters on an H100 (59.13 against 58.98 GB/s)
                    rates[metric] = float(kb_per_s) * 1000
        return rates

    def _read_utilization(self, dev: _Device) -> dict[str, Any]:
        util = self._query(dev, "nvmlDeviceGetUtilizationRates", dev.handle)
        if util is None:
            return {}
        return {"gpu_util_pct": float(util.gpu), "mem_util_pct": float(util.memory)}

    def _first(self, dev: _Device, key: str, names: tuple[str, ...], *args: Any) -> Any:
        """The first of `names` this driver has (newest first)."""
        for name in names:
            if name not in self._missing:
                result = self._query(dev, name, *args, key=key)
                if result is not None or name not in self._missing:
                    return result
        return None

    def _read_clock_event_reasons(self, dev: _Device) -> dict[str, Any] | None:
        mask = self._first(dev, "clock_event_reasons", _READ_FUNCTIONS["clock_event_reasons"], dev.handle)
        if mask is None:
            return None
        return {"throttle_reasons": decode_clock_event_reasons(mask), "throttle_reasons_mask": int(mask)}

    def _read_temperature(self, dev: _Device) -> dict[str, Any] | None:
        sensor = self._nv.NVML_TEMPERATURE_GPU
        temp = self._query(dev, "nvmlDeviceGetTemperature", dev.handle, sensor, key="temperature")
        return None if temp is None else {"temp_c": float(temp)}

    def _read_sm_clock(self, dev: _Device) -> dict[str, Any] | None:
        mhz = self._query(dev, "nvmlDeviceGetClockInfo", dev.handle, self._nv.NVML_CLOCK_SM, key="sm_clock")
        return None if mhz is None else {"sm_clock_mhz": int(mhz)}

    def _read_mem_clock(self, dev: _Device) -> dict[str, Any] | None:
        mhz = self._query(dev, "nvmlDeviceGetClockInfo", dev.handle, self._nv.NVML_CLOCK_MEM, key="mem_clock")
        return None if mhz is None else {"mem_clock_mhz": int(mhz)}

    def _read_memory(self, dev: _Device) -> dict[str, Any] | None:
        nv, memory = self._nv, None
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is None:
            self._missing.add("nvmlDeviceGetMemoryInfo_v2")  # bindings too old to ask
        else:
            # v2 reports used memory without the driver's reservation, as nvidia-smi does.
            memory = self._call(
                dev, "memory", "nvmlDeviceGetMemoryInfo_v2", nv.nvmlDeviceGetMemoryInfo, dev.handle, version=version
            )
        if memory is None and "nvmlDeviceGetMemoryInfo_v2" in self._missing:
            memory = self._query(dev, "nvmlDeviceGetMemoryInfo", dev.handle, key="memory")
        if memory is None:
            return None
        return {"mem_used_bytes": int(memory.used), "mem_total_bytes": int(memory.total)}

    def _read_power_samples(self, dev: _Device) -> dict[str, Any] | None:
        nv = self._nv
        result = self._query(
            dev, "nvmlDeviceGetSamples", dev.handle, nv.NVML_TOTAL_POWER_SAMPLES, dev.power_samples_after_us,
            key="power_samples",
        )
        if not result or not result[1]:
            return None  # NVML_ERROR_NOT_FOUND: no sample since the last read
        value_type, samples = result
        attr = self._value_attr.get(value_type, "uiVal")
        dev.power_samples_after_us = max(int(s.timeStamp) for s in samples)
        return {"power_max_w": max(getattr(s.sampleValue, attr) for s in samples) / 1000}  # mW

    def _read_ecc(self, dev: _Device) -> dict[str, Any]:
        nv, counts = self._nv, {}
        for metric, error_type in (
            ("ecc_corrected_count", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc_uncorrected_count", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            # One key for both: ECC disabled answers NotSupported to each.
            count = self._query(
                dev, "nvmlDeviceGetTotalEccErrors", dev.handle, error_type, nv.NVML_VOLATILE_ECC, key="ecc"
            )
            if count is not None:
                counts[metric] = int(count)
        return counts

    def _read_processes(self, dev: _Device) -> list[ProcessSample] | None:
        # The unversioned binding turns FunctionNotFound into a non-NVML error; ask by version.
        names = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
        found = self._first(dev, "processes", names, dev.handle)
        if found is None:
            return None
        seen = {int(p.pid) for p in found}
        for pid in list(self._process_names):
            if pid not in seen:
                del self._process_names[pid]  # the pid may be reused by another program
        processes = []
        for proc in found:
            pid = int(proc.pid)
            if pid not in self._process_names:
                self._process_names[pid] = _text(self._query(None, "nvmlSystemGetProcessName", pid))
            used = proc.usedGpuMemory  # the binding gives None where NVML cannot tell
            used_bytes = None if used is None else int(used)
            processes.append(ProcessSample(pid=pid, used_mem_bytes=used_bytes, process_name=self._process_names[pid]))
        return processes

    # --- events and shutdown ------------------------------------------------------------

    def _register_xid(self, dev: _Device) -> None:
        if self._event_set is None or dev.handle is None or dev.xid_registered:
            return
        nv = self._nv
        try:
            self._call(
                dev, "xid_events", "nvmlDeviceRegisterEvents", nv.nvmlDeviceRegisterEvents,
                dev.handle, nv.nvmlEventTypeXidCriticalError, self._event_set,
            )
        except GpuLost:
            return  # sample() will report it
        dev.xid_registered = "xid_events" not in dev.unsupported

    def poll_events(self) -> list[BackendEvent]:
        """XID errors queued since the last call; [] where events are unsupported."""
        if not self._event_set_tried:
            self.discover()
        if self._event_set is None:
            return []
        nv, events = self._nv, []
        for _ in range(1000):  # bounded: a storm of events must not stall the tick
            try:
                data = nv.nvmlEventSetWait_v2(self._event_set, 0)
            except nv.NVMLError as error:
                if error.value != nv.NVML_ERROR_TIMEOUT:
                    self._log_once(logging.DEBUG, "nvmlEventSetWait_v2", error.value, "NVML: event wait: %s", error)
                break
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            xid = int(data.eventData)
            gpu_index = self._index_of(data.device)
            events.append(BackendEvent(kind="xid", gpu_index=gpu_index, detail=f"XID {xid}", value=xid))
        return events

    def _index_of(self, handle: Any) -> int | None:
        uuid = _text(self._query(None, "nvmlDeviceGetUUID", handle))
        return next((d.index for d in self._devices.values() if uuid is not None and d.uuid == uuid), None)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for dev in self._devices.values():
            self._free_gpm(dev)
        if self._event_set is not None:
            self._query(None, "nvmlEventSetFree", self._event_set)
            self._event_set = None
        self._query(None, "nvmlShutdown")
