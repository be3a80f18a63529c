"""What every trace-format parser returns, and helpers to build it.

A format module (`kineto`, `nsys`, `rocprof`, `nccl_log`) exposes:

    FORMAT: str                                   # e.g. "kineto"
    def sniff(head: bytes, path: Path) -> bool    # from content, not name
    def parse(path: Path, run: str) -> ParsedTrace

`head` is the first 64 KiB of the (decompressed) file. `parse` raises
`collector.errors.TraceError(path, problem)` for anything wrong with the
input; the orchestrator (`collector.ingest`) turns that into one line and
writes nothing for that file.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.arrays import replace_column
from gpulens.collector.ingest.buffer import GZIP_MAGIC
from gpulens.collector.schema import TRACE_SCHEMAS, TS_TYPE

if TYPE_CHECKING:  # only rocprofv3 traces need it: kept off Kineto's import path
    from gpulens.collector.boot_clock import BootClockTrace


@dataclass
class ParsedTrace:
    """The normalised tables of one source file.

    `tables` maps a name from `collector.schema.TRACE_SCHEMAS` to an Arrow
    table with exactly that schema. A table with no rows may be absent.
    `runs` has one row per rank found in the file (usually one).
    """

    format: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    # Raw records read from the source (trace events, rows, log lines), for
    # throughput figures; 0 where a parser does not count them.
    events: int = 0
    # What the user should know of a file that was still ingested (lines that
    # could not be read): one line each, printed after the file's own line.
    warnings: list[str] = field(default_factory=list)
    # Times on the boot clock (rocprofv3), to be placed on the epoch where a
    # boot fits (`collector.boot_clock.place`, before the tables are written).
    boot_clock: BootClockTrace | None = None

    def rows(self, table: str) -> int:
        return self.tables[table].num_rows if table in self.tables else 0


# The timed tables, with what one row and several rows of each are called.
_TIMED_TABLES = {"kernels": ("GPU activity", "GPU activities"), "api_calls": ("runtime call", "runtime calls"),
                 "cpu_ops": ("CPU op", "CPU ops"), "annotations": ("annotation", "annotations")}


def ingested_now(rows: int = 1) -> pa.Array:
    """`runs.ingested_at` for `rows` rows: this moment, in the column's type."""
    return pc.cast(pa.array([time.time_ns() // 1000] * rows, type=pa.int64()), TS_TYPE)


def with_host(parsed: ParsedTrace, host: str | None) -> ParsedTrace:
    """`parsed` with `host` in its runs rows that name none, and as the host
    of its boot-clock times where they have none (`gpulens ingest --host`);
    a host the trace names stays."""
    if not host:
        return parsed
    runs = parsed.tables.get("runs")
    if runs is not None and runs.num_rows:
        filled = pc.fill_null(runs["host"], pa.scalar(host, runs.schema.field("host").type))
        parsed.tables["runs"] = replace_column(runs, "host", filled)
    if parsed.boot_clock is not None and parsed.boot_clock.host is None:
        parsed.boot_clock = dataclasses.replace(parsed.boot_clock, host=host)
    return parsed


def timing_warnings(tables: dict[str, pa.Table]) -> list[str]:
    """What is wrong with the times of a parsed source's rows, one line per
    table and kind: rows that end before they start, and rows with no start
    (an event without a readable `ts`). They are kept as read (dropping them
    would hide a broken clock), but analyses count them as they are, so the
    user is told."""
    warnings = []
    for table, (one, several) in _TIMED_TABLES.items():
        data = tables.get(table)
        if data is None or not data.num_rows:
            continue
        negative = pc.sum(pc.less(data.column("dur_ns"), 0)).as_py() or 0
        no_start = data.column("start_ns").null_count
        if negative:
            rows = f"{negative:,} {one} ends" if negative == 1 else f"{negative:,} {several} end"
            warnings.append(f"{rows} before {'it starts' if negative == 1 else 'they start'} ({table}, negative "
                            "duration), kept as read: the trace's clock or the profiler that wrote it is off")
        if no_start:
            rows = f"{no_start:,} {one} has" if no_start == 1 else f"{no_start:,} {several} have"
            warnings.append(f"{rows} no start time ({table}: ts missing or not a number), kept but left out "
                            "of every timeline")
    return warnings


def odd_values_warning(dropped: dict[str, int]) -> str | None:
    """The one warning counting the odd values a reader set to NULL, by
    `table.column`: `3 odd values dropped, the rest kept (collectives.bytes 1,
    ...)`; None where there were none."""
    dropped = {what: n for what, n in dropped.items() if n}
    if not dropped:
        return None
    total = sum(dropped.values())
    by_column = ", ".join(f"{what} {n:,}" for what, n in sorted(dropped.items()))
    return f"{total:,} odd value{'s' if total != 1 else ''} dropped, the rest kept ({by_column})"


def build_table(table: str, columns: dict[str, Iterable[Any]], num_rows: int | None = None,
                dropped: dict[str, int] | None = None) -> pa.Table:
    """An Arrow table with `table`'s schema from a dict of column lists.

    Columns not given are NULL; given columns are cast to the schema's
    types. Extra keys are an error (a typo would otherwise vanish). An
    integer beyond its column's type (a rank or a size past int64) is NULL,
    counted in `dropped` under `table.column`: one odd value costs that
    value, not the file.
    """
    schema = TRACE_SCHEMAS[table]
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise KeyError(f"{table}: columns not in the schema: {sorted(unknown)}")
    arrays = []
    length = num_rows
    for name in schema.names:
        if name in columns:
            values = columns[name]
            array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else _array(values, schema.field(name).type,
                                                                                          f"{table}.{name}", dropped)
            if array.type != schema.field(name).type:
                array = pc.cast(array, schema.field(name).type)
            length = len(array)
            arrays.append(array)
        else:
            arrays.append(None)
    if length is None:
        length = 0
    arrays = [a if a is not None else pa.nulls(length, type=schema.field(n).type) for a, n in zip(arrays, schema.names)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _array(values: Iterable[Any], type: pa.DataType, column: str, dropped: dict[str, int] | None) -> pa.Array:
    try:
        return pa.array(values, type=type, from_pandas=True)
    except OverflowError:
        if not pa.types.is_integer(type):
            raise
    from gpulens.collector.ingest.arrays import int_array

    values = list(values)
    array = int_array(values, type)
    if dropped is not None:
        lost = array.null_count - sum(value is None for value in values)
        dropped[column] = dropped.get(column, 0) + lost
    return array


# The columns that tell two events apart: events equal in all those a table
# has are one event recorded twice.
_EVENT_KEYS = ("name", "start_ns", "end_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation_id", "external_id")


def duplicate_events(tables: dict[str, pa.Table], names: Iterable[str] = ("kernels", "api_calls", "cpu_ops")) -> dict[str, int]:
    """Per table of `names`, the rows that repeat an earlier row in every
    column of _EVENT_KEYS it has (a trace written twice into one file, a
    profiler's double flush). They are kept; the count is for a warning."""
    found = {}
    for name in names:
        table = tables.get(name)
        if table is None or table.num_rows < 2:
            continue
        keys = [key for key in _EVENT_KEYS if key in table.column_names]
        candidates = _rows_sharing_numbers(table, keys)
        if candidates is not None:
            if len(candidates) == 0:
                continue
            table = pc.take(table, pa.array(candidates))
        # Exact, names included, on the candidates alone: a hash table of
        # every event's strings cost a large rank ~50 MiB and most of the check.
        distinct = table.select(keys).group_by(keys).aggregate([]).num_rows
        if distinct < table.num_rows:
            found[name] = table.num_rows - distinct
    return found


def _rows_sharing_numbers(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """The rows whose integer columns of `keys` hash the same as another
    row's: a superset of the duplicates (equal rows hash equal), mostly
    empty. None where no key is an integer column."""
    numeric = [key for key in keys if pa.types.is_integer(table.schema.field(key).type)]
    if not numeric:
        return None
    mixed = np.zeros(table.num_rows, dtype=np.uint64)
    for key in numeric:
        # A null reads as NaN, the rest as float: equal values stay equal,
        # and a value that rounds onto another only adds a candidate.
        values = np.ascontiguousarray(table[key].to_numpy(), dtype=np.float64).view(np.uint64)
        mixed ^= values
        mixed *= np.uint64(0x9E3779B97F4A7C15)  # wraps: a multiplicative hash
    ordered = np.sort(mixed)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeated) == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.isin(mixed, repeated))


def open_maybe_gzip(path: Path):
    """A binary file object, decompressing `.gz` content (detected by magic),
    for readers that stop early (a format's sniff, nsys's SQLite copy); whole
    files are read with `buffer.read_buffer`."""
    handle = open(path, "rb")
    magic = handle.read(2)
    handle.seek(0)
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=handle, mode="rb")
    return handle


# A trace with nothing that ran on a GPU has nothing to analyse: an error.
NO_GPU_EVENTS = "no GPU events (kernels, memcpy or memset)"
# The annotations kind of a mark at one instant (a Kineto instant, an NVTX mark): start = end.
INSTANT_KIND = "instant"

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)


# A profiler step's range, as PyTorch names it (`ProfilerStep#12`), wherever
# a trace format records it as a named range (NVTX, roctx).
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)")


