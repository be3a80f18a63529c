"""Nsight Systems SQLite exports (`nsys export --type sqlite`) → trace tables.

What is read, and from where (the nsys SQLite schema reference):

- `CUPTI_ACTIVITY_KIND_KERNEL` → `kernels` (kind `kernel`); the name is the
  demangled name from `StringIds`, the category comes from
  `collector.ingest.categories` (NCCL kernels → communication).
- `CUPTI_ACTIVITY_KIND_MEMCPY` / `_MEMSET` → `kernels` (kind `memcpy` /
  `memset`), named the way Kineto names them (`Memcpy HtoD (Pageable ->
  Device)`, `Memset (Device)`) so the same activity has the same name in
  every format.
- `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (a CUDA graph launch traced as a whole,
  nsys's default `--cuda-graph-trace=graph`) → `kernels` kind `graph`, one
  row per execution named `CUDA graph <graphId>`, category compute: the
  kernels it ran are not in the export at all, and without these rows its
  GPU time would read as idle. A warning after the file's line, and
  `graph_executions_traced_whole` in `runs.metadata_json`, say so and how
  to see each kernel (`--cuda-graph-trace=node`).
- `CUPTI_ACTIVITY_KIND_RUNTIME` → `api_calls`; nsys stores names with the
  API version (`cudaLaunchKernel_v7000`); the suffix is dropped, as nsys's
  own reports do.
- `NVTX_EVENTS` push/pop (eventType 59) and start/end (60) ranges →
  `annotations` kind `nvtx`; `ProfilerStep#N` → kind `profiler_step`.
  Marks (34, `nvtxMark`) → kind `instant`, ending where they start, as
  a Kineto trace's instants do.

`globalTid` packs the process and thread: bits 24–47 are the pid and bits
0–23 the tid (`globalTid / 0x1000000 % 0x1000000` and `globalTid %
0x1000000`, as the nsys export documentation shows); the bits above hold
the hardware and VM ids.

Times: nsys timestamps are nanoseconds from the session start, and
`TARGET_INFO_SESSION_START_TIME.utcEpochNs` is that start on the Unix epoch,
so `start_ns = utcEpochNs + start` and `runs.time_base = 'epoch'` (with
`epoch_offset_ns` = the offset that was added). Without that table the times
stay session-relative (`time_base = 'trace'`).

Processes and ranks. `nsys profile torchrun ...` records every rank's
process in one export, and CUPTI numbers correlation ids per process, so
they repeat across processes. Each process that did GPU work (the
`globalPid` of its kernel, memcpy and memset rows) gets its own rank, and
its runtime calls and NVTX ranges (the pid in their `globalTid`) that rank,
so kernels link to launch calls by (rank, correlation id) within their own
process. The export does not know the job's ranks: one such process takes
the file name's rank (`rank-3.sqlite`) or 0; several are numbered 0, 1, ...
in pid order, with `rank_source` in `runs.metadata_json` saying so. `runs`
has one row per rank, with the process's pid. Rows of processes with no GPU
work (a launcher) belong to no rank and are left out; their pids are listed
as `pids_without_gpu_work`. GPU rows without `globalPid` cannot be split:
then every row gets the one rank.

An export with no kernel, memcpy or memset rows is an error, as in the
Kineto parser. NCCL kernels carry no collective arguments here: each is
one `collectives` row with its op from its name and no size, group or
sequence number (`kernel_collectives`). Tables the export lacks (no
memset, no NVTX) simply give no rows.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import (INSTANT_KIND, NO_GPU_EVENTS, ParsedTrace, odd_values_warning, profiler_step,
                                           rank_from_filename)
from gpulens.collector.ingest.categories import categorise
from gpulens.collector.ingest.kernel_collectives import add_collectives_from_kernels
from gpulens.collector.ingest.sqlite_db import (
    SQLITE_MAGIC, Columns, Processes, column_names, gpu_and_cpu_tables, mapped, parse_file, processes_of, query_columns,
    rank_notes, runs_table, schema_has, table_names, whole_number,
)
from gpulens.collector.wording import counted

FORMAT = "nsys"

# Table names that only an nsys export has; the schema sits in the first pages.
_NSYS_MARKERS = (b"CUPTI_ACTIVITY_KIND_", b"TARGET_INFO_SESSION_START_TIME", b"NVTX_EVENTS", b"StringIds")

_PID_DIVISOR = 0x1000000
_NVTX_PUSH_POP = 59
_NVTX_START_END = 60
_NVTX_MARK = 34


def _times(alias: str) -> str:
    """The start_ns, end_ns and dur_ns items of a row on the epoch. SQLite
    reads text as 0 in arithmetic, so a time that is not a number is passed
    through as it is, for `query_columns` to name, instead of becoming the
    session start. A time that the session start would push past int64
    (`start` = INT64_MAX) is NULL: SQLite would make it a float, and one
    odd value must cost that value, not the file (such events are kept,
    and counted as having no start or end). Each is flagged in a column of
    its own (`start_ns_beyond_int64`, ...: 1 where it went NULL so), which
    `_count_beyond_int64` turns into the odd-values warning."""
    start, end = f"{alias}.start", f'{alias}."end"'
    dur_overflows = f"typeof({start}) = 'integer' and typeof({end}) = 'integer' and typeof({end} - {start}) <> 'integer'"
    return ",\n    ".join([
        f"{_on_epoch(start)} as start_ns",
        f"{_on_epoch(end)} as end_ns",
        f"case when {dur_overflows} then null else {end} - {start} end as dur_ns",
        f"{_pushed_past_int64(start)} as start_ns{_BEYOND_INT64}",
        f"{_pushed_past_int64(end)} as end_ns{_BEYOND_INT64}",
        f"({dur_overflows}) as dur_ns{_BEYOND_INT64}",
    ])


_BEYOND_INT64 = "_beyond_int64"


def _pushed_past_int64(time: str) -> str:
    return f"(typeof({time}) = 'integer' and typeof({time} + :epoch_ns) <> 'integer')"


def _count_beyond_int64(columns: Columns, table: str, dropped: dict[str, int]) -> None:
    """Remove the flag columns of `_times` from `columns`, counting the
    flags set under `table.column` in `dropped`."""
    for name in ("start_ns", "end_ns", "dur_ns"):
        flags = columns.pop(name + _BEYOND_INT64, None)
        if flags:
            dropped[f"{table}.{name}"] = dropped.get(f"{table}.{name}", 0) + sum(flags)


def _on_epoch(time: str) -> str:
    return (f"case when typeof({time}) in ('integer', 'real') then "
            f"case when typeof({time} + :epoch_ns) = 'integer' then {time} + :epoch_ns end else {time} end")


# --- the mapping: one query per source table, aliased to contract columns ---
# `{...}` placeholders are optional columns (NULL where the export lacks them;
# `{pid}` is the process in `globalPid`); `:epoch_ns` is the session start on
# the epoch, or 0. Rows are sorted by start afterwards, in Arrow (faster than
# SQLite's temporary b-tree).

_KERNEL_SQL = f"""
select
    {{pid}} as pid,
    k.deviceId as device,
    k.streamId as stream,
    coalesce(demangled.value, short.value) as name,
    {_times('k')},
    k.correlationId as correlation_id,
    '[' || k.gridX || ', ' || k.gridY || ', ' || k.gridZ || ']' as grid,
    '[' || k.blockX || ', ' || k.blockY || ', ' || k.blockZ || ']' as block
