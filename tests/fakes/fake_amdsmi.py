"""A fake of ROCm's `amdsmi` package that behaves like the real one.

`FakeAmdSmi(gpus)` is a module-like object with the real package's function
names and signatures, enums, exception classes and status codes, returning
the real dict shapes in the real units: power caps in µW, energy as an
accumulator with a float32 resolution in µJ, VRAM in MB (MiB), XGMI data as
per-link KB accumulators, 'N/A' strings where the firmware has no reading.
Functions check their arguments as the real ones do (a processor handle,
enum members) and raise `AmdSmiParameterException` otherwise.

`api_version` selects the library generation (see collector/amd.py):
(7, 0, 2) is current; (6, 0, 2) has the older shapes (`power` energy key,
`cur_clk`, `amdsmi_get_pcie_link_caps`, process handles, raw throttle masks
and all-ones instead of 'N/A' in the metrics table).

Controls: each `FakeGpu`'s fields (counters, readings), `gpu.unsupported`
(function names that raise NOT_SUPPORTED), `fake.lose(index, code)`,
`fake.push_event(...)`, `missing=` (functions this version lacks), and
`init_error=`. `fake.calls` counts calls per function name.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

# amdsmi_status_t (amdsmi_wrapper.py)
AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_DRM_ERROR = 6
AMDSMI_STATUS_TIMEOUT = 8
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_BUSY = 30
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_NO_DRV = 51

_STATUS_INFO = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED: "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet implemented",
    AMDSMI_STATUS_DRM_ERROR: "AMDSMI_STATUS_DRM_ERROR - Error when called libdrm",
    AMDSMI_STATUS_TIMEOUT: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    AMDSMI_STATUS_RETRY: "AMDSMI_STATUS_RETRY - Retry operation",
    AMDSMI_STATUS_BUSY: "AMDSMI_STATUS_BUSY - Device busy",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    AMDSMI_STATUS_NO_DRV: "AMDSMI_STATUS_NO_DRV - No Energy and HSMP driver present",
}


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _STATUS_INFO.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or f"Invalid parameter:\nActual type: {type(receivedValue)}\nExpected type: {expectedType}"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0  # an alias of SYS, as in amdsmi
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1  # an alias of HOTSPOT
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6


class AmdSmiEvtNotificationType(IntEnum):
    NONE = 0
    VMFAULT = 1
    THERMAL_THROTTLE = 2
    GPU_PRE_RESET = 3
    GPU_POST_RESET = 4


class ProcessorHandle:
    """Like amdsmi_processor_handle (a ctypes c_void_p): `.value`, identity equality."""

    def __init__(self, value: int) -> None:
        self.value = value


class ProcessHandle:
    """A 6.0-era amdsmi_process_handle_t."""

    def __init__(self, pid: int) -> None:
        self.value = pid


def float32(value: float) -> float:
    """What ctypes.c_float(value).value gives back."""
    return struct.unpack("f", struct.pack("f", value))[0]


# Every key of amdsmi_get_gpu_metrics_info (amdsmi 7.0); fields an ASIC lacks are 'N/A'.
_METRIC_KEYS = (
    "common_header.structure_size common_header.format_revision common_header.content_revision "
    "temperature_edge temperature_hotspot temperature_mem temperature_vrgfx temperature_vrsoc temperature_vrmem "
    "average_gfx_activity average_umc_activity average_mm_activity average_socket_power energy_accumulator "
    "system_clock_counter average_gfxclk_frequency average_socclk_frequency average_uclk_frequency "
    "average_vclk0_frequency average_dclk0_frequency average_vclk1_frequency average_dclk1_frequency "
    "current_gfxclk current_socclk current_uclk current_vclk0 current_dclk0 current_vclk1 current_dclk1 "
    "throttle_status current_fan_speed pcie_link_width pcie_link_speed gfx_activity_acc mem_activity_acc "
    "temperature_hbm firmware_timestamp voltage_soc voltage_gfx voltage_mem indep_throttle_status "
    "current_socket_power vcn_activity gfxclk_lock_status xgmi_link_width xgmi_link_speed pcie_bandwidth_acc "
    "pcie_bandwidth_inst pcie_l0_to_recov_count_acc pcie_replay_count_acc pcie_replay_rover_count_acc "
    "xgmi_read_data_acc xgmi_write_data_acc current_gfxclks current_socclks current_vclk0s current_dclk0s "
    "jpeg_activity pcie_nak_sent_count_acc pcie_nak_rcvd_count_acc accumulation_counter prochot_residency_acc "
    "ppt_residency_acc socket_thm_residency_acc vr_thm_residency_acc hbm_thm_residency_acc num_partition"
).split()
_LIST_LENGTHS = {
    "temperature_hbm": 4,
    "vcn_activity": 4,
    "xgmi_read_data_acc": 8,
    "xgmi_write_data_acc": 8,
    "current_gfxclks": 8,
    "current_socclks": 4,
    "current_vclk0s": 4,
    "current_dclk0s": 4,
    "jpeg_activity": 32,
}
_U64_KEYS = {
    "energy_accumulator", "system_clock_counter", "firmware_timestamp", "pcie_bandwidth_acc", "pcie_bandwidth_inst",
    "pcie_l0_to_recov_count_acc", "pcie_replay_count_acc", "pcie_replay_rover_count_acc", "xgmi_read_data_acc",
    "xgmi_write_data_acc", "accumulation_counter", "prochot_residency_acc", "ppt_residency_acc",
    "socket_thm_residency_acc", "vr_thm_residency_acc", "hbm_thm_residency_acc", "indep_throttle_status",
}  # fmt: skip
_RESIDENCY_KEYS = ("prochot", "ppt", "socket_thm", "vr_thm", "hbm_thm")


def _na_metrics() -> dict[str, Any]:
    return {key: ["N/A"] * _LIST_LENGTHS[key] if key in _LIST_LENGTHS else "N/A" for key in _METRIC_KEYS}


@dataclass
class FakeProcess:
    pid: int
    name: str
    vram_bytes: int


@dataclass
class FakeGpu:
    """One GPU (or MI250X GCD): inventory and live readings in amdsmi's units."""

    market_name: str
    device_id: int
    uuid: str
    bdf: str
    serial: str
    power_cap_uw: int
    default_power_cap_uw: int
    min_power_cap_uw: int
    max_power_cap_uw: int
    vram_total_mb: int
    vram_used_mb: int
    pcie_gen: int
    metrics: dict[str, Any]  # firmware table in amdsmi 7.0's shape, throttle fields excepted
    power_info: dict[str, Any]
    activity: dict[str, Any]
    clocks_mhz: dict[str, int]  # by AmdSmiClkType name; absent: NOT_SUPPORTED
    temps_c: dict[str, int]  # by AmdSmiTemperatureType name; absent: NOT_SUPPORTED
    xgmi_link_status: list[str] | None  # None: NOT_SUPPORTED (older firmware)
    xgmi_link_metrics_count: int
    energy_accumulator: int = 0
    counter_resolution_uj: float = float32(15.259)
    pcie_bandwidth_mbit_per_s: int | str = "N/A"
    pcie_replay_count: int = 0
    # Throttle statuses as the firmware has them; amdsmi 6.2+ reduces them to bools.
    throttle_mask: int | None = None
    indep_throttle_mask: int | None = None
    ecc_correctable: int = 0
    ecc_uncorrectable: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    lost_code: int | None = None

    def set_xgmi_kb(self, read_kb: list[int], write_kb: list[int]) -> None:
        """Per-link accumulators; the slots past the GPU's links stay 'N/A'."""
        self.metrics["xgmi_read_data_acc"] = read_kb + ["N/A"] * (8 - len(read_kb))
        self.metrics["xgmi_write_data_acc"] = write_kb + ["N/A"] * (8 - len(write_kb))

    def add_residency(self, **ticks: int) -> None:
        """Advance firmware residency counters, e.g. add_residency(ppt=40), and the accumulation counter."""
        self.metrics["accumulation_counter"] += 1000
        for name, count in ticks.items():
            self.metrics[f"{name}_residency_acc"] += count


