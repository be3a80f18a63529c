"""rocprofv3 databases (rocpd: one SQLite file per process, `<pid>_results.db`)
→ trace tables.

rocpd is rocprofv3's default output since ROCm 7.0, and its direct CSV
output is deprecated (see `rocprof` for the CSV files). What is read, and
from where (rocprofiler-sdk's `rocpd_tables.sql`; each table is stored as
`<name><uuid>` and read through the `<name>` view the file also holds,
else through the suffixed table itself):

- `rocpd_kernel_dispatch` → `kernels` (kind `kernel`), named from
  `rocpd_info_kernel_symbol` (`display_name`, else `kernel_name`), the
  category from `collector.ingest.categories` (RCCL kernels →
  communication); grid in workgroups (ceil(grid / workgroup), as CUDA and
  Kineto count it), block the workgroup size.
- `rocpd_memory_copy` → `kernels` (kind `memcpy`), named as Kineto names
  ROCm copies (`Memcpy HtoD (Host -> Device)`), on the GPU end of the copy
  (the destination of a host-to-device copy, else the source).
- `rocpd_region` whose event category is `HIP_*`, `HSA_*` or `RCCL_*` →
  `api_calls`; `MARKER_*` (roctx ranges) → `annotations` kind `nvtx`, named
  by the range's message (`ProfilerStep#N` → kind `profiler_step`), read
  from its event's `extdata` whether stored as JSON text or as SQLite's
  binary JSONB (`sqlite_db.jsonb_loads`). Regions of other categories are
  counted in `runs.metadata_json` `skipped_regions`; instant samples
  (`rocpd_sample`, roctxMark) are not ranges and are not read.
- Correlation ids are the events' `stack_id` (rocprofiler's internal
  correlation id, which `rocpd convert` writes as the CSV's
  Correlation_Id), shared by a kernel and the HIP call that launched it.
- Devices: `rocpd_info_agent`; a GPU agent's `type_index` is its GPU
  index (a CPU end is no device).

Two layouts of the same tables exist: times and process columns on each
row (`start`, `end`, `pid`, `tid`, `agent_id`, `queue_id`, `stream_id`),
or a `track_id` into `rocpd_track` and `start_id`/`end_id` into
`rocpd_timestamp`. Both are read.

Times are nanoseconds of the boot-time clock, as in the CSV files: the
parse leaves them so (`runs.time_base = 'trace'`) and hands the host and
file to `collector.boot_clock`, which ingest asks to place them on the
epoch where a boot of that host fits (this machine's, or one its collector
recorded), the reason in `time_note` either way.

Ranks: one process with GPU work takes the rank its path states
(`rank3_results.db`, or a folder `rank3`), else 0; a merged file (`rocpd
merge`) of several processes gives each its rank in pid order
(`sqlite_db`). A file with no kernel dispatch or memory copy is an error,
as a Kineto trace without GPU events is.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.collector.boot_clock import BootClockTrace
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import ParsedTrace, profiler_step
from gpulens.collector.ingest.categories import categorise
from gpulens.collector.ingest.kernel_collectives import add_collectives_from_kernels
from gpulens.collector.ingest.rocprof import COPY_NAMES, NO_GPU_EVENTS, rank_from_path
from gpulens.collector.ingest.sqlite_db import (
    SQLITE_MAGIC, Columns, Processes, column_names, gpu_and_cpu_tables, jsonb_loads, mapped, parse_file, processes_of,
    query_columns, rank_notes, runs_table, schema_has, table_names, whole_number,
)

FORMAT = "rocpd"

_TABLES = (
    "rocpd_metadata", "rocpd_string", "rocpd_info_node", "rocpd_info_process", "rocpd_info_agent",
    "rocpd_info_kernel_symbol", "rocpd_info_category", "rocpd_track", "rocpd_timestamp", "rocpd_event",
    "rocpd_region", "rocpd_kernel_dispatch", "rocpd_memory_copy",
)
_API_CATEGORIES = ("HIP_", "HSA_", "RCCL_")
_MARKER_CATEGORY = "MARKER_"


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file whose schema names rocpd tables."""
    if not head.startswith(SQLITE_MAGIC):
        return False
    if b"rocpd_kernel_dispatch" in head or b"rocpd_metadata" in head:
        return True
    # A schema larger than the head: ask SQLite.
    return schema_has(path, lambda names: any(name.startswith("rocpd_kernel_dispatch") for name in names))


