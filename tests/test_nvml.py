"""NvmlBackend against a fake pynvml that behaves like the real library."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from gpulens.collector.backend import BackendEvent, GpuLost, ProcessSample, RateFromCounter
from gpulens.collector.errors import BackendUnavailable
from gpulens.collector.nvml import CLOCK_EVENT_REASONS, NVML_METRICS, NvmlBackend, decode_clock_event_reasons
from gpulens.collector.schema import TELEMETRY_METRICS
from fakes.fake_pynvml import (
    OLD_DRIVER_MISSING,
    FakeNvml,
    FakeProcess,
    a100_pcie,
    h100_sxm,
    make_fake_pynvml,
    v100_sxm2,
)

T0_NS = 1_700_000_000_000_000_000
TICK_NS = 100_000_000  # 10 Hz


def open_backend(*gpus, **options):
    nvml = make_fake_pynvml(list(gpus), **options)
    backend = NvmlBackend(nvml_module=nvml)
    backend.discover()
    nvml.fake.reset_calls()
    return backend, nvml.fake


def tick(n: int) -> int:
    return T0_NS + n * TICK_NS


# --- decoding ---------------------------------------------------------------------


def test_decode_clock_event_reasons_names_bits_in_order():
    assert decode_clock_event_reasons(0x20 | 0x4) == ["sw_power_cap", "sw_thermal_slowdown"]


def test_decode_clock_event_reasons_empty_mask_is_empty_list():
    assert decode_clock_event_reasons(0) == []


def test_decode_clock_event_reasons_keeps_unknown_bits():
    assert decode_clock_event_reasons(0x1 | 0x10000) == ["gpu_idle", "unknown_0x10000"]


def test_clock_event_reason_bits_match_pynvml_constants():
    # The two newest reasons are named only by recent bindings (not 13.580 and older).
    newest = {
        getattr(pynvml, "nvmlClocksThrottleReasonBoardLimit", 0x200): "board_limit",
        getattr(pynvml, "nvmlClocksThrottleReasonReliability", 0x400): "reliability",
    }
    assert dict(CLOCK_EVENT_REASONS) == {
        pynvml.nvmlClocksEventReasonGpuIdle: "gpu_idle",
        pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "applications_clocks_setting",
        pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
        pynvml.nvmlClocksEventReasonHwSlowdown: "hw_slowdown",
        pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
        pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal_slowdown",
        pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal_slowdown",
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake_slowdown",
        pynvml.nvmlClocksEventReasonDisplayClockSetting: "display_clock_setting",
        **newest,
    }


def test_fake_functions_take_the_real_bindings_parameters():
    fake = make_fake_pynvml([h100_sxm()])
    faked = [name for name in dir(FakeNvml) if name.startswith("nvml")]
    mismatched = [
        name for name in faked
        if list(inspect.signature(getattr(fake, name)).parameters)
        != list(inspect.signature(getattr(pynvml, name)).parameters)
    ]
    assert faked and mismatched == []


def test_nvml_metrics_are_contract_columns():
    assert set(NVML_METRICS) <= set(TELEMETRY_METRICS)


# --- start-up and inventory -----------------------------------------------------------


def test_init_without_library_raises_backend_unavailable():
    nvml = make_fake_pynvml([h100_sxm()], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(BackendUnavailable, match=r"^NVML: NVML Shared Library Not Found \(is the NVIDIA driver"):
        NvmlBackend(nvml_module=nvml)


def test_init_with_driver_not_loaded_raises_backend_unavailable():
    nvml = make_fake_pynvml([h100_sxm()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(BackendUnavailable, match=r"^NVML: Driver Not Loaded"):
        NvmlBackend(nvml_module=nvml)


def test_discover_reports_h100_limits_in_watts_and_links():
    backend = NvmlBackend(nvml_module=make_fake_pynvml([h100_sxm(0)]))
    (info,) = backend.discover()
    assert (info.gpu_index, info.vendor, info.model) == (0, "nvidia", "NVIDIA H100 80GB HBM3")
    assert info.gpu_uuid == "GPU-6c0a5b1e-4d2f-8a9b-1c3d-000000000000"
    assert info.pci_bus_id == "00000000:18:00.0"
    assert (info.driver_version, info.backend_library_version) == ("550.54.15", "12.550.54.15")
    assert info.mem_total_bytes == 85_520_809_984
    limits = (info.power_limit_min_w, info.power_limit_default_w, info.power_limit_max_w, info.power_limit_w)
    assert limits == (200.0, 700.0, 700.0, 700.0)
    assert (info.pcie_gen, info.pcie_width, info.link_kind, info.link_count) == (5, 16, "nvlink", 18)


def test_discover_pcie_card_has_no_links():
    backend = NvmlBackend(nvml_module=make_fake_pynvml([a100_pcie(0)]))
    (info,) = backend.discover()
    assert (info.link_kind, info.link_count, info.power_limit_w) == (None, 0, 250.0)


def test_discover_counts_only_active_nvlinks():
    backend = NvmlBackend(nvml_module=make_fake_pynvml([h100_sxm(0, inactive_links={3, 7})]))
    assert backend.discover()[0].link_count == 16


# --- units ---------------------------------------------------------------------------------


def test_sample_converts_milliwatts_and_millijoules():
    backend, _ = open_backend(h100_sxm(0, power_mw=412_345, power_instant_mw=455_010, energy_mj=9_876_543_210))
    values = backend.sample(0, tick(0), slow=False).values
    assert (values["power_w"], values["power_instant_w"], values["power_limit_w"]) == (412.345, 455.01, 700.0)
    assert values["energy_j"] == 9_876_543.21


def test_sample_reads_violation_time_replays_and_memory_temperature():
    gpu = h100_sxm(0, power_violation_ns=3_250_000_000, thermal_violation_ns=12_000, pcie_replays=7, mem_temp_c=78)
    backend, _ = open_backend(gpu)
    values = backend.sample(0, tick(0), slow=False).values
    assert (values["power_violation_ns"], values["thermal_violation_ns"]) == (3_250_000_000, 12_000)
    assert (values["pcie_replay_count"], values["mem_temp_c"]) == (7, 78.0)


def test_sample_first_read_of_a_counter_gives_no_rate():
    backend, _ = open_backend(h100_sxm(0))
    values = backend.sample(0, tick(0), slow=False).values
    assert values["pcie_tx_bytes_per_s"] is None
    assert values["link_tx_bytes_per_s"] is None


def test_sample_pcie_byte_counters_become_bytes_per_second():
    gpu = a100_pcie(0, pcie_tx_bytes=1_000_000_000, pcie_rx_bytes=2_000_000_000)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.pcie_tx_bytes += 250_000_000
    gpu.pcie_rx_bytes += 12_345_678
    values = backend.sample(0, tick(1), slow=False).values
    assert (values["pcie_tx_bytes_per_s"], values["pcie_rx_bytes_per_s"]) == (2_500_000_000.0, 123_456_780.0)


def nvlink_scopes(fake, request: int) -> list[int]:
    _, asked = fake.field_requests[request]
    return [scope for field_id, scope in asked if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX]


def test_sample_asks_nvlink_counters_summed_over_all_links():
    backend, fake = open_backend(h100_sxm(0))
    backend.sample(0, tick(0), slow=False)
    assert nvlink_scopes(fake, 0) == [0xFFFFFFFF]


def test_sample_nvlink_kib_counters_become_bytes_per_second_over_all_links():
    gpu = h100_sxm(0)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.nvlink_tx_kib = [kib + 1_000 * (link + 1) for link, kib in enumerate(gpu.nvlink_tx_kib)]  # 171,000 KiB in all
    gpu.nvlink_rx_kib[0] += 50_000
    values = backend.sample(0, tick(1), slow=False).values
    assert values["link_tx_bytes_per_s"] == 171_000 * 1024 * 10
    assert values["link_rx_bytes_per_s"] == 50_000 * 1024 * 10


def test_driver_without_link_sums_is_asked_per_active_link():
    backend, fake = open_backend(v100_sxm2(0, inactive_links={2}))
    backend.sample(0, tick(0), slow=False)
    backend.sample(0, tick(1), slow=False)
    assert (nvlink_scopes(fake, 0), nvlink_scopes(fake, 1)) == ([0xFFFFFFFF], [0, 1, 3, 4, 5])


def test_per_link_nvlink_rates_are_summed():
    gpu = v100_sxm2(0)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)  # learns the sum is not offered
    backend.sample(0, tick(1), slow=False)
    gpu.nvlink_tx_kib = [kib + 2_000 * (link + 1) for link, kib in enumerate(gpu.nvlink_tx_kib)]  # 42,000 KiB in all
    values = backend.sample(0, tick(2), slow=False).values
    assert (values["link_tx_bytes_per_s"], values["link_rx_bytes_per_s"]) == (42_000 * 1024 * 10, 0.0)


def test_sample_wrapped_32bit_counter_gives_the_rate_across_the_wrap():
    gpu = a100_pcie(0, pcie_tx_bytes=2**32 - 1_000)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.pcie_tx_bytes += 6_000  # past 2**32: NVML's 32-bit counter reads 5,000
    assert backend.sample(0, tick(1), slow=False).values["pcie_tx_bytes_per_s"] == 60_000.0


def test_32bit_pcie_counter_read_too_seldom_for_its_link_gives_no_rate():
    # Gen4 x16 moves at most 31.5 GB/s: in 0.2 s that could be more than 2**32 bytes, a wrap unseen.
    gpu = a100_pcie(0)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.pcie_tx_bytes += 1_000_000
    assert backend.sample(0, tick(2), slow=False).values["pcie_tx_bytes_per_s"] is None


def test_h100_without_gpm_cannot_read_its_pcie_counters_at_10_hz():
    # Gen5 x16 (63 GB/s) can wrap the 32-bit counter in 68 ms.
    gpu = h100_sxm(0, gpm=False)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.pcie_rx_bytes += 1_000_000
    assert backend.sample(0, tick(1), slow=False).values["pcie_rx_bytes_per_s"] is None


def test_slow_tick_samples_pcie_throughput_where_the_counters_cannot_tell():
    gpu = h100_sxm(0, gpm=False, pcie_tx_bytes_per_s=5_142_403_000, pcie_rx_bytes_per_s=59_128_256_000)
    backend, fake = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    fake.reset_calls()
    values = backend.sample(0, tick(100), slow=True).values
    assert (values["pcie_tx_bytes_per_s"], values["pcie_rx_bytes_per_s"]) == (5_142_403_000.0, 59_128_256_000.0)
    assert fake.count("nvmlDeviceGetPcieThroughput") == 2


def test_fast_tick_never_samples_pcie_throughput():
    backend, fake = open_backend(h100_sxm(0, gpm=False))
    backend.sample(0, tick(0), slow=False)
    values = backend.sample(0, tick(10), slow=False).values
    assert values["pcie_tx_bytes_per_s"] is None
    assert fake.count("nvmlDeviceGetPcieThroughput") == 0


def test_sample_64bit_counter_that_goes_down_was_reset_and_gives_none():
    gpu = a100_pcie(0, pcie_rx_bytes=20_000_000_000,
                    field_types={pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG})
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.pcie_rx_bytes = 4_096  # driver reloaded
    assert backend.sample(0, tick(1), slow=False).values["pcie_rx_bytes_per_s"] is None
    gpu.pcie_rx_bytes += 100_000
    assert backend.sample(0, tick(2), slow=False).values["pcie_rx_bytes_per_s"] == 1_000_000.0


# --- GPM (Hopper and newer) -------------------------------------------------------------------


def run_ticks(backend, fake, first: int, last: int) -> dict:
    """Sample GPU 0 at ticks first..last, the fake's clock moving 0.1 s a tick; the last values."""
    values = None
    for n in range(first, last + 1):
        if n > first:
            fake.advance(0.1, tick(n) // 1000)
        values = backend.sample(0, tick(n), slow=False).values
    return values


def test_gpm_gives_pcie_rates_and_sm_activity_over_the_last_second():
    gpu = h100_sxm(0, pcie_tx_bytes_per_s=3_000 * 2**20, pcie_rx_bytes_per_s=50_000 * 2**20, sm_active_pct=95.5)
    backend, fake = open_backend(gpu)
    values = run_ticks(backend, fake, 0, 10)
    assert (values["pcie_tx_bytes_per_s"], values["pcie_rx_bytes_per_s"]) == (3_000 * 2**20, 50_000 * 2**20)
    assert values["sm_active_pct"] == pytest.approx(95.5)


def test_gpm_needs_a_whole_window_before_its_first_rates():
    backend, fake = open_backend(h100_sxm(0))
    values = run_ticks(backend, fake, 0, 9)
    assert (values["pcie_tx_bytes_per_s"], values["sm_active_pct"]) == (None, None)


def test_gpm_rates_carry_forward_between_once_a_second_reads():
    gpu = h100_sxm(0, sm_active_pct=40.0)
    backend, fake = open_backend(gpu)
    run_ticks(backend, fake, 0, 10)
    gpu.sm_active_pct = 100.0
    held = run_ticks(backend, fake, 10, 19)["sm_active_pct"]
    fresh = run_ticks(backend, fake, 19, 20)["sm_active_pct"]
    assert (held, fresh) == (pytest.approx(40.0), pytest.approx(100.0))


def test_gpu_with_gpm_asks_for_no_pcie_byte_counters():
    backend, fake = open_backend(h100_sxm(0))
    backend.sample(0, tick(0), slow=True)
    pcie_counters = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES}
    assert not pcie_counters & {field_id for field_id, _ in fake.field_requests[0][1]}


