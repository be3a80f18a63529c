"""rocprofv3 JSON (`rocprofv3 --output-format json`: rocprofiler-sdk's
`<pid>_results.json`, one document per process) → trace tables, the same
rows as the rocpd database (`rocpd`) and the CSV files (`rocprof`) of the
same run give.

The document is `{"rocprofiler-sdk-tool": [ENTRY, ...]}`, an entry per
process (an older writer gave the entry itself, not a list). What is read
from an entry (rocprofiler-sdk's serialization of its buffer records):

- `metadata.pid`: the process;
- `agents`: `id.handle`, `type` (2 or "GPU": a GPU), `logical_node_type_id`
  (the GPU index; else the GPUs in `node_id` order), `product_name` /
  `name`;
- `kernel_symbols`: `kernel_id` → `formatted_kernel_name`, else
  `kernel_name` (a list of them, or an object keyed by id);
- `strings.buffer_records`: one `{kind, operations}` per buffer tracing
  kind, in the kind's enum order: a record's `kind` (a number) and
  `operation` (an index) name it (`HIP_RUNTIME_API`, `hipLaunchKernel`;
  `MEMORY_COPY`, `MEMORY_COPY_HOST_TO_DEVICE`);
- `buffer_records.kernel_dispatch` → `kernels` (kind `kernel`):
  `dispatch_info.agent_id` (the device), `queue_id` (the stream where the
  record has no `stream_id`, as the CSV reader does: work on one queue runs
  in order), `kernel_id`, `grid_size` and `workgroup_size` (grid stored in
  workgroups, as CUDA and Kineto count it); RCCL kernels fall in
  communication (`collector.ingest.categories`), and a collective row is
  derived from each (`kernel_collectives`), as for the other rocprofv3
  outputs;
- `buffer_records.memory_copy` → `kernels` (kind `memcpy`), named as Kineto
  names ROCm copies, on the GPU end of the copy, with `bytes`;
- `buffer_records.hip_api`, `hsa_api`, `rccl_api` → `api_calls` (`thread_id`
  is the tid);
- every record's `correlation_id.internal` is the correlation id, shared by
  a kernel and the HIP call that launched it.

Other record kinds (`marker_api`: roctx ranges, whose messages the buffer
records do not carry; scratch memory, page faults, counters) are counted in
`runs.metadata_json` `skipped_records`, not read.

Times are nanoseconds of the boot-time clock, as in the other rocprofv3
outputs: kept so (`runs.time_base = 'trace'`), and placed on the epoch by
ingest where a boot of their host fits (`collector.boot_clock`). The
document names no host: a folder named like this machine makes it the host,
as for the CSV files. Ranks as for the CSV files (`rocprof.rank_from_path`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from gpulens.collector import boot_clock
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import ParsedTrace, open_maybe_gzip
from gpulens.collector.ingest.categories import categorise
from gpulens.collector.ingest.kernel_collectives import add_collectives_from_kernels
from gpulens.collector.ingest.rocprof import COPY_NAMES, NO_GPU_EVENTS, rank_from_path
from gpulens.collector.ingest.sqlite_db import Columns, gpu_and_cpu_tables, processes_of, rank_notes, runs_table

FORMAT = "rocprof_json"

_TOOL_KEY = b'"rocprofiler-sdk-tool"'
# Buffer records read as runtime calls.
_API_RECORDS = ("hip_api", "hsa_api", "rccl_api")
_READ_RECORDS = ("kernel_dispatch", "memory_copy", *_API_RECORDS)
_GPU_AGENT_TYPES = (2, "GPU", "ROCPROFILER_AGENT_TYPE_GPU")


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object whose first key is rocprofiler-sdk's tool section."""
    text = head.lstrip()
    return text.startswith(b"{") and text[1:].lstrip().startswith(_TOOL_KEY)


def parse(path: Path, run: str) -> ParsedTrace:
    document = _load(path)
    section = document.get("rocprofiler-sdk-tool") if isinstance(document, dict) else None
    entries = [section] if isinstance(section, dict) else section
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise TraceError(str(path), '"rocprofiler-sdk-tool" is not a list of process entries: not rocprofv3 JSON')
    try:
        return _parse_entries(entries, path, run)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise TraceError(str(path), f"unexpected rocprofv3 JSON ({type(error).__name__}: {error})") from None


def _load(path: Path) -> Any:
    try:
        with open_maybe_gzip(path) as handle:
            return orjson.loads(handle.read())
    except orjson.JSONDecodeError as error:
        raise TraceError(str(path), f"invalid JSON: {error}") from None
    except OSError as error:
        raise TraceError(str(path), f"cannot read: {error.strerror or error}") from None