from CUPTI_ACTIVITY_KIND_KERNEL as k
left join StringIds as demangled on demangled.id = k.demangledName
left join StringIds as short on short.id = k.shortName
"""

_GRAPH_SQL = f"""
select
    {{pid}} as pid,
    {{deviceId}} as device,
    {{streamId}} as stream,
    g.graphId as graph_id,
    {_times('g')},
    g.correlationId as correlation_id
from CUPTI_ACTIVITY_KIND_GRAPH_TRACE as g
"""

_MEMCPY_SQL = f"""
select
    {{pid}} as pid,
    m.deviceId as device,
    m.streamId as stream,
    m.copyKind as copy_kind,
    {{srcKind}} as src_kind,
    {{dstKind}} as dst_kind,
    {_times('m')},
    m.correlationId as correlation_id,
    m.bytes as bytes
from CUPTI_ACTIVITY_KIND_MEMCPY as m
"""

_MEMSET_SQL = f"""
select
    {{pid}} as pid,
    m.deviceId as device,
    m.streamId as stream,
    {{memKind}} as mem_kind,
    {_times('m')},
    m.correlationId as correlation_id,
    m.bytes as bytes
from CUPTI_ACTIVITY_KIND_MEMSET as m
"""

_RUNTIME_SQL = f"""
select
    r.globalTid / {_PID_DIVISOR} % {_PID_DIVISOR} as pid,
    r.globalTid % {_PID_DIVISOR} as tid,
    s.value as name,
    {_times('r')},
    r.correlationId as correlation_id
