"""Open a gpulens dataset as DuckDB views named after its tables.

    con = open_dataset("gpulens-data")
    con.sql("select host, max(power_w) from telemetry group by host")

Views: telemetry, devices, events, processes (node tables) and kernels,
api_calls, cpu_ops, annotations, collectives, nccl_topology, memory_events, runs (trace
tables). `run`, `rank` and `host` are ordinary columns stored in the files,
whatever the folder layout. A table with no files yet is an empty view
with the contract's columns, so queries written against it still run.
Files written by a newer gpulens with extra columns are read by name.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Collection, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from gpulens.analysis.tables import (DUCKDB_ERRORS, TABLE_GLOBS, TABLES, is_vanished_file_error, quote_identifier,
                                     quote_literal, retry_vanished_files, table_files, vanished_file_error)
from gpulens.collector.derive import DERIVED_TABLES
from gpulens.collector.errors import DatasetError, QueryError, one_line
from gpulens.collector.schema import NODE_SCHEMAS, TRACE_SCHEMAS

def unreadable_files(con: duckdb.DuckDBPyConnection, root: Path) -> list[str]:
    """"FILE: unreadable (DuckDB's reason)" for each Parquet file of the
    dataset that cannot be read in full (flipped bytes behind an intact
    footer open, then fail in a data page). Reads every file: for naming
    the culprit once a query over the tables has failed."""
    found = []
    for table in TABLES:
        for path in table_files(root, table):
            try:
                con.execute("select max(hash(columns(*))) from read_parquet(?)", [str(path)]).fetchall()
            except DUCKDB_ERRORS as error:
                if not is_vanished_file_error(error):
                    found.append(f"{path}: unreadable ({one_line(error)})")
    return found


def open_dataset(
    path: str | Path,
    connection: duckdb.DuckDBPyConnection | None = None,
    with_analyses: bool = True,
    analyses_on_demand: bool = False,
    tables: Collection[str] | None = None,
    footer_cache: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per dataset table.

    With `with_analyses`, every analysis in `analysis/sql/` is a view too
    (see `analysis.registry`), beside `hardware_peaks`; with
    `analyses_on_demand` as well, each is created when `run_analysis`
    first runs it (a caller that only runs analyses that way, such as
    the dashboard, opens faster).

    `tables` limits the table views to those named (None: every table),
    and `hardware_peaks` is made only with `runs` and `devices`, which it
    reads. Creating a view reads the footer of each of its files, so on a
    run of thousands of ranks (a file per rank and table) a caller that
    knows which tables it reads (`gpulens query`, see
    `analysis.registry.tables_named_in`) opens several times faster.

    `footer_cache` keeps each file's Parquet footer in the connection once
    read (DuckDB's `parquet_metadata_cache`, checked against the file's
    modification time on every read): each reference to a view reads every
    footer of its files again, so over 2,000 files one `gpulens query`
    count took 0.9 s without it and 0.3 s with it, and a report 74 s
    against 58. It is for short-lived connections (`gpulens query`,
    `gpulens report`): DuckDB never drops an entry, and a long-lived one
    (the dashboard's, beside a collector that writes and merges files all
    day) would keep the footers of every file it ever saw.

    Raises DatasetError if `path` is not a directory, or its Parquet is
    unreadable; QueryError if a file stays missing while being read
    (`retry_vanished_files`).
    """
    if tables is not None and with_analyses and not analyses_on_demand:
        raise ValueError("tables= needs analyses_on_demand=True (every analysis view reads its tables when made)")
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"{root}: no such dataset directory")
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory (a dataset is a folder of Parquet tables)")
    _refuse_a_trace_folder(root)
    con = connection or duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    # DuckDB runs an ASOF join whose left side it expects to be small (64
    # rows or fewer) as a loop over every pair of rows. It expects about one
    # row of a view built on aggregates, so dash_skew_steps over 400,000
    # collectives and 8,000 steps took 11-13 s, against 0.4 s as an ASOF
    # join. Never the loop, for people's own ASOF joins too.
    with contextlib.suppress(duckdb.Error):  # a DuckDB without the setting has no such loop
        con.execute("set asof_loop_join_threshold = 0")
    if footer_cache:
        con.execute("set parquet_metadata_cache = true")
    schemas = {**NODE_SCHEMAS, **TRACE_SCHEMAS}
    bound = [table for table in TABLES if tables is None or table in tables]
    for table in bound:
        if table_files(root, table):
            # A glob, not a file list: the view sees files a running
            # collector adds later (the live dashboard relies on it).
            pattern = quote_literal(str(root.resolve() / TABLE_GLOBS[table]))
            view = (f"create or replace view {quote_identifier(table)} as "
                    f"select * from read_parquet({pattern}, union_by_name = true, hive_partitioning = false)")
            try:
                retry_vanished_files(functools.partial(con.execute, view))
                if table in NULL_FILLED_TABLES:
                    _fill_missing_columns(con, table, schemas[table], view)
            except duckdb.Error as error:
                message = one_line(error)
                raise DatasetError(f"{root / table}: unreadable Parquet ({message})") from error
        else:
            empty_name = f"_empty_{table}"
            con.register(empty_name, schemas[table].empty_table())
            con.execute(f"create or replace view {quote_identifier(table)} as select * from {quote_identifier(empty_name)}")
    _check_derived_columns(con, root, bound)
    if with_analyses:
        from gpulens.analysis import peaks
        from gpulens.analysis.registry import register_analyses_on_demand, register_analysis_views

        if all(table in bound for table in peaks.TABLES_READ):
            peaks.register_hardware_peaks(con)
        if analyses_on_demand:
            register_analyses_on_demand(con)
        else:
            register_analysis_views(con)
    return con


