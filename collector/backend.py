"""The sampling-backend protocol: discover devices, sample them, close.

A backend turns one vendor library's view of a GPU into the contract's
units (W, J, bytes/s, MHz, °C, ns) at its edge; the sampler and the writer
never see vendor units or vendor errors. Backends:

- `collector.nvml.NvmlBackend`   (nvidia-ml-py, `import pynvml`)
- `collector.amd.AmdSmiBackend`  (amdsmi; needs the ROCm library)
- `collector.sim.SimBackend`     (a seeded model of a node; no GPU needed)

Each backend imports this module; `collector.backends.open_backend`
picks one by name (so this module imports none of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpulens.collector.jobs import JobIdentity


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU's inventory, as the `devices` table records it."""

    gpu_index: int
    gpu_uuid: str
    vendor: str  # nvidia | amd | sim
    model: str
    pci_bus_id: str | None = None
    serial: str | None = None
    driver_version: str | None = None
    backend_library_version: str | None = None
    mem_total_bytes: int | None = None
    power_limit_min_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_max_w: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    link_kind: str | None = None  # nvlink | xgmi | None
    link_count: int | None = None


@dataclass(frozen=True)
class ProcessSample:
    """A compute process seen on a GPU (slow cadence)."""

    pid: int
    used_mem_bytes: int | None
    process_name: str | None = None
    # The job it belongs to, where the backend knows it (the sim's own
    # job); None: the collector reads it from /proc (collector.jobs).
    job: JobIdentity | None = None


@dataclass
class DeviceSample:
    """One read of one GPU.

    `values` maps names from `collector.schema.TELEMETRY_METRICS` to values in
    the contract's units. A metric that is absent (or None) is written as
    NULL: the device does not report it, or it needs two reads to be known
    (a rate from counter deltas on the first read).
    `processes` is filled on slow ticks only, else None. The sampler takes
    ownership of `values` (it adds the key columns in place): return a new
    dict on each call.
    """

    values: dict[str, Any]
    processes: list[ProcessSample] | None = None


@dataclass(frozen=True)
class BackendEvent:
    """Something discrete a backend noticed (an XID error, say)."""

    kind: str
    gpu_index: int | None
    detail: str
    value: int | None = None


class GpuLost(Exception):
    """The GPU fell off the bus or stopped answering.

    Raised by `Backend.sample`; the sampler records a `gpu_lost` event,
    keeps sampling the other GPUs and retries this one with back-off.
    """

    def __init__(self, gpu_index: int, detail: str) -> None:
        super().__init__(f"GPU {gpu_index}: {detail}")
        self.gpu_index = gpu_index
        self.detail = detail


class Backend(Protocol):
    name: str

    def discover(self) -> list[DeviceInfo]:
        """The GPUs this backend can see, in index order."""
        ...

    def sample(self, gpu_index: int, ts_ns: int, slow: bool) -> DeviceSample:
        """Read one GPU at tick time `ts_ns` (epoch ns).

        `slow` asks for the slow-cadence quantities too (processes, ECC,
        anything costly). Raises `GpuLost`; any other per-metric failure
        becomes NULL inside the backend.
        """
        ...

    def poll_events(self) -> list[BackendEvent]:
        """Discrete events since the last call, without blocking."""
        ...

    def close(self) -> None: ...


@dataclass
class RateFromCounter:
    """Turns a cumulative counter into a per-second rate between reads.

    Handles counters that wrap at `wrap_at` (NVML's 32-bit counters, say) and
    counters that reset (driver reload): a reset gives no rate, not a huge
    negative one. `scale` converts counter units to bytes (1024 for KiB).

    A wrapping counter read too seldom is ambiguous: between two reads it may
    have wrapped more than once, and the difference modulo `wrap_at` then
    undercounts by whole wraps (an H100's 32-bit PCIe byte counter, moving
    59 GB/s, wraps every 73 ms). With `max_per_s` (the most the counter can
    move in a second, in bytes), an interval long enough to hold a whole
    wrap gives no rate rather than a wrong one.
    """

    scale: float = 1.0
    wrap_at: int | None = None
    max_per_s: float | None = None
    _last_value: int | None = field(default=None, init=False)
    _last_ts_ns: int | None = field(default=None, init=False)

    def update(self, value: int | None, ts_ns: int) -> float | None:
        if value is None:
            self._last_value = None
            return None
        last_value, last_ts = self._last_value, self._last_ts_ns
        self._last_value, self._last_ts_ns = value, ts_ns
        if last_value is None or last_ts is None or ts_ns <= last_ts:
            return None
        if (self.wrap_at is not None and self.max_per_s is not None
                and self.max_per_s * (ts_ns - last_ts) / 1e9 >= self.wrap_at * self.scale):
            return None  # it may have wrapped more than once: the rate is unknowable
        delta = value - last_value
        if delta < 0:
            if self.wrap_at is None:
                return None  # the counter was reset
            delta += self.wrap_at
        return delta * self.scale * 1e9 / (ts_ns - last_ts)
