"""Throttle (clock-event) reasons: one vocabulary for every backend.

NVIDIA reasons are NVML's clock-event bits decoded to lower-case names;
AMD reasons are the names `collector.amd` decodes from amdsmi's throttle
status. `LIMITING_REASONS` are those that mean the GPU is being held back
(power or heat), as opposed to idling or following a clock setting: the
daemon records `throttle_start`/`throttle_stop` events on them, and the
analyses count time throttled by them.
"""

from __future__ import annotations

# nvml.h nvmlClocksEventReason* bits (tests check them against pynvml's
# constants), in bit order so decoded lists are stable.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
_KNOWN_REASON_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)
REASON_BITS: dict[str, int] = {name: bit for bit, name in CLOCK_EVENT_REASONS}

NVIDIA_POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
NVIDIA_THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
NVIDIA_LIMITING_REASONS = NVIDIA_POWER_REASONS | NVIDIA_THERMAL_REASONS | {"hw_slowdown"}

AMD_POWER_REASONS = frozenset({"power", "current", "ppm"})
AMD_THERMAL_REASONS = frozenset({"thermal", "vr_thermal", "prochot"})
AMD_LIMITING_REASONS = AMD_POWER_REASONS | AMD_THERMAL_REASONS | {"unspecified"}

POWER_REASONS = NVIDIA_POWER_REASONS | AMD_POWER_REASONS
THERMAL_REASONS = NVIDIA_THERMAL_REASONS | AMD_THERMAL_REASONS
LIMITING_REASONS = NVIDIA_LIMITING_REASONS | AMD_LIMITING_REASONS


def decode_clock_event_reasons(mask: int) -> list[str]:
    """NVML clock-event reason bits → names, in bit order.

    Bits this table does not know become `unknown_0x...` rather than being
    dropped.
    """
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~_KNOWN_REASON_BITS
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return names