# Node tables that gained columns in a schema version (collector.schema):
# files of an older version are read with those columns NULL.
NULL_FILLED_TABLES = ("processes",)


def _fill_missing_columns(con: duckdb.DuckDBPyConnection, table: str, schema: pa.Schema, view: str) -> None:
    columns = {row[0] for row in con.execute(f"describe {quote_identifier(table)}").fetchall()}
    missing = [field for field in schema if field.name not in columns]
    if not missing:
        return
    empty = con.from_arrow(pa.schema(missing).empty_table())
    nulls = ", ".join(f"cast(null as {dtype}) as {quote_identifier(name)}"
                      for name, dtype in zip(empty.columns, empty.dtypes))
    con.execute(view.replace(" as select * from ", f" as select *, {nulls} from ", 1))


# The folders a dataset's tables live in (see TABLE_GLOBS).
_DATASET_FOLDERS = ("telemetry", "devices", "events", "processes", "traces")
# Of the names ingest looks for, those a dataset folder may well hold as notes.
_NOTE_SUFFIXES = (".log", ".txt", ".out")


def _refuse_a_trace_folder(root: Path) -> None:
    """A folder of raw trace files is not a dataset: its views would all be
    empty, and a query would quietly count nothing. Say what to do instead.
    (A folder with neither, a dataset a collector has not written to yet,
    opens as empty views.)"""
    if any((root / folder).is_dir() for folder in _DATASET_FOLDERS):
        return
    from gpulens.collector.ingest.batch import TRACE_SUFFIXES

    suffixes = tuple(suffix for suffix in TRACE_SUFFIXES if suffix not in _NOTE_SUFFIXES)
    try:
        traces = sorted(entry.name for entry in os.scandir(root)
                        if entry.is_file() and entry.name.lower().endswith(suffixes))
    except OSError:
        return
    if traces:
        raise DatasetError(f"{root}: holds trace files ({traces[0]}, ...), not a dataset: ingest them first "
                           f"(gpulens ingest {root} --out DATASET) and query DATASET")


def _check_derived_columns(con: duckdb.DuckDBPyConnection, root: Path, bound: list[str]) -> None:
    """Files without the columns ingest derives (collector.derive) would
    make the analyses silently count nothing: name the first one, of the
    tables `bound` as views."""
    if "kernels" in bound and table_files(root, "kernels"):
        _check_kernels(con, root)
    _check_derived_tables(con, root, bound)