def test_gpm_refused_after_discovery_falls_back_to_the_byte_counters():
    gpu = h100_sxm(0)
    backend, fake = open_backend(gpu)
    gpu.gpm = False  # nvmlGpmSampleGet now answers NotSupported
    backend.sample(0, tick(0), slow=False)
    backend.sample(0, tick(1), slow=False)
    asked = {field_id for field_id, _ in fake.field_requests[-1][1]}
    assert pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES in asked
    assert fake.gpm_buffers == set()


def test_gpm_refused_after_rates_were_read_leaves_no_stale_rate_behind():
    gpu = h100_sxm(0, pcie_rx_bytes_per_s=50_000 * 2**20)
    backend, fake = open_backend(gpu)
    run_ticks(backend, fake, 0, 10)
    gpu.gpm = False
    values = run_ticks(backend, fake, 10, 20)  # the counters' first read gives no rate yet
    assert (values["pcie_rx_bytes_per_s"], values["sm_active_pct"]) == (None, None)


def test_another_board_at_an_index_frees_the_old_boards_gpm_buffers():
    backend, fake = open_backend(h100_sxm(0))
    fake.gpus[0] = h100_sxm(0, uuid="GPU-00000000-0000-0000-0000-00000000beef")
    backend.discover()
    assert len(fake.gpm_buffers) == 2