_MI300X_BDFS = ("0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0")


def mi300x(index: int = 0) -> FakeGpu:
    """An MI300X OAM at work: 750 W cap, 7 XGMI links, gpu_metrics 1.5 (no edge sensor, per-XCC clocks)."""
    metrics = _na_metrics()
    metrics.update(
        {
            "common_header.structure_size": 1176,
            "common_header.format_revision": 1,
            "common_header.content_revision": 5,
            "temperature_hotspot": 71,
            "temperature_mem": 58,
            "average_gfx_activity": 87,
            "average_umc_activity": 41,
            "current_socket_power": 612,
            "energy_accumulator": 0,
            "current_uclk": 1300,
            "current_gfxclks": [2100, 2100, 2100, 2100, 2090, 2090, 2090, 2090],
            "pcie_link_width": 16,
            "pcie_link_speed": 320,
            "pcie_bandwidth_acc": 4_402_113,
            "pcie_bandwidth_inst": 12,
            "pcie_replay_count_acc": 0,
            "xgmi_link_width": 16,
            "xgmi_link_speed": 32,
            "accumulation_counter": 5_000_000,
            "num_partition": 1,
            **{f"{name}_residency_acc": 0 for name in _RESIDENCY_KEYS},
        }
    )
    gpu = FakeGpu(
        market_name="AMD Instinct MI300X",
        device_id=0x74A1,
        uuid=f"{index:02x}ff74a1-0000-1000-8039-d5b2c0e1f4{index:02x}",
        bdf=_MI300X_BDFS[index % len(_MI300X_BDFS)],
        serial=f"692325000{index:03d}",
        power_cap_uw=750_000_000,
        default_power_cap_uw=750_000_000,
        min_power_cap_uw=0,
        max_power_cap_uw=750_000_000,
        vram_total_mb=196_592,
        vram_used_mb=150_214,
        pcie_gen=5,
        metrics=metrics,
        power_info={"socket_power": 612, "current_socket_power": 612, "average_socket_power": "N/A"},
        activity={"gfx_activity": 87, "umc_activity": 41, "mm_activity": "N/A"},
        clocks_mhz={"GFX": 2100, "MEM": 1300},
        temps_c={"HOTSPOT": 71, "VRAM": 58},
        xgmi_link_status=["U"] * 7 + ["X"],
        xgmi_link_metrics_count=7,
        pcie_bandwidth_mbit_per_s=96_000,
        throttle_mask=0,
        indep_throttle_mask=0,
        processes=[FakeProcess(pid=48213, name="python3", vram_bytes=148_000 * 1024 * 1024)],
    )
    gpu.set_xgmi_kb([0] * 7, [0] * 7)
    return gpu


