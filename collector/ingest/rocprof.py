"""rocprofv3 CSV traces (`--kernel-trace --hip-trace --memory-copy-trace
--marker-trace --output-format csv`) → trace tables.

rocprofv3 writes one CSV per trace kind per process, `<prefix><kind>.csv`,
beside `<prefix>agent_info.csv`; the prefix is `<pid>_` by default (`-o
NAME` makes it `NAME_`). The files of one process are parsed together
(`parse_process`; the batch ingest groups files by `process_key`), so one
source holds the process's kernels and the HIP calls that launched them
(derive links them by correlation id, which rocprofv3 numbers per process),
and one runs row. `parse` reads one file alone. Each file is recognised by
its header row:

- `*_kernel_trace.csv` → `kernels` (kind `kernel`); RCCL kernels
  (`ncclDevKernel_Generic_4(...)`) fall in communication, the runtime's
  fill/copy kernels (`__amd_rocclr_fillBufferAligned`) in memory.
- `*_memory_copy_trace.csv` → `kernels` (kind `memcpy`), named as Kineto
  names ROCm copies (`Memcpy HtoD (Host -> Device)`).
- `*_hip_api_trace.csv`, `*_hsa_api_trace.csv`, `*_rccl_api_trace.csv` →
  `api_calls`; `*_marker_api_trace.csv` (same header, `MARKER_*` domains:
  roctx ranges) → `annotations` kind `nvtx` (`ProfilerStep#N` →
  `profiler_step`).

Decisions, each for a stated reason:

- Times: rocprofiler-sdk timestamps are nanoseconds of the monotonic
  boot-time clock (CLOCK_BOOTTIME), not the epoch, so they are kept as they
  are with `runs.time_base = 'trace'` and a NULL `epoch_offset_ns`, for
  ingest to place on the epoch where a boot of their host fits
  (`collector.boot_clock`). The files name no host; rocprofv3 writes them
  into a folder named for it (`%hostname%/%pid%_...` by default), so a
  folder named exactly like this machine makes it their host
  (`runs.host`), and any other folder leaves the host unknown: a renamed
  folder must not pose as a host.
- Device: `Agent_Id` is `GPU n` (type-relative: n is the GPU index), or
  `Agent n` / a bare number (the logical node id, CPUs included). The latter
  is turned into a GPU index with the `<pid>_agent_info.csv` written beside
  the trace (GPU agents in logical-node order); without that file the device
  is unknown (NULL) rather than a node id posing as a GPU index.
- Grid: rocprofv3's `Grid_Size_*` counts work-items; `grid` is stored in
  workgroups (ceil(grid / workgroup)), the unit CUDA and Kineto use.
- Stream: `Stream_Id` where the file has it; older files have only the HSA
  queue, which stands in (work on one queue runs in order, like a stream);
  a file with neither has a NULL stream. Only the columns a kernel cannot
  do without are required (`_KERNEL_HEADER`); the rest (stream, grid,
  bytes) are NULL where a file lacks them.
- Memory copies run on the GPU end of the copy (destination for HtoD, else
  the source).
- Source: a process's `runs.source_path` is its file prefix and a `*`
  (`/data/job/4242_*`), the same text as its `process_key`: its rows come
  from all its files (listed in `runs.metadata_json` `files`), no one of
  them, and a process ingested again keeps one source id. A file read
  alone is its own source.
- No GPU events: a process (or a file read alone) with no kernel and no
  memory copy is an error, as a Kineto trace without GPU activity is; a
  HIP API trace alone has API calls that launched nothing we can see.
- Rank: the one the file name states (`-o rank%rank%` → `rank3_...`), else
  the nearest folder named for one (`rank3`, `rank-3`, `rank_3`: `-d
  out/rank%rank%` or `rank%env{RANK}%`), else 0, with `rank_source` in
  `runs.metadata_json` saying which ("default (the trace does not say)").
  rocprofv3's default names (`%hostname%/%pid%/<pid>_...`) hold no rank.
- Sniffing is by header, but a file named like a rocprofv3 trace is
  claimed too, so a header that lacks a required column is reported
  naming the columns, not as an unknown format.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.csv as pacsv

from gpulens.collector import arrow_compute as pc
from gpulens.collector.errors import TraceError, one_line
from gpulens.collector import boot_clock
from gpulens.collector.ingest.base import ParsedTrace, build_table, ingested_now, profiler_step, rank_from_filename
from gpulens.collector.ingest.buffer import read_buffer
from gpulens.collector.ingest.categories import categorise
from gpulens.collector.ingest.kernel_collectives import add_collectives_from_kernels

FORMAT = "rocprof"

# Columns that identify each kind of file (a file may have more), in
# rocprofv3's order (error messages list the missing ones in it).
_KERNEL_HEADER = ("Kind", "Agent_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp")
_API_HEADER = ("Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp")
_COPY_HEADER = ("Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp", "End_Timestamp")
_HEADERS = {"kernel": _KERNEL_HEADER, "memory_copy": _COPY_HEADER, "api": _API_HEADER}

# Raw CSV column → contract column, per kind of file. Columns not listed are
# derived below (device, grid, names) or ignored.
_KERNEL_COLUMNS = {"Kernel_Name": "name", "Correlation_Id": "correlation_id", "Start_Timestamp": "start_ns", "End_Timestamp": "end_ns"}
_API_COLUMNS = {"Process_Id": "pid", "Thread_Id": "tid", "Function": "name", "Correlation_Id": "correlation_id", "Start_Timestamp": "start_ns", "End_Timestamp": "end_ns"}
_MARKER_COLUMNS = {"Process_Id": "pid", "Thread_Id": "tid", "Function": "name", "Start_Timestamp": "start_ns", "End_Timestamp": "end_ns"}
_COPY_COLUMNS = {"Correlation_Id": "correlation_id", "Start_Timestamp": "start_ns", "End_Timestamp": "end_ns"}

_INT_COLUMNS = (
    "Queue_Id", "Stream_Id", "Thread_Id", "Process_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp",
    "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z", "Bytes",
)
_TEXT_COLUMNS = ("Kind", "Agent_Id", "Source_Agent_Id", "Destination_Agent_Id", "Kernel_Name", "Domain", "Function", "Direction")

# Direction (with or without the MEMORY_COPY_ prefix) → Kineto's ROCm naming
# (also read by `rocpd`).
COPY_NAMES = {
    "HOST_TO_DEVICE": "Memcpy HtoD (Host -> Device)",
    "DEVICE_TO_HOST": "Memcpy DtoH (Device -> Host)",
    "DEVICE_TO_DEVICE": "Memcpy DtoD (Device -> Device)",
    "HOST_TO_HOST": "Memcpy HtoH (Host -> Host)",
}

# `<prefix><kind>.csv[.gz]`: the prefix (`4242_`, `NAME_` from `-o NAME`, or
# none) is shared by all the files of one process.
_TRACE_NAME = re.compile(
    r"^(?P<prefix>(?:.*_)?)"
    r"(?P<kind>kernel_trace|memory_copy_trace|hip_api_trace|hsa_api_trace|marker_api_trace|rccl_api_trace)"
    r"\.csv(?:\.gz)?$"
)
_NAMED_KIND = {"kernel_trace": "kernel", "memory_copy_trace": "memory_copy"}  # the rest: api
_AGENT = re.compile(r"^\s*(?:(Agent|GPU|CPU)[\s-]*)?(\d+)\s*$", re.IGNORECASE)
_PID_PREFIX = re.compile(r"^(\d+)_$")
# A folder named for a rank: `rank3`, `rank-3`, `rank_3`, or such a word
# among others (`node1.rank3`); not `rank3x` or `frank3`.
_RANK_IN_FOLDER = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?:$|[^a-z0-9])", re.IGNORECASE)
DEFAULT_RANK_SOURCE = "default (the trace does not say)"
NO_GPU_EVENTS = "no GPU events (kernels or memory copies)"


@dataclass
class _Agents:
    """GPU index and product name by logical node id, from agent_info.csv."""

    gpu_index: dict[int, int]
    gpu_name: dict[int, str]

    def device(self, agent: str | int | None) -> int | None:
        match = _AGENT.match(str(agent)) if agent is not None else None
        if not match:
            return None
        prefix, number = (match.group(1) or "agent").lower(), int(match.group(2))
        if prefix == "gpu":
            return number
        if prefix == "cpu":
            return None
        return self.gpu_index.get(number)


@dataclass
class _File:
    """One CSV of a process, read: its kind (`kernel`, `memory_copy`, `api`) and rows."""

    path: Path
    kind: str
    table: pa.Table


def sniff(head: bytes, path: Path) -> bool:
    """A rocprofv3 trace header, or a file named like a rocprofv3 trace
    (whose header `parse` then checks, naming any missing column)."""
    return _file_kind(_header(head)) is not None or _TRACE_NAME.match(path.name) is not None


def process_key(path: Path) -> str | None:
    """What all the trace files of one process share, for a file named like
    a rocprofv3 trace (`<pid>_kernel_trace.csv`): its folder and file
    prefix, `/abs/folder/4242_*` (also the process's `runs.source_path`);
    None for any other name (agent_info.csv included), read alone."""
    match = _TRACE_NAME.match(path.name)
    return None if match is None else _prefix_path(path, match.group("prefix"))


def parse(path: Path, run: str) -> ParsedTrace:
    """One file alone, as its own source."""
    return _parse_files([path], run, str(path.resolve()))


def parse_process(paths: list[Path], run: str) -> ParsedTrace:
    """All the given trace files of one process (one `process_key`) as one
    source: each contract table from all the files, one runs row."""
    paths = sorted({Path(path) for path in paths}, key=lambda path: path.name)
    if not paths:
        raise ValueError("parse_process needs at least one file")
    key = process_key(paths[0])
    if key is None and len(paths) > 1:
        raise TraceError(str(paths[0]), "not named like a rocprofv3 trace of one process (<pid>_<kind>.csv)")
    for path in paths:
        if process_key(path) != key:
            raise TraceError(str(path), f"not a rocprofv3 trace file of the process {key}")
    return _parse_files(paths, run, key or str(paths[0].resolve()))


def rank_from_path(path: Path) -> tuple[int, str]:
    """The rank a trace file's path states, and where it was found: the
    file name, else the nearest folder named for one, else 0 by default."""
    rank = rank_from_filename(path)
    if rank is not None:
        return rank, "file name"
    for folder in path.absolute().parents:
        match = _RANK_IN_FOLDER.search(folder.name)
        if match:
            return int(match.group(1)), f"folder name ({folder.name})"
    return 0, DEFAULT_RANK_SOURCE


def _parse_files(paths: list[Path], run: str, source_path: str) -> ParsedTrace:
    files = [_read_file(path) for path in paths]
    agents = _read_agents(paths[0])
    rank, rank_source = rank_from_path(paths[0])
    pieces: dict[str, list[pa.Table]] = {}
    for file in files:
        try:
            for name, columns in _contract_columns(file, agents).items():
                pieces.setdefault(name, []).append(_table(name, columns, run, rank))
        except Exception as error:
            # A bug met in one file: name that file, not the process (`4242_*`
            # is no file a user can open).
            raise TraceError(str(file.path), one_line(f"unexpected error: {type(error).__name__}: {error}")) from error
    parsed = ParsedTrace(format=FORMAT, events=sum(file.table.num_rows for file in files))
    for name, tables in pieces.items():
        table = pc.sort_by(pa.concat_tables(tables), [("start_ns", "ascending")])
        if table.num_rows:
            parsed.tables[name] = table
    if "kernels" not in parsed.tables:
        raise _no_gpu_events(files)
    add_collectives_from_kernels(parsed.tables)  # no collective args in this format
    host = boot_clock.host_from_folder(paths[0], boot_clock.BootClock.now())
    newest = max(paths, key=lambda path: path.stat().st_mtime_ns)  # a process's files are written together, at its end
    parsed.boot_clock = boot_clock.BootClockTrace(
        host, newest, no_host="the files name no host, and their folder is not named for this machine")
    parsed.tables["runs"] = _runs_table(paths, source_path, run, rank, rank_source, agents, parsed.tables, host)
    return parsed


def _no_gpu_events(files: list[_File]) -> TraceError:
    """Name where GPU events were looked for: the kernel (else memory-copy)
    trace that had none; else, for API traces alone, the first of them, with
    the option that records kernels (a process's `4242_*` is no file a user
    can open)."""
    gpu_files = [file.path for file in files if file.kind != "api"]
    if gpu_files:
        return TraceError(str(gpu_files[0]), NO_GPU_EVENTS)
    names = ", ".join(file.path.name for file in files)
    only = f"only API traces ({names})" if len(files) > 1 else "an API trace alone"
    return TraceError(str(files[0].path), f"{NO_GPU_EVENTS}: {only}; rocprofv3 records kernels with --kernel-trace")


def _read_file(path: Path) -> _File:
    data = read_buffer(path)
    header = _header(data[:65536])
    kind = _file_kind(header)
    if kind is not None:
        return _File(path, kind, _read_csv(path, data))
    if not data.strip():
        raise TraceError(str(path), "empty file")
    match = _TRACE_NAME.match(path.name)
    if match is None:
        raise TraceError(str(path), "not a rocprofv3 kernel, API or memory-copy CSV trace (unknown header)")
    required = _HEADERS[_NAMED_KIND.get(match.group("kind"), "api")]
    missing = [column for column in required if column not in header]
    columns = f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    raise TraceError(str(path), f"rocprofv3 {match.group('kind')} CSV lacks the {columns}")


# --- one function per kind of file: contract columns -------------------------------

Columns = dict[str, Any]  # contract column → list or Arrow array


def _contract_columns(file: _File, agents: _Agents) -> dict[str, Columns]:
    """The contract tables one file gives, as columns."""
    table = file.table
    if file.kind == "kernel":
        return {"kernels": _kernel_columns(table, agents)}
    if file.kind == "memory_copy":
        return {"kernels": _copy_columns(table, agents)}
    is_marker = pc.fill_null(pc.starts_with(pc.utf8_upper(table.column("Domain")), "MARKER"), False)
    return {
        "api_calls": _renamed(pc.filter(table, pc.invert(is_marker)), _API_COLUMNS),
        "annotations": _marker_columns(pc.filter(table, is_marker)),
    }


def _kernel_columns(table: pa.Table, agents: _Agents) -> Columns:
    columns = _renamed(table, _KERNEL_COLUMNS)
    columns["device"] = _mapped(table.column("Agent_Id"), agents.device, pa.int32())
    # Older files have no stream; their HSA queue stands in. A file with
    # neither (only the required columns) still has its kernels: stream NULL.
    columns["stream"] = _column(table, "Stream_Id" if "Stream_Id" in table.column_names else "Queue_Id")
    columns["kind"] = pa.repeat("kernel", table.num_rows)
    columns["category"] = _mapped(table.column("Kernel_Name"), lambda name: categorise(name, "kernel"), pa.string())
    workgroup = [_column(table, f"Workgroup_Size_{axis}") for axis in "XYZ"]
    items = [_column(table, f"Grid_Size_{axis}") for axis in "XYZ"]
    columns["grid"] = _dims_text([_ceil_div(n, size) for n, size in zip(items, workgroup)])
    columns["block"] = _dims_text(workgroup)
    return columns


def _copy_columns(table: pa.Table, agents: _Agents) -> Columns:
    columns = _renamed(table, _COPY_COLUMNS)
    direction = pc.replace_substring_regex(table.column("Direction"), "^MEMORY_COPY_", "")
    # The copy belongs to its GPU end: the destination of a HtoD copy, else the source.
    gpu_end = pc.if_else(pc.equal(direction, "HOST_TO_DEVICE"), table.column("Destination_Agent_Id"), table.column("Source_Agent_Id"))
    columns["device"] = _mapped(gpu_end, agents.device, pa.int32())
    columns["stream"] = _column(table, "Stream_Id")
    columns["name"] = _mapped(direction, lambda d: COPY_NAMES.get(d, "Memcpy"), pa.string())
    columns["kind"] = pa.repeat("memcpy", table.num_rows)
    columns["category"] = pa.repeat("memory", table.num_rows)
    columns["bytes"] = _column(table, "Bytes")
    return columns


def _marker_columns(table: pa.Table) -> Columns:
    """roctx ranges, from the MARKER_* rows of an API trace."""
    columns = _renamed(table, _MARKER_COLUMNS)
    columns["step"] = _mapped(table.column("Function"), profiler_step, pa.int64())
    columns["kind"] = pc.if_else(pc.is_null(columns["step"]), "nvtx", "profiler_step")
    return columns


def _runs_table(paths: list[Path], source_path: str, run: str, rank: int, rank_source: str, agents: _Agents,
                tables: dict[str, pa.Table], host: str | None) -> pa.Table:
    match = _TRACE_NAME.match(paths[0].name)
    pid_match = _PID_PREFIX.match(match.group("prefix")) if match else None
    pids = set()
    for name in ("api_calls", "annotations"):
        if name in tables:
            pids |= set(pc.unique(tables[name].column("pid")).to_pylist()) - {None}
    pid = int(pid_match.group(1)) if pid_match else (pids.pop() if len(pids) == 1 else None)
    devices = set(pc.unique(tables["kernels"].column("device")).to_pylist())
    names = {agents.gpu_name.get(device) for device in devices} - {None}
    metadata = {
        "gpus": {str(index): agents.gpu_name.get(index) for index in sorted(set(agents.gpu_index.values()))},
        "rank_source": rank_source,
        "files": [path.name for path in paths],
    }
    row = {
        "run": run,
        "rank": rank,
        "pid": pid,
        "device_name": names.pop() if len(names) == 1 else None,
        "source_path": source_path,
        "source_format": FORMAT,
        "host": host,
        "epoch_offset_ns": None,  # until placed (collector.boot_clock)
        "time_base": "trace",
        "backend": "rocm",
        "metadata_json": json.dumps(metadata, sort_keys=True),
    }
    columns = {name: [value] for name, value in row.items()}
    columns["ingested_at"] = ingested_now()
    return build_table("runs", columns)


# --- helpers ----------------------------------------------------------------------


def _header(head: bytes) -> set[str]:
    first_line = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    try:
        return {cell.strip() for cell in next(csv.reader([first_line]))}
    except (csv.Error, StopIteration):
        return set()


def _file_kind(header: set[str]) -> str | None:
    for kind, required in _HEADERS.items():
        if header.issuperset(required):
            return kind
    return None


def _read_csv(path: Path, data: bytes | bytearray) -> pa.Table:
    types = {name: pa.int64() for name in _INT_COLUMNS} | {name: pa.string() for name in _TEXT_COLUMNS}
    try:
        return pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(column_types=types))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        # e.g. a row cut short by a crash, or text where a number belongs
        problem = _first_bad_row(data) or str(error).splitlines()[0]
        raise TraceError(str(path), f"malformed rocprofv3 CSV ({problem})") from error


_INTEGER = re.compile(r"\s*[-+]?\d+\s*")


def _first_bad_row(data: bytes | bytearray) -> str | None:
    """Where Arrow refused the CSV, which it does not say: the first row with
    a field count other than the header's, or text in an integer column;
    None where neither is found (Arrow's own message is then given)."""
    # Decoded as read, not whole: the file may be gigabytes.
    rows = csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline=""))
    header = next(rows, [])
    integers = [(index, name) for index, name in enumerate(header) if name in _INT_COLUMNS]
    for row in rows:
        if not row:
            continue
        if len(row) != len(header):
            return f"line {rows.line_num}: {len(row)} fields where the header has {len(header)}"
        for index, name in integers:
            if row[index] and not _INTEGER.fullmatch(row[index]):
                return f"line {rows.line_num}: {name} is {row[index][:40]!r}, not an integer"
    return None