def parse(path: Path, run: str) -> ParsedTrace:
    return parse_file(path, "rocprofv3 database", lambda conn: _parse_connection(conn, path, run))


def _parse_connection(conn: sqlite3.Connection, path: Path, run: str) -> ParsedTrace:
    names = _table_names(conn)
    if "rocpd_kernel_dispatch" not in names and "rocpd_memory_copy" not in names:
        raise TraceError(str(path), "no rocpd_kernel_dispatch or rocpd_memory_copy table: not a rocprofv3 database")
    agents = _Agents(conn, names)
    gpu = [_kernels(conn, names, agents), _memory_copies(conn, names, agents)]
    gpu = [columns for columns in gpu if columns.get("start_ns")]
    if not gpu:
        raise TraceError(str(path), NO_GPU_EVENTS)
    processes = processes_of(gpu, *rank_from_path(path))
    regions, skipped = _regions(conn, names)

    parsed = ParsedTrace(format=FORMAT)
    parsed.tables = gpu_and_cpu_tables(gpu, regions, run, processes)
    host = _first(conn, names, "rocpd_info_node", "hostname")
    parsed.boot_clock = BootClockTrace(host, path, no_host="rocpd_info_node names no host")
    without_gpu = processes.left_out({pid for columns in regions.values() for pid in columns.get("pid", ())})
    parsed.tables["runs"] = _runs_table(conn, names, path, run, processes, gpu, agents, without_gpu, skipped, host)
    parsed.events = sum(table.num_rows for name, table in parsed.tables.items() if name != "runs")
    add_collectives_from_kernels(parsed.tables)  # no collective args in this format
    return parsed


# --- where each table lives, and the two layouts ------------------------------------


def _table_names(conn: sqlite3.Connection) -> dict[str, str]:
    """Each rocpd table's name in this file: the plain view, else the table
    with this file's uuid suffix (that of its `rocpd_metadata<uuid>`)."""
    present = table_names(conn)
    suffixes = sorted(name.removeprefix("rocpd_metadata") for name in present
                      if name.startswith("rocpd_metadata") and name != "rocpd_metadata")
    found = {}
    for base in _TABLES:
        if base in present:
            found[base] = base
        else:
            found.update({base: base + suffix for suffix in suffixes[:1] if base + suffix in present})
    return found


class _Frame:
    """The SQL for a row's times and process columns (`start`, `end`, `pid`,
    `tid`, `agent`, `queue`, `stream`) in either layout, for table alias X."""

    def __init__(self, conn: sqlite3.Connection, names: dict[str, str], table: str) -> None:
        columns = column_names(conn, names[table])
        self.joins = ""
        if {"start", "end"} <= columns:
            own = {"start": '"start"', "end": '"end"', "pid": "pid", "tid": "tid", "agent": "agent_id",
                   "queue": "queue_id", "stream": "stream_id"}
            self.sql = {key: f"X.{column}" if column.strip('"') in columns else "null" for key, column in own.items()}
        elif {"start_id", "end_id", "track_id"} <= columns and "rocpd_timestamp" in names:
            track_columns = column_names(conn, names["rocpd_track"]) if "rocpd_track" in names else set()
            on_track = {"pid": "pid", "tid": "tid", "agent": "agent_id", "queue": "queue_id", "stream": "stream_id"}
            self.sql = {key: f"T.{column}" if column in track_columns else "null" for key, column in on_track.items()}
            self.sql |= {"start": "TS.value", "end": "TE.value"}
            if track_columns:
                self.joins += f'left join "{names["rocpd_track"]}" as T on T.id = X.track_id and T.guid = X.guid\n'
            stamps = names["rocpd_timestamp"]
            self.joins += (f'left join "{stamps}" as TS on TS.id = X.start_id and TS.guid = X.guid\n'
                           f'left join "{stamps}" as TE on TE.id = X.end_id and TE.guid = X.guid\n')
        else:
            raise sqlite3.DatabaseError(f"unexpected schema: {table} has neither start/end nor start_id/end_id columns")
        if "rocpd_event" in names and "event_id" in columns:
            event_columns = column_names(conn, names["rocpd_event"])
            self.correlation = "E.stack_id" if "stack_id" in event_columns else "null"
            self.extdata = "E.extdata" if "extdata" in event_columns else "null"
            self.category_id = "E.category_id" if "category_id" in event_columns else "null"
            self.joins += f'left join "{names["rocpd_event"]}" as E on E.id = X.event_id and E.guid = X.guid\n'
        else:
            self.correlation = self.extdata = self.category_id = "null"

    def times(self) -> str:
        start, end = self.sql["start"], self.sql["end"]
        return f"{start} as start_ns, {end} as end_ns, {end} - {start} as dur_ns"