from CUPTI_ACTIVITY_KIND_RUNTIME as r
left join StringIds as s on s.id = r.nameId
"""

# Ranges and marks: domain and category records are neither.
_NVTX_SQL = f"""
select
    n.globalTid / {_PID_DIVISOR} % {_PID_DIVISOR} as pid,
    n.globalTid % {_PID_DIVISOR} as tid,
    coalesce(n.text, {{text_by_id}}) as name,
    {_times('n')},
    n.eventType as event_type
from NVTX_EVENTS as n
{{text_join}}
where n.eventType in ({_NVTX_PUSH_POP}, {_NVTX_START_END}, {_NVTX_MARK})
"""

# CUpti_ActivityMemcpyKind and CUpti_ActivityMemoryKind, spelled as Kineto
# spells them in its activity names.
_COPY_KINDS: dict[int, str] = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
    6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP",
}
_MEMORY_KINDS: dict[int, str] = {
    1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array",
    5: "Managed", 6: "Device Static", 7: "Managed Static",
}

_API_VERSION_SUFFIX = re.compile(r"_v\d+$")


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file whose schema names nsys tables."""
    if not head.startswith(SQLITE_MAGIC):
        return False
    if any(marker in head for marker in _NSYS_MARKERS):
        return True
    # A schema larger than the head: ask SQLite (plain files only).
    return schema_has(path, lambda names: bool(names & {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"}))


def parse(path: Path, run: str) -> ParsedTrace:
    return parse_file(path, "nsys SQLite export", lambda conn: _parse_connection(conn, path, run))


def _parse_connection(conn: sqlite3.Connection, path: Path, run: str) -> ParsedTrace:
    tables = table_names(conn)
    activity = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS"}
    if "StringIds" not in tables or not tables & activity:
        raise TraceError(str(path), "no StringIds or CUDA/NVTX activity tables: not an nsys SQLite export")
    epoch_ns = _session_start_epoch_ns(conn, tables)
    params = {"epoch_ns": epoch_ns or 0}

    graphs = _graph_executions(conn, tables, params)
    gpu = [_kernels(conn, tables, params), _memcpys(conn, tables, params), _memsets(conn, tables, params), graphs]
    gpu = [columns for columns in gpu if columns.get("start_ns")]
    if not gpu:
        raise TraceError(str(path), NO_GPU_EVENTS)
    graphs_whole = len(graphs.get("start_ns", ()))
    processes = _processes(gpu, path)
    cpu = {"api_calls": _runtime_calls(conn, tables, params), "annotations": _nvtx_ranges(conn, tables, params)}
    dropped: dict[str, int] = {}
    for table, columns in [*(("kernels", columns) for columns in gpu), *cpu.items()]:
        _count_beyond_int64(columns, table, dropped)

    parsed = ParsedTrace(format=FORMAT)
    parsed.tables = gpu_and_cpu_tables(gpu, cpu, run, processes)
    without_gpu = processes.left_out({pid for columns in cpu.values() for pid in columns.get("pid", ())})
    parsed.tables["runs"] = _runs_table(conn, tables, path, run, processes, without_gpu, epoch_ns, graphs_whole)
    parsed.events = sum(table.num_rows for name, table in parsed.tables.items() if name != "runs")
    add_collectives_from_kernels(parsed.tables)  # no collective args in this format
    if graphs_whole:
        parsed.warnings.append(
            f"{counted(graphs_whole, 'CUDA graph execution')} traced whole (nsys --cuda-graph-trace=graph, the default): "
            "each is one kernels row (kind graph), since the kernels it ran are not in the export; "
            "profile with --cuda-graph-trace=node to see them")
    odd = odd_values_warning(dropped)
    if odd:
        parsed.warnings.append(odd)
    return parsed


# --- processes and ranks (see sqlite_db) --------------------------------------------

_RANK_BY_PROCESS_ORDER = "process order in the export (by pid, among processes with GPU work), not the job's rank"


def _processes(gpu: list[Columns], path: Path) -> Processes:
    named = rank_from_filename(path)
    return processes_of(gpu, 0 if named is None else named, None, _RANK_BY_PROCESS_ORDER)


# --- one function per source table: contract columns as lists --------------------


def _kernels(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return {}
    columns = query_columns(conn, _KERNEL_SQL.format(**_global_pid(conn, "CUPTI_ACTIVITY_KIND_KERNEL", "k")), params)
    columns["kind"] = ["kernel"] * len(columns["name"])
    columns["category"] = mapped(columns["name"], lambda name: categorise(name or "", "kernel"))
    return columns


def _memcpys(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if table not in tables:
        return {}
    sql = _MEMCPY_SQL.format(**_global_pid(conn, table, "m"), **_optional_columns(conn, table, "m", ["srcKind", "dstKind"]))
    columns = query_columns(conn, sql, params)
    kinds = list(zip(columns.pop("copy_kind"), columns.pop("src_kind"), columns.pop("dst_kind")))
    columns["name"] = mapped(kinds, lambda kind: _memcpy_name(*kind))
    columns["kind"] = ["memcpy"] * len(kinds)
    columns["category"] = mapped(columns["name"], lambda name: categorise(name, "memcpy"))
    return columns


def _memsets(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    if table not in tables:
        return {}
    sql = _MEMSET_SQL.format(**_global_pid(conn, table, "m"), **_optional_columns(conn, table, "m", ["memKind"]))
    columns = query_columns(conn, sql, params)
    columns["name"] = mapped(columns.pop("mem_kind"), _memset_name)
    columns["kind"] = ["memset"] * len(columns["name"])
    columns["category"] = mapped(columns["name"], lambda name: categorise(name, "memset"))
    return columns


def _graph_executions(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    table = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    if table not in tables:
        return {}
    sql = _GRAPH_SQL.format(**_global_pid(conn, table, "g"), **_optional_columns(conn, table, "g", ["deviceId", "streamId"]))
    columns = query_columns(conn, sql, params)
    columns["name"] = [f"CUDA graph {graph_id}" if graph_id is not None else "CUDA graph" for graph_id in columns.pop("graph_id")]
    columns["kind"] = ["graph"] * len(columns["name"])
    columns["category"] = mapped(columns["name"], lambda name: categorise(name, "graph"))
    return columns


def _runtime_calls(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return {}
    columns = query_columns(conn, _RUNTIME_SQL, params)
    columns["name"] = mapped(columns["name"], lambda name: _API_VERSION_SUFFIX.sub("", name) if name else name)
    return columns


def _nvtx_ranges(conn: sqlite3.Connection, tables: set[str], params: dict[str, int]) -> Columns:
    if "NVTX_EVENTS" not in tables:
        return {}
    # Registered strings (nvtxDomainRegisterString) leave `text` NULL and set `textId`.
    if "textId" in column_names(conn, "NVTX_EVENTS"):
        sql = _NVTX_SQL.format(text_by_id="s.value", text_join="left join StringIds as s on s.id = n.textId")
    else:
        sql = _NVTX_SQL.format(text_by_id="null", text_join="")
    columns = query_columns(conn, sql, params)
    steps = mapped(columns["name"], profiler_step)
    columns["kind"] = ["nvtx" if step is None else "profiler_step" for step in steps]
    columns["step"] = steps
    for i, event_type in enumerate(columns.pop("event_type")):
        if event_type == _NVTX_MARK:  # an instant: no end of its own
            columns["kind"][i], columns["step"][i] = INSTANT_KIND, None
            columns["end_ns"][i], columns["dur_ns"][i] = columns["start_ns"][i], 0
    return columns


def _runs_table(conn: sqlite3.Connection, tables: set[str], path: Path, run: str, processes: Processes,
                without_gpu: list[int], epoch_ns: int | None, graphs_whole: int = 0) -> pa.Table:
    """One row per rank: per process with GPU work, or one for the whole export."""
    gpus = _gpus(conn, tables)
    names = {gpu["name"] for gpu in gpus if gpu.get("name")}
    host = _hostname(conn, tables)
    ranked = sorted(processes.rank_by_pid.items(), key=lambda item: item[1]) or [(None, processes.rank)]
    rows = []
    for pid, rank in ranked:
        metadata: dict[str, Any] = {"gpus": gpus, "pids": [] if pid is None else [pid], "time_note": (
            "ts from the session start, placed on the epoch by TARGET_INFO_SESSION_START_TIME" if epoch_ns is not None
            else "ts from the session start: the export has no TARGET_INFO_SESSION_START_TIME")}
        metadata |= rank_notes(processes, without_gpu)
        if graphs_whole:
            metadata["graph_executions_traced_whole"] = graphs_whole
        rows.append({
            "run": run,
            "rank": rank,
            "host": host,
            "pid": pid,
            # One GPU model is the usual case; otherwise leave it to metadata.
            "device_name": next(iter(names)) if len(names) == 1 else None,
            "source_path": str(path.resolve()),
            "source_format": FORMAT,
            "epoch_offset_ns": epoch_ns,
            "time_base": "epoch" if epoch_ns is not None else "trace",
            "backend": "cuda",
            "metadata_json": json.dumps(metadata, sort_keys=True),
        })
    return runs_table(rows)


# --- small helpers --------------------------------------------------------------



def _memset_name(mem_kind: int | None) -> str:
    memory = _MEMORY_KINDS.get(mem_kind)
    return f"Memset ({memory})" if memory else "Memset"


def _memcpy_name(copy_kind: int | None, src_kind: int | None, dst_kind: int | None) -> str:
    direction = _COPY_KINDS.get(copy_kind, "Unknown")
    src, dst = _MEMORY_KINDS.get(src_kind), _MEMORY_KINDS.get(dst_kind)
    if src and dst:
        return f"Memcpy {direction} ({src} -> {dst})"
    return f"Memcpy {direction}"


def _session_start_epoch_ns(conn: sqlite3.Connection, tables: set[str]) -> int | None:
    table = "TARGET_INFO_SESSION_START_TIME"
    if table not in tables or "utcEpochNs" not in column_names(conn, table):
        return None
    row = conn.execute(f"select utcEpochNs from {table} limit 1").fetchone()
    return whole_number(row[0], f"{table}.utcEpochNs") if row and row[0] is not None else None


def _gpus(conn: sqlite3.Connection, tables: set[str]) -> list[dict[str, Any]]:
    table = "TARGET_INFO_GPU"
    if table not in tables:
        return []
    wanted = [c for c in ("id", "name", "busLocation", "uuid") if c in column_names(conn, table)]
    if not wanted:
        return []
    cursor = conn.execute(f"select {', '.join(wanted)} from {table} order by 1")
    return [dict(zip(wanted, row)) for row in cursor]


def _hostname(conn: sqlite3.Connection, tables: set[str]) -> str | None:
    # Best effort: newer exports list the target's environment as name/value pairs.
    table = "TARGET_INFO_SYSTEM_ENV"
    if table not in tables or not {"name", "value"} <= column_names(conn, table):
        return None
    row = conn.execute(f"select value from {table} where lower(name) = 'hostname' limit 1").fetchone()
    return str(row[0]) if row and row[0] else None


def _global_pid(conn: sqlite3.Connection, table: str, alias: str) -> dict[str, str]:
    """`{pid}`: the process of a GPU activity row, from its `globalPid` (bits 24-47, as in `globalTid`)."""
    if "globalPid" not in column_names(conn, table):
        return {"pid": "null"}
    return {"pid": f"{alias}.globalPid / {_PID_DIVISOR} % {_PID_DIVISOR}"}


def _optional_columns(conn: sqlite3.Connection, table: str, alias: str, names: list[str]) -> dict[str, str]:
    present = column_names(conn, table)
    return {name: f"{alias}.{name}" if name in present else "null" for name in names}
