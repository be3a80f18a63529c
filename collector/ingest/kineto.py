"""PyTorch profiler (Kineto) Chrome-trace JSON → the trace tables.

What the shared real traces showed (`../shared/traces/kineto`):

- Where the trace has `baseTimeNanoseconds` (newer Kineto: the A100, MI250
  and CPU-only files), `ts` is microseconds *relative to it*, with
  three decimals: the A100 file's base is 2024-04-01T09:44:06Z, its first
  `ts` 4458676388068.751 µs (51.6 days) and base + ts is 2024-05-23
  00:15:22Z, the time its `INFO` log lines give (17:15:22 local, UTC-7).
  So `start_ns = baseTimeNanoseconds + ts_ns`, `time_base = 'epoch'` and
  `runs.epoch_offset_ns = baseTimeNanoseconds`.
- Older traces without it (the V100, 128-rank and no-distributedInfo
  files) write `ts` as *integer Unix-epoch microseconds* (1669783687352244
  = 2022-11-30). Those are on the epoch too (`epoch_offset_ns = 0`); only a
  trace with neither (`ts` below 10**15 µs, i.e. not after 2001) gets
  `time_base = 'trace'` and a NULL offset.
- Times keep full nanosecond precision, read from the decimal text itself
  at any size (see `arrays`: a double would lose up to 125 ns of an
  epoch-microsecond `ts`).

Which raw keys are read, and which event categories go to which table, is
declared in `kineto_schema`; collectives are built in `kineto_collectives`.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import kineto_stream
from gpulens.collector.ingest.arrays import constant, to_int
from gpulens.collector.ingest.base import (NO_GPU_EVENTS, ParsedTrace, build_table, duplicate_events, ingested_now,
                                           odd_values_warning, rank_from_filename)
from gpulens.collector.ingest.buffer import read_buffer
from gpulens.collector.ingest.kineto_collectives import build_collectives
from gpulens.collector.ingest.kineto_columns import TABLES, Accumulator
from gpulens.collector.ingest.kineto_marks import Marks
from gpulens.collector.ingest.kineto_schema import EVENT_TABLES, KinetoTrace
from gpulens.collector.ingest.kineto_stream import NotStreamable, TraceStream

FORMAT = "kineto"

_HEAD_BYTES = 64 * 1024
_MARKERS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
# Times at or above this (2001-09-09, in ns) are on the Unix epoch.
_EPOCH_NS = 10**18
# Events per batch when a trace has to be decoded whole.
_WHOLE_BATCH = 1 << 16
# tensorboard_trace_handler's default file name: {hostname}_{pid}.{time_ns}.pt.trace.json
_HANDLER_FILE = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")
# A worker-name prefix naming the rank (`rank-2.`, `rank3_`) is not the host.
_RANK_PREFIX = re.compile(r"^rank[-_]?\d+[._]", re.IGNORECASE)
_NOT_BLANK = re.compile(rb"\s*\S")
_DECODER = msgspec.json.Decoder(KinetoTrace)


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object with `traceEvents` (or Kineto's header keys, when a
    large `distributedInfo` pushes `traceEvents` past the head)."""
    if not head.removeprefix(kineto_stream.UTF8_BOM).lstrip().startswith(b"{"):
        return False
    if b'"traceEvents"' in head:
        return True
    return len(head) >= _HEAD_BYTES and any(marker in head for marker in _MARKERS)


def parse(path: Path, run: str) -> ParsedTrace:
    before = dict(kineto_stream.REPAIRED)
    metadata, events = _read(path)
    return _parsed(path, run, metadata, events, kineto_stream.repairs_since(before))


@dataclass
class PartRead:
    """One part of a file's event array, as `read_part` read it."""

    start: int
    metadata: KinetoTrace
    events: Accumulator
    # Content offsets where its events begin and end (None: the array's end).
    first_event_at: int | None
    end_at: int | None
    # Values replaced while reading it (kineto_stream.REPAIRED), by kind.
    repaired: dict[str, int] = field(default_factory=dict)


def read_part(path: Path, start: int, end: int | None) -> PartRead:
    """The events of one part of a big file, for `parse_parts`: those from
    the first event boundary at or past content offset `start` to the first
    at or past `end` (see `TraceStream`). Raises NotStreamable where the part
    cannot be read on its own; the file is then read whole."""
    before = dict(kineto_stream.REPAIRED)
    events = Accumulator()
    stream = TraceStream(path, kineto_stream.BATCH_BYTES, start=start, end=end)
    for batch in stream.batches():
        events.add(batch)
    events.compact()  # one array per column: cheap to send between processes
    return PartRead(start, stream.metadata, events, stream.first_event_at, stream.end_at,
                    kineto_stream.repairs_since(before))