class _Agents:
    """GPU index and product name of each agent, by (guid, agent id)."""

    def __init__(self, conn: sqlite3.Connection, names: dict[str, str]) -> None:
        self.gpu_index: dict[tuple[Any, Any], int] = {}
        self.gpu_name: dict[int, str] = {}
        if "rocpd_info_agent" not in names:
            return
        table = names["rocpd_info_agent"]
        present = column_names(conn, table)
        wanted = ["guid", "id", "type", "type_index", "absolute_index", "product_name", "name"]
        select = ", ".join(f'"{column}"' if column in present else f"null as {column}" for column in wanted)
        rows = conn.execute(f'select {select} from "{table}" order by guid, absolute_index, id').fetchall()
        order: dict[Any, int] = {}
        for guid, agent_id, kind, type_index, _, product, name in rows:
            if str(kind or "").upper() != "GPU":
                continue
            index = type_index if type_index is not None else order.get(guid, 0)
            order[guid] = order.get(guid, 0) + 1
            index = whole_number(index, f"{table}.type_index")
            self.gpu_index[(guid, agent_id)] = index
            if product or name:
                self.gpu_name.setdefault(index, product or name)

    def devices(self, guids: list[Any], agent_ids: list[Any]) -> list[int | None]:
        return [self.gpu_index.get(key) for key in zip(guids, agent_ids)]


# --- one function per source table: contract columns as lists --------------------


def _kernels(conn: sqlite3.Connection, names: dict[str, str], agents: _Agents) -> Columns:
    if "rocpd_kernel_dispatch" not in names:
        return {}
    frame = _Frame(conn, names, "rocpd_kernel_dispatch")
    name, symbol_join = "null", ""
    if "rocpd_info_kernel_symbol" in names:
        symbol_columns = column_names(conn, names["rocpd_info_kernel_symbol"])
        parts = [f"nullif(S.{column}, '')" for column in ("display_name", "kernel_name") if column in symbol_columns]
        name = f"coalesce({', '.join(parts)})" if parts else "null"
        symbol_join = f'left join "{names["rocpd_info_kernel_symbol"]}" as S on S.id = X.kernel_id and S.guid = X.guid'
    dims = {axis: (f"X.grid_size_{axis}", f"X.workgroup_size_{axis}") for axis in "xyz"}
    grid = " || ', ' || ".join(f"(({items} + nullif({size}, 0) - 1) / nullif({size}, 0))" for items, size in dims.values())
    block = " || ', ' || ".join(size for _, size in dims.values())
    sql = f"""
        select
            X.guid as guid,
            {frame.sql["pid"]} as pid,
            {frame.sql["agent"]} as agent_id,
            {frame.sql["stream"]} as stream,
            {name} as name,
            {frame.times()},
            {frame.correlation} as correlation_id,
            '[' || {grid} || ']' as grid,
            '[' || {block} || ']' as block
        from "{names["rocpd_kernel_dispatch"]}" as X
        {frame.joins}
        {symbol_join}
    """
    columns = query_columns(conn, sql)
    columns["device"] = agents.devices(columns.pop("guid"), columns.pop("agent_id"))
    columns["kind"] = ["kernel"] * len(columns["name"])
    columns["category"] = mapped(columns["name"], lambda kernel: categorise(kernel or "", "kernel"))
    return columns