def profiler_step(name: str | None) -> int | None:
    """N of a `ProfilerStep#N` range name; None for any other name."""
    match = _PROFILER_STEP.match(name or "")
    return int(match.group(1)) if match else None


def rank_from_filename(path: Path) -> int | None:
    """The rank a file name states (`rank-3`, `rank_3`, `rank3`), if any."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


# Element sizes of the dtypes collectives carry, by the names PyTorch,
# NCCL (ncclDataType_t values and names) and nsys use.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "fp32": 4, "float64": 8, "double": 8, "fp64": 8,
    "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "int8": 1, "uint8": 1, "char": 1, "byte": 1, "bool": 1,
    "int16": 2, "short": 2, "int32": 4, "int": 4, "uint32": 4,
    "int64": 8, "long": 8, "uint64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    # The ROCm (MI300) fp8 variants, the MX scale type, and packed fp4 (two
    # values a byte: element counts of such tensors count the bytes).
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "complexhalf": 4, "complexfloat": 8, "complexdouble": 16, "complex32": 4, "complex64": 8, "complex128": 16,
    "qint8": 1, "quint8": 1, "qint32": 4, "bits8": 1, "bits16": 2,
    # C++ type names, as `Input type` args write them.
    "unsigned char": 1, "signed char": 1, "uint16": 2,
}

# ncclDataType_t enum values (nccl.h) to names.
NCCL_DTYPES: dict[int, str] = {
    0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64",
    6: "float16", 7: "float32", 8: "float64", 9: "bfloat16",
    10: "fp8_e4m3", 11: "fp8_e5m2",
}


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element for a dtype name (`Float`, `c10::BFloat16`, `float32`)."""
    if not dtype:
        return None
    key = dtype.strip().lower().removeprefix("c10::").removeprefix("torch.")
    return DTYPE_BYTES.get(key)