def parse_parts(path: Path, run: str, parts: list[PartRead]) -> ParsedTrace:
    """The file from parts that `read_part` read (in any order), the same
    tables `parse` gives. Raises NotStreamable where the parts do not cover
    the event array exactly: each one beginning where the one before ended."""
    parts = sorted(parts, key=lambda part: part.start)
    meets = all(before.end_at == after.first_event_at for before, after in zip(parts, parts[1:]))
    if not parts or parts[0].start != 0 or parts[-1].end_at is not None or not meets:
        raise NotStreamable
    metadata, events = parts[0].metadata, parts[0].events
    repaired = dict(parts[0].repaired)
    for part in parts[1:]:
        events.merge(part.events)
        kineto_stream.fill_missing(metadata, part.metadata)  # the trailer, from the part that read the end
        for kind, n in part.repaired.items():
            repaired[kind] = repaired.get(kind, 0) + n
    return _parsed(path, run, metadata, events, repaired)


def _parsed(path: Path, run: str, metadata: KinetoTrace, events: Accumulator,
            repaired: dict[str, int] | None = None) -> ParsedTrace:
    unreadable = _unreadable_times(events.skipped)
    if not events.rows["kernels"]:
        gpu = sum(n for cat, n in unreadable.items() if EVENT_TABLES.get(cat, ("",))[0] == "kernels")
        raise TraceError(str(path), NO_GPU_EVENTS + (f": {_skipped_for_times(gpu)}" if gpu else ""))
    clock = _clock(metadata, events.first_ts_ns())
    dropped = dict(repaired or {})
    rank, rank_source = _rank(metadata, path, dropped)
    rows = {table: events.result(table, clock.offset_ns) for table in TABLES}
    tables = {table: _table(table, r.columns, run, rank, dropped) for table, r in rows.items() if r.columns}
    memory = events.memory_events(clock.offset_ns)
    if memory:
        tables["memory_events"] = _table("memory_events", memory, run, rank, dropped)
    collectives = build_collectives(rows["kernels"], rows["cpu_ops"], rows["api_calls"], rows["annotations"])
    if collectives is not None:
        tables["collectives"] = _table("collectives", collectives, run, rank, dropped)
    steps_lost = _steps_beyond_int64(tables.get("annotations"))
    if steps_lost:
        dropped["annotations.step"] = dropped.get("annotations.step", 0) + steps_lost
    tables["runs"] = _runs_row(metadata, path, run, rank, rank_source, clock, rows, dict(sorted(events.skipped.items())),
                               events.marks, dropped)
    warnings = [f"{_skipped_for_times(sum(unreadable.values()))} ({_by_category(unreadable)})"] if unreadable else []
    duplicates = duplicate_events(tables)
    if duplicates:
        warnings.append(f"{sum(duplicates.values()):,} duplicate event{'s' if sum(duplicates.values()) != 1 else ''} "
                        f"kept, each the same as an earlier one in every field ({_by_category(duplicates)}): "
                        "was the trace written twice?")
    odd = odd_values_warning(dropped)
    if odd:
        warnings.append(odd)
    return ParsedTrace(format=FORMAT, tables=tables, events=events.events, warnings=warnings)


def _steps_beyond_int64(annotations: pa.Table | None) -> int:
    """Profiler steps whose number did not fit the step column (kineto_schema.annotation_kind)."""
    if annotations is None:
        return 0
    steps = pc.and_(pc.equal(annotations["kind"], "profiler_step"), pc.is_null(annotations["step"]))
    return pc.sum(pc.cast(steps, pa.int64())).as_py() or 0


def _unreadable_times(skipped: dict[str, int]) -> dict[str, int]:
    """Per category, the complete events skipped because their `ts` or `dur`
    is neither a number nor numeric text (counted in `runs` as
    `<cat>: ts or dur not a number`)."""
    suffix = f": {kineto_stream.TIMES_NOT_NUMBERS}"
    return {name.removesuffix(suffix): n for name, n in skipped.items() if name.endswith(suffix)}


def _skipped_for_times(n: int) -> str:
    return f"{n:,} event{'s' if n != 1 else ''} skipped, {'their' if n != 1 else 'its'} ts or dur not a number"


def _by_category(counts: dict[str, int]) -> str:
    return ", ".join(f"{cat} {n:,}" for cat, n in sorted(counts.items()))


def _read(path: Path) -> tuple[KinetoTrace, Accumulator]:
    """Metadata and accumulated columns: streamed, else decoded whole."""
    events = Accumulator()
    stream = TraceStream(path, kineto_stream.BATCH_BYTES)
    try:
        for batch in stream.batches():
            events.add(batch)
        return stream.metadata, events
    except NotStreamable:
        pass
    data = read_buffer(path)
    if not _NOT_BLANK.match(data):
        raise TraceError(str(path), "empty file")
    data = data.removeprefix(kineto_stream.UTF8_BOM)
    with _decode_errors(path):
        trace = kineto_stream.decode_leniently(_DECODER.decode, data)
    del data
    with _decode_errors(path, "traceEvents: "):
        all_events = kineto_stream.event_array(trace.traceEvents)
    if all_events is None:
        raise TraceError(str(path), "no traceEvents: not a PyTorch profiler (Kineto) trace")
    trace.traceEvents = msgspec.Raw()  # the raw array pins the whole text
    events = Accumulator()
    for start in range(0, len(all_events), _WHOLE_BATCH):
        events.add(all_events[start : start + _WHOLE_BATCH])
    return trace, events


