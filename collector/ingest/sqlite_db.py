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
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from collector.errors import TraceError
from collector.ingest.base import build_table, open_maybe_gzip
from collector.schema import TRACE_SCHEMAS

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


def by_start(parts: list[pa.Table | None], then: str) -> pa.Table | None:
    """The parts as one table sorted by start, then by `then`."""
    parts = [part for part in parts if part is not None]
    if not parts:
        return None
    return pa.concat_tables(parts).sort_by([("start_ns", "ascending"), (then, "ascending")])


def query_columns(conn: sqlite3.Connection, sql: str, params: dict[str, Any] | None = None) -> Columns:
    """The rows of `sql` as lists by column name."""
    try:
        cursor = conn.execute(sql, params or {})
    except sqlite3.OperationalError as error:
        # A column this file does not have: say which, as one line.
        raise sqlite3.DatabaseError(f"unexpected schema: {error}") from error
    names = [d[0] for d in cursor.description]
    rows = cursor.fetchall()
    values = list(zip(*rows)) if rows else [() for _ in names]
    return {name: list(column) for name, column in zip(names, values)}


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