def mi250x_gcd(index: int = 0) -> FakeGpu:
    """One GCD of an MI250X OAM: 560 W cap, gpu_metrics 1.3 (average power only, no XGMI counters)."""
    metrics = _na_metrics()
    metrics.update(
        {
            "common_header.structure_size": 264,
            "common_header.format_revision": 1,
            "common_header.content_revision": 3,
            "temperature_edge": 44,
            "temperature_hotspot": 52,
            "temperature_mem": 57,
            "average_gfx_activity": 96,
            "average_umc_activity": 35,
            "average_mm_activity": 0,
            "average_socket_power": 331,
            "energy_accumulator": 0,
            "current_gfxclk": 1700,
            "current_socclk": 1090,
            "current_uclk": 1600,
            "pcie_link_width": 16,
            "pcie_link_speed": 160,
        }
    )
    return FakeGpu(
        market_name="AMD Instinct MI250X / MI250",
        device_id=0x740C,
        uuid=f"{index:02x}ff740c-0000-1000-80a5-1b3f6c9e20{index:02x}",
        bdf=f"0000:{0x29 + index * 0x3:02x}:00.0",
        serial=f"PCB0487{index:02d}",
        power_cap_uw=560_000_000,
        default_power_cap_uw=560_000_000,
        min_power_cap_uw=0,
        max_power_cap_uw=560_000_000,
        vram_total_mb=65_520,
        vram_used_mb=61_012,
        pcie_gen=4,
        metrics=metrics,
        power_info={"socket_power": 331, "current_socket_power": "N/A", "average_socket_power": 331},
        activity={"gfx_activity": 96, "umc_activity": 35, "mm_activity": 0},
        clocks_mhz={"GFX": 1700, "MEM": 1600},
        temps_c={"EDGE": 44, "HOTSPOT": 52, "VRAM": 57},
        xgmi_link_status=None,
        xgmi_link_metrics_count=8,
        throttle_mask=0,
        indep_throttle_mask=0,
    )


