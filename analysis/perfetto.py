"""One run's kernels, CPU threads, collectives and its GPUs' telemetry on one
timeline: a Chrome trace-event file that ui.perfetto.dev and
chrome://tracing open (`gpulens export perfetto`).

Layout, per exported rank (one process, named with its host and GPU):
- a track "profiler steps" with each `ProfilerStep#N` as a slice;
- one track per CPU thread with its operators (`cpu_op`) and runtime calls
  (`cuda_runtime`: CUDA or HIP);
- one track per GPU stream with its kernels, memcpys and memsets (`kernel`,
  `gpu_memcpy`, `gpu_memset`; args: device, stream, correlation, the gpulens
  category, launch_delay_ns); a flow (`ac2g`) from each launch call to
  its kernel, as PyTorch's profiler draws them;
- a track "collectives": each collective with op, bytes, process group,
  sequence number;
- counters from the telemetry of the GPU the rank ran on, on the same
  clock: power (average and instant), power limit, SM clock, SM activity,
  GPU utilisation, temperature, NVLink/XGMI and PCIe TX/RX, and throttling
  as a 0/1 counter (any limiting reason, and each reason seen);
- instants: the collector's events on that GPU (throttle start and stop,
  XID) and the findings about the rank or its GPU, at the moment they
  concern, with their sentence in args.

Events are the Kineto (PyTorch profiler) kinds and keys, so gpulens' own
Kineto ingest reads the file back: `ts` is microseconds (three decimals:
nanoseconds) from `baseTimeNanoseconds`, a whole second at or before the
first event. The file's `otherData` says what was exported, how each rank's
GPU was matched to telemetry, and whether `max_events` cut the file.

Everything is read through DuckDB views of the dataset (SQL in
`analysis/perfetto_sql/`) and written as it is read, a record batch at a
time (`analysis.trace_events`): memory does not grow with the kernels.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter as _Tally
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from gpulens.analysis.dataset import stream_sql
from gpulens.analysis.tables import quote_identifier
from gpulens.analysis.findings import Finding
from gpulens.analysis.registry import create_views_named_in
from gpulens.analysis.trace_events import TraceEventWriter
from gpulens.collector.errors import DatasetError, UsageError
from gpulens.collector.throttle import LIMITING_REASONS

SQL_DIR = Path(__file__).resolve().parent / "perfetto_sql"
GENERATOR = "gpulens export perfetto"
# Thread ids of the tracks that are not CPU threads: GPU streams count up
# from STREAM_TID_BASE (a stream's own id may be a 64-bit handle, and Chrome
# trace tids are 32-bit); the steps track sits just below, and one track
# per process group counts down from COLLECTIVES_TID (collectives of two
# groups may overlap, and slices of one track must nest).
STREAM_TID_BASE = 1 << 30
STEPS_TID = STREAM_TID_BASE - 1
COLLECTIVES_TID = STREAM_TID_BASE - 2
# How a rank's GPU was found, where power_trace_gpus does not say: its
# kernels' device index, taken as the telemetry gpu_index.
INDEX_ASSUMED = "index_assumed"
# Kineto's category of each kernels.kind.
_GPU_CATEGORIES = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
_SECOND_NS = 1_000_000_000
# Rows read from DuckDB at a time.
BATCH_ROWS = 16_384


@dataclass(frozen=True)
class Counter:
    """One counter track: `label` after "GPU N ", from telemetry `column`."""

    label: str
    column: str


COUNTERS: tuple[Counter, ...] = (
    Counter("power avg", "power_w"),
    Counter("power instant", "power_instant_w"),
    Counter("power limit", "power_limit_w"),
    Counter("SM clock", "sm_clock_mhz"),
    Counter("SM activity", "sm_active_pct"),
    Counter("GPU utilisation", "gpu_util_pct"),
    Counter("temperature", "temp_c"),
    Counter("{link} TX", "link_tx_bytes_per_s"),
    Counter("{link} RX", "link_rx_bytes_per_s"),
    Counter("PCIe TX", "pcie_tx_bytes_per_s"),
    Counter("PCIe RX", "pcie_rx_bytes_per_s"),
)
THROTTLED_COUNTER = "throttled"


@dataclass
class RankWindow:
    rank: int
    host: str | None
    os_pid: int | None
    device_name: str | None
    world_size: int | None
    window_start_ns: int
    window_end_ns: int
    step_count: int
    gpu_index: int | None = None
    matched_by: str | None = None
    unmatched_reason: str | None = None

    @property
    def pid(self) -> int:
        """The process id of the rank's process in the file (0 is the idle
        process in Perfetto's model)."""
        return self.rank + 1

    def gpu_matching(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "gpu_index": self.gpu_index, "matched_by": self.matched_by,
                "unmatched_reason": self.unmatched_reason}