def _read_agents(path: Path) -> _Agents:
    """GPU agents from the `<prefix>agent_info.csv` beside the trace, if any."""
    gpu_index: dict[int, int] = {}
    gpu_name: dict[int, str] = {}
    match = _TRACE_NAME.match(path.name)
    if not match:
        return _Agents(gpu_index, gpu_name)
    prefix = match.group("prefix")
    candidates = [path.with_name(f"{prefix}agent_info.csv"), path.with_name(f"{prefix}agent_info.csv.gz")]
    info = next((candidate for candidate in candidates if candidate.is_file()), None)
    if info is None:
        return _Agents(gpu_index, gpu_name)
    text = read_buffer(info).decode("utf-8", errors="replace")
    gpus = sorted(
        (int(row["Logical_Node_Id"]), row.get("Product_Name") or row.get("Name") or None)
        for row in csv.DictReader(io.StringIO(text))
        if (row.get("Agent_Type") or "").upper() == "GPU" and (row.get("Logical_Node_Id") or "").isdigit()
    )
    for index, (node, name) in enumerate(gpus):
        gpu_index[node] = index
        if name:
            gpu_name[index] = name
    return _Agents(gpu_index, gpu_name)


def _renamed(table: pa.Table, mapping: dict[str, str]) -> Columns:
    """The raw columns `mapping` names, under their contract names, plus dur_ns."""
    columns: Columns = {target: table.column(source) for source, target in mapping.items() if source in table.column_names}
    columns["dur_ns"] = pc.subtract(columns["end_ns"], columns["start_ns"])
    return columns


