"""What the two SQLite trace formats share (Nsight Systems exports in
`nsys`, rocprofv3 databases in `rocpd`): opening a file read-only (a `.gz`
one through a decompressed copy), querying it into columns, and giving
each process of a multi-process file its rank.

Processes and ranks. One database may hold several processes (`nsys
profile torchrun ...`; `rocpd merge`), and both profilers number
correlation ids per process, so they repeat across processes. Each process
that did GPU work gets its own rank, and its CPU-side rows that rank, so
kernels link to launch calls by (rank, correlation id) within their own
process. The file does not know the job's ranks: one such process takes the
rank its path states (or 0); several are numbered 0, 1, ... in pid order,
with `rank_source` in `runs.metadata_json` saying so. Rows of processes
with no GPU work (a launcher) belong to no rank and are left out. GPU rows
without a pid cannot be split: then every row gets the one rank.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import ParsedTrace, build_table, ingested_now, open_maybe_gzip
from gpulens.collector.schema import TRACE_SCHEMAS

SQLITE_MAGIC = b"SQLite format 3\x00"
RANK_BY_PROCESS_ORDER = "process order in the file (by pid, among processes with GPU work), not the job's rank"

Columns = dict[str, list[Any]]


@dataclass(frozen=True)
class Processes:
    """The rank of each process's rows (see the module docstring)."""

    # pid -> rank for each process with GPU work; empty when GPU rows carry
    # no pid, and then every row gets `rank`.
    rank_by_pid: dict[int, int]
    rank: int
    # For runs.metadata_json; None where the rank is the path's or 0.
    rank_source: str | None

    def ranks(self, pids: list[int | None]) -> list[int | None]:
        """Each row's rank; None for a process without GPU work."""
        if not self.rank_by_pid:
            return [self.rank] * len(pids)
        return [self.rank_by_pid.get(pid) for pid in pids]

    def left_out(self, pids: set[int | None]) -> list[int]:
        """Those of `pids` whose rows get no rank."""
        if not self.rank_by_pid:
            return []
        return sorted(pid for pid in pids if pid is not None and pid not in self.rank_by_pid)


def processes_of(gpu: list[Columns], rank: int, rank_source: str | None,
                 by_order: str = RANK_BY_PROCESS_ORDER) -> Processes:
    """The ranks of the processes with GPU work in `gpu` (columns with a
    `pid`); `rank` (from the path, `rank_source` saying so) where there is
    one such process or they cannot be told apart, else pid order, with
    `by_order` as the rank source."""
    pids = {pid for columns in gpu for pid in columns["pid"]}
    if None in pids:
        return Processes({}, rank, rank_source)
    if len(pids) == 1:
        return Processes({pids.pop(): rank}, rank, rank_source)
    return Processes({pid: order for order, pid in enumerate(sorted(pids))}, 0, by_order)


def rank_notes(processes: Processes, without_gpu: list[int]) -> dict[str, Any]:
    """What a runs row's metadata says of how its rank was found."""
    notes: dict[str, Any] = {}
    if processes.rank_source:
        notes["rank_source"] = processes.rank_source
    if without_gpu:
        notes["pids_without_gpu_work"] = without_gpu
    return notes


