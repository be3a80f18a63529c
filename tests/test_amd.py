import logging
import sys

import pytest

from gpulens.collector.amd import AmdSmiBackend
from gpulens.collector.backend import GpuLost, ProcessSample
from gpulens.collector.errors import BackendUnavailable
from gpulens.collector.schema import TELEMETRY_METRICS
from fakes.fake_amdsmi import (
    AMDSMI_STATUS_DRIVER_NOT_LOADED,
    AMDSMI_STATUS_NOT_FOUND,
    FakeAmdSmi,
    float32,
    mi250x_gcd,
    mi300x,
)

S = 1_000_000_000  # ns
T0 = 1_750_000_000 * S
OLD_API = (6, 0, 2)


def start(*gpus, **options):
    fake = FakeAmdSmi(list(gpus), **options)
    backend = AmdSmiBackend(amdsmi_module=fake)
    backend.discover()
    return fake, backend


# --- starting ---------------------------------------------------------------------


def test_import_raising_keyerror_gives_backend_unavailable_and_prints_nothing(capsys):
    def amdsmi_without_rocm():
        print("Could not load libamd_smi.so")
        print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
        raise KeyError("libamd_smi.so")

    with pytest.raises(BackendUnavailable, match="amdsmi: cannot load libamd_smi.so"):
        AmdSmiBackend(loader=amdsmi_without_rocm)
    assert capsys.readouterr().out == ""


