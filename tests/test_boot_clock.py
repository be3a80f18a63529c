"""rocprofv3 traces (boot-clock times) placed on the epoch where a boot of
their host fits: this machine's current boot, or one its collector
recorded in the dataset; and left on the boot clock, saying why, where
none or more than one fits.

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

from gpulens.analysis import power
from gpulens.analysis.dataset import open_dataset
from gpulens.collector import boot_clock
from gpulens.collector.boot_clock import BootClock
from gpulens.collector.daemon import CollectOptions, Collector
from gpulens.collector.ingest import rocpd, rocprof
from gpulens.collector.ingest.batch import ingest_paths
from gpulens.collector.sim import SimBackend
from gpulens.collector.writer import DatasetWriter
from conftest import update_sqlite, write_telemetry
from test_ingest_rocpd import write_rocpd
from test_ingest_rocprof import _process

HOST = "mi250-node-07"
BOOTED_AT_NS = 1_767_225_600_000_000_000  # 2026-01-01 00:00:00 UTC
UPTIME_NS = 2 * 3600 * 10**9
TRACE_AT_NS = 90 * 60 * 10**9  # the events' boot time: 5,400 s after boot
LAST_EVENT_NS = TRACE_AT_NS + 5000  # the latest end in the database (the ProfilerStep range)
S = 10**9
KEPT = "ts on the boot clock (CLOCK_BOOTTIME): "


def _machine(monkeypatch: pytest.MonkeyPatch, hostname: str = HOST, uptime_ns: int = UPTIME_NS,
             origin_ns: int = BOOTED_AT_NS, boot_id: str | None = "boot-now") -> BootClock:
    clock = BootClock(hostname=hostname, uptime_ns=uptime_ns, origin_ns=origin_ns, boot_id=boot_id)
    monkeypatch.setattr(BootClock, "now", classmethod(lambda cls: clock))
    return clock


@pytest.fixture(autouse=True)
def this_machine(monkeypatch: pytest.MonkeyPatch) -> BootClock:
    return _machine(monkeypatch)


def _database(folder: Path, written_after_last_event_ns: int = 30 * S, boot_ns: int = TRACE_AT_NS,
              booted_at_ns: int = BOOTED_AT_NS, name: str = "4242_results.db") -> Path:
    """The database, its file written `written_after_last_event_ns` after its
    last event as it happened (in the boot that began at `booted_at_ns`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write_rocpd(folder / name, boot_ns=boot_ns)
    written = booted_at_ns + boot_ns + 5000 + written_after_last_event_ns
    os.utime(path, ns=(written, written))
    return path


def _placed(path: Path, dataset: Path | None = None):
    parsed = rocpd.parse(path, "job")
    boot_clock.place(parsed, dataset)
    return parsed


def _run_row(parsed) -> dict:
    return parsed.tables["runs"].to_pylist()[0]


def _outcome(parsed) -> tuple[str, int | None, str]:
    run = _run_row(parsed)
    return run["time_base"], run["epoch_offset_ns"], json.loads(run["metadata_json"])["time_note"]


def _record_boots(dataset: Path, host: str, *boots: tuple[int, str]) -> None:
    """Boot records as the collector on `host` writes them: (origin, boot id),
    each recorded a minute after its boot began."""
    writer = DatasetWriter(dataset, host)
    for origin_ns, boot_id in boots:
        writer.add_event(origin_ns + 60 * S, "boot_clock", f"boot_id={boot_id}", value=origin_ns)
    writer.flush()


# --- this machine, this boot -----------------------------------------------------


def test_a_trace_of_this_host_and_boot_is_placed_on_the_epoch(tmp_path: Path) -> None:
    parsed = _placed(_database(tmp_path))
    kernels = parsed.tables["kernels"].to_pylist()
    # The earliest GPU activity, the host-to-device copy, ran from boot time 5,400 s + 1,700 ns for 200 ns.
    assert (kernels[0]["kind"], kernels[0]["start_ns"], kernels[0]["dur_ns"]) == ("memcpy", BOOTED_AT_NS + TRACE_AT_NS + 1700, 200)
    assert _outcome(parsed) == (
        "epoch", BOOTED_AT_NS, "ts on the boot clock, placed on the epoch at ingest: recorded on this host in this boot")


def test_every_instant_moves_by_the_same_offset(tmp_path: Path) -> None:
    placed = _placed(_database(tmp_path)).tables
    kept = rocpd.parse(_database(tmp_path / "kept"), "job").tables  # never placed
    for table in ("kernels", "api_calls", "annotations"):
        for column in ("start_ns", "end_ns"):
            moved = [a - b for a, b in zip(placed[table][column].to_pylist(), kept[table][column].to_pylist())]
            assert set(moved) == {BOOTED_AT_NS}, (table, column)


def test_a_parsed_trace_is_on_the_boot_clock_until_placed(tmp_path: Path) -> None:
    run = _run_row(rocpd.parse(_database(tmp_path), "job"))
    assert (run["time_base"], run["epoch_offset_ns"], "time_note" in json.loads(run["metadata_json"])) == ("trace", None, False)


def test_host_names_match_whatever_their_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname=HOST.upper())
    assert _outcome(_placed(_database(tmp_path)))[0] == "epoch"


