"""A fake of nvidia-ml-py's `pynvml` that behaves like the real library.

`make_fake_pynvml(gpus)` returns a module built from the real pynvml's
namespace (its constants, ctypes structs and `NVMLError_*` classes), with the
functions gpulens calls replaced by fakes that take the same arguments,
return the same types (structs, lists, `(valueType, samples)` tuples) in the
same units (mW, mJ, KiB and byte counters, MHz, µs timestamps) and raise the
same errors. Value types follow an H100 on driver 580.159 (read with
bench/nvml_read_costs.py): the PCIe byte and replay counters are 32-bit
(UNSIGNED_INT, so the byte counters wrap at 2**32), energy and violation
time 64-bit. GPM (Hopper and newer) keeps one snapshot per sample buffer and
answers rates over the time `advance` moved on between two of them.
Errors: NotSupported per device or per field, FunctionNotFound for a
function an older driver lacks, GpuIsLost on every call to a lost GPU,
Timeout from an empty event set, NotFound from an empty sample buffer.

Controls live on `module.fake` (a `FakeNvml`) and on each `FakeGpu`: set
`gpu.lost`, set counters, `fake.queue_xid(...)`, `gpu.errors[name] = code`.
`fake.calls` counts calls per (function, gpu index or None).
"""

from __future__ import annotations

import ctypes
import struct
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pynvml as _real

NV = _real

# Functions an R470-era driver lacks (clock-event reasons came in R535).
OLD_DRIVER_MISSING = frozenset(
    {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetMemoryInfo_v2",
    }
)

_U32, _U64 = NV.NVML_VALUE_TYPE_UNSIGNED_INT, NV.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
# c_nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, then the value union.
_FIELD_HEAD = struct.Struct("=IIqqII")
_FIELD_STRUCT_SIZE = ctypes.sizeof(NV.c_nvmlFieldValue_t)
_VALUE_FORMAT = {_U32: struct.Struct("=I4x"), _U64: struct.Struct("=Q")}
_FIELD_TIMESTAMP_US = 1_700_000_000_000_000
_ALL_LINKS = 0xFFFFFFFF
assert _FIELD_HEAD.size == NV.c_nvmlFieldValue_t.value.offset and _FIELD_STRUCT_SIZE == _FIELD_HEAD.size + 8
_NVLINK_FIELDS = (NV.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NV.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)


@dataclass
class FakeProcess:
    pid: int
    name: str
    used_gpu_memory_bytes: int | None  # None: NVML cannot tell (WDDM, MIG)


@dataclass
class FakeGpu:
    """One GPU: inventory, support matrix and live readings in NVML's units."""

    model: str
    uuid: str
    pci_bus_id: str
    serial: str | None
    mem_total_bytes: int
    power_limit_min_mw: int
    power_limit_default_mw: int
    power_limit_max_mw: int
    power_limit_mw: int
    pcie_gen: int
    pcie_width: int
    nvlink_count: int = 0  # 0: no NVLink, state queries answer NotSupported
    nvlink_sum_scope: bool = True  # the driver answers scopeId UINT_MAX with the sum over links
    inactive_links: set[int] = field(default_factory=set)
    unsupported_fields: set[int] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)  # function -> NVML error code
    field_types: dict[int, int] = field(default_factory=dict)  # value type overrides
    supports_xid_events: bool = True
    gpm: bool = False  # GPM metrics (Hopper and newer)
    lost: bool = False
    # live readings
    power_mw: int = 412_345
    power_instant_mw: int = 430_100
    energy_mj: int = 9_876_543_210
    temp_c: int = 61
    mem_temp_c: int = 72
    sm_clock_mhz: int = 1_980
    mem_clock_mhz: int = 2_619
    mem_used_bytes: int = 68 * 1024**3
    mem_reserved_bytes: int = 512 * 1024**2
    gpu_util_pct: int = 97
    mem_util_pct: int = 41
    sm_active_pct: float = 88.0  # what GPM's SM activity reads while advance() runs
    clock_event_reasons: int = 0
    pcie_tx_bytes: int = 10_000_000_000
    pcie_rx_bytes: int = 20_000_000_000
    pcie_replays: int = 0
    power_violation_ns: int = 0
    thermal_violation_ns: int = 0
    nvlink_tx_kib: list[int] = field(default_factory=list)
    nvlink_rx_kib: list[int] = field(default_factory=list)
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    power_samples: list[tuple[int, int]] = field(default_factory=list)  # (CPU µs, mW)
    # rates used by advance(), for load tests
    pcie_tx_bytes_per_s: int = 2_000_000_000
    pcie_rx_bytes_per_s: int = 3_000_000_000
    nvlink_kib_per_s: int = 10_000_000
    # time and SM-busy time, moved on by advance(), that GPM samples snapshot
    clock_us: int = 0
    sm_busy_us: float = 0.0

    def __post_init__(self) -> None:
        if not self.nvlink_tx_kib:
            self.nvlink_tx_kib = [1_000_000 * (link + 1) for link in range(self.nvlink_count)]
        if not self.nvlink_rx_kib:
            self.nvlink_rx_kib = [2_000_000 * (link + 1) for link in range(self.nvlink_count)]

    def advance(self, seconds: float, now_us: int) -> None:
        """Move the counters on as if `seconds` passed at the current load."""
        self.clock_us += round(seconds * 1e6)
        self.sm_busy_us += self.sm_active_pct / 100 * seconds * 1e6
        self.energy_mj += int(self.power_mw * seconds)
        self.pcie_tx_bytes += int(self.pcie_tx_bytes_per_s * seconds)
        self.pcie_rx_bytes += int(self.pcie_rx_bytes_per_s * seconds)
        step = int(self.nvlink_kib_per_s * seconds)
        self.nvlink_tx_kib = [kib + step for kib in self.nvlink_tx_kib]
        self.nvlink_rx_kib = [kib + step for kib in self.nvlink_rx_kib]
        self.power_samples.append((now_us, self.power_instant_mw))
        del self.power_samples[:-120]  # the driver keeps a short ring buffer


