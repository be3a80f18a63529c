"""The collector's /metrics endpoint: names, labels and values of each
family from known samples, the dcgm-exporter names, the address and the
server."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpulens.collector.backend import DeviceInfo
from gpulens.collector.daemon import CollectOptions, Collector
from gpulens.collector.errors import UsageError
from gpulens.collector.metrics_endpoint import (
    DEFAULT_METRICS_PORT,
    GPULENS_METRICS,
    MetricsEndpoint,
    MetricsServer,
    parse_metrics_address,
)
from gpulens.collector.schema import TELEMETRY_METRICS
from gpulens.collector.sim import SimBackend
from conftest import free_port, modules_loaded_by

H100 = DeviceInfo(gpu_index=3, gpu_uuid="GPU-aaaa", vendor="nvidia", model="NVIDIA H100 80GB HBM3",
                  pci_bus_id="00000000:4A:00.0", driver_version="550.54.15", link_kind="nvlink", link_count=18)
MI300X = DeviceInfo(gpu_index=0, gpu_uuid="GPU-bbbb", vendor="amd", model="AMD Instinct MI300X")
LABELS = {"host": "node-a", "gpu": "3", "uuid": "GPU-aaaa", "model": "NVIDIA H100 80GB HBM3", "vendor": "nvidia"}
DCGM_LABELS = {"gpu": "3", "UUID": "GPU-aaaa", "pci_bus_id": "00000000:4A:00.0", "device": "nvidia3",
               "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a"}

SAMPLE = {
    "power_w": 612.5, "power_instant_w": 640.25, "power_max_w": 655.0, "power_limit_w": 700.0, "energy_j": 123456.75,
    "gpu_util_pct": 97.0, "mem_util_pct": 41.0, "sm_active_pct": 83.0, "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
    "temp_c": 66.0, "mem_temp_c": 72.0, "mem_used_bytes": 68 * 2**30, "mem_total_bytes": 80 * 2**30,
    "throttle_reasons": ["sw_power_cap"], "throttle_reasons_mask": 4,
    "power_violation_ns": 1_500_000_000, "thermal_violation_ns": 0,
    "pcie_tx_bytes_per_s": 2.5e9, "pcie_rx_bytes_per_s": 12.5e9, "pcie_bytes_per_s": None, "pcie_replay_count": 2,
    "link_tx_bytes_per_s": 300e9, "link_rx_bytes_per_s": 298.5e9, "ecc_corrected_count": 5, "ecc_uncorrected_count": 0,
}


def _served(endpoint: MetricsEndpoint) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for family in endpoint.collect() for s in family.samples}


def _endpoint(row: dict | None = None, device: DeviceInfo = H100, names: str = "gpulens") -> MetricsEndpoint:
    endpoint = MetricsEndpoint("node-a", names)
    endpoint.devices([device], {device.gpu_index: {"link_peak_bytes_per_s": 450e9, "pcie_peak_bytes_per_s": 63e9}})
    if row is not None:
        endpoint.tick(1_700_000_000_000_000_000, [(device, dict(row))])
    return endpoint


def _value(served: dict, name: str, **extra: str) -> float:
    return served[(name, frozenset({**LABELS, **extra}.items()))]


def test_power_is_watts_with_the_host_gpu_uuid_model_and_vendor_labels():
    served = _served(_endpoint(SAMPLE))
    assert _value(served, "gpulens_gpu_power_watts") == 612.5
    assert _value(served, "gpulens_gpu_power_limit_watts") == 700.0


def test_percent_columns_are_served_as_ratios():
    served = _served(_endpoint(SAMPLE))
    ratios = [_value(served, name) for name in ("gpulens_gpu_utilization_ratio", "gpulens_gpu_memory_utilization_ratio",
                                                "gpulens_gpu_sm_active_ratio")]
    assert ratios == [0.97, 0.41, 0.83]


def test_clocks_are_served_in_hertz():
    served = _served(_endpoint(SAMPLE))
    assert (_value(served, "gpulens_gpu_sm_clock_hertz"), _value(served, "gpulens_gpu_memory_clock_hertz")) == (1.755e9, 2.619e9)


def test_cumulative_columns_are_counters_in_base_units():
    served = _served(_endpoint(SAMPLE))
    assert _value(served, "gpulens_gpu_energy_joules_total") == 123456.75
    assert _value(served, "gpulens_gpu_power_violation_seconds_total") == 1.5
    assert _value(served, "gpulens_gpu_pcie_replays_total") == 2
    assert _value(served, "gpulens_gpu_ecc_corrected_errors_total") == 5


def test_throughputs_are_bytes_per_second_beside_their_nominal_peaks():
    served = _served(_endpoint(SAMPLE))
    assert _value(served, "gpulens_gpu_link_tx_bytes_per_second") == 300e9
    assert _value(served, "gpulens_gpu_link_peak_bytes_per_second") == 450e9
    assert _value(served, "gpulens_gpu_pcie_rx_bytes_per_second") == 12.5e9
    assert _value(served, "gpulens_gpu_pcie_peak_bytes_per_second") == 63e9


def test_a_null_column_has_no_series():
    served = _served(_endpoint(SAMPLE))
    assert [key for key in served if key[0] == "gpulens_gpu_pcie_bytes_per_second"] == []


def test_every_telemetry_column_but_the_reason_list_has_a_metric():
    assert sorted(spec.column for spec in GPULENS_METRICS) == sorted(set(TELEMETRY_METRICS) - {"throttle_reasons"})


def test_each_throttle_reason_is_its_own_series_one_while_active():
    served = _served(_endpoint(SAMPLE))
    reasons = {dict(labels)["reason"]: value for (name, labels), value in served.items() if name == "gpulens_gpu_throttle_reason"}
    assert len(reasons) == 11 and reasons["sw_power_cap"] == 1
    assert sum(reasons.values()) == 1


def test_a_reason_outside_the_vendors_list_is_served_from_when_it_is_first_seen():
    endpoint = _endpoint(device=MI300X)
    endpoint.tick(1, [(MI300X, {"throttle_reasons": ["fit"]})])
    endpoint.tick(2, [(MI300X, {"throttle_reasons": []})])
    served = _served(endpoint)
    reasons = {dict(labels)["reason"]: value for (name, labels), value in served.items() if name == "gpulens_gpu_throttle_reason"}
    assert reasons == {"current": 0, "power": 0, "ppm": 0, "prochot": 0, "thermal": 0, "unspecified": 0, "vr_thermal": 0, "fit": 0}


def test_the_sample_time_is_served_in_seconds():
    served = _served(_endpoint(SAMPLE))
    assert served[("gpulens_sample_timestamp_seconds", frozenset({"host": "node-a"}.items()))] == 1_700_000_000.0


def test_a_scrape_serves_every_gpu_from_the_latest_tick_only():
    other = DeviceInfo(gpu_index=4, gpu_uuid="GPU-cccc", vendor="nvidia", model="NVIDIA H100 80GB HBM3")
    endpoint = _endpoint()
    endpoint.tick(1, [(H100, {"power_w": 100.0}), (other, {"power_w": 110.0})])
    endpoint.tick(2, [(H100, {"power_w": 200.0})])  # GPU 4 not answering at tick 2
    served = _served(endpoint)
    assert [(dict(labels)["gpu"], value) for (name, labels), value in served.items() if name == "gpulens_gpu_power_watts"] == [("3", 200.0)]


def test_xid_errors_are_counted_and_the_latest_code_kept():
    endpoint = _endpoint(SAMPLE)
    endpoint.event("xid", H100, 79)
    endpoint.event("xid", H100, 48)
    served = _served(endpoint)
    assert (_value(served, "gpulens_gpu_xid_errors_total"), _value(served, "gpulens_gpu_last_xid")) == (2, 48)


def test_a_gpu_without_xid_counts_zero_and_has_no_latest_code():
    served = _served(_endpoint(SAMPLE))
    assert _value(served, "gpulens_gpu_xid_errors_total") == 0
    assert [key for key in served if key[0] == "gpulens_gpu_last_xid"] == []


def test_a_lost_gpu_is_counted_and_down_until_it_recovers():
    endpoint = _endpoint(SAMPLE)
    endpoint.event("gpu_lost", H100, None)
    lost = _served(endpoint)
    endpoint.event("gpu_recovered", H100, None)
    recovered = _served(endpoint)
    assert (_value(lost, "gpulens_gpu_up"), _value(lost, "gpulens_gpu_lost_total")) == (0, 1)
    assert (_value(recovered, "gpulens_gpu_up"), _value(recovered, "gpulens_gpu_lost_total")) == (1, 1)


def test_skipped_ticks_are_a_node_counter():
    endpoint = _endpoint(SAMPLE)
    endpoint.event("ticks_skipped", None, 3)
    endpoint.event("ticks_skipped", None, 2)
    assert _served(endpoint)[("gpulens_collector_ticks_skipped_total", frozenset({"host": "node-a"}.items()))] == 5


def test_dcgm_names_carry_dcgm_exporters_units_and_labels():
    served = _served(_endpoint(SAMPLE, names="dcgm"))
    key = frozenset(DCGM_LABELS.items())
    assert served[("DCGM_FI_DEV_POWER_USAGE", key)] == 612.5
    assert served[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", key)] == 123456750.0  # mJ
    assert served[("DCGM_FI_DEV_GPU_UTIL", key)] == 97.0  # %
    assert served[("DCGM_FI_PROF_SM_ACTIVE", key)] == 0.83  # ratio
    assert (served[("DCGM_FI_DEV_FB_USED", key)], served[("DCGM_FI_DEV_FB_FREE", key)]) == (69632, 12288)  # MiB
    assert served[("DCGM_FI_DEV_SM_CLOCK", key)] == 1755  # MHz


def test_dcgm_names_serve_the_latest_xid_code_zero_before_any():
    endpoint = _endpoint(SAMPLE, names="dcgm")
    before = _served(endpoint)[("DCGM_FI_DEV_XID_ERRORS", frozenset(DCGM_LABELS.items()))]
    endpoint.event("xid", H100, 79)
    assert (before, _served(endpoint)[("DCGM_FI_DEV_XID_ERRORS", frozenset(DCGM_LABELS.items()))]) == (0, 79)


def test_dcgm_names_serve_no_gpulens_name():
    served = _served(_endpoint(SAMPLE, names="dcgm"))
    assert sorted({name for name, _ in served if not name.startswith("DCGM_FI_")}) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9999", ("127.0.0.1", 9999)),
    ("127.0.0.1", ("127.0.0.1", DEFAULT_METRICS_PORT)),
    (":9999", ("0.0.0.0", 9999)),
    ("[::1]:9999", ("::1", 9999)),
    ("[::1]", ("::1", DEFAULT_METRICS_PORT)),
])
def test_metrics_address_forms(text, expected):
    assert parse_metrics_address(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1:http", "127.0.0.1:70000", "::1:9999", "[::1]9999"])
def test_a_bad_metrics_address_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--metrics-address"):
        parse_metrics_address(text)


def test_the_default_port_is_none_of_the_gpu_and_node_exporters():
    assert DEFAULT_METRICS_PORT not in (9100, 9400, 9835)


def test_the_server_answers_openmetrics_with_units_on_metrics():
    server = MetricsServer(_endpoint(SAMPLE), f"127.0.0.1:{free_port()}")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics",
                                         headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.close()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert (families["gpulens_gpu_power_watts"].unit, families["gpulens_gpu_energy_joules"].type) == ("watts", "counter")


def test_a_port_in_use_is_a_usage_error_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port}"):
            MetricsServer(_endpoint(SAMPLE), f"127.0.0.1:{port}")


def test_the_collector_loop_feeds_the_endpoint_the_rows_it_writes(tmp_path):
    from gpulens.analysis.dataset import open_dataset

    endpoint = MetricsEndpoint("node-a")
    last: list[int] = []
    collector = Collector(SimBackend(gpus=2), CollectOptions(out=tmp_path, interval_s=0.05, host="node-a"), observer=endpoint)

    def three_ticks(ts_ns: int) -> None:
        last.append(ts_ns)
        if len(last) == 3:
            collector.stop()

    collector.on_tick(three_ticks)
    collector.run()
    served = _served(endpoint)
    power = sorted((dict(labels)["gpu"], value) for (name, labels), value in served.items() if name == "gpulens_gpu_power_watts")
    written = open_dataset(tmp_path).execute(
        "select gpu_index::varchar, power_w from telemetry where epoch_ns(ts) = ? order by 1", [last[-1]]).fetchall()
    assert power == written


def test_collect_without_a_metrics_address_loads_no_prometheus_client(tmp_path):
    command = ["collect", "--backend", "sim", "--sim-gpus", "1", "--interval", "0.05", "--duration", "0.1",
               "--out", str(tmp_path / "out")]
    assert modules_loaded_by(command, ("prometheus_client", "gpulens.collector.metrics_endpoint")) == []


def test_metrics_names_without_a_metrics_address_is_one_error_line_and_exit_2(tmp_path, capsys):
    from gpulens.dashboard import cli

    code = cli.main(["collect", "--backend", "sim", "--out", str(tmp_path), "--metrics-names", "dcgm"])
    assert (code, capsys.readouterr().err) == (
        2, "gpulens: error: --metrics-names chooses the names of --metrics-address; give --metrics-address HOST:PORT too\n")


def test_a_metrics_address_with_no_telemetry_is_one_error_line_and_exit_2(tmp_path, capsys):
    from gpulens.dashboard import cli

    code = cli.main(["collect", "--no-telemetry", "--watch-traces", str(tmp_path / "traces"), "--out", str(tmp_path / "data"),
                     "--metrics-address", "127.0.0.1:19400"])
    assert (code, capsys.readouterr().err) == (
        2, "gpulens: error: --metrics-address serves telemetry, which --no-telemetry turns off\n")