def test_file_time_granularity_is_allowed_for(tmp_path: Path) -> None:
    assert _outcome(_placed(_database(tmp_path, written_after_last_event_ns=-1 * S)))[0] == "epoch"


# --- this machine: what keeps the boot clock -------------------------------------


def test_a_trace_of_another_host_without_its_collectors_records_keeps_its_boot_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="mi250-node-08")
    parsed = _placed(_database(tmp_path))
    assert parsed.tables["kernels"]["start_ns"][0].as_py() == TRACE_AT_NS + 1700
    assert _outcome(parsed) == ("trace", None, KEPT + "recorded on mi250-node-07, ingested on mi250-node-08, "
                                                      "and the dataset holds no boot record of mi250-node-07's collector")


def test_a_trace_past_this_boots_uptime_is_from_an_earlier_boot(tmp_path: Path) -> None:
    assert _outcome(_placed(_database(tmp_path, boot_ns=UPTIME_NS + 60 * S))) == (
        "trace", None, KEPT + "its last event is past this boot's uptime, so it was recorded in an earlier boot, "
                              "and no collector record of that boot is in the dataset")


def test_a_file_written_before_its_events_would_have_run_in_this_boot_is_from_an_earlier_one(tmp_path: Path) -> None:
    # An earlier boot's file was written before this boot began.
    path = _database(tmp_path, written_after_last_event_ns=-(TRACE_AT_NS + 60 * S))
    assert _outcome(_placed(path)) == (
        "trace", None, KEPT + "the file was written before its last event would have happened in this boot, "
                              "so it was recorded in an earlier boot")


def test_a_file_written_more_than_an_hour_after_its_events_cannot_be_placed(tmp_path: Path) -> None:
    assert _outcome(_placed(_database(tmp_path, written_after_last_event_ns=3601 * S))) == (
        "trace", None, KEPT + "the file was written more than an hour after its last event in this boot "
                              "(copied, or an earlier boot's), so the boot cannot be told")


def test_a_database_without_a_host_name_keeps_its_boot_clock(tmp_path: Path) -> None:
    path = _database(tmp_path)
    update_sqlite(path, 'update "rocpd_info_node_00015a3c9f2e4b7d" set hostname = null')
    os.utime(path, ns=(BOOTED_AT_NS + LAST_EVENT_NS + 30 * S,) * 2)
    assert _outcome(_placed(path)) == ("trace", None, KEPT + "rocpd_info_node names no host")


# --- boots the collector recorded ------------------------------------------------