def h100_sxm(index: int = 0, **overrides: Any) -> FakeGpu:
    """H100 SXM5 80GB: 700 W, 18 NVLinks, every field supported."""
    spec = dict(
        model="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-6c0a5b1e-4d2f-8a9b-1c3d-{index:012x}",
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        serial=f"165492301{index:04d}",
        mem_total_bytes=85_520_809_984,
        power_limit_min_mw=200_000,
        power_limit_default_mw=700_000,
        power_limit_max_mw=700_000,
        power_limit_mw=700_000,
        pcie_gen=5,
        pcie_width=16,
        nvlink_count=18,
        gpm=True,
    )
    return FakeGpu(**{**spec, **overrides})


def a100_pcie(index: int = 0, **overrides: Any) -> FakeGpu:
    """A100 PCIe 40GB: 250 W, no NVLink, no instant-power field."""
    spec = dict(
        model="NVIDIA A100-PCIE-40GB",
        uuid=f"GPU-2f9e8d7c-6b5a-4c3d-9e8f-{index:012x}",
        pci_bus_id=f"00000000:{0x3B + index:02X}:00.0",
        serial=f"132022003{index:04d}",
        mem_total_bytes=42_505_273_344,
        power_limit_min_mw=150_000,
        power_limit_default_mw=250_000,
        power_limit_max_mw=250_000,
        power_limit_mw=250_000,
        pcie_gen=4,
        pcie_width=16,
        unsupported_fields={NV.NVML_FI_DEV_POWER_INSTANT},
        power_mw=187_250,
        sm_clock_mhz=1_410,
        mem_clock_mhz=1_215,
    )
    return FakeGpu(**{**spec, **overrides})


def v100_sxm2(index: int = 0, **overrides: Any) -> FakeGpu:
    """V100 SXM2 32GB: 300 W, 6 NVLinks, no power sample buffer, NVLink counters per link only."""
    spec = dict(
        model="Tesla V100-SXM2-32GB",
        uuid=f"GPU-9a8b7c6d-5e4f-3a2b-1c0d-{index:012x}",
        pci_bus_id=f"00000000:{0x1A + index:02X}:00.0",
        serial=f"032371802{index:04d}",
        mem_total_bytes=34_089_730_048,
        power_limit_min_mw=150_000,
        power_limit_default_mw=300_000,
        power_limit_max_mw=300_000,
        power_limit_mw=300_000,
        pcie_gen=3,
        pcie_width=16,
        nvlink_count=6,
        nvlink_sum_scope=False,
        unsupported_fields={NV.NVML_FI_DEV_POWER_INSTANT},
        errors={"nvmlDeviceGetSamples": NV.NVML_ERROR_NOT_SUPPORTED},
        power_mw=251_500,
        sm_clock_mhz=1_530,
        mem_clock_mhz=877,
    )
    return FakeGpu(**{**spec, **overrides})


class FakeHandle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class FakeEventSet:
    __slots__ = ("handles",)

    def __init__(self) -> None:
        self.handles: list[FakeHandle] = []


def _error(code: int) -> Exception:
    return NV.NVMLError(code)  # maps to the NVMLError_* subclass, as the real library does


