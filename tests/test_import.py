"""`gpulens import`: nvidia-smi logs, exporter scrapes and AMD JSON into the
telemetry and devices tables (a live Prometheus: tests/test_import_prometheus.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from gpulens.collector.errors import ImportSourceError, UsageError
from gpulens.collector.imports import detect_format, import_source
from gpulens.dashboard.cli import main

DATA = Path(__file__).parent / "data" / "import"
UTC = dt.timezone.utc


def _rows(out: Path, table: str = "telemetry", order: str = "ts, gpu_index") -> list[dict]:
    con = duckdb.connect()
    relation = con.sql(f"select * from read_parquet('{out}/{table}/**/*.parquet', hive_partitioning = false) order by {order}")
    names = relation.columns
    return [dict(zip(names, row)) for row in relation.fetchall()]


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))


def _us(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- nvidia-smi logs ----------------------------------------------------------


def test_import_nvidia_smi_h200_capture_maps_every_field(tmp_path):
    result = import_source(str(DATA / "nvidia-smi-h200-load.csv"), tmp_path, host="h200-box")
    assert result.rows == 1
    [row] = _rows(tmp_path)
    assert row["ts"] == _us("2026-07-03 22:11:09.763")
    assert (row["host"], row["gpu_index"], row["gpu_uuid"], row["vendor"]) == (
        "h200-box", 0, "GPU-00000000-0000-0000-0000-000000000000", "nvidia")
    assert (row["power_w"], row["power_instant_w"], row["power_limit_w"]) == (627.40, 626.26, 700.0)
    assert (row["gpu_util_pct"], row["mem_util_pct"]) == (100.0, 7.0)
    assert (row["sm_clock_mhz"], row["mem_clock_mhz"]) == (1980, 3201)
    assert (row["temp_c"], row["mem_temp_c"]) == (52.0, 40.0)
    assert (row["mem_used_bytes"], row["mem_total_bytes"]) == (32362 * 2**20, 143771 * 2**20)
    assert (row["throttle_reasons_mask"], row["throttle_reasons"]) == (0, [])
    assert (row["power_violation_ns"], row["thermal_violation_ns"]) == (0, 0)
    assert (row["ecc_corrected_count"], row["ecc_uncorrected_count"]) == (0, 0)


def test_import_nvidia_smi_fields_the_log_lacks_are_null(tmp_path):
    import_source(str(DATA / "nvidia-smi-h200-load.csv"), tmp_path, host="h200-box")
    [row] = _rows(tmp_path)
    missing = ["energy_j", "sm_active_pct", "power_max_w", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s",
               "pcie_bytes_per_s", "link_tx_bytes_per_s", "link_rx_bytes_per_s", "pcie_replay_count"]
    assert {name: row[name] for name in missing} == dict.fromkeys(missing)


def test_import_nvidia_smi_unbracketed_na_is_null(tmp_path):
    import_source(str(DATA / "nvidia-smi-l40s-load.csv"), tmp_path, host="l40s-box")
    [row] = _rows(tmp_path)
    assert row["mem_temp_c"] is None
    assert row["power_violation_ns"] == 204_642_816_000
    assert (row["power_w"], row["sm_clock_mhz"], row["mem_clock_mhz"]) == (110.23, 2520, 9001)


def test_import_nvidia_smi_devices_row_from_the_log(tmp_path):
    import_source(str(DATA / "nvidia-smi-h200-load.csv"), tmp_path, host="h200-box")
    [device] = _rows(tmp_path, "devices", "gpu_index")
    assert {k: device[k] for k in ("model", "pci_bus_id", "serial", "driver_version", "power_limit_w",
                                   "power_limit_default_w", "power_limit_min_w", "power_limit_max_w",
                                   "mem_total_bytes", "pcie_gen", "pcie_width")} == {
        "model": "NVIDIA H200", "pci_bus_id": "00000000:83:00.0", "serial": "0000000000000",
        "driver_version": "590.48.01", "power_limit_w": 700.0, "power_limit_default_w": 700.0,
        "power_limit_min_w": 200.0, "power_limit_max_w": 700.0, "mem_total_bytes": 143771 * 2**20,
        "pcie_gen": 5, "pcie_width": 16,
    }
    assert (device["link_count"], device["backend_library_version"]) == (None, None)


def test_import_nvidia_smi_polls_share_their_first_timestamp(tmp_path):
    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    rows = _rows(tmp_path)
    assert [(r["ts"], r["gpu_index"]) for r in rows] == [
        (_us("2024-05-01 12:00:00.101"), 0), (_us("2024-05-01 12:00:00.101"), 1),
        (_us("2024-05-01 12:00:01.102"), 0), (_us("2024-05-01 12:00:01.102"), 1),
        (_us("2024-05-01 12:00:02.100"), 0), (_us("2024-05-01 12:00:02.100"), 1),
    ]


def test_import_nvidia_smi_host_from_the_hostname_field(tmp_path):
    result = import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    assert result.hosts == ["node7"]
    assert _files(tmp_path)[-1].startswith("telemetry/host=node7/date=2024-05-01/import-")


def test_import_nvidia_smi_log_of_two_nodes_gives_each_nodes_gpu_its_devices_row(tmp_path):
    # Both nodes have a GPU 0: each keeps its own last row.
    log = tmp_path / "fleet.csv"
    log.write_text("timestamp, index, uuid, hostname, power.draw [W], power.limit [W]\n"
                   "2024/05/01 12:00:00.100, 0, GPU-a0, nodeA, 100 W, 700 W\n"
                   "2024/05/01 12:00:00.100, 0, GPU-b0, nodeB, 200 W, 650 W\n"
                   "2024/05/01 12:00:01.100, 0, GPU-a0, nodeA, 110 W, 700 W\n"
                   "2024/05/01 12:00:01.100, 0, GPU-b0, nodeB, 210 W, 600 W\n")
    result = import_source(str(log), tmp_path / "out")
    assert (result.hosts, result.gpus) == (["nodeA", "nodeB"], 2)
    devices = _rows(tmp_path / "out", "devices", "host, gpu_index")
    assert [(d["host"], d["gpu_index"], d["gpu_uuid"], d["power_limit_w"]) for d in devices] == [
        ("nodeA", 0, "GPU-a0", 700.0), ("nodeB", 0, "GPU-b0", 600.0)]


def test_import_nvidia_smi_not_supported_and_throttle_reasons(tmp_path):
    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    rows = _rows(tmp_path)
    assert [r["power_w"] for r in rows] == [250.5, 300.25, 690.0, None, 400.0, 350.0]
    assert [r["gpu_util_pct"] for r in rows] == [40.0, None, 100.0, 98.0, 70.0, 65.0]
    assert [r["throttle_reasons"] for r in rows] == [
        [], ["sw_power_cap"], ["sw_power_cap"], ["sw_power_cap", "sw_thermal_slowdown"], ["gpu_idle"], []]


def test_import_nvidia_smi_noheader_with_columns(tmp_path):
    import_source(str(DATA / "nvidia-smi-noheader.csv"), tmp_path, host="n1",
                  columns=["timestamp", "index", "power.draw", "utilization.gpu", "temperature.gpu"])
    rows = _rows(tmp_path)
    assert [(r["ts"], r["gpu_index"], r["power_w"], r["gpu_util_pct"], r["temp_c"]) for r in rows] == [
        (_us("2024-05-01 14:00:00.500"), 0, 120.0, 10.0, 35.0),
        (_us("2024-05-01 14:00:00.500"), 1, 130.0, 20.0, 36.0),
        (_us("2024-05-01 14:00:01.500"), 0, 125.5, 11.0, 35.0),
        (_us("2024-05-01 14:00:01.500"), 1, 131.75, 21.0, 37.0),
    ]


def test_import_nvidia_smi_noheader_without_columns_says_so(tmp_path):
    with pytest.raises(ImportSourceError, match=r"nvidia-smi-noheader.csv:1: no header line: give the fields with --columns"):
        import_source(str(DATA / "nvidia-smi-noheader.csv"), tmp_path, host="n1")


def test_import_nvidia_smi_timezone_makes_local_times_utc(tmp_path):
    import_source(str(DATA / "nvidia-smi-noheader.csv"), tmp_path, host="n1", timezone="Europe/Paris",
                  columns=["timestamp", "index", "power.draw", "utilization.gpu", "temperature.gpu"])
    assert _rows(tmp_path)[0]["ts"] == _us("2024-05-01 12:00:00.500")  # CEST is UTC+2


def test_import_nvidia_smi_windows_log_with_bom_and_crlf(tmp_path):
    log = tmp_path / "windows.csv"
    log.write_bytes(b"\xef\xbb\xbftimestamp, index, power.draw [W], memory.used [MiB]\r\n"
                    b"2024/05/01 12:00:00.100, 0, 100.00 W, 10 MiB\r\n2024/05/01 12:00:00.110, 1, 101.00 W, 11 MiB\r\n")
    import_source(str(log), tmp_path / "out", host="w")
    assert [(r["ts"], r["gpu_index"], r["power_w"], r["mem_used_bytes"]) for r in _rows(tmp_path / "out")] == [
        (_us("2024-05-01 12:00:00.100"), 0, 100.0, 10 * 2**20), (_us("2024-05-01 12:00:00.100"), 1, 101.0, 11 * 2**20)]


def test_import_leaves_nothing_of_a_killed_import_staged(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tmp_path / ".staging" / f"import-0123456789abcdef-{dead.stdout.strip()}"
    leftover.mkdir(parents=True)
    (leftover / "node7-19844.parquet").write_bytes(b"PAR1")
    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    assert not leftover.exists()


def test_import_nvidia_smi_repeated_header_is_skipped(tmp_path):
    log = tmp_path / "appended.csv"
    text = (DATA / "nvidia-smi-2gpu.csv").read_text()
    header, *rows = text.splitlines(keepends=True)
    log.write_text(header + "".join(rows[:2]) + header + "".join(rows[2:]))
    assert import_source(str(log), tmp_path / "out").rows == 6


def test_import_nvidia_smi_without_host_says_so(tmp_path):
    with pytest.raises(ImportSourceError, match=r"nvidia-smi-h200-load.csv:2: names no host .*--host NAME"):
        import_source(str(DATA / "nvidia-smi-h200-load.csv"), tmp_path)


def test_import_nvidia_smi_bad_value_names_file_and_line(tmp_path):
    log = tmp_path / "bad.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    lines[6] = lines[6].replace("400.00 W", "4OO.00 W")  # the line after the blank one
    log.write_text("".join(lines))
    out = tmp_path / "out"
    with pytest.raises(ImportSourceError, match=r"bad.csv:7: '4OO.00 W' is not a number \(power_w\)"):
        import_source(str(log), out)
    assert _files(out) == []
    assert list((out / ".staging").iterdir()) == []


def test_import_nvidia_smi_text_not_utf8_names_file_and_line(tmp_path):
    log = tmp_path / "latin1.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"node7", b"n\xf6de7")  # Latin-1, not UTF-8
    log.write_bytes(b"".join(lines))
    out = tmp_path / "out"
    with pytest.raises(ImportSourceError, match=r"latin1.csv:4: ' n\ufffdde7' is not UTF-8 text \(host\)"):
        import_source(str(log), out)
    assert _files(out) == []


def test_import_nvidia_smi_bad_throttle_mask_names_file_and_line(tmp_path):
    log = tmp_path / "mask.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace("0x0000000000000024", "0xZZ")
    log.write_text("".join(lines))
    with pytest.raises(ImportSourceError, match=r"mask.csv:5: '0xZZ' is not a number \(throttle_reasons_mask\)"):
        import_source(str(log), tmp_path / "out")


def test_import_nvidia_smi_throttle_mask_past_64_bits_names_file_and_line(tmp_path):
    log = tmp_path / "mask.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace("0x0000000000000024", "0x10000000000000000")
    log.write_text("".join(lines))
    with pytest.raises(ImportSourceError, match=r"mask.csv:5: '0x10000000000000000' is out of range "
                                                r"\(throttle_reasons_mask\)"):
        import_source(str(log), tmp_path / "out")


def test_import_nvidia_smi_timestamp_not_utf8_names_file_and_line(tmp_path):
    log = tmp_path / "stamp.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"2024/05/01", b"2024/05/\xff1", 1)
    log.write_bytes(b"".join(lines))
    with pytest.raises(ImportSourceError, match=r"stamp.csv:4: '2024/05/\ufffd1 12:00:01.102' is not a timestamp"):
        import_source(str(log), tmp_path / "out")


def test_import_nvidia_smi_short_line_names_file_and_line(tmp_path):
    log = tmp_path / "short.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    lines[3] = "2024/05/01 12:00:01.102, 0, GPU-0a1b2c3d\n"
    log.write_text("".join(lines))
    with pytest.raises(ImportSourceError, match=r"short.csv:4: 3 fields where the log has 13"):
        import_source(str(log), tmp_path / "out")


def test_import_bad_line_keeps_the_earlier_import(tmp_path):
    log = tmp_path / "log.csv"
    shutil.copy(DATA / "nvidia-smi-2gpu.csv", log)
    import_source(str(log), tmp_path / "out")
    before = _rows(tmp_path / "out")
    with open(log, "a") as handle:
        handle.write("2024/05/01 12:00:03.100, 0, GPU-x, NVIDIA H100 80GB HBM3, node7, hot W, 650.00 W, 1 %, 1 MiB, 1 MiB, 1, 1 MHz, 0x0\n")
    with pytest.raises(ImportSourceError, match=r"log.csv:9:"):
        import_source(str(log), tmp_path / "out")
    assert _rows(tmp_path / "out") == before


def test_import_same_file_twice_is_idempotent(tmp_path):
    source = str(DATA / "nvidia-smi-2gpu.csv")
    import_source(source, tmp_path)
    files, rows = _files(tmp_path), _rows(tmp_path)
    again = import_source(source, tmp_path)
    assert (_files(tmp_path), _rows(tmp_path)) == (files, rows)
    assert again.replaced == 0


def test_import_grown_log_replaces_its_earlier_import(tmp_path):
    log = tmp_path / "growing.csv"
    lines = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]))
    import_source(str(log), tmp_path / "out")
    log.write_text("".join(lines))
    import_source(str(log), tmp_path / "out")
    assert len(_rows(tmp_path / "out")) == 6
    assert len(_files(tmp_path / "out")) == 2  # one telemetry file, one devices file


def test_import_again_with_another_timezone_replaces_the_rows(tmp_path):
    columns = ["timestamp", "index", "power.draw", "utilization.gpu", "temperature.gpu"]
    source = str(DATA / "nvidia-smi-noheader.csv")
    import_source(source, tmp_path, host="n1", columns=columns)
    import_source(source, tmp_path, host="n1", columns=columns, timezone="Europe/Paris")
    assert [r["ts"] for r in _rows(tmp_path)][:2] == [_us("2024-05-01 12:00:00.500")] * 2
    assert len(_rows(tmp_path)) == 4


def test_import_since_until_keep_the_window(tmp_path):
    result = import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path, since=_us("2024-05-01 12:00:01"),
                           until=_us("2024-05-01 12:00:02"))
    assert result.rows == 2
    assert {r["ts"] for r in _rows(tmp_path)} == {_us("2024-05-01 12:00:01.102")}


def test_import_log_over_midnight_writes_a_file_per_day(tmp_path):
    log = tmp_path / "midnight.csv"
    log.write_text("timestamp, index, power.draw [W]\n2024/05/01 23:59:59.500, 0, 100.00 W\n"
                   "2024/05/02 00:00:00.500, 0, 110.00 W\n")
    import_source(str(log), tmp_path / "out", host="n")
    assert [f.split("/import-")[0] for f in _files(tmp_path / "out")] == [
        "devices/host=n", "telemetry/host=n/date=2024-05-01", "telemetry/host=n/date=2024-05-02"]


# --- the analyses on an imported dataset -------------------------------------------


def test_import_node_power_sums_a_poll_of_every_gpu(tmp_path):
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.power import node_power

    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    [row] = node_power(open_dataset(tmp_path)).to_dicts()
    assert (row["host"], row["gpus"], row["ticks"]) == ("node7", 2, 2)
    assert (row["coincident_max_w"], row["limit_sum_w"]) == (750.0, 1300.0)
    assert row["coincident_p50_w"] == pytest.approx(650.375, abs=1e-9)


def test_import_power_headroom_of_an_imported_log(tmp_path):
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.power import power_headroom

    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    rows = power_headroom(open_dataset(tmp_path)).to_dicts()
    assert [(r["gpu_index"], r["samples"], r["power_samples"], r["max_w"], r["limit_w"], r["p50_w"]) for r in rows] == [
        (0, 3, 3, 690.0, 650.0, 400.0), (1, 3, 2, 350.0, 650.0, 325.125)]
    assert [r["power_throttled_share"] for r in rows] == pytest.approx([1 / 3, 2 / 3])
    assert [r["power_throttle_source"] for r in rows] == ["reasons", "reasons"]


@pytest.mark.slow  # a whole report: about 10 s here
def test_import_then_gpulens_report_shows_the_power(tmp_path, capsys):
    assert main(["import", str(DATA / "nvidia-smi-2gpu.csv"), "--out", str(tmp_path / "data")]) == 0
    assert main(["report", str(tmp_path / "data"), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [row["coincident_max_w"] for row in report["tables"]["node_power"]] == [750.0]
    assert [f["title"] for f in report["findings"][:3]] == [
        "GPU 0 on node7 was held back by its power limit 33% of the time (limit 650 W)",
        "GPU 1 on node7 was held back by its power limit 67% of the time (limit 650 W)",
        "GPU 1 on node7 was held back by heat 33% of the time",
    ]


# --- the command ---------------------------------------------------------------------


def test_import_command_prints_one_line_summary(tmp_path, capsys):
    assert main(["import", str(DATA / "nvidia-smi-2gpu.csv"), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().err == (
        f"gpulens: imported 6 telemetry rows of 2 GPUs on node7 from {DATA / 'nvidia-smi-2gpu.csv'} into {tmp_path}\n")


def test_import_command_bad_line_is_one_error_line(tmp_path, capsys):
    log = tmp_path / "bad.csv"
    log.write_text("timestamp, index, power.draw [W]\n2024/05/01 12:00:00.000, 0, lots W\n")
    assert main(["import", str(log), "--host", "n", "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"gpulens: error: {log}:2: 'lots W' is not a number (power_w)\n"


def test_import_command_missing_file(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"gpulens: error: {tmp_path / 'nope.csv'}: no such file\n"


def test_import_unknown_timezone_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--timezone Mars/Olympus: not a time zone"):
        import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path, timezone="Mars/Olympus")


def test_import_prometheus_unreachable_is_one_line(tmp_path):
    port = _closed_port()
    with pytest.raises(ImportSourceError, match=rf"^http://127.0.0.1:{port}: cannot query it \(.*refused.*\)$"):
        import_source(f"http://127.0.0.1:{port}", tmp_path, since=_us("2024-05-01 12:00:00"),
                      until=_us("2024-05-01 12:01:00"))


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_import_prometheus_without_window_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--since and --until"):
        import_source("http://127.0.0.1:9/", tmp_path)


# --- format detection ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("nvidia-smi-h200-load.csv", "nvidia-smi"),
    ("nvidia-smi-noheader.csv", "nvidia-smi"),
    ("nvidia-gpu-exporter-h200-load.prom", "scrape"),
    ("dcgm-exporter-h100.prom", "scrape"),
    ("rocm-smi-mi100.json", "rocm-smi"),
])
def test_detect_format_from_content(name, expected):
    assert detect_format(str(DATA / name)) == expected


# --- exporter scrapes --------------------------------------------------------------------


def _scrape_at(tmp_path: Path, name: str, when: str) -> Path:
    copy = tmp_path / name
    shutil.copy(DATA / name, copy)
    seconds = _us(when).timestamp()
    os.utime(copy, (seconds, seconds))
    return copy


def test_import_dcgm_exporter_scrape(tmp_path):
    scrape = _scrape_at(tmp_path, "dcgm-exporter-h100.prom", "2024-05-01 12:00:00")
    result = import_source(str(scrape), tmp_path / "out")
    assert result.hosts == ["gpu-node-3"]
    rows = _rows(tmp_path / "out")
    assert [(r["ts"], r["host"], r["gpu_index"], r["gpu_uuid"]) for r in rows] == [
        (_us("2024-05-01 12:00:00"), "gpu-node-3", 0, "GPU-5fd4a2b1-1c2d-4e5f-8a9b-0c1d2e3f4a01"),
        (_us("2024-05-01 12:00:00"), "gpu-node-3", 1, "GPU-5fd4a2b1-1c2d-4e5f-8a9b-0c1d2e3f4a02"),
    ]
    gpu0 = rows[0]
    assert {k: gpu0[k] for k in ("power_w", "power_limit_w", "energy_j", "gpu_util_pct", "mem_util_pct",
                                 "sm_active_pct", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "mem_temp_c",
                                 "mem_used_bytes", "throttle_reasons_mask", "throttle_reasons",
                                 "power_violation_ns", "thermal_violation_ns", "pcie_tx_bytes_per_s",
                                 "pcie_rx_bytes_per_s", "link_tx_bytes_per_s", "link_rx_bytes_per_s",
                                 "pcie_replay_count", "mem_total_bytes")} == {
        "power_w": 612.345, "power_limit_w": 700.0, "energy_j": 123456.789, "gpu_util_pct": 100.0,
        "mem_util_pct": 35.0, "sm_active_pct": 87.5, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temp_c": 52.0,
        "mem_temp_c": 40.0, "mem_used_bytes": 71000 * 2**20, "throttle_reasons_mask": 4,
        "throttle_reasons": ["sw_power_cap"], "power_violation_ns": 1_500_000_000, "thermal_violation_ns": 0,
        "pcie_tx_bytes_per_s": 1e6, "pcie_rx_bytes_per_s": 3e6, "link_tx_bytes_per_s": 5e10,
        "link_rx_bytes_per_s": 4.9e10, "pcie_replay_count": 0, "mem_total_bytes": None,
    }


def test_import_dcgm_exporter_devices_from_labels(tmp_path):
    scrape = _scrape_at(tmp_path, "dcgm-exporter-h100.prom", "2024-05-01 12:00:00")
    import_source(str(scrape), tmp_path / "out")
    devices = _rows(tmp_path / "out", "devices", "gpu_index")
    assert [(d["gpu_index"], d["model"], d["pci_bus_id"], d["driver_version"], d["power_limit_w"],
             d["power_limit_max_w"]) for d in devices] == [
        (0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", "550.54.15", 700.0, None),
        (1, "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", "550.54.15", 700.0, None),
    ]


def test_import_nvidia_gpu_exporter_scrape(tmp_path):
    scrape = _scrape_at(tmp_path, "nvidia-gpu-exporter-h200-load.prom", "2026-07-03 22:11:10")
    import_source(str(scrape), tmp_path / "out", host="h200-box")
    [row] = _rows(tmp_path / "out")
    assert {k: row[k] for k in ("ts", "gpu_index", "gpu_uuid", "power_w", "power_instant_w", "power_limit_w",
                                "gpu_util_pct", "mem_util_pct", "sm_clock_mhz", "mem_clock_mhz", "temp_c",
                                "mem_temp_c", "mem_used_bytes", "mem_total_bytes", "power_violation_ns")} == {
        "ts": _us("2026-07-03 22:11:10"), "gpu_index": 0, "gpu_uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "power_w": 627.4, "power_instant_w": 626.26, "power_limit_w": 700.0, "gpu_util_pct": 100.0,
        "mem_util_pct": 7.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "temp_c": 52.0, "mem_temp_c": 40.0,
        "mem_used_bytes": 32362 * 2**20, "mem_total_bytes": 143771 * 2**20, "power_violation_ns": 0,
    }
    [device] = _rows(tmp_path / "out", "devices", "gpu_index")
    assert (device["model"], device["driver_version"], device["power_limit_min_w"], device["pcie_gen"],
            device["power_limit_w"], device["mem_total_bytes"]) == ("NVIDIA H200", "590.48.01", 200.0, 5, 700.0,
                                                                   143771 * 2**20)


def test_import_scrape_sample_timestamps_are_the_times(tmp_path):
    scrape = tmp_path / "timed.prom"
    scrape.write_text('DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n"} 100 1714564800000\n'
                      'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n"} 120 1714564801500\n')
    import_source(str(scrape), tmp_path / "out", fmt="scrape")
    assert [(r["ts"], r["power_w"]) for r in _rows(tmp_path / "out")] == [
        (_us("2024-05-01 12:00:00"), 100.0), (_us("2024-05-01 12:00:01.500"), 120.0)]


def test_import_scrape_bad_line_names_file_and_line(tmp_path):
    scrape = tmp_path / "bad.prom"
    scrape.write_text('# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n"} 100\n'
                      'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n" 12\n')
    with pytest.raises(ImportSourceError, match=r"bad.prom:3: not a Prometheus text-format line"):
        import_source(str(scrape), tmp_path / "out")
    assert not (tmp_path / "out" / "telemetry").exists()


# --- AMD ------------------------------------------------------------------------------------


def test_import_rocm_smi_json(tmp_path):
    snapshot = _scrape_at(tmp_path, "rocm-smi-mi100.json", "2024-05-01 12:00:00")
    import_source(str(snapshot), tmp_path / "out", host="mi100-box")
    rows = _rows(tmp_path / "out")
    assert [(r["gpu_index"], r["vendor"], r["power_w"], r["power_limit_w"], r["temp_c"], r["mem_temp_c"],
             r["sm_clock_mhz"], r["mem_clock_mhz"], r["gpu_util_pct"], r["mem_used_bytes"], r["mem_total_bytes"],
             r["pcie_replay_count"]) for r in rows] == [
        (0, "amd", 36.0, 290.0, 55.0, 53.0, 300, 1200, 0.0, 6750208, 34342961152, 0),
        (1, "amd", 44.0, 290.0, 58.0, 54.0, 300, 1200, 0.0, 6750208, 34342961152, 0),
    ]
    devices = _rows(tmp_path / "out", "devices", "gpu_index")
    assert [(d["model"], d["pci_bus_id"], d["serial"], d["gpu_uuid"], d["driver_version"]) for d in devices] == [
        ("Arcturus GL-XL [Instinct MI100]", "0000:83:00.0", None, "0x79ccd55167a2124a", "6.3.6"),
        ("Arcturus GL-XL [Instinct MI100]", "0000:A3:00.0", None, "0x4edfb117a17a07d", "6.3.6"),
    ]


def test_import_amd_smi_metric_json(tmp_path):
    snapshot = tmp_path / "amd-smi.json"
    snapshot.write_text(json.dumps({"gpu_data": [
        {"gpu": 0, "usage": {"gfx_activity": {"value": 87, "unit": "%"}, "umc_activity": {"value": 41, "unit": "%"}},
         "power": {"socket_power": {"value": 542, "unit": "W"}},
         "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}, "mem_0": {"clk": {"value": 1300, "unit": "MHz"}}},
         "temperature": {"edge": {"value": 52, "unit": "C"}, "hotspot": {"value": 71, "unit": "C"}, "mem": "N/A"},
         "mem_usage": {"used_vram": {"value": 121344, "unit": "MB"}, "total_vram": {"value": 196592, "unit": "MB"}},
         "energy": {"total_energy_consumption": {"value": 1234567.5, "unit": "uJ"}}},
    ]}))
    seconds = _us("2024-05-01 12:00:00").timestamp()
    os.utime(snapshot, (seconds, seconds))
    import_source(str(snapshot), tmp_path / "out", host="mi300-box")
    [row] = _rows(tmp_path / "out")
    assert {k: row[k] for k in ("ts", "vendor", "power_w", "gpu_util_pct", "mem_util_pct", "sm_clock_mhz",
                                "mem_clock_mhz", "temp_c", "mem_temp_c", "mem_used_bytes", "mem_total_bytes",
                                "energy_j")} == {
        "ts": _us("2024-05-01 12:00:00"), "vendor": "amd", "power_w": 542.0, "gpu_util_pct": 87.0,
        "mem_util_pct": 41.0, "sm_clock_mhz": 2100, "mem_clock_mhz": 1300, "temp_c": 71.0, "mem_temp_c": None,
        "mem_used_bytes": 121344 * 2**20, "mem_total_bytes": 196592 * 2**20, "energy_j": 1.2345675,
    }


def test_import_amd_json_without_host_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="names no host: give --host NAME"):
        import_source(str(DATA / "rocm-smi-mi100.json"), tmp_path)


def test_import_files_have_the_collectors_schema_and_encodings(tmp_path):
    import pyarrow.parquet as pq

    from gpulens.collector.schema import TELEMETRY_SCHEMA

    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    [path] = (tmp_path / "telemetry").rglob("*.parquet")
    schema = pq.read_schema(path)
    assert schema.remove_metadata() == TELEMETRY_SCHEMA.remove_metadata()
    assert schema.metadata[b"gpulens.table"] == b"telemetry"
    group = pq.ParquetFile(path).metadata.row_group(0)
    power_w, ts = (group.column(TELEMETRY_SCHEMA.get_field_index(name)) for name in ("power_w", "ts"))
    assert (power_w.compression, "BYTE_STREAM_SPLIT" in power_w.encodings) == ("ZSTD", True)
    assert (ts.compression, "DELTA_BINARY_PACKED" in ts.encodings) == ("ZSTD", True)


def test_import_nvidia_smi_devices_row_is_the_last_row_of_a_host_spelt_two_ways(tmp_path):
    # "nodeA " and "nodeA" are one host once trimmed: its GPU's last row wins.
    log = tmp_path / "fleet.csv"
    log.write_text("timestamp, index, uuid, hostname, power.draw [W], power.limit [W]\n"
                   "2024/05/01 12:00:00.100, 0, GPU-a0, nodeA , 100 W, 650 W\n"
                   "2024/05/01 12:00:01.100, 0, GPU-a0, nodeA, 110 W, 700 W\n"
                   "2024/05/01 12:00:02.100, 0, GPU-a0, nodeA , 120 W, 600 W\n")
    import_source(str(log), tmp_path / "out")
    [device] = _rows(tmp_path / "out", "devices", "gpu_index")
    assert (device["host"], device["power_limit_w"]) == ("nodeA", 600.0)


def test_import_text_columns_written_from_each_blocks_own_dictionary_read_back_as_text(tmp_path, monkeypatch):
    # Small blocks, GPUs in another order in each poll: every block's UUID
    # dictionary differs, and row groups span blocks.
    import pyarrow.parquet as pq

    from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader
    from gpulens.collector.schema import TELEMETRY_SCHEMA

    monkeypatch.setattr(NvidiaSmiReader, "block_bytes", 16384)
    log = tmp_path / "log.csv"
    lines = ["timestamp, index, uuid, power.draw [W]"]
    for second in range(30_000):
        order = [0, 1, 2] if second % 3 else [2, 0, 1]
        stamp = f"2024/05/01 {second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000"
        lines += [f"{stamp}, {gpu}, GPU-{gpu:04d}, {second % 500}.5 W" for gpu in order]
    log.write_text("\n".join(lines) + "\n")
    import_source(str(log), tmp_path / "ds", host="node7")
    [path] = (tmp_path / "ds" / "telemetry").rglob("*.parquet")
    assert pq.read_schema(path).remove_metadata() == TELEMETRY_SCHEMA.remove_metadata()
    table = pq.read_table(path)
    assert (table.num_rows, pq.ParquetFile(path).metadata.num_row_groups) == (90_000, 2)
    assert set(zip(table["gpu_index"].to_pylist(), table["gpu_uuid"].to_pylist())) == {
        (0, "GPU-0000"), (1, "GPU-0001"), (2, "GPU-0002")}
    assert set(table["host"].to_pylist()) == {"node7"} and set(table["vendor"].to_pylist()) == {"nvidia"}


def test_import_throttle_reasons_of_a_bit_first_seen_in_a_later_block_read_back(tmp_path, monkeypatch):
    from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader

    monkeypatch.setattr(NvidiaSmiReader, "block_bytes", 1024)
    log = tmp_path / "log.csv"
    masks = ["0x0000000000000004"] * 40 + ["0x0000000000008001", "[N/A]", "0x0000000000000000"]
    log.write_text("timestamp, index, clocks_event_reasons.active\n" + "".join(
        f"2024/05/01 12:00:{i:02d}.000, 0, {mask}\n" for i, mask in enumerate(masks)))
    import_source(str(log), tmp_path / "out", host="n")
    rows = _rows(tmp_path / "out")
    assert [(r["throttle_reasons"], r["throttle_reasons_mask"]) for r in rows[-4:]] == [
        (["sw_power_cap"], 4), (["gpu_idle", "unknown_0x8000"], 0x8001), (None, None), ([], 0)]


def test_import_files_keep_statistics_for_times_and_numbers_not_text(tmp_path):
    import pyarrow.parquet as pq

    from gpulens.collector.schema import TELEMETRY_SCHEMA

    import_source(str(DATA / "nvidia-smi-2gpu.csv"), tmp_path)
    [path] = (tmp_path / "telemetry").rglob("*.parquet")
    group = pq.ParquetFile(path).metadata.row_group(0)
    kept = {name: group.column(TELEMETRY_SCHEMA.get_field_index(name)).is_stats_set
            for name in ("ts", "gpu_index", "power_w", "host", "gpu_uuid", "vendor")}
    assert kept == {"ts": True, "gpu_index": True, "power_w": True, "host": False, "gpu_uuid": False,
                    "vendor": False}
    power_w = group.column(TELEMETRY_SCHEMA.get_field_index("power_w")).statistics
    assert (power_w.min, power_w.max, power_w.null_count) == (250.5, 690.0, 1)  # one [N/A]


@pytest.fixture(scope="module")
def imported_dataset(tmp_path_factory):
    from gpulens.analysis.dataset import open_dataset

    out = tmp_path_factory.mktemp("imported")
    import_source(str(DATA / "nvidia-smi-2gpu.csv"), out)
    return open_dataset(out)


# The telemetry views the dashboard's pages and the report read, and the
# rows each gives on the 2-GPU log of 3 polls (None: any number, they need
# traces or links the log does not have).
@pytest.mark.parametrize(("view", "rows"), [
    ("host_telemetry", 6), ("power_samples", 6), ("power_node_ticks", 3), ("power_headroom", 2),
    ("node_power", 1), ("power_cap_whatif_node", 1), ("dash_node_power_timeline", 1),
    ("dash_telemetry_coverage", 2), ("dash_power_histogram", None), ("dash_power_cap_curve", None),
    ("power_cap_whatif", None), ("telemetry_timeline", None), ("interconnect_timeline", None),
    ("interconnect_usage", None), ("interconnect_links", None),
])
def test_import_dashboard_views_run_on_an_imported_dataset(imported_dataset, view, rows):
    from gpulens.analysis.registry import run_analysis

    result = run_analysis(imported_dataset, view)
    if rows is not None:
        assert result.height == rows


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "pure"])
def test_a_ragged_line_of_bytes_that_are_not_utf8_is_one_error_line_naming_it(tmp_path, pure):
    # pyarrow cannot hand such a row to the invalid-row handler; Python
    # would print that as "Exception ignored ... Traceback" beside the error.
    import subprocess
    import sys

    lines = (DATA / "nvidia-smi-2gpu.csv").read_bytes().splitlines(keepends=True)
    log = tmp_path / "ragged.csv"
    log.write_bytes(b"".join([*lines[:3], b"2024/05/01 12:00:01.101, \xf8\xff broken, 1\n", *lines[3:]]))
    env = {**os.environ, **({"GPULENS_PURE_PYTHON": "1"} if pure else {})}
    done = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "import", str(log), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"gpulens: error: {log}:4: a line of other than the log's 13 fields, "
                                        "with bytes that are not UTF-8"]


@pytest.mark.parametrize(("users_setting", "seen"), [(None, "1"), ("4", "4")])
def test_gpulens_command_starts_no_openblas_pool_unless_the_user_asks(tmp_path, users_setting, seen):
    # What numpy's OpenBLAS reads when pyarrow loads it, in the command's
    # own process: a pool's threads spin 0.1 s of CPU each at start.
    import subprocess
    import sys

    from conftest import REPO_ROOT

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "atexit.register(lambda: open(os.environ['SEEN'], 'w').write(\n"
        "    str('numpy' in sys.modules) + ' ' + os.environ.get('OPENBLAS_NUM_THREADS', '-')))\n")
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    env.update(PYTHONPATH=os.pathsep.join([str(hook), str(REPO_ROOT)]), SEEN=str(tmp_path / "seen"))
    if users_setting is not None:
        env["OPENBLAS_NUM_THREADS"] = users_setting
    done = subprocess.run([sys.executable, "-c", "import sys; from gpulens.dashboard.cli import entry; sys.exit(entry())",
                           "import", str(DATA / "nvidia-smi-2gpu.csv"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "seen").read_text() == f"True {seen}"


def test_import_of_a_log_across_midnight_loads_neither_numpy_ma_nor_pandas(tmp_path, node_python):
    # On a node: pa.array and np.unique of a numpy array load numpy.ma, 40 ms a process.
    from conftest import modules_loaded_by

    log = tmp_path / "log.csv"
    log.write_text("timestamp, index, power.draw [W]\n" + "".join(
        f"2024/05/01 23:59:{second:02d}.000, {gpu}, {100 + second} W\n" for second in range(50, 60) for gpu in (0, 1))
        + "2024/05/02 00:00:00.000, 0, 1 W\n2024/05/02 00:00:00.000, 1, 2 W\n")
    out = tmp_path / "out"
    assert modules_loaded_by(["import", str(log), "--out", str(out), "--host", "n"], ("numpy.ma", "pandas"),
                             node_python) == []
    assert sorted(p.parent.name for p in (out / "telemetry").rglob("*.parquet")) == ["date=2024-05-01", "date=2024-05-02"]