def runs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The `runs` table of one row per rank, stamped with the ingest time."""
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    columns["ingested_at"] = ingested_now(len(rows))
    return build_table("runs", columns)


def contract_table(name: str, columns: Columns, run: str, processes: Processes) -> pa.Table | None:
    """Contract table `name` from `columns`, each row given its process's rank
    (rows of processes without one left out)."""
    if not columns:
        return None
    ranks = processes.ranks(columns["pid"])
    if None in ranks:
        keep = [row for row, rank in enumerate(ranks) if rank is not None]
        columns = {column: [values[row] for row in keep] for column, values in columns.items()}
        ranks = [ranks[row] for row in keep]
    if "pid" not in TRACE_SCHEMAS[name].names:
        columns = {column: values for column, values in columns.items() if column != "pid"}
    rows = len(ranks)
    return build_table(name, {**columns, "run": [run] * rows, "rank": ranks}, num_rows=rows)


class NotANumber(Exception):
    """A column read as a number holds text (or a blob): SQLite keeps any
    value in any column, whatever type the schema declares."""

    def __init__(self, column: str, value: object) -> None:
        held = "binary data" if isinstance(value, (bytes, bytearray, memoryview)) else "text"
        super().__init__(f"{column} holds {held} where a number belongs")


def parse_file(path: Path, what: str, parse_connection: Callable[[sqlite3.Connection], ParsedTrace]) -> ParsedTrace:
    """`parse_connection` over the file (a `.gz` one decompressed first); an
    SQLite error is a TraceError naming the file as not a readable `what`."""
    with plain_sqlite(path) as db_path:
        try:
            with connect(db_path) as conn:
                return parse_connection(conn)
        except sqlite3.DatabaseError as error:
            raise TraceError(str(path), f"not a readable {what} ({error})") from error
        except NotANumber as error:
            raise TraceError(str(path), str(error)) from error


def schema_has(path: Path, test: Callable[[set[str]], bool]) -> bool:
    """Whether the names of a plain SQLite file's tables and views pass
    `test`: for sniffing a file whose schema is larger than its head."""
    if path.suffix == ".gz":
        return False
    try:
        with connect(path) as conn:
            return test(table_names(conn))
    except (sqlite3.Error, TraceError):
        return False


def gpu_and_cpu_tables(gpu: list[Columns], cpu: dict[str, Columns], run: str,
                       processes: Processes) -> dict[str, pa.Table]:
    """`kernels` from the GPU columns, `api_calls` and `annotations` from
    the CPU ones, each row given its process's rank, sorted by start; tables
    with no rows left out."""
    produced = {
        "kernels": by_start([contract_table("kernels", columns, run, processes) for columns in gpu], "device"),
        **{name: by_start([contract_table(name, cpu.get(name, {}), run, processes)], "tid")
           for name in ("api_calls", "annotations")},
    }
    return {name: table for name, table in produced.items() if table is not None and table.num_rows}


def by_start(parts: list[pa.Table | None], then: str) -> pa.Table | None:
    """The parts as one table sorted by start, then by `then`."""
    parts = [part for part in parts if part is not None]
    if not parts:
        return None
    return pc.sort_by(pa.concat_tables(parts), [("start_ns", "ascending"), (then, "ascending")])


def query_columns(conn: sqlite3.Connection, sql: str, params: dict[str, Any] | None = None) -> Columns:
    """The rows of `sql` as lists by column name. A column named like a
    numeric contract column that holds text raises NotANumber naming where
    it came from (Arrow's own error would name neither table nor column)."""
    try:
        cursor = conn.execute(sql, params or {})
    except sqlite3.OperationalError as error:
        # A column this file does not have: say which, as one line.
        raise sqlite3.DatabaseError(f"unexpected schema: {error}") from error
    names = [d[0] for d in cursor.description]
    rows = cursor.fetchall()
    values = list(zip(*rows)) if rows else [() for _ in names]
    columns = {name: list(column) for name, column in zip(names, values)}
    for name in _NUMERIC_COLUMNS.intersection(columns):
        # The set of types: ~20 ms a million values, beside ~350 ms for
        # Arrow's conversion of them.
        wrong = set(map(type, columns[name])) - {int, float, type(None)}
        if wrong:
            value = next(value for value in columns[name] if type(value) in wrong)
            raise NotANumber(_origin(sql, name), value)
    return columns


def whole_number(value: Any, column: str) -> int:
    """A value read on its own (not by `query_columns`) as an int."""
    if isinstance(value, (int, float)):
        return int(value)
    raise NotANumber(column, value)


# Contract columns that are numbers in every trace table that has them.
_NUMERIC_COLUMNS = frozenset(
    name for name in {field.name for schema in TRACE_SCHEMAS.values() for field in schema}
    if all(pa.types.is_integer(schema.field(name).type) or pa.types.is_floating(schema.field(name).type)
           for schema in TRACE_SCHEMAS.values() if name in schema.names)
)


def _origin(sql: str, alias: str) -> str:
    """Where `sql` reads its column `alias` from: `TABLE.column` where it is
    a table's column as it is (the usual way text gets through: SQLite makes
    numbers of text in arithmetic), else `column ALIAS of TABLE`, the table
    the query selects from."""
    tables = list(re.finditer(r'\b(?:from|join)\s+"?([^"\s]+)"?\s+as\s+(\w+)\b', sql, re.IGNORECASE))
    table_of = {match.group(2): match.group(1) for match in tables}
    # The item's expression (one without commas), and the table columns it
    # reads: one column is named, as in `k.start as start_ns` or the `case`
    # that keeps a text time out of arithmetic (see nsys).
    item = re.search(rf'(?:\bselect|,)\s*([^,]*?)\s+as\s+{alias}\b', sql, re.IGNORECASE)
    read = {(match.group(1), match.group(3)) for match in re.finditer(r'\b(\w+)\.("?)(\w+)\2', item.group(1))} if item else set()
    if len(read) == 1:
        table_alias, column = read.pop()
        if table_alias in table_of:
            return f"{table_of[table_alias]}.{column}"
    # Not a subquery's table (those sit in parentheses).
    outer = [match.group(1) for match in tables
             if sql.count("(", 0, match.start()) == sql.count(")", 0, match.start())]
    return f"column {alias} of {outer[0]}" if outer else f"column {alias}"


def mapped(values: list[Any], function: Any) -> list[Any]:
    """`function` over `values`, computed once per distinct value (names repeat a lot)."""
    cache: dict[Any, Any] = {}
    out = []
    for value in values:
        if value not in cache:
            cache[value] = function(value)
        out.append(cache[value])
    return out


def table_names(conn: sqlite3.Connection) -> set[str]:
    """Its tables and views."""
    return {row[0] for row in conn.execute("select name from sqlite_master where type in ('table', 'view')")}


def column_names(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'pragma table_info("{table}")')}


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection: ingest never changes the user's file."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def plain_sqlite(path: Path) -> Iterator[Path]:
    """The path itself, or a decompressed temporary copy of a `.gz` file."""
    try:
        handle = open_maybe_gzip(path)
    except OSError as error:
        raise TraceError(str(path), f"cannot read: {error.strerror}") from error
    if not isinstance(handle, gzip.GzipFile):
        handle.close()
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="gpulens-sqlite-") as folder:
        plain = Path(folder) / "trace.sqlite"
        try:
            with handle, open(plain, "wb") as out:
                shutil.copyfileobj(handle, out)
        except (EOFError, gzip.BadGzipFile, OSError) as error:
            raise TraceError(str(path), f"truncated or corrupt gzip ({error})") from error
        yield plain