def test_close_frees_the_gpm_buffers():
    backend, fake = open_backend(h100_sxm(0), h100_sxm(1))
    assert len(fake.gpm_buffers) == 4
    backend.close()
    assert fake.gpm_buffers == set()


# --- what is read once a second ------------------------------------------------------------------


def test_energy_and_thermal_violation_are_read_once_a_second_and_carried_between():
    gpu = h100_sxm(0, energy_mj=1_000_000, thermal_violation_ns=5_000)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.energy_mj, gpu.thermal_violation_ns = 2_000_000, 9_000
    held = backend.sample(0, tick(9), slow=False).values
    fresh = backend.sample(0, tick(10), slow=False).values
    assert (held["energy_j"], held["thermal_violation_ns"]) == (1_000.0, 5_000)
    assert (fresh["energy_j"], fresh["thermal_violation_ns"]) == (2_000.0, 9_000)


def test_once_a_second_fields_are_asked_only_on_their_ticks():
    backend, fake = open_backend(a100_pcie(0))
    for n in range(0, 11):
        backend.sample(0, tick(n), slow=False)
    asked_energy = [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION in {f for f, _ in request}
                    for _, request in fake.field_requests]
    assert asked_energy == [True] + [False] * 9 + [True]


def test_power_violation_stays_in_every_tick():
    gpu = a100_pcie(0, power_violation_ns=0)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.power_violation_ns = 70_000_000
    assert backend.sample(0, tick(1), slow=False).values["power_violation_ns"] == 70_000_000


