"""Open a gpulens dataset as DuckDB views named after its tables.

    con = open_dataset("gpulens-data")
    con.sql("select host, max(power_w) from telemetry group by host")

Views: telemetry, devices, events, processes (node tables) and kernels,
api_calls, cpu_ops, annotations, collectives, nccl_topology, runs (trace
tables). `run`, `rank` and `host` are ordinary columns stored in the files,
whatever the folder layout. A table with no files yet is an empty view
with the contract's columns, so queries written against it still run.
Files written by a newer gpulens with extra columns are read by name.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from collector.derive import DERIVED_TABLES
from collector.errors import DatasetError, QueryError
from collector.schema import NODE_SCHEMAS, TRACE_SCHEMAS

# Where each table's files live, relative to the dataset root.
TABLE_GLOBS: dict[str, str] = {
    "telemetry": "telemetry/**/*.parquet",
    "devices": "devices/**/*.parquet",
    "events": "events/**/*.parquet",
    "processes": "processes/**/*.parquet",
    **{name: f"traces/*/{name}/*.parquet" for name in TRACE_SCHEMAS},
}
TABLES: tuple[str, ...] = tuple(TABLE_GLOBS)


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def table_files(root: Path, table: str) -> list[Path]:
    return sorted(p for p in root.glob(TABLE_GLOBS[table]) if p.is_file())


def open_dataset(
    path: str | Path,
    connection: duckdb.DuckDBPyConnection | None = None,
    with_analyses: bool = True,
    analyses_on_demand: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per dataset table.

    With `with_analyses`, every analysis in `analysis/sql/` is a view too
    (see `analysis.registry`), beside `hardware_peaks`; with
    `analyses_on_demand` as well, each is created when `run_analysis`
    first runs it (a caller that only runs analyses that way, such as
    the dashboard, opens faster).

    Raises DatasetError if `path` is not a directory.
    """
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"{root}: no such dataset directory")
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory (a dataset is a folder of Parquet tables)")
    con = connection or duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    schemas = {**NODE_SCHEMAS, **TRACE_SCHEMAS}
    for table in TABLES:
        if table_files(root, table):
            # A glob, not a file list: the view sees files a running
            # collector adds later (the live dashboard relies on it).
            pattern = quote_literal(str(root.resolve() / TABLE_GLOBS[table]))
            try:
                con.execute(
                    f"create or replace view {quote_identifier(table)} as "
                    f"select * from read_parquet({pattern}, union_by_name = true, hive_partitioning = false)"
                )
            except duckdb.Error as error:
                message = " ".join(str(error).split())
                raise DatasetError(f"{root / table}: unreadable Parquet ({message})") from error
        else:
            empty_name = f"_empty_{table}"
            con.register(empty_name, schemas[table].empty_table())
            con.execute(f"create or replace view {quote_identifier(table)} as select * from {quote_identifier(empty_name)}")
    _check_derived_columns(con, root)
    if with_analyses:
        from analysis.peaks import register_hardware_peaks
        from analysis.registry import register_analyses_on_demand, register_analysis_views

        register_hardware_peaks(con)
        if analyses_on_demand:
            register_analyses_on_demand(con)
        else:
            register_analysis_views(con)
    return con


def _check_derived_columns(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Kernel files without the columns ingest derives (collector.derive)
    would make the analyses silently count nothing: name the first one."""
    if not table_files(root, "kernels"):
        return
    pattern = quote_literal(str(root.resolve() / TABLE_GLOBS["kernels"]))
    try:
        columns = {row[0] for row in con.execute("describe kernels").fetchall()}
        if "scoped" not in columns:
            stale = [(str(table_files(root, "kernels")[0]),)]
        else:
            stale = con.execute(
            f"select filename from read_parquet({pattern}, union_by_name = true, filename = true, "
                "hive_partitioning = false) where scoped is null limit 1"
            ).fetchall()
    except duckdb.Error as error:
        message = " ".join(str(error).split())
        raise DatasetError(f"{root / 'traces'}: unreadable kernels Parquet ({message})") from error
    if stale:
        raise DatasetError(
            f"{stale[0][0]}: kernels written by an older gpulens, without the derived columns "
            "(kernels.scoped, ...); run `gpulens ingest` on its trace files again"
        )
    for table in DERIVED_TABLES:
        files = table_files(root, table)
        if not files:
            continue
        columns = {row[0] for row in con.execute(f"describe {quote_identifier(table)}").fetchall()}
        missing = [name for name in TRACE_SCHEMAS[table].names if name not in columns]
        if missing:
            raise DatasetError(
                f"{files[0]}: {table} written by an older gpulens (no {', '.join(missing)}); "
                "run `gpulens ingest` on its trace files again"
            )


# Statements that write files or reach past the dataset: `gpulens query`
# reads a dataset that a collector may be writing, and a `COPY ... TO` one of
# its Parquet files would replace a table's rows.
_REFUSED_STATEMENTS = {"COPY", "EXPORT", "ATTACH", "DETACH", "LOAD", "COPY_DATABASE"}
# Statements that return rows; one query at a time, so none is dropped unseen.
_QUERIES = {"SELECT", "EXPLAIN", "CALL"}


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run a query (after any SET statements); DuckDB's error becomes a
    one-line QueryError. Statements that write files are refused."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise QueryError(f"SQL error: {' '.join(str(error).split())}") from error
    kinds = [statement.type.name for statement in statements]
    if not statements:
        raise QueryError("SQL error: no statement given")
    refused = sorted(set(kinds) & _REFUSED_STATEMENTS)
    if refused:
        raise QueryError(f"SQL error: {', '.join(refused)} statements are not run: gpulens query only reads the "
                         "dataset (write results with --format csv or json)")
    queries = sum(kind in _QUERIES for kind in kinds)
    if queries > 1:
        raise QueryError(f"SQL error: one query at a time ({queries} given)")
    try:
        relation = con.sql(sql)
        if relation is None:
            return pa.table({})
        return relation.to_arrow_table()
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None  # Ctrl-C: the command's own "aborted"
    except RuntimeError as error:  # how DuckDB 2 reports the same interrupt
        if "interrupted" in str(error).lower():
            raise KeyboardInterrupt from None
        raise
    except duckdb.Error as error:
        message = " ".join(str(error).split())
        raise QueryError(f"SQL error: {message}") from error


def dataset_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per table, for `gpulens query --tables` and the dashboard."""
    # fetchall, not fetchone: a half-read result keeps a DuckDB 2 connection busy.
    return {table: con.execute(f"select count(*) from {quote_identifier(table)}").fetchall()[0][0] for table in TABLES}
