"""rocprofv3 databases (boot-clock times) placed on the epoch when ingested
on the machine and in the boot that recorded them, and only then.

The machine is fixed here (`BootClock.now` patched): host mi250-node-07,
booted at 2026-01-01 00:00:00 UTC, up for two hours. The database is the
one of test_ingest_rocpd, its events 90 minutes after boot, its file
written 30 s after its last event unless a test says otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collector.ingest import boot_clock, rocpd
from collector.ingest.batch import ingest_paths
from collector.ingest.boot_clock import BootClock
from analysis import power
from analysis.dataset import open_dataset
from conftest import update_sqlite, write_telemetry
from test_ingest_rocpd import write_rocpd
from test_ingest_rocprof import _process

from collector.ingest import rocprof

HOST = "mi250-node-07"
BOOTED_AT_NS = 1_767_225_600_000_000_000  # 2026-01-01 00:00:00 UTC
UPTIME_NS = 2 * 3600 * 10**9
TRACE_AT_NS = 90 * 60 * 10**9  # the events' boot time: 5,400 s after boot
LAST_EVENT_NS = TRACE_AT_NS + 5000  # the latest end in the database (the ProfilerStep range)
S = 10**9


@pytest.fixture(autouse=True)
def this_machine(monkeypatch: pytest.MonkeyPatch) -> BootClock:
    clock = BootClock(hostname=HOST, uptime_ns=UPTIME_NS, origin_ns=BOOTED_AT_NS)
    monkeypatch.setattr(BootClock, "now", classmethod(lambda cls: clock))
    return clock


def _database(tmp_path: Path, written_after_last_event_ns: int = 30 * S, boot_ns: int = TRACE_AT_NS) -> Path:
    path = write_rocpd(tmp_path / "4242_results.db", boot_ns=boot_ns)
    written = BOOTED_AT_NS + boot_ns + 5000 + written_after_last_event_ns
    os.utime(path, ns=(written, written))
    return path


def _run_row(parsed) -> dict:
    return _run_row_of(parsed.tables)


def _run_row_of(tables) -> dict:
    return tables["runs"].to_pylist()[0]


def test_a_trace_of_this_host_and_boot_is_placed_on_the_epoch(tmp_path: Path) -> None:
    parsed = rocpd.parse(_database(tmp_path), "job")
    kernels = parsed.tables["kernels"].to_pylist()
    run = _run_row(parsed)
    # The earliest GPU activity, the host-to-device copy, ran from boot time 5,400 s + 1,700 ns for 200 ns.
    assert (kernels[0]["kind"], kernels[0]["start_ns"], kernels[0]["dur_ns"]) == ("memcpy", BOOTED_AT_NS + TRACE_AT_NS + 1700, 200)
    assert (run["time_base"], run["epoch_offset_ns"]) == ("epoch", BOOTED_AT_NS)


def test_every_instant_moves_by_the_same_offset(tmp_path: Path) -> None:
    placed = rocpd.parse(_database(tmp_path), "job").tables
    # The same database written now, long after its events would have run: kept as it is.
    kept = rocpd.parse(write_rocpd(tmp_path / "kept.db", boot_ns=TRACE_AT_NS), "job").tables
    assert _run_row_of(kept)["time_base"] == "trace"
    for table in ("kernels", "api_calls", "annotations"):
        for column in ("start_ns", "end_ns"):
            moved = [a - b for a, b in zip(placed[table][column].to_pylist(), kept[table][column].to_pylist())]
            assert set(moved) == {BOOTED_AT_NS}, (table, column)


def test_the_run_row_says_how_its_times_were_placed(tmp_path: Path) -> None:
    note = json.loads(_run_row(rocpd.parse(_database(tmp_path), "job"))["metadata_json"])["time_note"]
    assert note == "ts on the boot clock, placed on the epoch at ingest: recorded on this host in this boot"


def _kept(parsed) -> tuple[str, int | None, int, str]:
    run = _run_row(parsed)
    return run["time_base"], run["epoch_offset_ns"], parsed.tables["kernels"]["start_ns"][0].as_py(), \
        json.loads(run["metadata_json"])["time_note"]


def test_a_trace_of_another_host_keeps_its_boot_clock(tmp_path: Path, this_machine: BootClock,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    other = BootClock(hostname="mi250-node-08", uptime_ns=UPTIME_NS, origin_ns=BOOTED_AT_NS)
    monkeypatch.setattr(BootClock, "now", classmethod(lambda cls: other))
    assert _kept(rocpd.parse(_database(tmp_path), "job")) == (
        "trace", None, TRACE_AT_NS + 1700,
        "ts on the boot clock (CLOCK_BOOTTIME): recorded on mi250-node-07, ingested on mi250-node-08")


def test_host_names_match_whatever_their_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upper = BootClock(hostname=HOST.upper(), uptime_ns=UPTIME_NS, origin_ns=BOOTED_AT_NS)
    monkeypatch.setattr(BootClock, "now", classmethod(lambda cls: upper))
    assert _run_row(rocpd.parse(_database(tmp_path), "job"))["time_base"] == "epoch"


def test_a_trace_past_this_boots_uptime_is_from_an_earlier_boot(tmp_path: Path) -> None:
    path = _database(tmp_path, boot_ns=UPTIME_NS + 60 * S)
    assert _kept(rocpd.parse(path, "job"))[::3] == (
        "trace", "ts on the boot clock (CLOCK_BOOTTIME): its last event is past this boot's uptime, "
                 "so it was recorded in an earlier boot")


def test_a_file_written_before_its_events_would_have_run_in_this_boot_is_from_an_earlier_one(tmp_path: Path) -> None:
    # An earlier boot's file was written before this boot began.
    path = _database(tmp_path, written_after_last_event_ns=-(TRACE_AT_NS + 60 * S))
    time_base, offset, start_ns, note = _kept(rocpd.parse(path, "job"))
    assert (time_base, offset, start_ns) == ("trace", None, TRACE_AT_NS + 1700)
    assert note.endswith("the file was written before its last event would have happened in this boot, "
                         "so it was recorded in an earlier boot")


def test_file_time_granularity_is_allowed_for(tmp_path: Path) -> None:
    path = _database(tmp_path, written_after_last_event_ns=-1 * S)
    assert _run_row(rocpd.parse(path, "job"))["time_base"] == "epoch"


def test_a_file_written_more_than_an_hour_after_its_events_cannot_be_placed(tmp_path: Path) -> None:
    path = _database(tmp_path, written_after_last_event_ns=3601 * S)
    time_base, offset, _, note = _kept(rocpd.parse(path, "job"))
    assert (time_base, offset) == ("trace", None)
    assert "more than an hour after its last event" in note


def test_a_database_without_a_host_name_keeps_its_boot_clock(tmp_path: Path) -> None:
    path = _database(tmp_path)
    update_sqlite(path, 'update "rocpd_info_node_00015a3c9f2e4b7d" set hostname = null')
    os.utime(path, ns=(BOOTED_AT_NS + LAST_EVENT_NS + 30 * S,) * 2)
    assert _kept(rocpd.parse(path, "job"))[::3] == ("trace", "ts on the boot clock (CLOCK_BOOTTIME): the trace names no host")


def test_derived_launch_columns_are_the_same_once_placed(tmp_path: Path) -> None:
    placed = ingest_paths([_database(tmp_path)], tmp_path / "placed", run="job", jobs=1)
    kept_path = write_rocpd(tmp_path / "kept.db", boot_ns=TRACE_AT_NS)  # written now: kept on the boot clock
    kept = ingest_paths([kept_path], tmp_path / "kept", run="job", jobs=1)
    assert placed.failures == kept.failures == []

    def launch(root: Path) -> list[tuple]:
        table = pq.read_table(next((root / "traces").glob("run=job/kernels/*.parquet")))
        return list(zip(*(table[c].to_pylist() for c in ("name", "launch_delay_ns", "launch_queue_ns", "launch_call_start_ns"))))

    placed_rows, kept_rows = launch(tmp_path / "placed"), launch(tmp_path / "kept")
    assert [row[:3] for row in placed_rows] == [row[:3] for row in kept_rows]
    assert [p[3] - k[3] for p, k in zip(placed_rows, kept_rows) if p[3] is not None] == [BOOTED_AT_NS] * 3


def test_this_machines_boot_clock_reads_the_epoch_at_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real clock
    clock = BootClock.now()
    assert clock.hostname == socket.gethostname()
    assert abs(clock.origin_ns + clock.uptime_ns - time.time_ns()) < 10 * S
    assert clock.uptime_ns == pytest.approx(time.clock_gettime_ns(time.CLOCK_BOOTTIME), abs=10 * S)


def test_instants_are_moved_and_durations_are_not() -> None:
    tables = {"collectives": pa.table({"start_ns": [10], "end_ns": [20], "cpu_start_ns": [5], "cpu_end_ns": pa.array([None], pa.int64()),
                                       "dur_ns": [10]})}
    moved = boot_clock.shifted(tables, 1000)["collectives"].to_pylist()
    assert moved == [{"start_ns": 1010, "end_ns": 1020, "cpu_start_ns": 1005, "cpu_end_ns": None, "dur_ns": 10}]


def test_a_placed_trace_joins_its_hosts_telemetry(tmp_path: Path) -> None:
    # The collector sampled both GPUs of the node each second around the trace.
    trace_start_us = (BOOTED_AT_NS + TRACE_AT_NS) // 1000
    write_telemetry(tmp_path / "data", HOST, [
        {"ts": trace_start_us + second * 1_000_000, "gpu_index": gpu, "power_w": 300.0}
        for second in (-2, -1, 0, 1, 2) for gpu in (0, 1)
    ])
    report = ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    assert report.failures == []
    matched = power.power_trace_gpus(open_dataset(tmp_path / "data")).row(0, named=True)
    assert (matched["host"], matched["gpu_index"], matched["unmatched_reason"], matched["telemetry_covers"]) == (
        HOST, 0, None, True)


def test_the_overview_lists_how_each_runs_times_were_placed(tmp_path: Path) -> None:
    ingest_paths([_database(tmp_path)], tmp_path / "data", run="placed", jobs=1)
    ingest_paths([write_rocpd(tmp_path / "kept.db", boot_ns=TRACE_AT_NS)], tmp_path / "data", run="kept", jobs=1)
    con = open_dataset(tmp_path / "data")
    rows = con.sql("select run, time_base, time_note from dash_runs order by run").fetchall()
    assert rows == [
        ("kept", "trace", "ts on the boot clock (CLOCK_BOOTTIME): the file was written more than an hour after its "
                          "last event in this boot (copied, or an earlier boot's), so the boot cannot be told"),
        ("placed", "epoch", "ts on the boot clock, placed on the epoch at ingest: recorded on this host in this boot"),
    ]


# --- rocprofv3 CSV files: no host inside, but rocprofv3's %hostname% folder ------
# Their events are 1,552,000 s (18 days) after boot; this machine is up for 20.


@pytest.fixture
def up_for_20_days(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = BootClock(hostname=HOST, uptime_ns=20 * 86400 * S, origin_ns=BOOTED_AT_NS)
    monkeypatch.setattr(BootClock, "now", classmethod(lambda cls: clock))


def _csv_process(folder: Path, written_after_last_event_ns: int = 30 * S) -> list[Path]:
    files = _process(folder, "kernel_trace", "hip_api_trace")
    last_ns = boot_clock.last_time_ns(rocprof.parse_process(files, "probe").tables)
    for path in files:
        os.utime(path, ns=(BOOTED_AT_NS + last_ns + written_after_last_event_ns,) * 2)
    return files


def test_csv_files_in_this_machines_folder_are_placed_on_the_epoch(tmp_path: Path, up_for_20_days: None) -> None:
    files = _csv_process(tmp_path / HOST)
    kept = rocprof.parse_process(_process(tmp_path / "elsewhere", "kernel_trace", "hip_api_trace"), "r1")
    placed = rocprof.parse_process(files, "r1")
    assert placed.tables["runs"].select(["host", "time_base", "epoch_offset_ns"]).to_pylist() == [
        {"host": HOST, "time_base": "epoch", "epoch_offset_ns": BOOTED_AT_NS}]
    assert [p - k for p, k in zip(placed.tables["kernels"]["start_ns"].to_pylist(),
                                  kept.tables["kernels"]["start_ns"].to_pylist())] == [BOOTED_AT_NS] * kept.tables["kernels"].num_rows


def test_csv_files_of_this_machine_written_long_after_stay_on_the_boot_clock(tmp_path: Path, up_for_20_days: None) -> None:
    placed = rocprof.parse_process(_csv_process(tmp_path / HOST, written_after_last_event_ns=2 * 3600 * S), "r1")
    assert placed.tables["runs"].select(["host", "time_base"]).to_pylist() == [{"host": HOST, "time_base": "trace"}]