_OP_ALIASES: dict[str, str] = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgather_into_tensor": "all_gather",
    "_allgather_base": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "alltoallv": "all_to_all",
    "bcast": "broadcast",
    "sendrecv": "send_recv",
    "allreduce_coalesced": "all_reduce",
}
# The same aliases with underscores dropped, so `_allgather_base`,
# `_all_gather_base` and `allgatherbase` all match one entry.
_COMPACT_ALIASES: dict[str, str] = {key.replace("_", ""): value for key, value in _OP_ALIASES.items()}


def normalise_op(name: str | None) -> str | None:
    """`AllReduce`, `allreduce`, `all_reduce`, `ncclAllReduce` → `all_reduce`."""
    if not name:
        return None
    key = name.strip()
    # `nccl:` (ProcessGroupNCCL's range names) before the bare `nccl` prefix.
    for prefix in ("nccl:", "c10d::", "nccl", "rccl"):
        key = key.removeprefix(prefix)
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower().strip("_")
    compact = key.replace("_", "")
    if compact in _COMPACT_ALIASES:
        return _COMPACT_ALIASES[compact]
    return key


_KERNEL_OP = re.compile(r"(AllReduce|AllGather|ReduceScatter|AllToAll|SendRecv|Broadcast|Reduce|Send|Recv)")


@functools.lru_cache(maxsize=4096)
def op_from_kernel_name(name: str) -> str | None:
    """`ncclKernel_AllReduce_RING_LL_Sum_float(...)` → `all_reduce`.

    None for RCCL's `Generic` kernels, which run any collective.
    """
    match = _KERNEL_OP.search(name.split("(", 1)[0])
    return normalise_op(match.group(1)) if match else None