@dataclass
class ExportSummary:
    path: Path
    events: int
    ranks: list[int]
    # Where max_events cut the file: the start of the first event left out
    # of the time-ordered kernels, runtime calls and CPU ops (epoch ns);
    # None where nothing was left out.
    cut: bool = False
    cut_at_ns: int | None = None
    gpu_matching: list[dict[str, Any]] = field(default_factory=list)


@functools.cache
def _sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")


def export_perfetto(
    con: duckdb.DuckDBPyConnection,
    run: str,
    path: str | Path,
    ranks: list[int] | None = None,
    steps: tuple[int, int] | None = None,
    max_events: int | None = None,
    findings: list[Finding] | None = None,
) -> ExportSummary:
    """Write `run` (its `ranks`, None: all; within profiler `steps` first to
    last, None: all of it) to `path` as trace events; see the module
    docstring. `findings` (None: none) are placed on the ranks and GPUs they
    are about. Raises DatasetError for a run or ranks the dataset lacks,
    UsageError for steps no rank has."""
    windows = rank_windows(con, run, ranks, steps)
    base_ns = _time_origin(con, windows)
    header: dict[str, Any] = {"baseTimeNanoseconds": base_ns, "displayTimeUnit": "ns"}
    if len(windows) == 1:
        header["distributedInfo"] = {"rank": windows[0].rank, "world_size": windows[0].world_size}
    writer = TraceEventWriter(path, header, max_events)
    try:
        cut_at_ns = _write_events(con, writer, windows, base_ns, findings or [])
        writer.close({"otherData": {
            "generator": GENERATOR,
            "run": run,
            "ranks": [w.rank for w in windows],
            "steps": list(steps) if steps else None,
            "time_origin_ns": base_ns,
            "gpu_matching": [w.gpu_matching() for w in windows],
            "max_events": max_events,
            "cut": writer.cut,
            "cut_at_ns": cut_at_ns,
        }})
    except BaseException:
        writer.discard()
        raise
    return ExportSummary(Path(path), writer.events, [w.rank for w in windows], writer.cut, cut_at_ns,
                         [w.gpu_matching() for w in windows])


def rank_windows(
    con: duckdb.DuckDBPyConnection, run: str, ranks: list[int] | None, steps: tuple[int, int] | None,
) -> list[RankWindow]:
    """The ranks to export, each with its window and its GPU, registered
    on `con` as the table `export_windows` that the export's SQL reads."""
    _set(con, "export_run", run)
    con.execute("set variable export_ranks = " + ("null" if ranks is None else f"{[int(r) for r in ranks]}::integer[]"))
    _set(con, "export_first_step", steps[0] if steps else None)
    _set(con, "export_last_step", steps[1] if steps else None)
    rows = _rows(con, _sql("ranks"))
    if not rows:
        known = [row[0] for row in con.execute("select distinct run from runs order by run").fetchall()]
        if run not in known:
            raise DatasetError(f"no run {run!r} in the dataset (runs: {', '.join(known) or 'none'})")
        raise DatasetError(f"run {run!r} has no rank {', '.join(map(str, ranks or []))}")
    if ranks is not None:
        missing = sorted(set(ranks) - {row["rank"] for row in rows})
        if missing:
            raise DatasetError(f"run {run!r} has no rank {', '.join(map(str, missing))}")
    windows = [RankWindow(**row) for row in rows if row["window_start_ns"] is not None]
    if not windows:
        if steps:
            raise UsageError(f"run {run!r}: no rank has profiler steps {steps[0]}-{steps[1]}")
        raise DatasetError(f"run {run!r}: the ranks have no trace events")
    _match_gpus(con, run, windows)
    table = pa.table({
        "rank": pa.array([w.rank for w in windows], pa.int32()),
        "host": pa.array([w.host for w in windows], pa.string()),
        # Counters only for a rank joined to its GPU's telemetry: a trace off
        # the epoch, or outside the telemetry, would take samples of another time.
        "gpu_index": pa.array([w.gpu_index if w.unmatched_reason is None else None for w in windows], pa.int32()),
        "window_start_ns": pa.array([w.window_start_ns for w in windows], pa.int64()),
        "window_end_ns": pa.array([w.window_end_ns for w in windows], pa.int64()),
    })
    con.register("export_windows", table)
    return windows