def test_a_trace_of_another_host_is_placed_by_its_collectors_boot_record(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Ingested on a login node, into the dataset the node's collector writes.
    _machine(monkeypatch, hostname="login-01", origin_ns=BOOTED_AT_NS - 86400 * S, uptime_ns=30 * 86400 * S)
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"))
    assert _outcome(_placed(_database(tmp_path), tmp_path / "data")) == (
        "epoch", BOOTED_AT_NS,
        "ts on the boot clock, placed on the epoch at ingest: the boot mi250-node-07's collector recorded "
        "(booted 2026-01-01 00:00:00 UTC)")


def test_of_two_recorded_boots_the_one_the_file_time_fits_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    later_boot_ns = BOOTED_AT_NS + 3 * 86400 * S
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"), (later_boot_ns, "b-2"))
    path = _database(tmp_path, booted_at_ns=later_boot_ns)  # recorded in the later boot
    assert _outcome(_placed(path, tmp_path / "data"))[:2] == ("epoch", later_boot_ns)


def test_an_earlier_boot_of_this_machine_is_placed_by_its_record(tmp_path: Path) -> None:
    # This boot is 2 h old; the trace ran 20 h into the boot before it.
    earlier_ns = BOOTED_AT_NS - 86400 * S
    _record_boots(tmp_path / "data", HOST, (earlier_ns, "b-0"), (BOOTED_AT_NS, "boot-now"))
    path = _database(tmp_path, boot_ns=20 * 3600 * S, booted_at_ns=earlier_ns)
    assert _outcome(_placed(path, tmp_path / "data"))[:2] == ("epoch", earlier_ns)


def test_a_recorded_boot_that_ended_before_the_trace_would_is_not_a_candidate(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The trace's last event is 90 min in; the first boot lasted 30 min before the second began.
    _machine(monkeypatch, hostname="login-01")
    second_ns = BOOTED_AT_NS + 30 * 60 * S
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"), (second_ns, "b-2"))
    path = _database(tmp_path)  # its file time fits the first boot only
    assert _outcome(_placed(path, tmp_path / "data")) == (
        "trace", None, KEPT + "the file was written before its last event would have happened in the boot "
                              "booted 2026-01-01 00:30:00 UTC, so it was recorded in an earlier boot")


def test_repeated_records_of_one_boot_are_one_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    # A collector restart in the same boot records it again, a few µs off, after the trace.
    writer = DatasetWriter(tmp_path / "data", HOST)
    writer.add_event(BOOTED_AT_NS + 60 * S, "boot_clock", "boot_id=b-1", value=BOOTED_AT_NS)
    writer.add_event(BOOTED_AT_NS + 7000 * S, "boot_clock", "boot_id=b-1", value=BOOTED_AT_NS + 3000)
    writer.flush()
    assert boot_clock.recorded_boots(tmp_path / "data", HOST) == [boot_clock.RecordedBoot(
        "b-1", ((BOOTED_AT_NS + 60 * S, BOOTED_AT_NS), (BOOTED_AT_NS + 7000 * S, BOOTED_AT_NS + 3000)))]
    assert _outcome(_placed(_database(tmp_path), tmp_path / "data"))[:2] == ("epoch", BOOTED_AT_NS)


def test_a_trace_after_a_clock_step_takes_the_origin_recorded_after_the_step(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    # NTP stepped the clock by 2 s a few minutes after boot, before the trace.
    stepped_ns = BOOTED_AT_NS + 2 * S
    writer = DatasetWriter(tmp_path / "data", HOST)
    writer.add_event(BOOTED_AT_NS + 60 * S, "boot_clock", "boot_id=b-1", value=BOOTED_AT_NS)
    writer.add_event(BOOTED_AT_NS + 300 * S, "boot_clock", "boot_id=b-1", value=stepped_ns)
    writer.flush()
    path = _database(tmp_path, booted_at_ns=stepped_ns)
    assert _outcome(_placed(path, tmp_path / "data"))[:2] == ("epoch", stepped_ns)


def test_a_file_time_that_fits_two_boots_is_ambiguous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trace 10 min into a boot; the first boot lasted 20 min, so its file,
    # written 30 s after the trace in the second boot, is also within an
    # hour of the trace as the first boot would place it.
    _machine(monkeypatch, hostname="login-01")
    second_ns = BOOTED_AT_NS + 20 * 60 * S
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"), (second_ns, "b-2"))
    path = _database(tmp_path, boot_ns=10 * 60 * S, booted_at_ns=second_ns)
    assert _outcome(_placed(path, tmp_path / "data")) == (
        "trace", None, KEPT + "its file's time fits 2 boots of mi250-node-07, so the boot cannot be told")


# --- through ingest, into the dataset ---------------------------------------------


def test_ingest_places_a_trace_by_the_boot_records_in_its_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"))
    report = ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    assert report.failures == []
    runs = open_dataset(tmp_path / "data").sql("select time_base, epoch_offset_ns from runs").fetchall()
    assert runs == [("epoch", BOOTED_AT_NS)]


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
    rows = open_dataset(tmp_path / "data").sql("select run, time_base, time_note from dash_runs order by run").fetchall()
    assert rows == [
        ("kept", "trace", KEPT + "the file was written more than an hour after its last event in this boot "
                                 "(copied, or an earlier boot's), so the boot cannot be told"),
        ("placed", "epoch", "ts on the boot clock, placed on the epoch at ingest: recorded on this host in this boot"),
    ]


# --- the collector's records -------------------------------------------------------


def _collect_with(tmp_path: Path, clocks: list[BootClock]) -> list[tuple]:
    """Collect briefly, flushing every tick, the boot clock read as `clocks`
    say in turn (the last one from then on); the boot_clock events written."""
    readings = iter(clocks)
    last = [clocks[0]]

    def now() -> BootClock:
        last[0] = next(readings, last[0])
        return last[0]

    options = CollectOptions(out=tmp_path, interval_s=0.02, flush_every_s=0.02, slow_every_s=0.1, duration_s=0.3, host=HOST)
    Collector(SimBackend(gpus=1), options, boot_clock_now=now).run()
    con = open_dataset(tmp_path)
    return con.sql("select host, detail, value from events where kind = 'boot_clock' order by ts").fetchall()


def test_the_collector_records_its_boot_once_while_the_clock_holds(tmp_path: Path) -> None:
    drifted = BootClock(HOST, UPTIME_NS, BOOTED_AT_NS + boot_clock.RECORD_DRIFT_NS, "b-1")  # within the drift allowed
    events = _collect_with(tmp_path, [BootClock(HOST, UPTIME_NS, BOOTED_AT_NS, "b-1"), drifted])
    assert events == [(HOST, f"boot_id=b-1 hostname={HOST}", BOOTED_AT_NS)]


def test_the_collector_records_its_boot_again_after_a_clock_step(tmp_path: Path) -> None:
    stepped = BootClock(HOST, UPTIME_NS, BOOTED_AT_NS + 2 * S, "b-1")  # NTP stepped the clock 2 s
    events = _collect_with(tmp_path, [BootClock(HOST, UPTIME_NS, BOOTED_AT_NS, "b-1"), stepped])
    assert events == [(HOST, f"boot_id=b-1 hostname={HOST}", BOOTED_AT_NS),
                      (HOST, f"boot_id=b-1 hostname={HOST}", BOOTED_AT_NS + 2 * S)]


def test_this_machines_boot_clock_reads_the_epoch_at_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real clock
    clock = BootClock.now()
    assert clock.hostname == socket.gethostname()
    assert abs(clock.origin_ns + clock.uptime_ns - time.time_ns()) < 10 * S
    assert clock.uptime_ns == pytest.approx(time.clock_gettime_ns(time.CLOCK_BOOTTIME), abs=10 * S)


def test_instants_are_moved_and_durations_are_not() -> None:
    tables = {"collectives": pa.table({"start_ns": [10], "end_ns": [20], "cpu_start_ns": [5],
                                       "cpu_end_ns": pa.array([None], pa.int64()), "dur_ns": [10]})}
    moved = boot_clock.shifted(tables, 1000)["collectives"].to_pylist()
    assert moved == [{"start_ns": 1010, "end_ns": 1020, "cpu_start_ns": 1005, "cpu_end_ns": None, "dur_ns": 10}]


# --- rocprofv3 CSV files: no host inside, but rocprofv3's %hostname% folder ------
# Their events are 1,552,000 s (18 days) after boot; this machine is up for 20.


@pytest.fixture
def up_for_20_days(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, uptime_ns=20 * 86400 * S)


def _csv_process(folder: Path, written_after_last_event_ns: int = 30 * S) -> list[Path]:
    files = _process(folder, "kernel_trace", "hip_api_trace")
    last_ns = boot_clock.last_time_ns(rocprof.parse_process(files, "probe").tables)
    for path in files:
        os.utime(path, ns=(BOOTED_AT_NS + last_ns + written_after_last_event_ns,) * 2)
    return files


def _csv_placed(files: list[Path]):
    parsed = rocprof.parse_process(files, "r1")
    boot_clock.place(parsed)
    return parsed


def test_csv_files_in_this_machines_folder_are_placed_on_the_epoch(tmp_path: Path, up_for_20_days: None) -> None:
    placed = _csv_placed(_csv_process(tmp_path / HOST))
    kept = rocprof.parse_process(_process(tmp_path / "elsewhere", "kernel_trace", "hip_api_trace"), "r1")
    assert placed.tables["runs"].select(["host", "time_base", "epoch_offset_ns"]).to_pylist() == [
        {"host": HOST, "time_base": "epoch", "epoch_offset_ns": BOOTED_AT_NS}]
    assert [p - k for p, k in zip(placed.tables["kernels"]["start_ns"].to_pylist(),
                                  kept.tables["kernels"]["start_ns"].to_pylist())] == [BOOTED_AT_NS] * kept.tables["kernels"].num_rows


def test_csv_files_of_this_machine_written_long_after_stay_on_the_boot_clock(tmp_path: Path, up_for_20_days: None) -> None:
    placed = _csv_placed(_csv_process(tmp_path / HOST, written_after_last_event_ns=2 * 3600 * S))
    assert placed.tables["runs"].select(["host", "time_base"]).to_pylist() == [{"host": HOST, "time_base": "trace"}]


def test_csv_files_in_a_folder_not_named_for_this_machine_have_no_host(tmp_path: Path, up_for_20_days: None) -> None:
    placed = _csv_placed(_csv_process(tmp_path / "node01"))
    assert _outcome(placed) == ("trace", None, KEPT + "the files name no host, and their folder is not named for this machine")
    assert _run_row(placed)["host"] is None


def test_ingest_warns_where_the_hosts_telemetry_is_there_but_the_trace_stays_on_the_boot_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    write_telemetry(tmp_path / "data", HOST, [{"ts": (BOOTED_AT_NS + TRACE_AT_NS) // 1000, "gpu_index": 0, "power_w": 300.0}])
    report = ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    assert report.results[0].warnings == (
        "no telemetry join: the dataset has mi250-node-07's telemetry, but recorded on mi250-node-07, ingested on "
        "login-01, and the dataset holds no boot record of mi250-node-07's collector; its times stay on the boot clock",)


def test_ingest_says_nothing_of_the_boot_clock_where_the_dataset_has_no_telemetry_to_join(tmp_path: Path,
                                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    report = ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    assert report.results[0].warnings == ()


def test_csv_files_without_a_host_warn_where_the_dataset_has_any_telemetry(tmp_path: Path, up_for_20_days: None) -> None:
    write_telemetry(tmp_path / "data", "node01", [{"ts": BOOTED_AT_NS // 1000, "gpu_index": 0, "power_w": 300.0}])
    report = ingest_paths(_csv_process(tmp_path / "node01"), tmp_path / "data", run="job", jobs=1)
    assert report.results[0].warnings == (
        "no telemetry join: the dataset has telemetry, but the files name no host, and their folder is not named for "
        "this machine; its times stay on the boot clock",)


def test_a_collector_run_as_another_host_name_is_found_by_the_machines_own_name(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # `gpulens collect --host gpu07` on the machine that calls itself mi250-node-07.
    _machine(monkeypatch, hostname="login-01")
    writer = DatasetWriter(tmp_path / "data", "gpu07")
    writer.add_event(BOOTED_AT_NS + 60 * S, "boot_clock", f"boot_id=b-1 hostname={HOST}", value=BOOTED_AT_NS)
    writer.flush()
    assert _outcome(_placed(_database(tmp_path), tmp_path / "data"))[:2] == ("epoch", BOOTED_AT_NS)


def test_csv_files_outside_their_host_folder_are_placed_by_the_host_given(tmp_path: Path, up_for_20_days: None,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Copied off the node into traces/, ingested on a login node with --host.
    _machine(monkeypatch, hostname="login-01", uptime_ns=20 * 86400 * S)
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"))
    files = _csv_process(tmp_path / "traces")
    report = ingest_paths(files, tmp_path / "data", run="job", jobs=1, host=HOST)
    assert report.failures == []
    runs = open_dataset(tmp_path / "data").sql("select host, time_base, epoch_offset_ns from runs").fetchall()
    assert runs == [(HOST, "epoch", BOOTED_AT_NS)]


def test_the_telemetry_join_says_why_a_trace_stayed_on_the_boot_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    write_telemetry(tmp_path / "data", HOST, [{"ts": (BOOTED_AT_NS + TRACE_AT_NS) // 1000, "gpu_index": 0, "power_w": 300.0}])
    ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    matched = power.power_trace_gpus(open_dataset(tmp_path / "data")).row(0, named=True)
    assert matched["unmatched_reason"] == (
        "trace times are not on the epoch (runs.time_base): " + KEPT + "recorded on mi250-node-07, ingested on "
        "login-01, and the dataset holds no boot record of mi250-node-07's collector")


def test_a_machine_without_a_boot_time_clock_places_by_records_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # macOS has no CLOCK_BOOTTIME: a laptop reading a node's traces.
    monkeypatch.undo()
    monkeypatch.delattr(time, "CLOCK_BOOTTIME", raising=False)
    assert (BootClock.now().uptime_ns, BootClock.now().origin_ns) == (None, None)
    monkeypatch.setattr(socket, "gethostname", lambda: HOST)  # even named like the node
    _record_boots(tmp_path / "data", HOST, (BOOTED_AT_NS, "b-1"))
    assert _outcome(_placed(_database(tmp_path), tmp_path / "data"))[:2] == ("epoch", BOOTED_AT_NS)


def test_a_collector_without_a_boot_time_clock_records_no_boot(tmp_path: Path) -> None:
    assert _collect_with(tmp_path, [BootClock(HOST, None, None)]) == []


def test_a_run_left_on_the_boot_clock_beside_telemetry_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, hostname="login-01")
    write_telemetry(tmp_path / "data", HOST, [{"ts": (BOOTED_AT_NS + TRACE_AT_NS) // 1000, "gpu_index": 0, "power_w": 300.0}])
    ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    found = [f for f in power.power_findings(open_dataset(tmp_path / "data")) if f.id == "trace_not_joined"]
    assert [(f.severity, f.subject, f.evidence["ranks"]) for f in found] == [("info", {"run": "job"}, [0])]
    assert found[0].title == ("Run job cannot be joined to the telemetry, so its steps have no energy: trace times are "
                              "not on the epoch (runs.time_base): " + KEPT + "recorded on mi250-node-07, ingested on "
                              "login-01, and the dataset holds no boot record of mi250-node-07's collector")


def test_a_placed_run_is_no_finding(tmp_path: Path) -> None:
    write_telemetry(tmp_path / "data", HOST, [{"ts": (BOOTED_AT_NS + TRACE_AT_NS) // 1000 + s * 1_000_000, "gpu_index": 0,
                                               "power_w": 300.0} for s in (-1, 0, 1)])
    ingest_paths([_database(tmp_path)], tmp_path / "data", run="job", jobs=1)
    assert [f for f in power.power_findings(open_dataset(tmp_path / "data")) if f.id == "trace_not_joined"] == []


def test_the_collectors_trace_watcher_places_a_rocprofv3_database_of_its_node(tmp_path: Path) -> None:
    from gpulens.collector.ingest.watch import TraceWatcher
    from test_watch import FakeClock

    folder = tmp_path / "rocprof"
    path = _database(folder)
    clock = FakeClock()
    watcher = TraceWatcher(folder, tmp_path / "data", run="job", give_up_after_s=60.0, clock=clock)
    reports = [watcher.poll(), watcher.poll()]  # seen, then stable: ingested
    assert reports[0] is None and [Path(r.path) for r in reports[1].results] == [path]
    runs = open_dataset(tmp_path / "data").sql("select time_base, epoch_offset_ns from runs").fetchall()
    assert runs == [("epoch", BOOTED_AT_NS)]


def test_a_node_watcher_gives_its_host_to_rocprofv3_csv_files_that_name_none(tmp_path: Path, up_for_20_days: None) -> None:
    from gpulens.collector.ingest.watch import TraceWatcher
    from test_watch import FakeClock

    # Written into traces/, not rocprofv3's %hostname% folder; the node's collector
    # (its --host the machine's name) watches it.
    files = _csv_process(tmp_path / "traces")
    watcher = TraceWatcher(tmp_path / "traces", tmp_path / "data", run="job", clock=FakeClock(), host=HOST)
    watcher.poll()
    report = watcher.poll()
    assert [Path(r.path).name for r in report.results] == ["4242_*"]
    runs = open_dataset(tmp_path / "data").sql("select host, time_base, epoch_offset_ns from runs").fetchall()
    assert runs == [(HOST, "epoch", BOOTED_AT_NS)]
    assert len(files) == 2