# --- support matrix ---------------------------------------------------------------------------


def test_sample_unsupported_field_is_none_and_dropped_from_later_batches():
    backend, fake = open_backend(a100_pcie(0, power_mw=187_250))
    first = backend.sample(0, tick(0), slow=False).values
    second = backend.sample(0, tick(1), slow=False).values
    assert (first["power_instant_w"], second["power_instant_w"], second["power_w"]) == (None, None, 187.25)
    first_ids = [field_id for field_id, _ in fake.field_requests[0][1]]
    later_ids = [field_id for field_id, _ in fake.field_requests[1][1]]
    assert pynvml.NVML_FI_DEV_POWER_INSTANT in first_ids
    assert pynvml.NVML_FI_DEV_POWER_INSTANT not in later_ids


def test_sample_device_without_nvlink_asks_for_no_link_fields():
    backend, fake = open_backend(a100_pcie(0))
    values = backend.sample(0, tick(0), slow=False).values
    link_fields = {pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX}
    assert not link_fields & {field_id for field_id, _ in fake.field_requests[0][1]}
    assert (values["link_tx_bytes_per_s"], values["link_rx_bytes_per_s"]) == (None, None)


def test_old_driver_falls_back_to_throttle_reasons_and_stops_asking_for_event_reasons():
    backend, fake = open_backend(v100_sxm2(0, clock_event_reasons=0x4 | 0x20), missing_functions=OLD_DRIVER_MISSING)
    values = backend.sample(0, tick(0), slow=True).values
    backend.sample(0, tick(1), slow=True)
    assert values["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert values["throttle_reasons_mask"] == 0x24
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 2


def test_old_driver_memory_falls_back_to_v1_which_counts_the_reservation():
    gpu = v100_sxm2(0, mem_used_bytes=30 * 1024**3, mem_reserved_bytes=300 * 1024**2)
    backend, _ = open_backend(gpu, missing_functions=OLD_DRIVER_MISSING)
    values = backend.sample(0, tick(0), slow=True).values
    assert (values["mem_used_bytes"], values["mem_total_bytes"]) == (30 * 1024**3 + 300 * 1024**2, 34_089_730_048)


def test_current_driver_memory_v2_excludes_the_reservation():
    backend, _ = open_backend(h100_sxm(0, mem_used_bytes=68 * 1024**3))
    assert backend.sample(0, tick(0), slow=True).values["mem_used_bytes"] == 68 * 1024**3


def test_unsupported_power_samples_are_none_and_not_asked_again():
    backend, fake = open_backend(v100_sxm2(0))
    values = backend.sample(0, tick(0), slow=True).values
    for n in range(1, 12):
        backend.sample(0, tick(n), slow=n % 10 == 0)
    assert values["power_max_w"] is None
    assert fake.count("nvmlDeviceGetSamples") == 1


def test_no_permission_gives_none_and_is_not_asked_again():
    gpu = h100_sxm(0, errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_NO_PERMISSION})
    backend, fake = open_backend(gpu)
    first = backend.sample(0, tick(0), slow=True).values
    second = backend.sample(0, tick(1), slow=True).values
    assert (first["ecc_corrected_count"], second["ecc_uncorrected_count"]) == (None, None)
    assert fake.count("nvmlDeviceGetTotalEccErrors") == 1