def _check_kernels(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    pattern = quote_literal(str(root.resolve() / TABLE_GLOBS["kernels"]))
    try:
        columns = {row[0] for row in _fetch_all(con, "describe kernels")}
        if "scoped" not in columns:
            stale = [(str(table_files(root, "kernels")[0]),)]
        else:
            stale = _fetch_all(
                con,
                f"select filename from read_parquet({pattern}, union_by_name = true, filename = true, "
                "hive_partitioning = false) where scoped is null limit 1",
            )
    except duckdb.Error as error:
        message = one_line(error)
        raise DatasetError(f"{root / 'traces'}: unreadable kernels Parquet ({message})") from error
    if stale:
        raise DatasetError(
            f"{stale[0][0]}: kernels written by an older gpulens, without the derived columns "
            "(kernels.scoped, ...); run `gpulens ingest` on its trace files again"
        )


def _check_derived_tables(con: duckdb.DuckDBPyConnection, root: Path, bound: list[str]) -> None:
    """Derived tables written before a column was added to them: name one."""
    for table in DERIVED_TABLES:
        if table not in bound:
            continue
        files = table_files(root, table)
        if not files:
            continue
        columns = {row[0] for row in _fetch_all(con, f"describe {quote_identifier(table)}")}
        missing = [name for name in TRACE_SCHEMAS[table].names if name not in columns]
        if missing:
            raise DatasetError(
                f"{files[0]}: {table} written by an older gpulens (no {', '.join(missing)}); "
                "run `gpulens ingest` on its trace files again"
            )


def _fetch_all(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return retry_vanished_files(lambda: con.execute(sql).fetchall())


# Statements that write files. `sandbox` lets DuckDB read only the
# dataset's table folders, but DuckDB's allow-list cannot say "read, not
# write": inside those folders a `COPY ... TO` one of its Parquet files would
# replace a table's rows, `EXPORT DATABASE` or `ATTACH` would add files. These
# three kinds, as DuckDB's own parser classifies each statement, are refused;
# every other way to reach a file, the network or an extension (`SET
# log_query_path`, `PRAGMA profiling_output`, `read_csv('https://...')`,
# `INSTALL`, `LOAD`, `CREATE SECRET`) is shut by DuckDB's settings.
_WRITING_STATEMENTS = {"COPY", "EXPORT", "ATTACH", "COPY_DATABASE"}
# Statements that return rows; one query at a time, so none is dropped unseen.
_QUERIES = {"SELECT", "EXPLAIN", "CALL"}
# Settings a sandboxed connection may still change: they cost time or memory,
# never reach a file (`set threads = 1; select ...`).
SANDBOX_SETTINGS = ("threads", "memory_limit")


def sandbox(con: duckdb.DuckDBPyConnection, root: str | Path) -> None:
    """Let `con` read `root`'s tables and nothing else, for SQL written by
    someone else (`gpulens query`). Call it after the views are made.

    DuckDB's own controls: no file, URL or database outside the dataset's
    table folders (`enable_external_access = false` with those folders as
    `allowed_directories`; the views read their files through them), no
    extension installed or loaded on demand, and the configuration locked
    (`lock_configuration`), so that no later statement turns any of it back
    on or points a log or profile at a file. Only SANDBOX_SETTINGS may still
    change. Statements that would write inside the allowed folders are
    refused by `run_sql` and `stream_sql` (_WRITING_STATEMENTS)."""
    resolved = Path(root).resolve()
    folders = [quote_literal(f"{resolved / folder}/") for folder in _DATASET_FOLDERS]
    con.execute(f"set allowed_directories = [{', '.join(folders)}]")
    con.execute("set enable_external_access = false")
    con.execute("set autoinstall_known_extensions = false")
    con.execute("set autoload_known_extensions = false")
    con.execute(f"set allowed_configs = [{', '.join(map(quote_literal, SANDBOX_SETTINGS))}]")
    con.execute("set lock_configuration = true")


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run a query (after any SET statements); DuckDB's error becomes a
    one-line QueryError. Statements that write files are refused. A file
    that vanishes while it runs (a collector merging its files) makes it
    run again (`retry_vanished_files`)."""
    check_statements(sql)

    def run() -> pa.Table:
        relation = con.sql(sql)
        return pa.table({}) if relation is None else relation.to_arrow_table()

    with _query_errors():
        return retry_vanished_files(run)


# Rows per batch of `stream_sql`: DuckDB makes 2,048 at a time.
STREAM_BATCH_ROWS = 16_384
# Types whose Python value reads differently from DuckDB's text for it
# (`True`, `[1, None]`, a dict, `b'..'`): `duckdb_text` has DuckDB cast them.
_TEXT_CAST_TYPES = frozenset({"boolean", "blob", "list", "array", "struct", "map", "union"})


def stream_sql(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    rows_per_batch: int | None = None,
    duckdb_text: bool = False,
) -> pa.RecordBatchReader:
    """`run_sql`'s result as batches read as they are asked for, so memory
    does not grow with the rows (`rows_per_batch`, by default
    STREAM_BATCH_ROWS, at a time). With `duckdb_text`, columns of BOOLEAN,
    BLOB and the nested types come as DuckDB's own text for them
    (`true`, `[1, NULL]`, `{'a': 1}`), what its CLI prints.

    The same checks and errors as `run_sql`. A file that vanishes before the
    first batch is read makes the query run again; one that vanishes later
    is a QueryError naming it when that batch is read (the batches already
    read cannot be taken back)."""
    check_statements(sql)

    def start() -> tuple[pa.Schema, pa.RecordBatch | None, pa.RecordBatchReader | None]:
        relation = con.sql(sql)
        if relation is None:
            return pa.schema([]), None, None
        if duckdb_text:
            relation = _with_duckdb_text(relation)
        reader = relation.to_arrow_reader(rows_per_batch or STREAM_BATCH_ROWS)
        try:
            return reader.schema, reader.read_next_batch(), reader
        except StopIteration:
            return reader.schema, None, None

    with _query_errors():
        schema, first, reader = retry_vanished_files(start)
    return pa.RecordBatchReader.from_batches(schema, _batches(first, reader))


def _batches(first: pa.RecordBatch | None, reader: pa.RecordBatchReader | None) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
    while reader is not None:
        with _query_errors(midway=True):
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
        yield batch


def _with_duckdb_text(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    kinds = [column_type.id for column_type in relation.types]
    if not _TEXT_CAST_TYPES.intersection(kinds):
        return relation
    # By position: a join's two `name` columns are two columns.
    return relation.project(", ".join(
        f"#{position}{'::varchar' if kind in _TEXT_CAST_TYPES else ''} as {quote_identifier(name)}"
        for position, (name, kind) in enumerate(zip(relation.columns, kinds), start=1)
    ))


def check_statements(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise QueryError(f"SQL error: {one_line(error)}") from error
    kinds = [statement.type.name for statement in statements]
    if not statements:
        raise QueryError("SQL error: no statement given")
    refused = sorted(set(kinds) & _WRITING_STATEMENTS)
    if refused:
        raise QueryError(f"SQL error: {', '.join(refused)} statements are not run: gpulens query only reads the "
                         "dataset (write results with --format csv or json)")
    queries = sum(kind in _QUERIES for kind in kinds)
    if queries > 1:
        raise QueryError(f"SQL error: one query at a time ({queries} given)")


@contextlib.contextmanager
def _query_errors(midway: bool = False) -> Iterator[None]:
    """DuckDB's errors as one-line QueryErrors, Ctrl-C as KeyboardInterrupt
    (the command's own "aborted"). `midway`: some rows were already read."""
    try:
        yield
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None
    except DUCKDB_ERRORS as error:
        if midway and is_vanished_file_error(error):
            raise vanished_file_error(error, "removed after the query's first rows were read; run it again") from error
        raise QueryError(f"SQL error: {_with_gpulens_hint(one_line(error))}") from error
    except RuntimeError as error:  # how DuckDB 2 reports the same interrupt
        if "interrupted" in str(error).lower():
            raise KeyboardInterrupt from None
        raise


# DuckDB's word for a name it does not know, and the name it suggests: one
# of its own catalogue's (`telemetri` → "sqlite_master"), never a view of
# the dataset's, which it does not weigh.
_UNKNOWN_NAME = re.compile(r'(?P<what>Table|View|Table Function) with name (?P<name>\S+) does not exist!'
                           r'(?: Did you mean "[^"]*"\?)?')


def _with_gpulens_hint(message: str) -> str:
    """DuckDB's message for an unknown table, with a hint among the
    dataset's tables and gpulens' analysis views in place of its own."""
    match = _UNKNOWN_NAME.search(message)
    if match is None or match["what"] == "Table Function":
        return message
    import difflib

    from gpulens.analysis.registry import load_analyses

    names = [*TABLES, *(name for name in load_analyses() if not name.startswith("dash_"))]
    close = difflib.get_close_matches(match["name"].lower(), names, n=3, cutoff=0.6)
    quoted = [repr(name) for name in close] or [""]
    choices = quoted[0] if len(quoted) <= 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    hint = f"Did you mean {choices}?" if close else "gpulens query --help lists the tables and views."
    return message[:match.start()] + f"{match['what']} with name {match['name']} does not exist! {hint}" + message[match.end():]


def dataset_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per table, for `gpulens query --tables` and the dashboard (a
    file merged away meanwhile by a running collector is read again)."""

    # fetchall, not fetchone: a half-read result keeps a DuckDB 2 connection busy.
    return {table: _fetch_all(con, f"select count(*) from {quote_identifier(table)}")[0][0] for table in TABLES}