def _memory_copies(conn: sqlite3.Connection, names: dict[str, str], agents: _Agents) -> Columns:
    if "rocpd_memory_copy" not in names:
        return {}
    frame = _Frame(conn, names, "rocpd_memory_copy")
    direction = _string_of(names, "X.name_id")
    sql = f"""
        select
            X.guid as guid,
            {frame.sql["pid"]} as pid,
            {frame.sql["stream"]} as stream,
            {direction} as direction,
            X.src_agent_id as src_agent_id,
            X.dst_agent_id as dst_agent_id,
            {frame.times()},
            {frame.correlation} as correlation_id,
            X.size as bytes
        from "{names["rocpd_memory_copy"]}" as X
        {frame.joins}
    """
    columns = query_columns(conn, sql)
    guids = columns.pop("guid")
    directions = mapped(columns.pop("direction"), lambda text: (text or "").removeprefix("MEMORY_COPY_"))
    sources = agents.devices(guids, columns.pop("src_agent_id"))
    destinations = agents.devices(guids, columns.pop("dst_agent_id"))
    # The copy belongs to its GPU end: the destination of a HtoD copy, else the source.
    columns["device"] = [dst if direction == "HOST_TO_DEVICE" else src
                         for direction, src, dst in zip(directions, sources, destinations)]
    columns["name"] = mapped(directions, lambda direction: COPY_NAMES.get(direction, "Memcpy"))
    columns["kind"] = ["memcpy"] * len(directions)
    columns["category"] = ["memory"] * len(directions)
    return columns


def _string_of(names: dict[str, str], string_id: str) -> str:
    """SQL for the text of `string_id` (a column of the row X) in `rocpd_string`."""
    if "rocpd_string" not in names:
        return "null"
    return f'(select string from "{names["rocpd_string"]}" as N where N.id = {string_id} and N.guid = X.guid)'


def _regions(conn: sqlite3.Connection, names: dict[str, str]) -> tuple[dict[str, Columns], dict[str, int]]:
    """HIP/HSA/RCCL calls and roctx ranges as columns, and the number of
    regions of every other category."""
    empty: dict[str, Columns] = {"api_calls": {}, "annotations": {}}
    if "rocpd_region" not in names:
        return empty, {}
    frame = _Frame(conn, names, "rocpd_region")
    category, category_join = "null", ""
    if "rocpd_info_category" in names:  # where the layout has it, event categories are listed there
        category = "C.name"
        category_join = f'left join "{names["rocpd_info_category"]}" as C on C.id = {frame.category_id} and C.guid = X.guid'
    elif "rocpd_string" in names:
        category = "C.string"
        category_join = f'left join "{names["rocpd_string"]}" as C on C.id = {frame.category_id} and C.guid = X.guid'
    name = _string_of(names, "X.name_id")
    sql = f"""
        select
            {frame.sql["pid"]} as pid,
            {frame.sql["tid"]} as tid,
            {name} as name,
            {category} as category,
            {frame.times()},
            {frame.correlation} as correlation_id,
            {frame.extdata} as extdata
        from "{names["rocpd_region"]}" as X
        {frame.joins}
        {category_join}
    """
    columns = query_columns(conn, sql)
    categories = [str(value or "").upper() for value in columns.pop("category")]
    extdata = columns.pop("extdata")
    kinds = mapped(categories, _region_kind)
    skipped: dict[str, int] = {}
    for kind, category_name in zip(kinds, categories):
        if kind is None:
            skipped[category_name or "(none)"] = skipped.get(category_name or "(none)", 0) + 1
    api = _rows(columns, [row for row, kind in enumerate(kinds) if kind == "api_calls"])
    marker_rows = [row for row, kind in enumerate(kinds) if kind == "annotations"]
    markers = _rows(columns, marker_rows)
    if markers:
        markers["name"] = [_message(extdata[row]) or name for row, name in zip(marker_rows, markers["name"])]
        del markers["correlation_id"]
        markers["step"] = [profiler_step(text) for text in markers["name"]]
        markers["kind"] = ["nvtx" if step is None else "profiler_step" for step in markers["step"]]
    return {"api_calls": api, "annotations": markers}, dict(sorted(skipped.items()))