# --- the call budget ------------------------------------------------------------------------------


def test_fast_tick_makes_three_driver_calls_per_gpu():
    backend, fake = open_backend(h100_sxm(0), a100_pcie(1), v100_sxm2(2), missing_functions=OLD_DRIVER_MISSING)
    for gpu in range(3):
        backend.sample(gpu, tick(0), slow=True)
    per_tick = []
    for n in range(1, 10):
        fake.reset_calls()
        for gpu in range(3):
            backend.sample(gpu, tick(n), slow=False)
        per_tick.append([fake.count(gpu=gpu) for gpu in range(3)])
    assert per_tick == [[3, 3, 3]] * 9


def test_once_a_second_tick_adds_the_two_gpm_calls_and_no_others():
    backend, fake = open_backend(h100_sxm(0), a100_pcie(1))
    for gpu in range(2):
        backend.sample(gpu, tick(0), slow=True)
    fake.reset_calls()
    for gpu in range(2):
        backend.sample(gpu, tick(10), slow=False)
    # nvmlGpmMetricsGet takes no device: it computes from the two buffers
    assert (fake.count(gpu=0), fake.count(gpu=1), fake.count("nvmlGpmMetricsGet")) == (4, 3, 1)


def test_slow_tick_reads_everything_once_and_names_each_process_once():
    gpu = h100_sxm(0, processes=[FakeProcess(4242, "python3", 61 * 1024**3), FakeProcess(4243, "nccl-proxy", None)])
    backend, fake = open_backend(gpu)
    backend.sample(0, tick(0), slow=True)
    first = fake.count()
    fake.reset_calls()
    backend.sample(0, tick(1), slow=True)
    # fields + utilization + 6 rotated + 2 ECC + processes + a GPM sample (+ 2 names the first
    # time; a GPM window from the second time on)
    assert (first, fake.count()) == (14, 13)