class FakeNvml:
    """The fake library's state and its functions (installed by make_fake_pynvml)."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver_version: str = "550.54.15",
        missing_functions: frozenset[str] | set[str] = frozenset(),
        init_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.missing_functions = set(missing_functions)
        self.init_error = init_error
        self.initialized = False
        self.shutdowns = 0
        self.calls: Counter[tuple[str, int | None]] = Counter()
        self.field_requests: list[tuple[int, list[tuple[int, int]]]] = []  # (gpu, [(field, scope)])
        self.xid_queue: list[tuple[int, int]] = []  # (gpu index, XID code)
        self.gpm_snapshots: dict[int, tuple[int, int, int, int, float]] = {}  # buffer address -> (gpu, time, tx, rx, busy)
        self.gpm_buffers: set[int] = set()  # allocated and not yet freed

    # --- controls and counts -------------------------------------------------------

    def queue_xid(self, gpu_index: int, xid: int) -> None:
        self.xid_queue.append((gpu_index, xid))

    def count(self, function: str | None = None, gpu: int | None = None) -> int:
        """Calls made, filtered by function name and/or GPU index."""
        return sum(
            n for (name, index), n in self.calls.items()
            if (function is None or name == function) and (gpu is None or index == gpu)
        )

    def reset_calls(self) -> None:
        self.calls.clear()
        self.field_requests.clear()

    def advance(self, seconds: float, now_us: int) -> None:
        for gpu in self.gpus:
            gpu.advance(seconds, now_us)

    # --- plumbing shared by every fake function --------------------------------------

    def _enter(self, name: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        gpu_index = None if handle is None else handle.index
        self.calls[(name, gpu_index)] += 1
        if name in self.missing_functions:
            raise _error(NV.NVML_ERROR_FUNCTION_NOT_FOUND)
        if not self.initialized and name != "nvmlInit":
            raise _error(NV.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise _error(NV.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.errors:
            raise _error(gpu.errors[name])
        return gpu

    # --- library and system ----------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise _error(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return "12." + self.driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._enter("nvmlSystemGetProcessName")
        for gpu in self.gpus:
            for proc in gpu.processes:
                if proc.pid == pid:
                    return proc.name
        raise _error(NV.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise _error(NV.NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByUUID")
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                if gpu.lost:
                    raise _error(NV.NVML_ERROR_GPU_IS_LOST)
                return FakeHandle(index)
        raise _error(NV.NVML_ERROR_NOT_FOUND)

    # --- inventory ---------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._enter("nvmlDeviceGetName", handle).model

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._enter("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        gpu = self._enter("nvmlDeviceGetSerial", handle)
        if gpu.serial is None:
            raise _error(NV.NVML_ERROR_NOT_SUPPORTED)
        return gpu.serial

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Any:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        info = NV.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()  # the real struct holds bytes
        info.busIdLegacy = gpu.pci_bus_id.encode()
        return info

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: FakeHandle) -> list[int]:
        gpu = self._enter("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return [gpu.power_limit_min_mw, gpu.power_limit_max_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetPowerManagementDefaultLimit", handle).power_limit_default_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetNvLinkState(self, device: FakeHandle, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", device)
        if gpu.nvlink_count == 0:
            raise _error(NV.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.nvlink_count:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        return NV.NVML_FEATURE_DISABLED if link in gpu.inactive_links else NV.NVML_FEATURE_ENABLED

    # --- readings ----------------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[Any]) -> Any:
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        values = (NV.c_nvmlFieldValue_t * len(fieldIds))()
        asked = []
        for i, field_id in enumerate(fieldIds):
            # the real binding takes ints or (fieldId, scopeId) pairs
            fid, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
            asked.append((fid, scope))
            code, value_type, value = self._field(gpu, fid, scope)
            # Write the struct's bytes: setting fields through pynvml's
            # _PrintableStructure costs microseconds each, too slow for 64 GPUs at 10 Hz.
            offset = i * _FIELD_STRUCT_SIZE
            _FIELD_HEAD.pack_into(values, offset, fid, scope, _FIELD_TIMESTAMP_US, 0, value_type, code)
            _VALUE_FORMAT[value_type].pack_into(values, offset + _FIELD_HEAD.size, value)
        self.field_requests.append((handle.index, asked))
        return values

    def _field(self, gpu: FakeGpu, fid: int, scope: int) -> tuple[int, int, int]:
        """(nvmlReturn, valueType, value) for one field of one GPU."""
        if fid in gpu.unsupported_fields:
            return NV.NVML_ERROR_NOT_SUPPORTED, _U32, 0
        if fid in _NVLINK_FIELDS:
            if gpu.nvlink_count == 0:
                return NV.NVML_ERROR_NOT_SUPPORTED, _U32, 0
            counters = gpu.nvlink_tx_kib if fid == _NVLINK_FIELDS[0] else gpu.nvlink_rx_kib
            if scope == _ALL_LINKS and gpu.nvlink_sum_scope:
                return NV.NVML_SUCCESS, gpu.field_types.get(fid, _U64), sum(counters)
            if scope >= gpu.nvlink_count:
                return NV.NVML_ERROR_INVALID_ARGUMENT, _U32, 0
            return NV.NVML_SUCCESS, gpu.field_types.get(fid, _U64), counters[scope]
        reader = _FIELD_READERS.get(fid)
        if reader is None:
            return NV.NVML_ERROR_NOT_SUPPORTED, _U32, 0
        value_type, value = reader(gpu)
        value_type = gpu.field_types.get(fid, value_type)
        return NV.NVML_SUCCESS, value_type, value % 2**32 if value_type == _U32 else value

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        util = NV.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.gpu_util_pct, gpu.mem_util_pct
        return util

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != NV.NVML_TEMPERATURE_GPU:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temp_c

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        gpu = self._enter("nvmlDeviceGetClockInfo", handle)
        clocks = {NV.NVML_CLOCK_SM: gpu.sm_clock_mhz, NV.NVML_CLOCK_MEM: gpu.mem_clock_mhz}
        if type not in clocks:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        return clocks[type]

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        if version and "nvmlDeviceGetMemoryInfo_v2" in self.missing_functions:
            self.calls[("nvmlDeviceGetMemoryInfo", handle.index)] += 1
            raise _error(NV.NVML_ERROR_FUNCTION_NOT_FOUND)
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        if not version:  # v1 counts the driver's reservation as used
            memory = NV.c_nvmlMemory_t()
            memory.used = gpu.mem_used_bytes + gpu.mem_reserved_bytes
        else:
            memory = NV.c_nvmlMemory_v2_t()
            memory.version, memory.reserved, memory.used = version, gpu.mem_reserved_bytes, gpu.mem_used_bytes
        memory.total = gpu.mem_total_bytes
        memory.free = gpu.mem_total_bytes - gpu.mem_used_bytes - gpu.mem_reserved_bytes
        return memory

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_event_reasons

    def nvmlDeviceGetSamples(self, device: FakeHandle, sampling_type: int, timeStamp: int) -> tuple[int, list[Any]]:
        gpu = self._enter("nvmlDeviceGetSamples", device)
        if sampling_type != NV.NVML_TOTAL_POWER_SAMPLES:
            raise _error(NV.NVML_ERROR_NOT_SUPPORTED)
        newer = [(ts, mw) for ts, mw in gpu.power_samples if ts > timeStamp]
        if not newer:
            raise _error(NV.NVML_ERROR_NOT_FOUND)
        samples = []
        for ts, mw in newer:
            sample = NV.c_nvmlSample_t()
            sample.timeStamp, sample.sampleValue.uiVal = ts, mw
            samples.append(sample)
        return (_U32, samples)

    def nvmlDeviceGetPcieThroughput(self, device: FakeHandle, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetPcieThroughput", device)
        rates = {NV.NVML_PCIE_UTIL_TX_BYTES: gpu.pcie_tx_bytes_per_s, NV.NVML_PCIE_UTIL_RX_BYTES: gpu.pcie_rx_bytes_per_s}
        if counter not in rates:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        return rates[counter] // 1000  # KB/s

    # --- GPM ----------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device: FakeHandle) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", device)
        support = NV.c_nvmlGpmSupport_t()
        support.version, support.isSupportedDevice = NV.NVML_GPM_SUPPORT_VERSION, int(gpu.gpm)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        sample = ctypes.pointer(NV.struct_c_nvmlGpmSample_t())
        self.gpm_buffers.add(ctypes.addressof(sample.contents))
        return sample

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        self.gpm_buffers.discard(ctypes.addressof(gpmSample.contents))

    def nvmlGpmSampleGet(self, device: FakeHandle, gpmSample: Any) -> Any:
        gpu = self._enter("nvmlGpmSampleGet", device)
        if not gpu.gpm:
            raise _error(NV.NVML_ERROR_NOT_SUPPORTED)
        self.gpm_snapshots[ctypes.addressof(gpmSample.contents)] = (
            device.index, gpu.clock_us, gpu.pcie_tx_bytes, gpu.pcie_rx_bytes, gpu.sm_busy_us)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        first = self.gpm_snapshots.get(ctypes.addressof(metricsGet.sample1.contents))
        second = self.gpm_snapshots.get(ctypes.addressof(metricsGet.sample2.contents))
        if first is None or second is None or first[0] != second[0]:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        seconds = (second[1] - first[1]) / 1e6
        rates = {
            NV.NVML_GPM_METRIC_SM_UTIL: lambda: (second[4] - first[4]) / 1e6 / seconds * 100,
            NV.NVML_GPM_METRIC_PCIE_TX_PER_SEC: lambda: (second[2] - first[2]) / 2**20 / seconds,
            NV.NVML_GPM_METRIC_PCIE_RX_PER_SEC: lambda: (second[3] - first[3]) / 2**20 / seconds,
        }
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            if seconds <= 0 or metric.metricId not in rates:
                metric.nvmlReturn = NV.NVML_ERROR_INVALID_ARGUMENT
            else:
                metric.nvmlReturn, metric.value = NV.NVML_SUCCESS, rates[metric.metricId]()
        return metricsGet

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, errorType: int, counterType: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        if counterType != NV.NVML_VOLATILE_ECC:
            raise _error(NV.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.ecc_corrected if errorType == NV.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def _processes(self, name: str, handle: FakeHandle) -> list[Any]:
        gpu = self._enter(name, handle)
        no_instance = 0xFFFFFFFF  # not a MIG instance
        return [
            NV.nvmlFriendlyObject(
                {
                    "pid": p.pid,
                    "usedGpuMemory": p.used_gpu_memory_bytes,
                    "gpuInstanceId": no_instance,
                    "computeInstanceId": no_instance,
                }
            )
            for p in gpu.processes
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        try:  # the real one is v3 under @throwOnVersionMismatch
            return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)
        except NV.NVMLError_FunctionNotFound:
            raise NV.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            ) from None

    # --- events --------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        return FakeEventSet()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, eventTypes: int, eventSet: FakeEventSet) -> None:
        gpu = self._enter("nvmlDeviceRegisterEvents", handle)
        if not gpu.supports_xid_events:
            raise _error(NV.NVML_ERROR_NOT_SUPPORTED)
        if eventTypes & NV.nvmlEventTypeXidCriticalError:
            eventSet.handles.append(handle)

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        registered = {h.index: h for h in eventSet.handles}
        for position, (gpu_index, xid) in enumerate(self.xid_queue):
            if gpu_index in registered:
                del self.xid_queue[position]
                return NV.nvmlFriendlyObject(
                    {
                        "device": FakeHandle(gpu_index),  # a fresh handle, as from the C library
                        "eventType": NV.nvmlEventTypeXidCriticalError,
                        "eventData": xid,
                        "gpuInstanceId": 0xFFFFFFFF,
                        "computeInstanceId": 0xFFFFFFFF,
                    }
                )
        raise _error(NV.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        self._enter("nvmlEventSetFree")
        eventSet.handles.clear()


# Field id -> reader giving (value type, value) in NVML's units.
_FIELD_READERS: dict[int, Callable[[FakeGpu], tuple[int, int]]] = {
    NV.NVML_FI_DEV_POWER_AVERAGE: lambda g: (_U32, g.power_mw),
    NV.NVML_FI_DEV_POWER_INSTANT: lambda g: (_U32, g.power_instant_mw),
    NV.NVML_FI_DEV_POWER_CURRENT_LIMIT: lambda g: (_U32, g.power_limit_mw),
    NV.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: lambda g: (_U64, g.energy_mj),
    NV.NVML_FI_DEV_MEMORY_TEMP: lambda g: (_U32, g.mem_temp_c),
    NV.NVML_FI_DEV_PCIE_REPLAY_COUNTER: lambda g: (_U32, g.pcie_replays),
    NV.NVML_FI_DEV_PERF_POLICY_POWER: lambda g: (_U64, g.power_violation_ns),
    NV.NVML_FI_DEV_PERF_POLICY_THERMAL: lambda g: (_U64, g.thermal_violation_ns),
    NV.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: lambda g: (_U32, g.pcie_tx_bytes),
    NV.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: lambda g: (_U32, g.pcie_rx_bytes),
}


def make_fake_pynvml(
    gpus: list[FakeGpu],
    *,
    driver_version: str = "550.54.15",
    missing_functions: frozenset[str] | set[str] = frozenset(),
    init_error: int | None = None,
) -> types.ModuleType:
    """A pynvml look-alike over `gpus`; its state is `module.fake`."""
    fake = FakeNvml(gpus, driver_version, missing_functions, init_error)
    module = types.ModuleType("pynvml")
    module.__dict__.update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            setattr(module, name, getattr(fake, name))
    module.fake = fake
    module.calls = fake.calls
    return module