def _region_kind(category: str) -> str | None:
    if category.startswith(_API_CATEGORIES):
        return "api_calls"
    if category.startswith(_MARKER_CATEGORY):
        return "annotations"
    return None


def _rows(columns: Columns, rows: list[int]) -> Columns:
    if not rows:
        return {}
    return {name: [values[row] for row in rows] for name, values in columns.items()}


def _message(extdata: Any) -> str | None:
    """A roctx range's message, from its event's extdata (`{"message": ...}`):
    JSON text, or SQLite's binary JSONB where it was stored through jsonb()."""
    try:
        if isinstance(extdata, str):
            if "message" not in extdata:
                return None
            value = json.loads(extdata)
        elif isinstance(extdata, bytes):
            value = jsonb_loads(extdata)
        else:
            return None
        message = value.get("message")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None  # unreadable: the range's name stands in
    return message if isinstance(message, str) and message else None



# --- runs ------------------------------------------------------------------------


def _runs_table(conn: sqlite3.Connection, names: dict[str, str], path: Path, run: str, processes: Processes,
                gpu: list[Columns], agents: _Agents, without_gpu: list[int], skipped: dict[str, int],
                host: str | None) -> pa.Table:
    """One row per rank: per process with GPU work, or one for the whole file."""
    commands = _commands(conn, names)
    shared = {
        "gpus": {str(index): name for index, name in sorted(agents.gpu_name.items())},
        "schema_version": _metadata_value(conn, names, "schema_version"),
        "skipped_regions": skipped,
    }
    # The GPU names each process's rows ran on, gathered in one pass (None: every process).
    names_by_pid: dict[int | None, set[str]] = {}
    for columns in gpu:
        for pid, device in zip(columns["pid"], columns["device"]):
            if device is not None and device in agents.gpu_name:
                names_by_pid.setdefault(pid, set()).add(agents.gpu_name[device])
                names_by_pid.setdefault(None, set()).add(agents.gpu_name[device])
    ranked = sorted(processes.rank_by_pid.items(), key=lambda item: item[1]) or [(None, processes.rank)]
    rows = []
    for pid, rank in ranked:
        device_names = names_by_pid.get(pid, set())
        metadata: dict[str, Any] = {**shared, "pids": [] if pid is None else [pid]}
        if commands.get(pid):
            metadata["command"] = commands[pid]
        metadata |= rank_notes(processes, without_gpu)
        rows.append({
            "run": run,
            "rank": rank,
            "host": host,
            "pid": pid,
            "device_name": next(iter(device_names)) if len(device_names) == 1 else None,
            "source_path": str(path.resolve()),
            "source_format": FORMAT,
            "epoch_offset_ns": None,  # until placed (collector.boot_clock)
            "time_base": "trace",
            "backend": "rocm",
            "metadata_json": json.dumps(metadata, sort_keys=True),
        })
    return runs_table(rows)


def _first(conn: sqlite3.Connection, names: dict[str, str], table: str, column: str) -> str | None:
    if table not in names or column not in column_names(conn, names[table]):
        return None
    row = conn.execute(f'select "{column}" from "{names[table]}" where "{column}" is not null limit 1').fetchone()
    return str(row[0]) if row and row[0] else None


def _commands(conn: sqlite3.Connection, names: dict[str, str]) -> dict[int, str]:
    table = names.get("rocpd_info_process")
    if table is None or not {"pid", "command"} <= column_names(conn, table):
        return {}
    return {pid: command for pid, command in conn.execute(f'select pid, command from "{table}"') if command}


def _metadata_value(conn: sqlite3.Connection, names: dict[str, str], tag: str) -> str | None:
    table = names.get("rocpd_metadata")
    if table is None or not {"tag", "value"} <= column_names(conn, table):
        return None
    row = conn.execute(f'select value from "{table}" where tag = ? limit 1', (tag,)).fetchone()
    return str(row[0]) if row else None