def test_first_fast_sample_reads_the_whole_rotation():
    backend, _ = open_backend(h100_sxm(0, temp_c=64, sm_clock_mhz=1_755))
    values = backend.sample(0, tick(0), slow=False).values
    assert (values["temp_c"], values["sm_clock_mhz"], values["throttle_reasons"]) == (64.0, 1_755, [])


def test_rotated_values_carry_forward_until_their_turn():
    gpu = h100_sxm(0, temp_c=60)
    backend, _ = open_backend(gpu)
    backend.sample(0, tick(0), slow=True)
    gpu.temp_c = 83
    temps = [backend.sample(0, tick(n), slow=False).values["temp_c"] for n in range(1, 7)]
    assert temps == [60.0, 83.0, 83.0, 83.0, 83.0, 83.0]  # temperature is second in the rotation


def test_power_max_is_the_highest_sample_since_the_previous_read():
    gpu = h100_sxm(0, power_samples=[(1_000, 512_000), (2_000, 698_500), (3_000, 640_000)])
    backend, _ = open_backend(gpu)
    first = backend.sample(0, tick(0), slow=True).values["power_max_w"]
    gpu.power_samples += [(4_000, 455_000), (5_000, 601_250)]
    second = backend.sample(0, tick(1), slow=True).values["power_max_w"]
    assert (first, second) == (698.5, 601.25)


def test_ecc_counts_are_read_on_slow_ticks_and_carried_on_fast_ones():
    gpu = h100_sxm(0, ecc_corrected=3, ecc_uncorrected=0)
    backend, fake = open_backend(gpu)
    backend.sample(0, tick(0), slow=True)
    gpu.ecc_corrected = 5
    fast = backend.sample(0, tick(1), slow=False).values
    slow = backend.sample(0, tick(2), slow=True).values
    assert (fast["ecc_corrected_count"], slow["ecc_corrected_count"], slow["ecc_uncorrected_count"]) == (3, 5, 0)
    assert fake.count("nvmlDeviceGetTotalEccErrors") == 4


# --- processes and events ------------------------------------------------------------------------


def test_processes_are_read_on_slow_ticks_only():
    gpu = h100_sxm(0, processes=[FakeProcess(4242, "python3", 61 * 1024**3), FakeProcess(4243, "nccl-proxy", None)])
    backend, _ = open_backend(gpu)
    slow = backend.sample(0, tick(0), slow=True)
    fast = backend.sample(0, tick(1), slow=False)
    assert slow.processes == [ProcessSample(4242, 61 * 1024**3, "python3"), ProcessSample(4243, None, "nccl-proxy")]
    assert fast.processes is None


def test_old_driver_reads_processes_with_v2():
    gpu = v100_sxm2(0, processes=[FakeProcess(777, "train.py", 8 * 1024**3)])
    backend, fake = open_backend(gpu, missing_functions=OLD_DRIVER_MISSING)
    assert backend.sample(0, tick(0), slow=True).processes == [ProcessSample(777, 8 * 1024**3, "train.py")]
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2") == 1


def test_poll_events_reports_a_queued_xid_once():
    backend, fake = open_backend(h100_sxm(0), h100_sxm(1))
    fake.queue_xid(1, 79)
    assert backend.poll_events() == [BackendEvent(kind="xid", gpu_index=1, detail="XID 79", value=79)]
    assert backend.poll_events() == []


