"""The amdsmi backend: AMD Instinct GPUs through ROCm's `amdsmi` package.

This is the only module that imports amdsmi. Every library call goes through
`AmdSmiBackend._call`, which turns "not supported" into None (and never asks
that device again), logs a function this library version lacks once, and
raises `GpuLost` when the error means the GPU itself is gone.

Units are converted here, at the edge: power caps arrive in µW, energy as
an accumulator times a resolution in µJ, VRAM in MiB (amdsmi says "MB" but
divides bytes by 1024²), XGMI traffic as per-link KiB accumulators.

Per fast tick an MI300X costs three calls: `amdsmi_get_gpu_metrics_info` (one
firmware table with power, activity, clocks, temperatures, throttling,
PCIe and XGMI counters), `amdsmi_get_energy_count` (it alone states the
energy resolution) and `amdsmi_get_gpu_vram_usage`. A quantity the metrics
table leaves 'N/A' is asked of its own function; a function that cannot
fill it on this device is not asked again. Slow ticks add the power cap,
ECC totals and the process list.

Library versions differ, and both shapes are read:
- 6.0-6.1: `amdsmi_get_energy_count` names the accumulator `power`, clock
  info names the clock `cur_clk`, PCIe caps come from
  `amdsmi_get_pcie_link_caps`, the process list holds handles for
  `amdsmi_get_gpu_process_info`, throttle statuses are raw bit masks, and
  metrics fields the firmware lacks are all-ones rather than 'N/A'.
- 6.2 and later: `energy_accumulator`, `clk`, `amdsmi_get_pcie_info`,
  process dicts, and throttle statuses reduced to booleans.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpulens.collector.backend import BackendEvent, DeviceInfo, DeviceSample, GpuLost, ProcessSample, RateFromCounter
from gpulens.collector.errors import BackendUnavailable, one_line
from gpulens.collector.throttle import AMD_LIMITING_REASONS

log = logging.getLogger("gpulens.collector.amd")

# amdsmi_status_t codes (amdsmi.h); the package does not export them at top level.
_NOT_SUPPORTED_CODES = {2, 3}  # NOT_SUPPORTED, NOT_YET_IMPLEMENTED
# Codes that mean the GPU is gone: its DRM node fails (DRM_ERROR, 6), the
# library no longer finds it (NOT_FOUND, 31), or amdgpu was unloaded
# (DRIVER_NOT_LOADED, 34). NO_DRV (51) is left out: it is about the CPU's
# energy and HSMP drivers. FILE_ERROR is left out: some ASICs simply lack
# the sysfs file, which is "not supported", not "gone".
_GPU_GONE_CODES = {6: "DRM_ERROR", 31: "NOT_FOUND", 34: "DRIVER_NOT_LOADED"}

# Values amdsmi 6.0 leaves in the metrics table where firmware has no reading.
_ALL_ONES = {0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}
_MIB = 1024 * 1024

# ASIC-independent throttler bits of gpu_metrics `indep_throttle_status`
# (Linux drivers/gpu/drm/amd/include/kgd_pp_interface.h, SMU_THROTTLER_*_BIT),
# folded into the reasons an operator acts on.
_INDEP_THROTTLE_BITS: list[tuple[range, str]] = [
    (range(0, 8), "power"),  # PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    (range(16, 24), "current"),  # TDC_GFX/SOC/MEM/VDD/CVIP, EDC_CPU/GFX, APCC
    (range(32, 44), "thermal"),  # TEMP_GPU/CORE/MEM/EDGE/HOTSPOT/SOC/VR_*/LIQUID*
    (range(44, 46), "vr_thermal"),  # VRHOT0-1
    (range(46, 48), "prochot"),  # PROCHOT_CPU/GFX
    (range(56, 57), "ppm"),
    (range(57, 58), "fit"),
]
# Firmware residency accumulators (gpu_metrics 1.5+, MI300): one that grew
# since the previous tick means that limit held the GPU back meanwhile.
_RESIDENCY_REASONS = {
    "ppt_residency_acc": "power",
    "socket_thm_residency_acc": "thermal",
    "hbm_thm_residency_acc": "thermal",
    "vr_thm_residency_acc": "vr_thermal",
    "prochot_residency_acc": "prochot",
}
# Reasons that mean the GPU is held back, for the sampler's throttle events.
LIMITING_REASONS = AMD_LIMITING_REASONS

_EVENT_KINDS = {"VMFAULT": "vm_fault", "GPU_PRE_RESET": "gpu_reset", "GPU_POST_RESET": "gpu_reset_done"}


def _import_amdsmi() -> ModuleType:
    return importlib.import_module("amdsmi")


def load_amdsmi(loader: Callable[[], Any] = _import_amdsmi) -> Any:
    """Import amdsmi, turning each way it fails without ROCm into BackendUnavailable."""
    printed = io.StringIO()
    try:
        # amdsmi_wrapper prints why libamd_smi.so did not load, then fails
        # with KeyError('libamd_smi.so') on its own table of libraries.
        with contextlib.redirect_stdout(printed):
            return loader()
    except ImportError as error:
        raise BackendUnavailable(f"amdsmi: the amdsmi package is not installed ({error})") from None
    except KeyError:
        log.debug("amdsmi import printed: %s", printed.getvalue().strip())
        raise BackendUnavailable("amdsmi: cannot load libamd_smi.so (is ROCm installed?)") from None
    except OSError as error:
        raise BackendUnavailable(f"amdsmi: {error}") from None


# --- decoding: library values to contract units -------------------------------


def _num(value: Any) -> int | float | None:
    """A reading, or None for 'N/A', a missing key or a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _without_all_ones(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics table with amdsmi 6.0's all-ones "no reading" values as None."""

    def clean(value: Any) -> Any:
        if isinstance(value, list):
            return [clean(v) for v in value]
        return None if not isinstance(value, bool) and value in _ALL_ONES else value

    return {key: clean(value) for key, value in metrics.items()}


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() not in ("", "N/A") else None


def _first(*values: Any) -> int | float | None:
    return next((n for n in map(_num, values) if n is not None), None)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _valid(values: Any) -> list[int | float]:
    """The readings in a per-link or per-XCC list, without the 'N/A' slots."""
    if not isinstance(values, list):
        return []
    return [n for n in map(_num, values) if n is not None]


def _watts_from_microwatts(value: Any) -> float | None:
    microwatts = _num(value)
    # Zero watts is never a real limit: no cap is reported for this device.
    return microwatts / 1e6 if microwatts else None


def decode_power_caps(info: dict[str, Any]) -> dict[str, float | None]:
    return {
        "power_limit_w": _watts_from_microwatts(info.get("power_cap")),
        "power_limit_default_w": _watts_from_microwatts(info.get("default_power_cap")),
        "power_limit_min_w": _watts_from_microwatts(info.get("min_power_cap")),
        "power_limit_max_w": _watts_from_microwatts(info.get("max_power_cap")),
    }


def decode_energy_j(info: dict[str, Any]) -> float | None:
    accumulator = _first(info.get("energy_accumulator"), info.get("power"))  # "power" before 6.2
    resolution_uj = _num(info.get("counter_resolution"))
    if accumulator is None or resolution_uj is None:
        return None
    return accumulator * resolution_uj / 1e6


def decode_vram(info: dict[str, Any]) -> dict[str, int | None]:
    used, total = _num(info.get("vram_used")), _num(info.get("vram_total"))
    return {
        "mem_used_bytes": None if used is None else int(used) * _MIB,
        "mem_total_bytes": None if total is None else int(total) * _MIB,
    }


def decode_throttle(metrics: dict[str, Any], last_residency: dict[str, int]) -> tuple[list[str] | None, int | None]:
    """Throttle reason names and the ASIC-independent mask (None where unknown).

    In order: the raw `indep_throttle_status` bits (amdsmi 6.0-6.1); the
    residency accumulators against `last_residency` (MI300); the boolean
    amdsmi 6.2+ makes of the status, or a raw ASIC-specific status, which
    say only whether ("unspecified") and not why.
    """
    mask = _num(metrics.get("indep_throttle_status"))
    if mask is not None:
        names = [name for bits, name in _INDEP_THROTTLE_BITS if any(mask >> bit & 1 for bit in bits)]
        return names, mask
    residency = {key: _num(metrics.get(key)) for key in _RESIDENCY_REASONS}
    if last_residency and all(residency[key] is not None for key in last_residency):
        grew = [
            name
            for key, name in _RESIDENCY_REASONS.items()
            if key in last_residency and residency[key] > last_residency[key]
        ]
        return list(dict.fromkeys(grew)), None
    for key in ("indep_throttle_status", "throttle_status"):
        status = metrics.get(key)
        if isinstance(status, bool) or _num(status) is not None:
            return (["unspecified"] if status else []), None
    return None, None


def decode_gpu_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The firmware metrics table's fast-cadence quantities (not the rates)."""
    current_w = _num(metrics.get("current_socket_power"))
    gfx_clocks = _valid(metrics.get("current_gfxclks"))  # per XCC on MI300
    hbm_temps = _valid(metrics.get("temperature_hbm"))
    pcie_gb_per_s = _num(metrics.get("pcie_bandwidth_inst"))
    return {
        # MI300 reports only the current socket power (firmware-filtered);
        # MI200 only the average. Either is the board's power reading.
        "power_w": _float(_first(metrics.get("average_socket_power"), current_w)),
        "power_instant_w": _float(current_w),
        "gpu_util_pct": _float(_num(metrics.get("average_gfx_activity"))),
        "mem_util_pct": _float(_num(metrics.get("average_umc_activity"))),
        "sm_clock_mhz": _int(
            _first(
                metrics.get("current_gfxclk"),
                round(sum(gfx_clocks) / len(gfx_clocks)) if gfx_clocks else None,
                metrics.get("average_gfxclk_frequency"),
            )
        ),
        "mem_clock_mhz": _int(_first(metrics.get("current_uclk"), metrics.get("average_uclk_frequency"))),
        # The hotspot (junction) is what the firmware throttles on; edge
        # reads 10-20 °C lower and MI300 does not report it at all.
        "temp_c": _float(_first(metrics.get("temperature_hotspot"), metrics.get("temperature_edge"))),
        "mem_temp_c": _float(_first(metrics.get("temperature_mem"), max(hbm_temps) if hbm_temps else None)),
        # Instantaneous PCIe throughput, both directions together, in whole
        # GB/s. The `_acc` twin sums firmware samples at a rate amdsmi does
        # not state, so it cannot be turned into bytes.
        "pcie_bytes_per_s": None if pcie_gb_per_s is None else pcie_gb_per_s * 1e9,
        "pcie_replay_count": _int(_num(metrics.get("pcie_replay_count_acc"))),
    }


def decode_pcie_caps(info: dict[str, Any]) -> tuple[int | None, int | None]:
    """(generation, width) from `amdsmi_get_pcie_info` (6.2+) or `_pcie_link_caps` (6.0)."""
    static = info.get("pcie_static", info)
    width = _first(static.get("max_pcie_width"), static.get("max_pcie_lanes"), static.get("pcie_lanes"))
    gen = _num(static.get("pcie_interface_version"))
    if gen is None or not 1 <= gen <= 7:
        gen = _pcie_gen_from_speed(_first(static.get("max_pcie_speed"), static.get("pcie_speed")))
    return gen, None if width is None else int(width)


def _pcie_gen_from_speed(speed: int | float | None) -> int | None:
    if not speed:
        return None
    mt_per_s = speed * 1000 if speed < 1000 else speed  # GT/s in some versions, MT/s in most
    for gen, threshold in ((6, 64000), (5, 32000), (4, 16000), (3, 8000), (2, 5000), (1, 2500)):
        if mt_per_s >= threshold:
            return gen
    return None


def decode_process(entry: dict[str, Any]) -> ProcessSample | None:
    pid = _num(entry.get("pid"))
    if pid is None:
        return None
    usage = entry.get("memory_usage")
    vram_bytes = _num(usage.get("vram_mem")) if isinstance(usage, dict) else None
    return ProcessSample(
        pid=int(pid),
        used_mem_bytes=_first(vram_bytes, entry.get("mem")),
        process_name=_text(entry.get("name")),
    )


# --- the backend ---------------------------------------------------------------


@dataclass
class _Gpu:
    index: int
    handle: Any
    unsupported: set[str] = field(default_factory=set)
    power_limit_w: float | None = None
    link_rx: RateFromCounter = field(default_factory=lambda: RateFromCounter(scale=1024))
    link_tx: RateFromCounter = field(default_factory=lambda: RateFromCounter(scale=1024))
    residency: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Fallback:
    """An individual call that fills metrics the firmware table left empty.

    `key` is remembered in the device's `unsupported` set once the call
    answers without any of `fills`, so it is not made again.
    """

    key: str
    fills: tuple[str, ...]
    read: Callable[[AmdSmiBackend, _Gpu], dict[str, Any] | None]


class AmdSmiBackend:
    """Samples AMD GPUs through amdsmi.

    `amdsmi_module` injects a module-like object (tests pass a fake);
    `loader` imports the real one (its failures become BackendUnavailable).
    Starting the library here, not in `discover`, lets
    `open_backend("auto")` move on when amdsmi is installed but no AMD GPU
    or driver is present.
    """

    name = "amdsmi"

    def __init__(self, amdsmi_module: Any = None, loader: Callable[[], Any] = _import_amdsmi) -> None:
        self._smi = amdsmi_module if amdsmi_module is not None else load_amdsmi(loader)
        self._missing_functions: set[str] = set()
        self._readers: list[Any] = []
        self._events_started = False
        try:
            self._smi.amdsmi_init(self._smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            handles = list(self._smi.amdsmi_get_processor_handles())
        except self._smi.AmdSmiException as error:
            raise BackendUnavailable(f"amdsmi: cannot start the library ({_describe(error)})") from None
        if not handles:
            self._shut_down()
            raise BackendUnavailable("amdsmi: no AMD GPU found")
        self._gpus = [_Gpu(index, handle) for index, handle in enumerate(handles)]
        version = self._call(None, "amdsmi_get_lib_version") or {}
        self._library_version = ".".join(str(version[k]) for k in ("major", "minor", "release") if k in version) or None

    # --- the one guarded call ----------------------------------------------------

    def _call(self, gpu: _Gpu | None, function_name: str, *args: Any, key: str | None = None) -> Any:
        """amdsmi.<function_name>(*args), or None where there is no value.

        None for: a function this library lacks or cannot call as written
        (logged once, never called again); "not supported" (remembered per
        device under `key`, never asked again); other library errors
        (busy, timeout: tried again next tick); a result of 'N/A'.
        Raises GpuLost when the error means the GPU is gone.
        """
        key = key or function_name
        if function_name in self._missing_functions or (gpu is not None and key in gpu.unsupported):
            return None
        function = getattr(self._smi, function_name, None)
        if function is None:
            return self._give_up(function_name, "this amdsmi version does not have it", logging.INFO)
        try:
            result = function(*args)
        except self._smi.AmdSmiLibraryException as error:
            code = error.get_error_code()
            if code in _NOT_SUPPORTED_CODES:
                if gpu is not None:
                    gpu.unsupported.add(key)
                return None
            if code in _GPU_GONE_CODES and gpu is not None:
                raise GpuLost(gpu.index, f"{function_name}: AMDSMI_STATUS_{_GPU_GONE_CODES[code]}") from None
            log.debug("%s on GPU %s: %s", function_name, None if gpu is None else gpu.index, _describe(error))
            return None
        except (self._smi.AmdSmiException, TypeError) as error:
            # A parameter or signature mismatch: this code and this library disagree.
            return self._give_up(function_name, _describe(error), logging.WARNING)
        return None if result == "N/A" else result

    def _give_up(self, function_name: str, reason: str, level: int) -> None:
        log.log(level, "amdsmi: not calling %s again: %s", function_name, reason)
        self._missing_functions.add(function_name)
        return None

    # --- inventory ---------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        devices = []
        for gpu in self._gpus:
            try:
                devices.append(self._device_info(gpu))
            except GpuLost as lost:
                log.warning("amdsmi: leaving GPU %d out of the inventory: %s", gpu.index, lost.detail)
        if not self._events_started:
            self._events_started = True
            self._start_event_readers()
        return devices

    def _device_info(self, gpu: _Gpu) -> DeviceInfo:
        h = gpu.handle
        asic = self._call(gpu, "amdsmi_get_gpu_asic_info", h) or {}
        bdf = _text(self._call(gpu, "amdsmi_get_gpu_device_bdf", h))
        uuid = _text(self._call(gpu, "amdsmi_get_gpu_device_uuid", h))
        board = self._call(gpu, "amdsmi_get_gpu_board_info", h) or {}
        driver = self._call(gpu, "amdsmi_get_gpu_driver_info", h) or {}
        vram = decode_vram(self._call(gpu, "amdsmi_get_gpu_vram_usage", h) or {})
        caps = decode_power_caps(self._call(gpu, "amdsmi_get_power_cap_info", h) or {})
        pcie = self._call(gpu, "amdsmi_get_pcie_info", h) or self._call(gpu, "amdsmi_get_pcie_link_caps", h) or {}
        pcie_gen, pcie_width = decode_pcie_caps(pcie)
        link_count = self._xgmi_link_count(gpu)
        if caps["power_limit_w"] is not None:
            gpu.power_limit_w = caps["power_limit_w"]
        device_id = asic.get("device_id")  # "0x74a1" from 6.2, an int before
        device_label = hex(device_id) if isinstance(device_id, int) else _text(device_id) or "unknown"
        return DeviceInfo(
            gpu_index=gpu.index,
            gpu_uuid=uuid or (f"amd-{bdf}" if bdf else f"amd-gpu-{gpu.index}"),
            vendor="amd",
            model=_text(asic.get("market_name")) or f"AMD GPU {device_label}",
            pci_bus_id=bdf,
            serial=_text(board.get("product_serial")),
            driver_version=_text(driver.get("driver_version")),
            backend_library_version=self._library_version,
            mem_total_bytes=vram["mem_total_bytes"],
            pcie_gen=pcie_gen,
            pcie_width=pcie_width,
            link_kind="xgmi" if link_count else None,
            link_count=link_count,
            **caps,
        )

    def _xgmi_link_count(self, gpu: _Gpu) -> int | None:
        """Links that are up or down (not disabled); else the link metrics' count."""
        status = self._call(gpu, "amdsmi_get_gpu_xgmi_link_status", gpu.handle)
        if isinstance(status, dict) and isinstance(status.get("status"), list):
            return sum(1 for s in status["status"] if s in ("U", "D")) or None
        metrics = self._call(gpu, "amdsmi_get_link_metrics", gpu.handle)
        return (_num(metrics.get("num_links")) or None) if isinstance(metrics, dict) else None

    # --- sampling ------------------------------------------------------------------

    def sample(self, gpu_index: int, ts_ns: int, slow: bool) -> DeviceSample:
        if not 0 <= gpu_index < len(self._gpus):
            raise ValueError(f"amdsmi: no GPU {gpu_index}")
        gpu = self._gpus[gpu_index]
        h = gpu.handle
        metrics = _without_all_ones(self._call(gpu, "amdsmi_get_gpu_metrics_info", h) or {})
        values = decode_gpu_metrics(metrics)
        values["link_rx_bytes_per_s"] = gpu.link_rx.update(_sum(metrics.get("xgmi_read_data_acc")), ts_ns)
        values["link_tx_bytes_per_s"] = gpu.link_tx.update(_sum(metrics.get("xgmi_write_data_acc")), ts_ns)
        values["throttle_reasons"], values["throttle_reasons_mask"] = decode_throttle(metrics, gpu.residency)
        gpu.residency = {k: v for k in _RESIDENCY_REASONS if (v := _num(metrics.get(k))) is not None}
        self._fill_gaps(gpu, values)
        values["energy_j"] = decode_energy_j(self._call(gpu, "amdsmi_get_energy_count", h) or {})
        values.update(decode_vram(self._call(gpu, "amdsmi_get_gpu_vram_usage", h) or {}))
        if not slow:
            values["power_limit_w"] = gpu.power_limit_w  # a setting: the last read still holds
            return DeviceSample(values)
        caps = self._call(gpu, "amdsmi_get_power_cap_info", h)
        if caps:
            gpu.power_limit_w = decode_power_caps(caps)["power_limit_w"]
        values["power_limit_w"] = gpu.power_limit_w
        ecc = self._call(gpu, "amdsmi_get_gpu_total_ecc_count", h) or {}
        values["ecc_corrected_count"] = _num(ecc.get("correctable_count"))
        values["ecc_uncorrected_count"] = _num(ecc.get("uncorrectable_count"))
        return DeviceSample(values, processes=self._processes(gpu))

    def _fill_gaps(self, gpu: _Gpu, values: dict[str, Any]) -> None:
        for fallback in _FALLBACKS:
            missing = [name for name in fallback.fills if values.get(name) is None]
            if not missing or fallback.key in gpu.unsupported:
                continue
            found = fallback.read(self, gpu)
            if found is None:
                continue  # the call failed; _call has already remembered why
            filled = [name for name in missing if found.get(name) is not None]
            for name in filled:
                values[name] = found[name]
            if not filled:
                gpu.unsupported.add(fallback.key)  # answers, but not with these

    def _processes(self, gpu: _Gpu) -> list[ProcessSample] | None:
        entries = self._call(gpu, "amdsmi_get_gpu_process_list", gpu.handle)
        if entries is None:
            return None
        processes = []
        for entry in entries:
            if not isinstance(entry, dict):  # 6.0-6.1: a process handle
                entry = self._call(gpu, "amdsmi_get_gpu_process_info", gpu.handle, entry) or {}
            if (process := decode_process(entry)) is not None:
                processes.append(process)
        return processes

    # --- individual calls behind the metrics table ---------------------------------

    def _read_power(self, gpu: _Gpu) -> dict[str, Any] | None:
        info = self._call(gpu, "amdsmi_get_power_info", gpu.handle)
        if info is None:
            return None
        current_w = _num(info.get("current_socket_power"))
        power_w = _first(info.get("average_socket_power"), info.get("socket_power"), current_w)
        return {"power_w": _float(power_w), "power_instant_w": _float(current_w)}

    def _read_activity(self, gpu: _Gpu) -> dict[str, Any] | None:
        info = self._call(gpu, "amdsmi_get_gpu_activity", gpu.handle)
        if info is None:
            return None
        return {
            "gpu_util_pct": _float(_num(info.get("gfx_activity"))),
            "mem_util_pct": _float(_num(info.get("umc_activity"))),
        }

    def _read_clock(self, gpu: _Gpu, clock: str, column: str) -> dict[str, Any] | None:
        clock_type = getattr(self._smi.AmdSmiClkType, clock)
        info = self._call(gpu, "amdsmi_get_clock_info", gpu.handle, clock_type, key=f"clock:{clock}")
        return None if info is None else {column: _int(_first(info.get("clk"), info.get("cur_clk")))}

    def _read_temp(self, gpu: _Gpu, sensor: str, column: str) -> dict[str, Any] | None:
        sensor_type = getattr(self._smi.AmdSmiTemperatureType, sensor)
        current = self._smi.AmdSmiTemperatureMetric.CURRENT
        value = self._call(gpu, "amdsmi_get_temp_metric", gpu.handle, sensor_type, current, key=f"temp:{sensor}")
        return None if value is None else {column: _float(_num(value))}  # amdsmi gives °C

    def _read_pcie(self, gpu: _Gpu) -> dict[str, Any] | None:
        info = self._call(gpu, "amdsmi_get_pcie_info", gpu.handle)
        if info is None:
            return None
        metric = info.get("pcie_metric", {})
        mbit_per_s = _num(metric.get("pcie_bandwidth"))  # Mb/s, the same firmware reading
        return {
            "pcie_bytes_per_s": None if mbit_per_s is None else mbit_per_s * 1e6 / 8,
            "pcie_replay_count": _int(_num(metric.get("pcie_replay_count"))),
        }

    # --- events and shutdown -------------------------------------------------------

    def _start_event_readers(self) -> None:
        kinds = getattr(self._smi, "AmdSmiEvtNotificationType", None)
        reader_class = getattr(self._smi, "AmdSmiEventReader", None)
        if kinds is None or reader_class is None:
            return
        wanted = [getattr(kinds, name) for name in _EVENT_KINDS if hasattr(kinds, name)]
        for gpu in self._gpus:
            try:
                self._readers.append(reader_class(gpu.handle, wanted))
            except (self._smi.AmdSmiException, OSError) as error:
                # KFD events need /dev/kfd; without them there are only samples.
                log.info("amdsmi: no event notifications for GPU %d: %s", gpu.index, _describe(error))

    def poll_events(self) -> list[BackendEvent]:
        """GPU resets and VM faults since the last call (kinds: gpu_reset, gpu_reset_done, vm_fault)."""
        if not self._readers:
            return []
        try:
            raw = self._readers[0].read(0)  # one reader drains every initialised GPU; 0 ms: no wait
        except self._smi.AmdSmiException as error:
            log.debug("amdsmi: reading events: %s", _describe(error))
            return []
        ids = {_handle_id(gpu.handle): gpu.index for gpu in self._gpus}
        return [
            BackendEvent(
                kind=_EVENT_KINDS[item["event"]],
                gpu_index=ids.get(_handle_id(item.get("processor_handle"))),
                detail=_text(item.get("message")) or item["event"],
            )
            for item in raw
            if item.get("event") in _EVENT_KINDS
        ]

    def close(self) -> None:
        for reader in self._readers:
            with contextlib.suppress(self._smi.AmdSmiException):
                reader.stop()
        self._readers = []
        self._shut_down()

    def _shut_down(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except self._smi.AmdSmiException as error:
            log.debug("amdsmi_shut_down: %s", _describe(error))


_FALLBACKS: list[_Fallback] = [
    _Fallback("fill:power", ("power_w", "power_instant_w"), AmdSmiBackend._read_power),
    _Fallback("fill:activity", ("gpu_util_pct", "mem_util_pct"), AmdSmiBackend._read_activity),
    _Fallback("fill:clock:GFX", ("sm_clock_mhz",), lambda b, g: b._read_clock(g, "GFX", "sm_clock_mhz")),
    _Fallback("fill:clock:MEM", ("mem_clock_mhz",), lambda b, g: b._read_clock(g, "MEM", "mem_clock_mhz")),
    _Fallback("fill:temp:HOTSPOT", ("temp_c",), lambda b, g: b._read_temp(g, "HOTSPOT", "temp_c")),
    _Fallback("fill:temp:EDGE", ("temp_c",), lambda b, g: b._read_temp(g, "EDGE", "temp_c")),
    _Fallback("fill:temp:VRAM", ("mem_temp_c",), lambda b, g: b._read_temp(g, "VRAM", "mem_temp_c")),
    _Fallback("fill:pcie", ("pcie_bytes_per_s", "pcie_replay_count"), AmdSmiBackend._read_pcie),
]


def _sum(counters: Any) -> int | None:
    """The sum of a per-link accumulator list; None if no link reports."""
    valid = _valid(counters)
    return int(sum(valid)) if valid else None


def _handle_id(handle: Any) -> Any:
    return getattr(handle, "value", handle)  # ctypes handles compare by identity


def _describe(error: BaseException) -> str:
    info = getattr(error, "get_error_info", None)
    text = info() if callable(info) else str(error)
    return one_line(text)