def _parse_entries(entries: list[dict[str, Any]], path: Path, run: str) -> ParsedTrace:
    gpu: list[Columns] = [{}, {}]
    api: Columns = {}
    skipped: dict[str, int] = {}
    gpu_names: dict[int, str] = {}
    commands: dict[int, str] = {}
    events = 0
    for entry in entries:
        pid = _pid(entry)
        agents = _Agents(entry.get("agents") or [])
        gpu_names.update(agents.gpu_name)
        names = _OperationNames(entry.get("strings") or {})
        records = entry.get("buffer_records") or {}
        _extend(gpu[0], _kernels(records.get("kernel_dispatch") or [], pid, agents, _symbols(entry)))
        _extend(gpu[1], _memory_copies(records.get("memory_copy") or [], pid, agents, names))
        for kind in _API_RECORDS:
            _extend(api, _api_calls(records.get(kind) or [], pid, names))
        for kind, rows in records.items():
            if isinstance(rows, list):
                events += len(rows) if kind in _READ_RECORDS else 0
                if kind not in _READ_RECORDS and rows:
                    skipped[kind] = skipped.get(kind, 0) + len(rows)
        command = (entry.get("metadata") or {}).get("command")
        if pid is not None and command:
            commands[pid] = " ".join(command) if isinstance(command, list) else str(command)
    gpu = [columns for columns in gpu if columns.get("start_ns")]
    if not gpu:
        raise TraceError(str(path), NO_GPU_EVENTS)
    processes = processes_of(gpu, *rank_from_path(path))
    parsed = ParsedTrace(format=FORMAT, events=events)
    parsed.tables = gpu_and_cpu_tables(gpu, {"api_calls": api}, run, processes)
    add_collectives_from_kernels(parsed.tables)  # no collective args in this format
    host = boot_clock.host_from_folder(path, boot_clock.BootClock.now())
    parsed.boot_clock = boot_clock.BootClockTrace(
        host, path, no_host="the file names no host, and its folder is not named for this machine")
    without_gpu = processes.left_out(set(api.get("pid", ())))
    rows = []
    for pid, rank in sorted(processes.rank_by_pid.items(), key=lambda item: item[1]) or [(None, processes.rank)]:
        devices = {device for columns in gpu for row_pid, device in zip(columns["pid"], columns["device"])
                   if row_pid == pid and device is not None}
        device_names = {gpu_names[device] for device in devices if device in gpu_names}
        metadata: dict[str, Any] = {
            "gpus": {str(index): name for index, name in sorted(gpu_names.items())},
            "skipped_records": dict(sorted(skipped.items())),
            "pids": [] if pid is None else [pid],
            **rank_notes(processes, without_gpu),
        }
        if pid in commands:
            metadata["command"] = commands[pid]
        rows.append({
            "run": run, "rank": rank, "host": host, "pid": pid,
            "device_name": device_names.pop() if len(device_names) == 1 else None,
            "source_path": str(path.resolve()), "source_format": FORMAT,
            "epoch_offset_ns": None,  # until placed (collector.boot_clock)
            "time_base": "trace", "backend": "rocm",
            "metadata_json": json.dumps(metadata, sort_keys=True),
        })
    parsed.tables["runs"] = runs_table(rows)
    return parsed


def _extend(into: Columns, columns: Columns) -> None:
    for name, values in columns.items():
        into.setdefault(name, []).extend(values)


def _pid(entry: dict[str, Any]) -> int | None:
    pid = (entry.get("metadata") or {}).get("pid")
    return int(pid) if isinstance(pid, int) or (isinstance(pid, str) and pid.isdigit()) else None


class _Agents:
    """GPU index and product name of each agent, by its handle."""

    def __init__(self, agents: list[dict[str, Any]]) -> None:
        self.gpu_index: dict[int, int] = {}
        self.gpu_name: dict[int, str] = {}
        gpus = [agent for agent in agents if agent.get("type") in _GPU_AGENT_TYPES]
        for order, agent in enumerate(sorted(gpus, key=lambda agent: (agent.get("node_id") or 0))):
            index = agent.get("logical_node_type_id")
            index = int(index) if isinstance(index, int) else order
            self.gpu_index[_handle(agent.get("id"))] = index
            name = agent.get("product_name") or agent.get("name")
            if name:
                self.gpu_name.setdefault(index, str(name))

    def device(self, agent_id: Any) -> int | None:
        return self.gpu_index.get(_handle(agent_id))


def _handle(value: Any) -> Any:
    """An id serialised as `{"handle": N}`, or the bare number."""
    return value.get("handle") if isinstance(value, dict) else value


def _correlation(record: dict[str, Any]) -> int | None:
    value = record.get("correlation_id")
    internal = value.get("internal") if isinstance(value, dict) else value
    return int(internal) if isinstance(internal, int) else None