@contextmanager
def _decode_errors(path: Path, where: str = "") -> Iterator[None]:
    """msgspec's decoding errors as a TraceError naming the file."""
    try:
        yield
    except msgspec.ValidationError as error:
        raise TraceError(str(path), f"not a PyTorch profiler (Kineto) trace: {where}{error}") from None
    except msgspec.DecodeError as error:
        raise TraceError(str(path), f"invalid JSON: {where}{error}") from None


class _Clock:
    def __init__(self, offset_ns: int, time_base: str, epoch_offset_ns: int | None, note: str) -> None:
        self.offset_ns = offset_ns
        self.time_base = time_base
        self.epoch_offset_ns = epoch_offset_ns
        self.note = note


def _clock(trace: KinetoTrace, first_ts_ns: int | None) -> _Clock:
    """Where the trace's `ts` origin lies (see the module docstring)."""
    base_ns = to_int(trace.baseTimeNanoseconds)
    absolute = first_ts_ns is not None and first_ts_ns >= _EPOCH_NS
    if base_ns is not None and not absolute:
        return _Clock(base_ns, "epoch", base_ns, "ts relative to baseTimeNanoseconds")
    if absolute:
        return _Clock(0, "epoch", 0, "ts in Unix-epoch microseconds")
    return _Clock(0, "trace", None, "ts from the trace's own origin")


def _table(table: str, columns: dict[str, Any], run: str, rank: int, dropped: dict[str, int]) -> pa.Table:
    length = len(next(iter(columns.values())))
    return build_table(table, {"run": constant(run, length, pa.string()), "rank": constant(rank, length, pa.int32()), **columns},
                       dropped=dropped)


# The rank column's range (int32).
_RANK_RANGE = range(-(1 << 31), 1 << 31)


def _rank(trace: KinetoTrace, path: Path, dropped: dict[str, int]) -> tuple[int, str]:
    info = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    rank = to_int(info.get("rank"))
    if rank is not None and rank not in _RANK_RANGE:
        dropped["distributedInfo.rank"] = 1  # as if the trace did not say
        rank = None
    if rank is not None:
        return rank, "distributedInfo"
    rank = rank_from_filename(path)
    if rank is not None:
        return rank, "file name"
    return 0, "default (the trace does not say)"


def _runs_row(trace: KinetoTrace, path: Path, run: str, rank: int, rank_source: str, clock: _Clock,
              rows: dict[str, Any], skipped: dict[str, int], marks: Marks, dropped: dict[str, int]) -> pa.Table:
    info = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    properties = trace.deviceProperties if isinstance(trace.deviceProperties, list) else []
    counts = pc.value_counts(rows["kernels"].columns["device"]).to_pylist()
    used = sorted((c["values"] for c in counts if c["values"] is not None))
    main_device = max(counts, key=lambda c: c["counts"])["values"] if counts else None
    device_name = next((p.get("name") for p in properties if isinstance(p, dict) and to_int(p.get("id")) == main_device), None)
    host, host_source = _host(trace, path)
    pid = _first_pid(rows)
    metadata = {
        "rank_source": rank_source,
        "host_source": host_source,
        "time_note": clock.note,
        "base_time_ns": to_int(trace.baseTimeNanoseconds),
        "schema_version": trace.schemaVersion,
        "trace_name": trace.traceName,
        "devices_used": used,
        "device_properties": properties,
        "pg_count": info.get("pg_count"),
        "pg_config": info.get("pg_config"),
        "skipped_events": skipped,
        **({"dropped_values": {what: n for what, n in sorted(dropped.items()) if n}} if any(dropped.values()) else {}),
        **marks.names(pid),
    }
    row = {
        "run": [run],
        "rank": [rank],
        "world_size": [to_int(info.get("world_size"))],
        "host": [host],
        "pid": [pid],
        "device_name": [device_name],
        "source_path": [str(path.resolve())],
        "source_format": [FORMAT],
        "epoch_offset_ns": [clock.epoch_offset_ns],
        "time_base": [clock.time_base],
        "backend": [_text(info.get("backend"))],
        "nccl_version": [_text(info.get("nccl_version"))],
        "ingested_at": ingested_now(),
        "metadata_json": [msgspec.json.encode(metadata).decode()],
    }
    return build_table("runs", row, dropped=dropped)


def _first_pid(rows: dict[str, Any]) -> int | None:
    """The profiled process: the pid of its CPU-side events."""
    for table in ("cpu_ops", "api_calls"):
        pids = rows[table].columns.get("pid")
        if pids is not None:
            pids = pc.drop_null(pids)
            if len(pids):
                return pids[0].as_py()
    return None


def _host(trace: KinetoTrace, path: Path) -> tuple[str | None, str | None]:
    for value in (trace.hostname, trace.hostName):
        if isinstance(value, str) and value:
            return value, "trace"
    match = _HANDLER_FILE.match(path.name)
    if match:
        return _RANK_PREFIX.sub("", match.group("host")), "file name (tensorboard_trace_handler)"
    return None, None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