# --- SQLite's binary JSON ------------------------------------------------------------
# SQLite 3.45+ stores JSON passed through `jsonb()` in a binary form
# (sqlite.org/jsonb.html). A column declared JSONB (rocpd's `extdata`) may
# hold it; this module's SQLite (Python's) may be too old to read it with
# json(), so it is decoded here. Each element is a header byte (low four
# bits its type, high four its payload size, or 12-15 for a size in the
# next 1, 2, 4 or 8 bytes, big-endian) and its payload: scalars as their
# JSON text, arrays and objects as their elements (an object's alternate
# key, value).

_JSONB_NULL, _JSONB_TRUE, _JSONB_FALSE = 0, 1, 2
_JSONB_INT, _JSONB_INT5, _JSONB_FLOAT, _JSONB_FLOAT5 = 3, 4, 5, 6
_JSONB_TEXT, _JSONB_TEXTJ, _JSONB_TEXT5, _JSONB_TEXTRAW = 7, 8, 9, 10
_JSONB_ARRAY, _JSONB_OBJECT = 11, 12


class NotJsonb(ValueError):
    """Bytes that are not a well-formed SQLite JSONB element."""


def jsonb_loads(data: bytes) -> Any:
    """The value of a SQLite JSONB blob, as json.loads gives it."""
    value, end = _jsonb_element(memoryview(data), 0)
    if end != len(data):
        raise NotJsonb(f"{len(data) - end} bytes after the value")
    return value


def _jsonb_element(data: memoryview, at: int) -> tuple[Any, int]:
    if at >= len(data):
        raise NotJsonb("truncated")
    header = data[at]
    kind, size = header & 0x0F, header >> 4
    at += 1
    if size >= 12:
        width = 1 << (size - 12)  # 12, 13, 14, 15: a 1-, 2-, 4- or 8-byte size
        size = int.from_bytes(data[at:at + width], "big")
        at += width
    end = at + size
    if end > len(data):
        raise NotJsonb("truncated")
    if kind in (_JSONB_ARRAY, _JSONB_OBJECT):
        items = []
        while at < end:
            item, at = _jsonb_element(data[:end], at)
            items.append(item)
        if kind == _JSONB_ARRAY:
            return items, end
        if len(items) % 2:
            raise NotJsonb("an object with a key and no value")
        return dict(zip(items[::2], items[1::2])), end
    payload = bytes(data[at:end])  # a scalar's JSON text
    if kind == _JSONB_NULL:
        return None, end
    if kind in (_JSONB_TRUE, _JSONB_FALSE):
        return kind == _JSONB_TRUE, end
    if kind in (_JSONB_INT, _JSONB_INT5):
        return int(payload.decode(), 0 if kind == _JSONB_INT5 else 10), end
    if kind in (_JSONB_FLOAT, _JSONB_FLOAT5):
        return float(payload.decode()), end
    if kind in (_JSONB_TEXT, _JSONB_TEXTRAW):
        return payload.decode(), end
    if kind in (_JSONB_TEXTJ, _JSONB_TEXT5):
        return json.loads(b'"' + payload + b'"'), end
    raise NotJsonb(f"element type {kind}")
