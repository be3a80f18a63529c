"""rocprofv3 CSV traces (`--kernel-trace --hip-trace --memory-copy-trace
--marker-trace --output-format csv`) → trace tables.

rocprofv3 writes one CSV per trace kind, named `<pid>_<kind>.csv`; each file
is ingested on its own and recognised by its header row:

- `*_kernel_trace.csv` → `kernels` (kind `kernel`); RCCL kernels
  (`ncclDevKernel_Generic_4(...)`) fall in communication.
- `*_memory_copy_trace.csv` → `kernels` (kind `memcpy`), named as Kineto
  names ROCm copies (`Memcpy HtoD (Host -> Device)`).
- `*_hip_api_trace.csv`, `*_hsa_api_trace.csv`, `*_rccl_api_trace.csv` →
  `api_calls`; `*_marker_api_trace.csv` (same header, `MARKER_*` domains:
  roctx ranges) → `annotations` kind `nvtx` (`ProfilerStep#N` →
  `profiler_step`).

Decisions, each for a stated reason:

- Times: rocprofiler-sdk timestamps are nanoseconds of the monotonic
  boot-time clock (CLOCK_BOOTTIME), not the epoch, so they are kept as they
  are with `runs.time_base = 'trace'` and a NULL `epoch_offset_ns`.
- Device: `Agent_Id` is `GPU n` (type-relative: n is the GPU index), or
  `Agent n` / a bare number (the logical node id, CPUs included). The latter
  is turned into a GPU index with the `<pid>_agent_info.csv` written beside
  the trace (GPU agents in logical-node order); without that file the device
  is unknown (NULL) rather than a node id posing as a GPU index.
- Grid: rocprofv3's `Grid_Size_*` counts work-items; `grid` is stored in
  workgroups (ceil(grid / workgroup)), the unit CUDA and Kineto use.
- Stream: `Stream_Id` where the file has it; older files have only the HSA
  queue, which stands in (work on one queue runs in order, like a stream).
- Memory copies run on the GPU end of the copy (destination for HtoD, else
  the source).

The rank comes from the file name or is 0.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from collector.errors import TraceError
from collector.ingest.base import ParsedTrace, build_table, rank_from_filename
from collector.ingest.buffer import read_buffer
from collector.ingest.categories import categorise
from collector.schema import TS_TYPE

FORMAT = "rocprof"

# Columns that identify each kind of file (a file may have more).
_KERNEL_HEADER = {"Kind", "Agent_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp"}
_API_HEADER = {"Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"}
_COPY_HEADER = {"Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp", "End_Timestamp"}

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

# Direction (with or without the MEMORY_COPY_ prefix) → Kineto's ROCm naming.
_COPY_NAMES = {
    "HOST_TO_DEVICE": "Memcpy HtoD (Host -> Device)",
    "DEVICE_TO_HOST": "Memcpy DtoH (Device -> Host)",
    "DEVICE_TO_DEVICE": "Memcpy DtoD (Device -> Device)",
    "HOST_TO_HOST": "Memcpy HtoH (Host -> Host)",
}

_TRACE_SUFFIX = re.compile(r"(kernel_trace|memory_copy_trace|hip_api_trace|hsa_api_trace|marker_api_trace|rccl_api_trace)\.csv(\.gz)?$")
_AGENT = re.compile(r"^\s*(?:(Agent|GPU|CPU)[\s-]*)?(\d+)\s*$", re.IGNORECASE)
_PID_PREFIX = re.compile(r"^(\d+)_")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)")


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


def sniff(head: bytes, path: Path) -> bool:
    return _file_kind(_header(head)) is not None


def parse(path: Path, run: str) -> ParsedTrace:
    data = read_buffer(path)
    kind = _file_kind(_header(data[:65536]))
    if kind is None:
        raise TraceError(str(path), "not a rocprofv3 kernel, API or memory-copy CSV trace (unknown header)")
    table = _read_csv(path, data)
    agents = _read_agents(path)
    rank = rank_from_filename(path)
    rank = 0 if rank is None else rank

    if kind == "kernel":
        produced = {"kernels": _kernel_columns(table, agents)}
    elif kind == "memory_copy":
        produced = {"kernels": _copy_columns(table, agents)}
    else:
        is_marker = pc.fill_null(pc.starts_with(pc.utf8_upper(table.column("Domain")), "MARKER"), False)
        produced = {
            "api_calls": _renamed(table.filter(pc.invert(is_marker)), _API_COLUMNS),
            "annotations": _marker_columns(table.filter(is_marker)),
        }
    parsed = ParsedTrace(format=FORMAT, events=table.num_rows)
    for name, columns in produced.items():
        built = _sorted_table(name, columns, run, rank)
        if built.num_rows:
            parsed.tables[name] = built
    parsed.tables["runs"] = _runs_table(path, run, rank, table, agents, parsed.tables.get("kernels"))
    return parsed


# --- one function per kind of file: contract columns -------------------------------

Columns = dict[str, Any]  # contract column → list or Arrow array


def _kernel_columns(table: pa.Table, agents: _Agents) -> Columns:
    columns = _renamed(table, _KERNEL_COLUMNS)
    columns["device"] = _mapped(table.column("Agent_Id"), agents.device, pa.int32())
    # Older files have no stream; their HSA queue stands in.
    columns["stream"] = table.column("Stream_Id" if "Stream_Id" in table.column_names else "Queue_Id")
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
    columns["name"] = _mapped(direction, lambda d: _COPY_NAMES.get(d, "Memcpy"), pa.string())
    columns["kind"] = pa.repeat("memcpy", table.num_rows)
    columns["category"] = pa.repeat("memory", table.num_rows)
    columns["bytes"] = _column(table, "Bytes")
    return columns


def _marker_columns(table: pa.Table) -> Columns:
    """roctx ranges, from the MARKER_* rows of an API trace."""
    columns = _renamed(table, _MARKER_COLUMNS)
    columns["step"] = _mapped(table.column("Function"), _profiler_step, pa.int64())
    columns["kind"] = pc.if_else(pc.is_null(columns["step"]), "nvtx", "profiler_step")
    return columns


def _runs_table(path: Path, run: str, rank: int, table: pa.Table, agents: _Agents, kernels: pa.Table | None) -> pa.Table:
    pid_match = _PID_PREFIX.match(path.name)
    pids = sorted(set(pc.unique(_column(table, "Process_Id")).to_pylist()) - {None})
    pid = int(pid_match.group(1)) if pid_match else (pids[0] if len(pids) == 1 else None)
    devices = set(pc.unique(kernels.column("device")).to_pylist()) if kernels is not None else set()
    names = {agents.gpu_name.get(device) for device in devices} - {None}
    metadata = {"gpus": {str(index): agents.gpu_name.get(index) for index in sorted(set(agents.gpu_index.values()))}}
    row = {
        "run": run,
        "rank": rank,
        "pid": pid,
        "device_name": names.pop() if len(names) == 1 else None,
        "source_path": str(path.resolve()),
        "source_format": FORMAT,
        "epoch_offset_ns": None,
        "time_base": "trace",
        "backend": "rocm",
        "metadata_json": json.dumps(metadata, sort_keys=True),
    }
    columns = {name: [value] for name, value in row.items()}
    columns["ingested_at"] = pa.array([time.time_ns() // 1000], type=pa.int64()).cast(TS_TYPE)
    return build_table("runs", columns)


# --- helpers ----------------------------------------------------------------------


def _header(head: bytes) -> set[str]:
    first_line = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    try:
        return {cell.strip() for cell in next(csv.reader([first_line]))}
    except (csv.Error, StopIteration):
        return set()


def _file_kind(header: set[str]) -> str | None:
    if _KERNEL_HEADER <= header:
        return "kernel"
    if _COPY_HEADER <= header:
        return "memory_copy"
    if _API_HEADER <= header:
        return "api"
    return None


def _read_csv(path: Path, data: bytes | bytearray) -> pa.Table:
    types = {name: pa.int64() for name in _INT_COLUMNS} | {name: pa.string() for name in _TEXT_COLUMNS}
    try:
        return pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(column_types=types))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        # e.g. a row cut short by a crash, or text where a number belongs
        raise TraceError(str(path), f"malformed rocprofv3 CSV ({str(error).splitlines()[0]})") from error


def _read_agents(path: Path) -> _Agents:
    """GPU agents from the `<prefix>agent_info.csv` beside the trace, if any."""
    gpu_index: dict[int, int] = {}
    gpu_name: dict[int, str] = {}
    match = _TRACE_SUFFIX.search(path.name)
    if not match:
        return _Agents(gpu_index, gpu_name)
    prefix = path.name[: match.start()]
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
    return mapped.take(encoded.indices)


def _sorted_table(name: str, columns: Columns, run: str, rank: int) -> pa.Table:
    rows = len(columns["start_ns"])
    table = build_table(name, {**columns, "run": [run] * rows, "rank": [rank] * rows}, num_rows=rows)
    return table.sort_by([("start_ns", "ascending")])


def _profiler_step(name: str | None) -> int | None:
    match = _PROFILER_STEP.match(name or "")
    return int(match.group(1)) if match else None


def _ceil_div(numerator: Any, denominator: Any) -> Any:
    """ceil(n / d) for non-negative integers; NULL where d is 0 or missing."""
    denominator = pc.if_else(pc.greater(denominator, 0), denominator, None)
    return pc.divide(pc.subtract(pc.add(numerator, denominator), 1), denominator)


def _dims_text(axes: list[Any]) -> Any:
    """`[x, y, z]`, the launch-dimension text every format writes; NULL if an axis is."""
    joined = pc.binary_join_element_wise(*(pc.cast(axis, pa.string()) for axis in axes), ", ")
    return pc.binary_join_element_wise("[", joined, "]", "")