# Functions each generation lacks (6.0: before amdsmi_get_pcie_info and link status).
_MISSING_BY_GENERATION = {
    (6, 0): {"amdsmi_get_pcie_info", "amdsmi_get_gpu_xgmi_link_status", "amdsmi_get_violation_status"},
    (7, 0): {"amdsmi_get_pcie_link_caps", "amdsmi_get_gpu_process_info"},
}


class FakeAmdSmi:
    """Module-like stand-in for `import amdsmi`."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiClkType = AmdSmiClkType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiEvtNotificationType = AmdSmiEvtNotificationType

    def __init__(
        self,
        gpus: list[FakeGpu],
        api_version: tuple[int, int, int] = (7, 0, 2),
        missing: set[str] | frozenset[str] = frozenset(),
        init_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.api_version = api_version
        self.old_api = api_version < (6, 2, 0)
        self._missing = set(missing) | _MISSING_BY_GENERATION[(6, 0) if self.old_api else (7, 0)]
        self.init_error = init_error
        self.initialised = False
        self.handles = [ProcessorHandle(0x55D0_0000 + 0x1000 * i) for i in range(len(gpus))]
        self.calls: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []
        self.readers: list[FakeEventReader] = []

    def __getattribute__(self, name: str) -> Any:
        # A function this library version lacks is simply not there.
        if name.startswith("amdsmi_") and name in object.__getattribute__(self, "_missing"):
            raise AttributeError(f"module 'amdsmi' has no attribute '{name}'")
        return object.__getattribute__(self, name)

    # --- controls ----------------------------------------------------------------

    def lose(self, index: int, code: int = AMDSMI_STATUS_NOT_FOUND) -> None:
        """Every later call on this GPU fails with `code`."""
        self.gpus[index].lost_code = code

    def push_event(self, index: int, event: str, message: str) -> None:
        self.events.append({"processor_handle": self.handles[index], "event": event, "message": message})

    # --- plumbing --------------------------------------------------------------

    def _count(self, name: str) -> None:
        self.calls[name] += 1
        if not self.initialised:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)

    def _device(self, name: str, handle: Any) -> FakeGpu:
        self._count(name)
        if not isinstance(handle, ProcessorHandle):
            raise AmdSmiParameterException(handle, ProcessorHandle)
        gpu = self.gpus[self.handles.index(handle)]
        if gpu.lost_code is not None:
            raise AmdSmiLibraryException(gpu.lost_code)
        if name in gpu.unsupported:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return gpu

    # --- library and discovery -------------------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls["amdsmi_init"] += 1
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self._count("amdsmi_shut_down")
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[ProcessorHandle]:
        self._count("amdsmi_get_processor_handles")
        return list(self.handles)

    def amdsmi_get_lib_version(self) -> dict[str, Any]:
        self._count("amdsmi_get_lib_version")
        major, minor, release = self.api_version
        return {"major": major, "minor": minor, "release": release, "build": ""}

    def amdsmi_get_gpu_asic_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_asic_info", handle)
        return {
            "market_name": gpu.market_name,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": hex(gpu.device_id),
            "rev_id": "0x00",
            "asic_serial": "0x" + gpu.uuid.replace("-", "")[-16:].upper(),
            "oam_id": 0,
            "num_compute_units": 304 if gpu.device_id == 0x74A1 else 110,
            "target_graphics_version": "gfx942" if gpu.device_id == 0x74A1 else "gfx90a",
            "subsystem_id": "0x74a1",
        }

    def amdsmi_get_gpu_device_uuid(self, handle: ProcessorHandle) -> str:
        return self._device("amdsmi_get_gpu_device_uuid", handle).uuid

    def amdsmi_get_gpu_device_bdf(self, handle: ProcessorHandle) -> str:
        return self._device("amdsmi_get_gpu_device_bdf", handle).bdf

    def amdsmi_get_gpu_board_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_board_info", handle)
        return {
            "model_number": "102-G30211-00",
            "product_serial": gpu.serial,
            "fru_id": "N/A",
            "product_name": gpu.market_name,
            "manufacturer_name": "AMD",
        }

    def amdsmi_get_gpu_driver_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        self._device("amdsmi_get_gpu_driver_info", handle)
        return {"driver_name": "amdgpu", "driver_version": "6.12.12", "driver_date": "2015/01/01 00:00"}

    def amdsmi_get_power_cap_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_power_cap_info", handle)
        return {
            "power_cap": gpu.power_cap_uw,
            "default_power_cap": gpu.default_power_cap_uw,
            "dpm_cap": 0,
            "min_power_cap": gpu.min_power_cap_uw,
            "max_power_cap": gpu.max_power_cap_uw,
        }

    def amdsmi_get_pcie_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_pcie_info", handle)
        return {
            "pcie_static": {
                "max_pcie_width": 16,
                "max_pcie_speed": 1000 * 2**gpu.pcie_gen,  # MT/s: Gen4 16000, Gen5 32000
                "pcie_interface_version": gpu.pcie_gen,
                "slot_type": "OAM",
            },
            "pcie_metric": {
                "pcie_width": 16,
                "pcie_speed": 1000 * 2**gpu.pcie_gen,
                "pcie_bandwidth": gpu.pcie_bandwidth_mbit_per_s,
                "pcie_replay_count": gpu.pcie_replay_count,
                "pcie_l0_to_recovery_count": 0,
                "pcie_replay_roll_over_count": 0,
                "pcie_nak_sent_count": 0,
                "pcie_nak_received_count": 0,
                "pcie_lc_perf_other_end_recovery_count": "N/A",
            },
        }

    def amdsmi_get_pcie_link_caps(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_pcie_link_caps", handle)
        return {
            "max_pcie_speed": 1000 * 2**gpu.pcie_gen,
            "max_pcie_lanes": 16,
            "pcie_interface_version": gpu.pcie_gen,
            "pcie_slot_type": 2,
        }

    def amdsmi_get_gpu_xgmi_link_status(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_xgmi_link_status", handle)
        if gpu.xgmi_link_status is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {"status": list(gpu.xgmi_link_status), "total_links": len(gpu.xgmi_link_status)}

    def amdsmi_get_link_metrics(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_link_metrics", handle)
        links = [
            {"bdf": "N/A", "bit_rate": 32, "max_bandwidth": 64, "link_type": 2, "read": 0, "write": 0}
            for _ in range(gpu.xgmi_link_metrics_count)
        ]
        return {"num_links": gpu.xgmi_link_metrics_count, "links": links}

    # --- monitoring --------------------------------------------------------------

    def amdsmi_get_gpu_metrics_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_metrics_info", handle)
        metrics = {key: list(value) if isinstance(value, list) else value for key, value in gpu.metrics.items()}
        if self.old_api:  # 6.0: raw firmware values, all-ones where there is none
            metrics["throttle_status"] = 0xFFFFFFFF if gpu.throttle_mask is None else gpu.throttle_mask
            metrics["indep_throttle_status"] = gpu.indep_throttle_mask
            return {key: _all_ones_for_na(key, value) for key, value in metrics.items()}
        for key, mask in (("throttle_status", gpu.throttle_mask), ("indep_throttle_status", gpu.indep_throttle_mask)):
            metrics[key] = "N/A" if mask is None else bool(mask)
        return metrics

    def amdsmi_get_energy_count(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_energy_count", handle)
        key = "power" if self.old_api else "energy_accumulator"
        return {key: gpu.energy_accumulator, "counter_resolution": gpu.counter_resolution_uj, "timestamp": 0}

    def amdsmi_get_power_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_power_info", handle)
        info = {**gpu.power_info, "power_limit": "N/A"}
        info.update(gfx_voltage="N/A", soc_voltage="N/A", mem_voltage="N/A")
        if self.old_api:
            del info["socket_power"]
        return info

    def amdsmi_get_gpu_activity(self, handle: ProcessorHandle) -> dict[str, Any]:
        return dict(self._device("amdsmi_get_gpu_activity", handle).activity)

    def amdsmi_get_clock_info(self, handle: ProcessorHandle, clock_type: AmdSmiClkType) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_clock_info", handle)
        if not isinstance(clock_type, AmdSmiClkType):
            raise AmdSmiParameterException(clock_type, AmdSmiClkType)
        # By value, as the C library sees it: GFX and SYS are both 0.
        mhz = next((v for k, v in gpu.clocks_mhz.items() if AmdSmiClkType[k] == clock_type), None)
        if mhz is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        if self.old_api:
            return {"cur_clk": mhz, "min_clk": 500, "max_clk": 2100, "sleep_clk": "N/A"}
        return {"clk": mhz, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": "N/A"}

    def amdsmi_get_temp_metric(
        self, handle: ProcessorHandle, sensor_type: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric
    ) -> int:
        gpu = self._device("amdsmi_get_temp_metric", handle)
        if not isinstance(sensor_type, AmdSmiTemperatureType):
            raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
        if not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
        celsius = next((v for k, v in gpu.temps_c.items() if AmdSmiTemperatureType[k] == sensor_type), None)
        if celsius is None or metric != AmdSmiTemperatureMetric.CURRENT:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return celsius

    def amdsmi_get_gpu_vram_usage(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_vram_usage", handle)
        return {"vram_total": gpu.vram_total_mb, "vram_used": gpu.vram_used_mb}

    def amdsmi_get_gpu_total_ecc_count(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_total_ecc_count", handle)
        return {
            "correctable_count": gpu.ecc_correctable,
            "uncorrectable_count": gpu.ecc_uncorrectable,
            "deferred_count": 0,
        }

    def amdsmi_get_gpu_process_list(self, handle: ProcessorHandle) -> list[Any]:
        gpu = self._device("amdsmi_get_gpu_process_list", handle)
        if self.old_api:
            return [ProcessHandle(p.pid) for p in gpu.processes]
        return [_process_dict(p) for p in gpu.processes]

    def amdsmi_get_gpu_process_info(self, handle: ProcessorHandle, process: ProcessHandle) -> dict[str, Any]:
        gpu = self._device("amdsmi_get_gpu_process_info", handle)
        if not isinstance(process, ProcessHandle):
            raise AmdSmiParameterException(process, ProcessHandle)
        found = next((p for p in gpu.processes if p.pid == process.value), None)
        if found is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
        entry = _process_dict(found)
        del entry["cu_occupancy"]
        return entry

    def AmdSmiEventReader(  # noqa: N802 - the real package's class name
        self, processor_handle: ProcessorHandle, event_types: list[AmdSmiEvtNotificationType]
    ) -> FakeEventReader:
        """The real package's class; here bound to this fake."""
        self._device("AmdSmiEventReader", processor_handle)
        reader = FakeEventReader(self, processor_handle, list(event_types))
        self.readers.append(reader)
        return reader