def test_real_import_of_a_package_that_raises_keyerror_gives_backend_unavailable(tmp_path, monkeypatch, capsys):
    package = tmp_path / "amdsmi"
    package.mkdir()
    (package / "__init__.py").write_text(
        "_libraries = {}\nprint('Unable to find libamd_smi.so library')\n_libraries['libamd_smi.so'].amdsmi_init\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    with pytest.raises(BackendUnavailable, match="libamd_smi.so"):
        AmdSmiBackend()
    assert capsys.readouterr().out == ""


def test_missing_package_gives_backend_unavailable():
    def not_installed():
        raise ModuleNotFoundError("No module named 'amdsmi'")

    with pytest.raises(BackendUnavailable, match="amdsmi: the amdsmi package is not installed"):
        AmdSmiBackend(loader=not_installed)


def test_init_without_driver_gives_backend_unavailable():
    fake = FakeAmdSmi([mi300x()], init_error=AMDSMI_STATUS_DRIVER_NOT_LOADED)
    with pytest.raises(BackendUnavailable, match="AMDSMI_STATUS_DRIVER_NOT_LOADED"):
        AmdSmiBackend(amdsmi_module=fake)


def test_no_amd_gpu_gives_backend_unavailable_and_shuts_library_down():
    fake = FakeAmdSmi([])
    with pytest.raises(BackendUnavailable, match="no AMD GPU"):
        AmdSmiBackend(amdsmi_module=fake)
    assert not fake.initialised


def test_close_shuts_library_down_and_stops_event_readers():
    fake, backend = start(mi300x())
    backend.close()
    assert (fake.initialised, fake.readers[0].stopped) == (False, True)


# --- inventory ----------------------------------------------------------------------


def test_discover_converts_power_caps_from_microwatts():
    _, backend = start(mi300x())
    device = backend.discover()[0]
    assert (device.power_limit_w, device.power_limit_default_w, device.power_limit_max_w) == (750.0, 750.0, 750.0)


def test_discover_reports_zero_minimum_cap_as_none():
    _, backend = start(mi300x())
    assert backend.discover()[0].power_limit_min_w is None


def test_discover_mi300x_identity_memory_pcie_and_xgmi_links():
    _, backend = start(mi300x(0))
    device = backend.discover()[0]
    assert (device.vendor, device.model, device.gpu_uuid, device.pci_bus_id, device.serial) == (
        "amd",
        "AMD Instinct MI300X",
        "00ff74a1-0000-1000-8039-d5b2c0e1f400",
        "0000:0c:00.0",
        "692325000000",
    )
    assert (device.mem_total_bytes, device.pcie_gen, device.pcie_width) == (196_592 * 1024**2, 5, 16)
    assert (device.link_kind, device.link_count, device.driver_version) == ("xgmi", 7, "6.12.12")


def test_discover_mi250x_counts_links_from_link_metrics_without_link_status():
    _, backend = start(mi250x_gcd())
    device = backend.discover()[0]
    assert (device.model, device.link_count, device.power_limit_w, device.pcie_gen) == (
        "AMD Instinct MI250X / MI250",
        8,
        560.0,
        4,
    )


def test_discover_reads_pcie_link_caps_on_amdsmi_6_0():
    _, backend = start(mi300x(), api_version=OLD_API)
    device = backend.discover()[0]
    assert (device.pcie_gen, device.pcie_width, device.backend_library_version) == (5, 16, "6.0.2")


# --- fast ticks -----------------------------------------------------------------------


def test_mi300x_fast_tick_costs_three_library_calls():
    fake, backend = start(mi300x())
    fake.calls.clear()
    backend.sample(0, T0, slow=False)
    assert dict(fake.calls) == {
        "amdsmi_get_gpu_metrics_info": 1,
        "amdsmi_get_energy_count": 1,
        "amdsmi_get_gpu_vram_usage": 1,
    }


def test_mi300x_sample_decodes_metrics_table():
    _, backend = start(mi300x())
    values = backend.sample(0, T0, slow=False).values
    assert {k: values[k] for k in ("power_w", "power_instant_w", "gpu_util_pct", "mem_util_pct")} == {
        "power_w": 612.0,
        "power_instant_w": 612.0,
        "gpu_util_pct": 87.0,
        "mem_util_pct": 41.0,
    }
    # The per-XCC clocks 4 x 2100 and 4 x 2090 MHz average to 2095.
    clocks_and_temps = (values["sm_clock_mhz"], values["mem_clock_mhz"], values["temp_c"], values["mem_temp_c"])
    assert clocks_and_temps == (2095, 1300, 71.0, 58.0)


def test_pcie_bandwidth_inst_gb_per_s_becomes_bytes_per_s():
    _, backend = start(mi300x())
    assert backend.sample(0, T0, slow=False).values["pcie_bytes_per_s"] == 12e9


def test_sample_names_only_contract_columns():
    _, backend = start(mi300x())
    assert set(backend.sample(0, T0, slow=True).values) <= set(TELEMETRY_METRICS)


def test_energy_is_accumulator_times_microjoule_resolution():
    fake, backend = start(mi300x())
    fake.gpus[0].energy_accumulator = 2_000_000_000
    energy_j = backend.sample(0, T0, slow=False).values["energy_j"]
    assert energy_j == 2_000_000_000 * float32(15.259) / 1e6
    assert energy_j == pytest.approx(30_517.9996, abs=1e-4)


def test_energy_reads_the_power_key_of_amdsmi_6_0():
    fake, backend = start(mi300x(), api_version=OLD_API)
    fake.gpus[0].energy_accumulator = 65_536
    assert backend.sample(0, T0, slow=False).values["energy_j"] == 65_536 * float32(15.259) / 1e6


def test_vram_megabytes_become_bytes():
    _, backend = start(mi300x())
    values = backend.sample(0, T0, slow=False).values
    assert (values["mem_used_bytes"], values["mem_total_bytes"]) == (150_214 * 1024**2, 196_592 * 1024**2)


def test_xgmi_first_sample_has_no_rate():
    _, backend = start(mi300x())
    values = backend.sample(0, T0, slow=False).values
    assert (values["link_rx_bytes_per_s"], values["link_tx_bytes_per_s"]) == (None, None)


def test_xgmi_kilobyte_accumulator_deltas_become_bytes_per_s():
    fake, backend = start(mi300x())
    gpu = fake.gpus[0]
    gpu.set_xgmi_kb([10_000] * 7, [20_000] * 7)
    backend.sample(0, T0, slow=False)
    # Two seconds later every link has read 4,000,000 KB and written 2,000,000 KB more.
    gpu.set_xgmi_kb([4_010_000] * 7, [2_020_000] * 7)
    values = backend.sample(0, T0 + 2 * S, slow=False).values
    assert values["link_rx_bytes_per_s"] == 7 * 4_000_000 * 1024 / 2
    assert values["link_tx_bytes_per_s"] == 7 * 2_000_000 * 1024 / 2


def test_na_current_socket_power_is_none_not_zero():
    _, backend = start(mi250x_gcd())
    values = backend.sample(0, T0, slow=False).values
    assert (values["power_w"], values["power_instant_w"]) == (331.0, None)


def test_na_metric_fallback_that_cannot_fill_it_is_not_asked_again():
    fake, backend = start(mi250x_gcd())
    for tick in range(3):
        backend.sample(0, T0 + tick * S, slow=False)
    assert fake.calls["amdsmi_get_power_info"] == 1


def test_all_ones_metrics_of_amdsmi_6_0_are_none():
    _, backend = start(mi250x_gcd(), api_version=OLD_API)
    values = backend.sample(0, T0, slow=False).values
    assert (values["power_instant_w"], values["link_rx_bytes_per_s"], values["pcie_bytes_per_s"]) == (None, None, None)


def test_temp_prefers_hotspot_over_edge():
    _, backend = start(mi250x_gcd())
    assert backend.sample(0, T0, slow=False).values["temp_c"] == 52.0


def test_metrics_table_unsupported_falls_back_to_individual_calls():
    gpu = mi250x_gcd()
    gpu.unsupported.add("amdsmi_get_gpu_metrics_info")
    _, backend = start(gpu)
    values = backend.sample(0, T0, slow=False).values
    names = ("power_w", "gpu_util_pct", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "mem_temp_c")
    assert {k: values[k] for k in names} == {
        "power_w": 331.0,
        "gpu_util_pct": 96.0,
        "sm_clock_mhz": 1700,
        "mem_clock_mhz": 1600,
        "temp_c": 52.0,
        "mem_temp_c": 57.0,
    }


def test_not_supported_metric_is_none_and_not_asked_again():
    gpu = mi300x()
    gpu.unsupported.add("amdsmi_get_energy_count")
    fake, backend = start(gpu)
    energies = [backend.sample(0, T0 + tick * S, slow=False).values["energy_j"] for tick in range(3)]
    assert (energies, fake.calls["amdsmi_get_energy_count"]) == ([None, None, None], 1)


def test_function_missing_from_library_is_logged_once_and_not_called(caplog):
    fake, backend = start(mi300x(), missing={"amdsmi_get_energy_count"})
    with caplog.at_level(logging.INFO, logger="gpulens.collector.amd"):
        for tick in range(3):
            backend.sample(0, T0 + tick * S, slow=False)
    messages = [r.getMessage() for r in caplog.records if "amdsmi_get_energy_count" in r.getMessage()]
    assert messages == ["amdsmi: not calling amdsmi_get_energy_count again: this amdsmi version does not have it"]


def test_power_limit_is_carried_on_fast_ticks_and_reread_on_slow_ticks():
    fake, backend = start(mi300x())
    fake.gpus[0].power_cap_uw = 600_000_000
    fast = backend.sample(0, T0, slow=False).values["power_limit_w"]
    slow = backend.sample(0, T0 + S, slow=True).values["power_limit_w"]
    assert (fast, slow) == (750.0, 600.0)


# --- throttling ----------------------------------------------------------------------------


def test_indep_throttle_bits_decode_to_names_on_amdsmi_6_0():
    gpu = mi250x_gcd()
    gpu.indep_throttle_mask = (1 << 0) | (1 << 36) | (1 << 44)  # PPT0, TEMP_HOTSPOT, VRHOT0
    _, backend = start(gpu, api_version=OLD_API)
    values = backend.sample(0, T0, slow=False).values
    assert values["throttle_reasons"] == ["power", "thermal", "vr_thermal"]
    assert values["throttle_reasons_mask"] == 0x1010_0000_0001


def test_residency_growth_names_the_limit_on_mi300x():
    fake, backend = start(mi300x())
    backend.sample(0, T0, slow=False)
    fake.gpus[0].add_residency(ppt=400)
    values = backend.sample(0, T0 + S, slow=False).values
    assert (values["throttle_reasons"], values["throttle_reasons_mask"]) == (["power"], None)


def test_residency_unchanged_means_no_throttling():
    fake, backend = start(mi300x())
    backend.sample(0, T0, slow=False)
    fake.gpus[0].add_residency()
    assert backend.sample(0, T0 + S, slow=False).values["throttle_reasons"] == []


def test_boolean_throttle_status_says_only_that_it_throttles():
    gpu = mi250x_gcd()
    gpu.indep_throttle_mask = 1 << 0
    _, backend = start(gpu)
    assert backend.sample(0, T0, slow=False).values["throttle_reasons"] == ["unspecified"]


# --- lost GPUs -------------------------------------------------------------------------------


def test_lost_gpu_raises_gpu_lost_and_the_others_continue():
    fake, backend = start(mi300x(0), mi300x(1))
    fake.lose(0, AMDSMI_STATUS_NOT_FOUND)
    with pytest.raises(GpuLost) as lost:
        backend.sample(0, T0, slow=False)
    assert (lost.value.gpu_index, lost.value.detail) == (0, "amdsmi_get_gpu_metrics_info: AMDSMI_STATUS_NOT_FOUND")
    assert backend.sample(1, T0, slow=False).values["power_w"] == 612.0


def test_lost_gpu_is_left_out_of_the_inventory():
    fake, backend = start(mi300x(0), mi300x(1))
    fake.lose(0, AMDSMI_STATUS_NOT_FOUND)
    assert [d.gpu_index for d in backend.discover()] == [1]


# --- slow ticks ----------------------------------------------------------------------------------


def test_slow_tick_reads_processes_with_vram_bytes():
    _, backend = start(mi300x())
    processes = backend.sample(0, T0, slow=True).processes
    assert processes == [ProcessSample(pid=48213, used_mem_bytes=148_000 * 1024**2, process_name="python3")]


def test_slow_tick_reads_processes_through_handles_on_amdsmi_6_0():
    _, backend = start(mi300x(), api_version=OLD_API)
    processes = backend.sample(0, T0, slow=True).processes
    assert processes == [ProcessSample(pid=48213, used_mem_bytes=148_000 * 1024**2, process_name="python3")]


def test_fast_tick_has_no_processes_and_no_ecc():
    _, backend = start(mi300x())
    sample = backend.sample(0, T0, slow=False)
    assert (sample.processes, "ecc_corrected_count" in sample.values) == (None, False)


def test_slow_tick_reads_ecc_totals():
    fake, backend = start(mi300x())
    fake.gpus[0].ecc_correctable, fake.gpus[0].ecc_uncorrectable = 12, 1
    values = backend.sample(0, T0, slow=True).values
    assert (values["ecc_corrected_count"], values["ecc_uncorrected_count"]) == (12, 1)


# --- events --------------------------------------------------------------------------------------


def test_poll_events_reports_gpu_reset_on_its_gpu():
    fake, backend = start(mi300x(0), mi300x(1))
    fake.push_event(1, "GPU_PRE_RESET", "GPU reset begin")
    events = backend.poll_events()
    assert [(e.kind, e.gpu_index, e.detail) for e in events] == [("gpu_reset", 1, "GPU reset begin")]