def test_poll_events_without_event_support_is_empty():
    backend, fake = open_backend(a100_pcie(0, supports_xid_events=False))
    fake.queue_xid(0, 48)
    assert backend.poll_events() == []


# --- lost GPUs and shutdown ------------------------------------------------------------------------


def test_lost_gpu_raises_gpu_lost_and_the_others_still_sample():
    lost = h100_sxm(1)
    backend, _ = open_backend(h100_sxm(0, power_mw=350_000), lost)
    lost.lost = True
    with pytest.raises(GpuLost) as error:
        backend.sample(1, tick(0), slow=False)
    assert error.value.gpu_index == 1
    assert error.value.detail == "nvmlDeviceGetFieldValues: GPU is lost"
    assert backend.sample(0, tick(0), slow=False).values["power_w"] == 350.0


def test_lost_gpu_stays_lost_while_its_handle_cannot_be_had():
    gpu = h100_sxm(0)
    backend, _ = open_backend(gpu)
    gpu.lost = True
    with pytest.raises(GpuLost):
        backend.sample(0, tick(0), slow=False)
    with pytest.raises(GpuLost, match="nvmlDeviceGetHandleByUUID: GPU is lost"):
        backend.sample(0, tick(1), slow=False)


def test_lost_gpu_comes_back_with_a_fresh_handle_by_uuid():
    gpu = h100_sxm(0, temp_c=55)
    backend, fake = open_backend(gpu)
    backend.sample(0, tick(0), slow=False)
    gpu.lost = True
    with pytest.raises(GpuLost):
        backend.sample(0, tick(1), slow=False)
    gpu.lost = False
    values = backend.sample(0, tick(2), slow=False).values
    assert fake.count("nvmlDeviceGetHandleByUUID") == 1
    assert (values["temp_c"], values["pcie_tx_bytes_per_s"]) == (55.0, None)  # counters start afresh


def test_unknown_error_on_a_healthy_gpu_is_none_for_that_read_only():
    gpu = h100_sxm(0, errors={"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_UNKNOWN})
    backend, fake = open_backend(gpu)
    first = backend.sample(0, tick(0), slow=False).values["gpu_util_pct"]
    del gpu.errors["nvmlDeviceGetUtilizationRates"]
    second = backend.sample(0, tick(1), slow=False).values["gpu_util_pct"]
    assert (first, second) == (None, 97.0)


def test_unknown_error_while_a_gpu_comes_back_means_still_lost():
    gpu = h100_sxm(0)
    backend, _ = open_backend(gpu)
    gpu.lost = True
    with pytest.raises(GpuLost):
        backend.sample(0, tick(0), slow=False)
    gpu.lost = False
    gpu.errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_UNKNOWN
    with pytest.raises(GpuLost, match="nvmlDeviceGetUtilizationRates: Unknown Error"):
        backend.sample(0, tick(1), slow=False)


def test_discover_keeps_a_lost_gpu_in_the_inventory():
    gpu = h100_sxm(0)
    backend, _ = open_backend(gpu)
    before = backend.discover()
    gpu.lost = True
    with pytest.raises(GpuLost):
        backend.sample(0, tick(0), slow=False)
    assert backend.discover() == before


def test_close_shuts_nvml_down_once():
    backend, fake = open_backend(h100_sxm(0))
    backend.close()
    backend.close()
    assert fake.shutdowns == 1


# --- counters that wrap -------------------------------------------------------------------


def test_wrapping_counter_gives_a_rate_while_no_whole_wrap_fits_the_interval():
    rate = RateFromCounter(wrap_at=2**32, max_per_s=1e9)  # a whole wrap takes 4.29 s at most speed
    rate.update(100, 0)
    assert rate.update(4_000_000_100, 4 * 10**9) == 1e9


def test_wrapping_counter_read_after_a_whole_wrap_could_fit_gives_no_rate():
    rate = RateFromCounter(wrap_at=2**32, max_per_s=1e9)
    rate.update(100, 0)
    assert rate.update(1_000_100, 5 * 10**9) is None
    assert rate.update(2_000_100, 6 * 10**9) == 1_000_000.0  # and the next short interval counts again