def _match_gpus(con: duckdb.DuckDBPyConnection, run: str, windows: list[RankWindow]) -> None:
    """Each rank's host and GPU from power_trace_gpus, with how the GPU was
    matched: its `matched_by` column where the view has one, else
    INDEX_ASSUMED (the kernels' device index taken as the GPU's)."""
    create_views_named_in(con, "power_trace_gpus")
    columns = con.sql("select * from power_trace_gpus limit 0").columns
    matched_by = "matched_by" if "matched_by" in columns else "null::varchar as matched_by"
    found = {row["rank"]: row for row in _rows(con, (
        f"select rank, host, gpu_index, unmatched_reason, {matched_by} from power_trace_gpus "
        f"where run = getvariable('export_run')"))}
    for window in windows:
        row = found.get(window.rank)
        if row is None:
            continue
        window.host = row["host"]
        window.gpu_index = row["gpu_index"]
        window.unmatched_reason = row["unmatched_reason"]
        if row["gpu_index"] is not None:
            window.matched_by = row["matched_by"] or INDEX_ASSUMED


def _time_origin(con: duckdb.DuckDBPyConnection, windows: list[RankWindow]) -> int:
    """The whole second at or before the first event the file holds."""
    first = min(w.window_start_ns for w in windows)
    # The sample at or before each window's start (telemetry.sql) may come
    # first: of those, the earliest.
    sample = con.execute(
        "select min(last_ns) from (select w.rank, max(epoch_ns(t.ts)) as last_ns from telemetry as t "
        "join export_windows as w on t.host = w.host and t.gpu_index = w.gpu_index "
        "and epoch_ns(t.ts) <= w.window_start_ns group by w.rank)"
    ).fetchall()[0][0]
    earliest = min(first, sample) if sample is not None else first
    return earliest - earliest % _SECOND_NS


def _write_events(con: duckdb.DuckDBPyConnection, writer: TraceEventWriter, windows: list[RankWindow], base_ns: int,
                  findings: list[Finding]) -> int | None:
    """Every event, small tracks first, then the time-ordered bulk; the
    start (epoch ns) of the first bulk event max_events left out, if any."""
    by_rank = {w.rank: w for w in windows}
    tracks = _rows(con, _sql("tracks"))
    stream_tids = _stream_tids(tracks)
    group_tids = _group_tids(con)
    small = _chain(
        _metadata_events(windows, tracks, stream_tids, group_tids),
        _counter_events(con, by_rank, base_ns),
        _gpu_event_instants(con, by_rank, base_ns),
        _step_events(con, by_rank, base_ns),
        _collective_events(con, by_rank, group_tids, base_ns),
        _finding_events(con, windows, findings, base_ns),
    )
    # Closed when cut short: a result read halfway keeps DuckDB's connection busy.
    with contextlib.closing(small):
        for event in small:
            if not writer.add(event):
                return None
    flow_ids = iter(range(1, 1 << 62))
    with contextlib.closing(_batch_rows(con, _sql("activities"))) as rows:
        for row in rows:
            for event in _activity_events(row, by_rank[row["rank"]].pid, stream_tids, base_ns, flow_ids):
                if not writer.add(event):
                    return row["start_ns"]
    return None