class _OperationNames:
    """A buffer record's kind and operation, named (`strings.buffer_records`:
    one `{kind, operations}` per kind, in the kind enum's order)."""

    def __init__(self, strings: dict[str, Any]) -> None:
        self.kinds: list[dict[str, Any]] = [k for k in strings.get("buffer_records") or [] if isinstance(k, dict)]

    def name(self, record: dict[str, Any]) -> str | None:
        kind, operation = record.get("kind"), record.get("operation")
        if not isinstance(kind, int) or not 0 <= kind < len(self.kinds):
            return None
        operations = self.kinds[kind].get("operations") or []
        return operations[operation] if isinstance(operation, int) and 0 <= operation < len(operations) else None


def _symbols(entry: dict[str, Any]) -> dict[int, str]:
    """kernel_id → the kernel's name."""
    symbols = entry.get("kernel_symbols") or []
    items = symbols.values() if isinstance(symbols, dict) else symbols
    names = {}
    for symbol in items:
        if isinstance(symbol, dict) and isinstance(symbol.get("kernel_id"), int):
            names[symbol["kernel_id"]] = symbol.get("formatted_kernel_name") or symbol.get("kernel_name")
    return names


def _times(record: dict[str, Any]) -> tuple[int, int]:
    return int(record["start_timestamp"]), int(record["end_timestamp"])


def _kernels(records: list[dict[str, Any]], pid: int | None, agents: _Agents, symbols: dict[int, str]) -> Columns:
    columns: Columns = {name: [] for name in ("pid", "device", "stream", "name", "category", "kind", "start_ns", "end_ns",
                                              "dur_ns", "correlation_id", "grid", "block")}
    for record in records:
        info = record["dispatch_info"]
        start, end = _times(record)
        name = symbols.get(info.get("kernel_id")) or f"kernel {info.get('kernel_id')}"
        stream = _handle(record.get("stream_id")) if record.get("stream_id") is not None else _handle(info.get("queue_id"))
        block = [int((info.get("workgroup_size") or {}).get(axis) or 0) for axis in "xyz"]
        items = [int((info.get("grid_size") or {}).get(axis) or 0) for axis in "xyz"]
        grid = [-(-n // b) if b else None for n, b in zip(items, block)]
        columns["pid"].append(pid)
        columns["device"].append(agents.device(info.get("agent_id")))
        columns["stream"].append(stream)
        columns["name"].append(name)
        columns["category"].append(categorise(name, "kernel"))
        columns["kind"].append("kernel")
        columns["start_ns"].append(start)
        columns["end_ns"].append(end)
        columns["dur_ns"].append(end - start)
        columns["correlation_id"].append(_correlation(record))
        columns["grid"].append(None if None in grid else "[" + ", ".join(map(str, grid)) + "]")
        columns["block"].append("[" + ", ".join(map(str, block)) + "]")
    return columns


def _memory_copies(records: list[dict[str, Any]], pid: int | None, agents: _Agents, names: _OperationNames) -> Columns:
    columns: Columns = {name: [] for name in ("pid", "device", "name", "category", "kind", "start_ns", "end_ns", "dur_ns",
                                              "correlation_id", "bytes")}
    for record in records:
        direction = (names.name(record) or "").removeprefix("MEMORY_COPY_")
        start, end = _times(record)
        source, destination = agents.device(record.get("src_agent_id")), agents.device(record.get("dst_agent_id"))
        columns["pid"].append(pid)
        # The copy belongs to its GPU end: the destination of a HtoD copy, else the source.
        columns["device"].append(destination if direction == "HOST_TO_DEVICE" else source)
        columns["name"].append(COPY_NAMES.get(direction, "Memcpy"))
        columns["category"].append("memory")
        columns["kind"].append("memcpy")
        columns["start_ns"].append(start)
        columns["end_ns"].append(end)
        columns["dur_ns"].append(end - start)
        columns["correlation_id"].append(_correlation(record))
        columns["bytes"].append(record.get("bytes"))
    return columns


def _api_calls(records: list[dict[str, Any]], pid: int | None, names: _OperationNames) -> Columns:
    columns: Columns = {name: [] for name in ("pid", "tid", "name", "start_ns", "end_ns", "dur_ns", "correlation_id")}
    for record in records:
        start, end = _times(record)
        columns["pid"].append(pid)
        columns["tid"].append(record.get("thread_id"))
        columns["name"].append(names.name(record))
        columns["start_ns"].append(start)
        columns["end_ns"].append(end)
        columns["dur_ns"].append(end - start)
        columns["correlation_id"].append(_correlation(record))
    return columns
