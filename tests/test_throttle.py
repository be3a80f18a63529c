from gpulens.collector.throttle import LIMITING_REASONS, decode_clock_event_reasons


def test_power_cap_and_thermal_bits_decode_in_bit_order():
    assert decode_clock_event_reasons(0x20 | 0x4) == ["sw_power_cap", "sw_thermal_slowdown"]


def test_unknown_bits_are_kept_not_dropped():
    assert decode_clock_event_reasons(0x1 | 0x8000) == ["gpu_idle", "unknown_0x8000"]


def test_idle_is_not_a_limiting_reason():
    assert "gpu_idle" not in LIMITING_REASONS


def test_amd_power_and_thermal_reasons_are_limiting():
    assert {"power", "thermal", "sw_power_cap"} <= LIMITING_REASONS
