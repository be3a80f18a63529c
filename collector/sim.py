"""A deterministic, seeded model of a GPU node: the `sim` backend.

It is a product feature, not a test helper: demos, tests and load tests
(hundreds of GPUs) run on it. Every value is a function of the seed, the GPU
and the sample time, plus a little state that integrates over time (energy,
temperature lag, counters), so the same seed and the same tick times give
the same rows, bit for bit.

Workload profiles
- `training`: a periodic step (2.35 s by default: a period that is no
  multiple of common sampling intervals, so 1 Hz samples land in every
  phase rather than always the same two) of a compute phase (GPU busy, power near the
  limit, NVLink quiet) then a communication phase (all-reduce: NVLink busy,
  lower power). One GPU (`capped_gpu`, default the last) draws more than its
  limit: it sits at the limit, with lowered SM clocks and the `sw_power_cap`
  reason set, and its power-violation counter grows.
- `inference`: bursty load: requests arrive in bursts separated by long idle
  stretches; power tracks utilisation between ~70 W idle and ~500 W.

Power follows utilisation with noise; hitting the limit lowers the SM clock
in proportion and sets the power-cap reason.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

from gpulens.collector.backend import BackendEvent, DeviceInfo, DeviceSample, ProcessSample
from gpulens.collector.errors import UsageError
from gpulens.collector.jobs import UNKNOWN, JobIdentity
from gpulens.collector.throttle import REASON_BITS, decode_clock_event_reasons

PROFILES = ("training", "inference")

# NVML's clock-event reason bits, so sim rows decode like real ones.
GPU_IDLE_BIT = REASON_BITS["gpu_idle"]
SW_POWER_CAP_BIT = REASON_BITS["sw_power_cap"]

_MASK64 = (1 << 64) - 1


def _unit_noise(seed: int, gpu: int, tick: int, channel: int) -> float:
    """A reproducible uniform value in [-1, 1) (splitmix64 of the inputs)."""
    x = (seed * 0x9E3779B97F4A7C15 + gpu * 0xBF58476D1CE4E5B9 + tick * 0x94D049BB133111EB + channel) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    x ^= x >> 31
    return (x >> 11) / float(1 << 52) - 1.0


@dataclass(frozen=True)
class SimGpuModel:
    """Nominal figures of the simulated part (an H100 SXM5 by default)."""

    model: str = "NVIDIA H100 80GB HBM3"
    power_limit_w: float = 700.0
    power_limit_min_w: float = 200.0
    idle_power_w: float = 72.0
    max_sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    mem_total_bytes: int = 81_559 * 1024 * 1024
    nvlink_count: int = 18
    # Per direction, summed over the links (NVLink4: 450 GB/s each way).
    link_peak_bytes_per_s: float = 450e9
    pcie_gen: int = 5
    pcie_width: int = 16


@dataclass
class _GpuState:
    last_ts_ns: int | None = None
    energy_j: float = 0.0
    temp_c: float = 35.0
    power_violation_ns: int = 0
    thermal_violation_ns: int = 0
    link_tx_total_bytes: float = 0.0
    pcie_replays: int = 0


class SimBackend:
    """A simulated node with `gpus` GPUs running `profile`."""

    name = "sim"

    def __init__(
        self,
        gpus: int = 8,
        profile: str = "training",
        seed: int = 0,
        capped_gpu: int | None = None,
        step_s: float = 2.35,
        model: SimGpuModel | None = None,
        gpu_processes: dict[int, tuple[int, JobIdentity]] | None = None,
    ) -> None:
        if gpus < 1:
            raise UsageError(f"--sim-gpus must be at least 1, got {gpus}")
        if profile not in PROFILES:
            raise UsageError(f"unknown sim profile {profile!r}; choose one of {', '.join(PROFILES)}")
        if step_s <= 0:
            raise UsageError(f"sim step must be positive, got {step_s}")
        self.gpus = gpus
        self.profile = profile
        self.seed = seed
        self.step_s = step_s
        self.model = model or SimGpuModel()
        if profile == "training":
            self.capped_gpu: int | None = gpus - 1 if capped_gpu is None else capped_gpu
        else:
            self.capped_gpu = capped_gpu
        if self.capped_gpu is not None and not 0 <= self.capped_gpu < gpus:
            raise UsageError(f"capped GPU {self.capped_gpu} is not one of the {gpus} simulated GPUs")
        self._state = [_GpuState() for _ in range(gpus)]
        # Per GPU: the pid and job of the process the sim shows on it while
        # busy (default: pid 4000 + index, no job). The processes are not
        # this machine's, so each carries its job and /proc is never read.
        self.gpu_processes = {i: (4000 + i, UNKNOWN) for i in range(gpus)}
        self.gpu_processes.update(gpu_processes or {})

    # --- protocol -----------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        m = self.model
        return [
            DeviceInfo(
                gpu_index=i,
                gpu_uuid=self.gpu_uuid(i),
                vendor="sim",
                model=m.model,
                pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                serial=f"SIM{self.seed:04d}{i:04d}",
                driver_version="sim",
                backend_library_version="sim",
                mem_total_bytes=m.mem_total_bytes,
                power_limit_min_w=m.power_limit_min_w,
                power_limit_default_w=m.power_limit_w,
                power_limit_max_w=m.power_limit_w,
                power_limit_w=m.power_limit_w,
                pcie_gen=m.pcie_gen,
                pcie_width=m.pcie_width,
                link_kind="nvlink",
                link_count=m.nvlink_count,
            )
            for i in range(self.gpus)
        ]

    def gpu_uuid(self, gpu_index: int) -> str:
        return "GPU-" + str(uuid.UUID(int=(self.seed << 64 | gpu_index) & ((1 << 128) - 1)))

    def sample(self, gpu_index: int, ts_ns: int, slow: bool) -> DeviceSample:
        m = self.model
        state = self._state[gpu_index]
        dt_s = 0.0 if state.last_ts_ns is None else max(0.0, (ts_ns - state.last_ts_ns) / 1e9)

        util, link_share, pcie_share = self._load(gpu_index, ts_ns)
        demand_w = self._power_demand_w(gpu_index, ts_ns, util)
        power_w = min(demand_w, m.power_limit_w)
        capped = demand_w > m.power_limit_w
        # Sub-interval peak: the model at four points since the last tick.
        if dt_s > 0:
            peaks = [
                min(m.power_limit_w, self._power_demand_w(gpu_index, ts_ns - int(k * dt_s * 1e9 / 4), util))
                for k in range(4)
            ]
            power_max_w = max(peaks)
        else:
            power_max_w = power_w

        sm_clock_mhz = m.max_sm_clock_mhz if util > 0.02 else 345
        if capped:
            # Clocks come down roughly with the power over-demand.
            sm_clock_mhz = int(m.max_sm_clock_mhz * (m.power_limit_w / demand_w) ** 1.6)
        mask = 0
        if util <= 0.02:
            mask |= GPU_IDLE_BIT
        if capped:
            mask |= SW_POWER_CAP_BIT

        # First-order thermal lag towards a power-dependent equilibrium.
        target_c = 32.0 + power_w * 0.055
        alpha = 1.0 - math.exp(-dt_s / 20.0) if dt_s > 0 else 1.0
        state.temp_c += (target_c - state.temp_c) * alpha
        state.energy_j += power_w * dt_s
        if capped:
            state.power_violation_ns += int(dt_s * 1e9)
        link_tx = link_share * m.link_peak_bytes_per_s
        link_rx = link_share * m.link_peak_bytes_per_s * 0.995
        pcie_peak = 63e9  # Gen5 x16 per direction
        tick = ts_ns // 10_000_000
        values = {
            "power_w": round(power_w, 3),
            "power_instant_w": round(min(m.power_limit_w * 1.02, power_w + 18.0 * _unit_noise(self.seed, gpu_index, tick, 9)), 3),
            "power_max_w": round(power_max_w, 3),
            "power_limit_w": m.power_limit_w,
            "energy_j": round(state.energy_j, 3),
            "gpu_util_pct": float(round(util * 100)),
            "mem_util_pct": float(round(util * 62)),
            "sm_active_pct": float(round(util * 88)),
            "sm_clock_mhz": sm_clock_mhz,
            "mem_clock_mhz": m.mem_clock_mhz,
            "temp_c": float(round(state.temp_c)),
            "mem_temp_c": float(round(state.temp_c + 6)),
            "mem_used_bytes": self._mem_used_bytes(gpu_index, util),
            "mem_total_bytes": m.mem_total_bytes,
            "throttle_reasons": decode_clock_event_reasons(mask),
            "throttle_reasons_mask": mask,
            "power_violation_ns": state.power_violation_ns,
            "thermal_violation_ns": state.thermal_violation_ns,
            "pcie_tx_bytes_per_s": round(pcie_share * pcie_peak * 0.2, 0),
            "pcie_rx_bytes_per_s": round(pcie_share * pcie_peak, 0),
            "pcie_bytes_per_s": None,  # NVML's and amdsmi's combined figure; the sim has both directions
            "pcie_replay_count": state.pcie_replays,
            "link_tx_bytes_per_s": round(link_tx, 0),
            "link_rx_bytes_per_s": round(link_rx, 0),
            "ecc_corrected_count": 0,
            "ecc_uncorrected_count": 0,
        }
        state.last_ts_ns = ts_ns
        processes = None
        if slow:
            pid, job = self.gpu_processes[gpu_index]
            processes = [ProcessSample(pid=pid, used_mem_bytes=values["mem_used_bytes"], process_name="python", job=job)] if util > 0.02 else []
        return DeviceSample(values=values, processes=processes)

    def poll_events(self) -> list[BackendEvent]:
        return []

    def close(self) -> None:
        pass

    # --- the workload model ---------------------------------------------------

    def _load(self, gpu: int, ts_ns: int) -> tuple[float, float, float]:
        """(utilisation 0-1, NVLink share of peak 0-1, PCIe share 0-1)."""
        t_s = ts_ns / 1e9
        tick = ts_ns // 10_000_000
        if self.profile == "training":
            phase = (t_s / self.step_s) % 1.0
            if phase < 0.05:  # data loading: host → device copies
                return 0.35, 0.02, 0.6
            if phase < 0.72:  # forward and backward
                return min(1.0, 0.97 + 0.03 * _unit_noise(self.seed, gpu, tick, 1)), 0.03, 0.02
            # gradient all-reduce
            return 0.58 + 0.04 * _unit_noise(self.seed, gpu, tick, 1), 0.71 + 0.05 * _unit_noise(self.seed, gpu, tick, 2), 0.01
        # inference: bursts whose on/off pattern is fixed per 5 s window
        window = int(t_s // 5)
        burst_on = _unit_noise(self.seed, gpu, window, 3) > 0.2
        if not burst_on:
            return 0.0, 0.0, 0.0
        level = 0.45 + 0.4 * abs(_unit_noise(self.seed, gpu, window, 4))
        return min(1.0, level + 0.08 * _unit_noise(self.seed, gpu, tick, 5)), 0.05 * level, 0.15 * level

    def _power_demand_w(self, gpu: int, ts_ns: int, util: float) -> float:
        m = self.model
        tick = ts_ns // 10_000_000
        span_w = (m.power_limit_w - m.idle_power_w) * (0.93 if self.profile == "training" else 0.62)
        demand = m.idle_power_w + span_w * util + 9.0 * _unit_noise(self.seed, gpu, tick, 6)
        if gpu == self.capped_gpu and util > 0.5:
            demand *= 1.12  # a hungrier part (or a lower cap) sits at its limit
        return max(m.idle_power_w * 0.8, demand)

    def _mem_used_bytes(self, gpu: int, util: float) -> int:
        if self.profile == "training":
            return 68 * 1024**3 + gpu * 256 * 1024**2
        return (22 if util > 0.02 else 21) * 1024**3