def _column(table: pa.Table, name: str) -> pa.ChunkedArray | pa.Array:
    """A raw column, or NULLs where this file's layout lacks it."""
    if name in table.column_names:
        return table.column(name)
    return pa.nulls(table.num_rows, type=pa.int64())


def _mapped(values: pa.ChunkedArray | pa.Array, function: Callable[[Any], Any], type: pa.DataType) -> pa.Array:
    """`function` over `values`, called once per distinct value (they repeat a lot); NULL stays NULL."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = pc.dictionary_encode(values)
    mapped = pa.array([function(value) for value in encoded.dictionary.to_pylist()], type=type)
    return pc.take(mapped, encoded.indices)


def _table(name: str, columns: Columns, run: str, rank: int) -> pa.Table:
    rows = len(columns["start_ns"])
    return build_table(name, {**columns, "run": [run] * rows, "rank": [rank] * rows}, num_rows=rows)


def _prefix_path(path: Path, prefix: str) -> str:
    """A process's files as one path: its folder and file prefix, `*`."""
    return str(path.parent.resolve() / f"{prefix}*")



def _ceil_div(numerator: Any, denominator: Any) -> Any:
    """ceil(n / d) for non-negative integers; NULL where d is 0 or missing."""
    denominator = pc.if_else(pc.greater(denominator, 0), denominator, None)
    return pc.divide(pc.subtract(pc.add(numerator, denominator), 1), denominator)


def _dims_text(axes: list[Any]) -> Any:
    """`[x, y, z]`, the launch-dimension text every format writes; NULL if an axis is."""
    joined = pc.binary_join_element_wise(*(pc.cast(axis, pa.string()) for axis in axes), ", ")
    return pc.binary_join_element_wise("[", joined, "]", "")