class FakeEventReader:
    def __init__(self, fake: FakeAmdSmi, handle: ProcessorHandle, event_types: list[AmdSmiEvtNotificationType]) -> None:
        self.fake, self.handle, self.event_types, self.stopped = fake, handle, event_types, False

    def read(self, timestamp: int, num_elem: int = 10) -> list[dict[str, Any]]:
        """Queued events of the subscribed kinds, for every initialised GPU (as the real one)."""
        wanted = {t.name for t in self.event_types}
        events = [e for e in self.fake.events if e["event"] in wanted][:num_elem]
        self.fake.events = [e for e in self.fake.events if e not in events]
        return events

    def stop(self) -> None:
        self.stopped = True


def _process_dict(process: FakeProcess) -> dict[str, Any]:
    return {
        "name": process.name,
        "pid": process.pid,
        "mem": process.vram_bytes + 2 * 1024 * 1024,  # VRAM plus GTT
        "engine_usage": {"gfx": 912_340_000, "enc": 0},
        "memory_usage": {"gtt_mem": 2 * 1024 * 1024, "cpu_mem": 0, "vram_mem": process.vram_bytes},
        "cu_occupancy": "N/A",
    }


def _all_ones_for_na(key: str, value: Any) -> Any:
    ones = 0xFFFFFFFFFFFFFFFF if key in _U64_KEYS else 0xFFFF
    if isinstance(value, list):
        return [ones if v == "N/A" else v for v in value]
    return ones if value == "N/A" or value is None else value