def _chain(*parts: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    try:
        for part in parts:
            yield from part
    finally:
        for part in parts:
            close = getattr(part, "close", None)
            if close is not None:
                close()


def _ts(ns: int, base_ns: int) -> float:
    """Trace-event time: µs from the origin; exact to the ns (ns / 1000 reads back as the same ns)."""
    return (ns - base_ns) / 1000


# --- tracks and their names ---------------------------------------------------------


def _stream_tids(tracks: list[dict[str, Any]]) -> dict[tuple[int, int | None, int | None], int]:
    """(rank, device, stream) → the tid of its track (tracks.sql's rows)."""
    tids: dict[tuple[int, int | None, int | None], int] = {}
    per_rank: _Tally[int] = _Tally()
    for row in tracks:
        if row["kind"] == "stream":
            tids[(row["rank"], row["device"], row["stream"])] = STREAM_TID_BASE + per_rank[row["rank"]]
            per_rank[row["rank"]] += 1
    return tids


def _metadata_events(windows: list[RankWindow], tracks: list[dict[str, Any]],
                     streams: dict[tuple[int, int | None, int | None], int],
                     groups: dict[tuple[int, tuple[str | None, str | None]], int]) -> Iterator[dict[str, Any]]:
    for window in windows:
        pid = window.pid
        gpu = f"GPU {window.gpu_index}" if window.gpu_index is not None else "GPU unknown"
        name = f"rank {window.rank} · {window.host or 'unknown host'} {gpu}"
        yield _meta("process_name", pid, 0, {"name": name})
        yield _meta("process_sort_index", pid, 0, {"sort_index": window.rank})
        labels = [f"pid {window.os_pid}"] if window.os_pid is not None else []
        labels += [window.device_name] if window.device_name else []
        if labels:
            yield _meta("process_labels", pid, 0, {"labels": ", ".join(labels)})
        yield _meta("thread_name", pid, STEPS_TID, {"name": "profiler steps"})
        yield _meta("thread_sort_index", pid, STEPS_TID, {"sort_index": 0})
        order = 1
        for track in tracks:
            if track["rank"] != window.rank:
                continue
            if track["kind"] == "thread":
                yield _meta("thread_name", pid, track["tid"], {"name": f"CPU thread {track['tid']}"})
                yield _meta("thread_sort_index", pid, track["tid"], {"sort_index": order})
            else:
                tid = streams[(window.rank, track["device"], track["stream"])]
                yield _meta("thread_name", pid, tid, {"name": f"stream {track['stream']} · GPU {track['device']}"})
                yield _meta("thread_sort_index", pid, tid, {"sort_index": order + 1_000})
            order += 1
        for (rank, group), tid in groups.items():
            if rank == window.rank:
                name = f"collectives · group {group[0]}" + (f" ({group[1]})" if group[1] else "")
                yield _meta("thread_name", pid, tid, {"name": name})
                yield _meta("thread_sort_index", pid, tid, {"sort_index": 1_000_000 + COLLECTIVES_TID - tid})


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


# --- telemetry ------------------------------------------------------------------------


def _counter_events(con: duckdb.DuckDBPyConnection, by_rank: dict[int, RankWindow], base_ns: int) -> Iterator[dict[str, Any]]:
    """Per telemetry sample, one counter event per metric the GPU reports
    (a NULL metric is not supported: no event), and the throttle counters."""
    reasons_seen: dict[int, list[str]] = {}
    for row in _rows(con, _sql("telemetry")):
        reasons = sorted(set(row["throttle_reasons"] or ()))
        seen = reasons_seen.setdefault(row["rank"], [])
        seen.extend(reason for reason in reasons if reason not in seen)
    for batch in _batches(con, _sql("telemetry")):
        for row in batch.to_pylist():
            window = by_rank[row["rank"]]
            gpu = f"GPU {window.gpu_index}"
            ts = _ts(row["ts_ns"], base_ns)
            link = "XGMI" if row["vendor"] == "amd" else "NVLink"
            for counter in COUNTERS:
                value = row[counter.column]
                if value is not None:
                    yield {"ph": "C", "name": f"{gpu} {counter.label.format(link=link)}", "pid": window.pid, "ts": ts,
                           "args": {counter.column: value}}
            if row["throttle_reasons"] is None:
                continue
            reasons = set(row["throttle_reasons"])
            yield {"ph": "C", "name": f"{gpu} {THROTTLED_COUNTER}", "pid": window.pid, "ts": ts,
                   "args": {THROTTLED_COUNTER: int(bool(reasons & LIMITING_REASONS))}}
            seen = reasons_seen[row["rank"]]
            if seen:
                yield {"ph": "C", "name": f"{gpu} throttle reasons", "pid": window.pid, "ts": ts,
                       "args": {reason: int(reason in reasons) for reason in seen}}


def _gpu_event_instants(con: duckdb.DuckDBPyConnection, by_rank: dict[int, RankWindow], base_ns: int) -> Iterator[dict[str, Any]]:
    for row in _rows(con, _sql("gpu_events")):
        window = by_rank[row["rank"]]
        yield {"ph": "i", "s": "p", "cat": "gpu_event", "name": row["kind"], "pid": window.pid, "tid": 0,
               "ts": _ts(row["ts_ns"], base_ns),
               "args": {"gpu_index": window.gpu_index, "detail": row["detail"], "value": row["value"]}}


# --- steps, collectives, findings ---------------------------------------------------


def _step_events(con: duckdb.DuckDBPyConnection, by_rank: dict[int, RankWindow], base_ns: int) -> Iterator[dict[str, Any]]:
    for row in _rows(con, _sql("steps")):
        yield {"ph": "X", "cat": "user_annotation", "name": row["name"], "pid": by_rank[row["rank"]].pid,
               "tid": STEPS_TID, "ts": _ts(row["start_ns"], base_ns), "dur": row["dur_ns"] / 1000,
               "args": {"step": row["step"]}}


def _group_tids(con: duckdb.DuckDBPyConnection) -> dict[tuple[int, tuple[str | None, str | None]], int]:
    """(rank, (process group, its description)) → the tid of its collectives track."""
    rows = _rows(con, f"select distinct rank, process_group, process_group_desc from ({_sql('collectives')}) "
                      "order by rank, process_group, process_group_desc")
    tids: dict[tuple[int, tuple[str | None, str | None]], int] = {}
    per_rank: _Tally[int] = _Tally()
    for row in rows:
        tids[(row["rank"], (row["process_group"], row["process_group_desc"]))] = COLLECTIVES_TID - per_rank[row["rank"]]
        per_rank[row["rank"]] += 1
    return tids


def _collective_events(con: duckdb.DuckDBPyConnection, by_rank: dict[int, RankWindow],
                       groups: dict[tuple[int, tuple[str | None, str | None]], int], base_ns: int) -> Iterator[dict[str, Any]]:
    for row in _batch_rows(con, _sql("collectives")):
        tid = groups[(row["rank"], (row["process_group"], row["process_group_desc"]))]
        args = {key: row[key] for key in ("op", "bytes", "process_group", "process_group_desc", "seq", "group_size",
                                          "dtype", "kernel_name", "correlation_id") if row[key] is not None}
        yield {"ph": "X", "cat": "collective", "name": row["op"] or "collective", "pid": by_rank[row["rank"]].pid,
               "tid": tid, "ts": _ts(row["start_ns"], base_ns), "dur": row["dur_ns"] / 1000, "args": args}


def _finding_events(con: duckdb.DuckDBPyConnection, windows: list[RankWindow], findings: list[Finding],
                    base_ns: int) -> Iterator[dict[str, Any]]:
    """Each finding about an exported rank, or the GPU one ran on, as an
    instant on that rank's process: a rank's at its latest late arrival
    at a collective where it has one (a straggler), a GPU's at its first
    throttle start in the window where it has one, else at the window's
    start. A finding about the run as a whole: a global instant at the
    first window's start. Others (other runs, ranks, GPUs) are left out."""
    if not findings:
        return
    run = con.execute("select getvariable('export_run')").fetchall()[0][0]
    late = {}
    if any(f.id == "straggler_rank" for f in findings):
        create_views_named_in(con, _sql("late_arrivals"))
        late = {row["rank"]: row["start_ns"] for row in _rows(con, _sql("late_arrivals"))}
    throttle_starts: dict[int, int] = {}
    for row in _rows(con, _sql("gpu_events")):
        if row["kind"] == "throttle_start":
            throttle_starts.setdefault(row["rank"], row["ts_ns"])
    for finding in findings:
        subject = finding.subject
        args = {"id": finding.id, "severity": finding.severity, "title": finding.title, "detail": finding.detail}
        if "rank" in subject and subject.get("run") == run:
            places = [(w, late.get(w.rank, w.window_start_ns)) for w in windows if w.rank == subject["rank"]]
        elif "gpu_index" in subject and "host" in subject:
            places = [(w, throttle_starts.get(w.rank, w.window_start_ns)) for w in windows
                      if w.host == subject["host"] and w.gpu_index == subject["gpu_index"]]
        elif subject.get("run") == run and set(subject) == {"run"}:
            start = min(w.window_start_ns for w in windows)
            yield {"ph": "i", "s": "g", "cat": "finding", "name": finding.title, "pid": 0, "tid": 0,
                   "ts": _ts(start, base_ns), "args": args}
            continue
        else:
            continue
        for window, at_ns in places:
            yield {"ph": "i", "s": "p", "cat": "finding", "name": finding.title, "pid": window.pid, "tid": 0,
                   "ts": _ts(at_ns, base_ns), "args": args}


# --- kernels, runtime calls, CPU ops --------------------------------------------------


def _activity_events(row: dict[str, Any], pid: int, tracks: dict[tuple[int, int | None, int | None], int], base_ns: int,
                     flow_ids: Iterator[int]) -> Iterator[dict[str, Any]]:
    ts = _ts(row["start_ns"], base_ns)
    dur = row["dur_ns"] / 1000
    source = row["source"]
    if source == "cpu_op":
        args = {"External id": row["external_id"]} if row["external_id"] is not None else {}
        yield {"ph": "X", "cat": "cpu_op", "name": row["name"], "pid": pid, "tid": row["tid"], "ts": ts, "dur": dur,
               "args": args}
        return
    if source == "api_call":
        args = _present({"correlation": row["correlation_id"], "External id": row["external_id"]})
        yield {"ph": "X", "cat": "cuda_runtime", "name": row["name"], "pid": pid, "tid": row["tid"], "ts": ts, "dur": dur,
               "args": args}
        return
    tid = tracks[(row["rank"], row["device"], row["stream"])]
    args = _present({
        "device": row["device"],
        "stream": row["stream"],
        "correlation": row["correlation_id"],
        "External id": row["external_id"],
        "category": row["category"],
        "launch_delay_ns": row["launch_delay_ns"],
        "bytes": row["bytes"],
        "grid": _json_value(row["grid"]),
        "block": _json_value(row["block"]),
    })
    yield {"ph": "X", "cat": _GPU_CATEGORIES.get(row["kind"], "kernel"), "name": row["name"], "pid": pid, "tid": tid,
           "ts": ts, "dur": dur, "args": args}
    if row["launch_tid"] is not None:
        flow = next(flow_ids)
        yield {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": pid, "tid": row["launch_tid"],
               "ts": _ts(row["launch_start_ns"], base_ns)}
        yield {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": pid, "tid": tid, "ts": ts}


def _present(args: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in args.items() if value is not None}


@functools.lru_cache(maxsize=4096)
def _json_value(text: str | None) -> Any:
    """Launch dimensions (`[8, 1, 1]`, stored as text) as the JSON list Kineto writes."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


# --- reading ------------------------------------------------------------------------


def _set(con: duckdb.DuckDBPyConnection, name: str, value: Any) -> None:
    if value is None:
        con.execute(f"set variable {quote_identifier(name)} = null")
    else:
        con.execute(f"set variable {quote_identifier(name)} = ?", [value])


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    return stream_sql(con, sql).read_all().to_pylist()


def _batches(con: duckdb.DuckDBPyConnection, sql: str) -> Iterator[pa.RecordBatch]:
    reader = stream_sql(con, sql, rows_per_batch=BATCH_ROWS)
    try:
        yield from reader
    finally:
        reader.close()


def _batch_rows(con: duckdb.DuckDBPyConnection, sql: str) -> Iterator[dict[str, Any]]:
    """`sql`'s rows, a batch in memory at a time."""
    for batch in _batches(con, sql):
        yield from batch.to_pylist()
