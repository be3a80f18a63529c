"""Every analysis is one SQL file in `analysis/sql/`, and also a view.

A file `analysis/sql/<name>.sql` holds one SELECT. Its header comments
declare what it builds on and its thresholds:

    -- requires: kernel_launches, step_windows
    -- param: short_kernel_max_call_ns = 50000

`register_analysis_views(con)` creates a view `<name>` for each file, in
dependency order, after setting each parameter's default as a DuckDB
variable; the SQL reads it with `getvariable('short_kernel_max_ns')`. So
people can build on any analysis in their own SQL
(`select * from time_breakdown where rank = 3`), and `run_analysis(con,
name, threshold=...)` runs the same view with other thresholds.
Parameter names are global to a connection, so each is declared once.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from gpulens.analysis import peaks
from gpulens.analysis.tables import TABLES, is_vanished_file_error, retry_vanished_files
from gpulens.collector.errors import QueryError, UsageError, one_line

if TYPE_CHECKING:
    import polars as pl

SQL_DIR = Path(__file__).resolve().parent / "sql"

_REQUIRES = re.compile(r"^--\s*requires:\s*(.*)$", re.MULTILINE)
_PARAM = re.compile(r"^--\s*param:\s*([a-z_][a-z0-9_]*)\s*=\s*(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class AnalysisSql:
    name: str
    sql: str
    requires: tuple[str, ...]
    params: dict[str, Any]


def _parse_value(text: str) -> Any:
    if text.lower() == "null":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text.strip("'\"")


@cache
def load_analyses() -> dict[str, AnalysisSql]:
    """Every analysis SQL file, in an order where requirements come first."""
    found: dict[str, AnalysisSql] = {}
    for path in sorted(SQL_DIR.glob("*.sql")):
        text = path.read_text()
        requires = tuple(
            name.strip() for line in _REQUIRES.findall(text) for name in line.split(",") if name.strip()
        )
        params = {name: _parse_value(value) for name, value in _PARAM.findall(text)}
        found[path.stem] = AnalysisSql(path.stem, text, requires, params)
    _check_params_unique(found)
    return {name: found[name] for name in _dependency_order(found)}


def _check_params_unique(analyses: dict[str, AnalysisSql]) -> None:
    seen: dict[str, tuple[str, Any]] = {}
    for analysis in analyses.values():
        for name, default in analysis.params.items():
            if name in seen and seen[name][1] != default:
                raise ValueError(f"param {name} declared with different defaults in {seen[name][0]} and {analysis.name}")
            seen.setdefault(name, (analysis.name, default))


def _dependency_order(analyses: dict[str, AnalysisSql]) -> list[str]:
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise ValueError("analysis requirements form a cycle: " + " -> ".join(chain + (name,)))
        if name not in analyses:
            return  # a base table view (kernels, telemetry, ...)
        state[name] = "visiting"
        for required in analyses[name].requires:
            visit(required, chain + (name,))
        state[name] = "done"
        order.append(name)

    for name in analyses:
        visit(name, ())
    return order


def all_params() -> dict[str, Any]:
    params: dict[str, Any] = {}
    for analysis in load_analyses().values():
        params.update(analysis.params)
    return params


def _set_variable(con: duckdb.DuckDBPyConnection, name: str, value: Any) -> None:
    if value is None:
        con.execute(f"set variable {name} = null")
    else:
        con.execute(f"set variable {name} = ?", [value])


def register_analysis_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create one view per analysis on a connection with the dataset views."""
    _set_param_defaults(con)
    for analysis in load_analyses().values():
        retry_vanished_files(functools.partial(_create_view, con, analysis))


def register_analyses_on_demand(con: duckdb.DuckDBPyConnection) -> None:
    """Set the parameters now, but create each analysis view (and the views
    it requires) the first time `run_analysis` runs it on `con`.

    Creating all 45 views binds each against the dataset's files (0.4 s on
    a day of telemetry and a 10M-kernel run); a dashboard page needs a
    few. The `requires:` headers must then be complete, which
    tests/test_registry.py checks view by view."""
    _set_param_defaults(con)
    _ON_DEMAND[id(con)] = set()


def create_views_named_in(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """On an on-demand connection, create the analysis views `sql` names,
    and those they require; every view where it asks what the catalogue
    holds (`show tables`, `information_schema`, `duckdb_views()`).

    Binding a view reads the footer of every file of the tables it reads:
    on a run of 200 ranks (2,000 files), creating all 45 took 1.8 s of a
    `gpulens query` that needed none of them. A name matched in a string
    or a comment only costs its view."""
    names = load_analyses() if _CATALOGUE.search(sql) else analyses_named_in(sql)
    for name in names:
        retry_vanished_files(functools.partial(_ensure_views, con, name))


def tables_named_in(sql: str) -> set[str] | None:
    """The dataset tables `sql` reads: those it names, and those the
    analyses it names (and what they require) read; None (every table)
    where it asks what the catalogue holds. For `open_dataset(tables=...)`.

    Over 2,000 rank files per table, each table's view took 0.3 s to
    create, so `gpulens query "select count(*) from kernels"` spent 5 of
    its 5.7 s creating views it never read."""
    if _CATALOGUE.search(sql):
        return None
    texts = [sql] + [analysis.sql for name in analyses_named_in(sql) for analysis in with_requirements(name)]
    tables = {table for table in TABLES if any(_names(text, table) for text in texts)}
    if any(_names(text, "hardware_peaks") for text in texts):
        tables.update(peaks.TABLES_READ)
    return tables


def analyses_named_in(sql: str) -> list[str]:
    return [name for name in load_analyses() if _names(sql, name)]


# SQL that lists what the connection holds, so wants every view made.
_CATALOGUE = re.compile(r"(?<![\w$])(show|information_schema|duckdb_views|duckdb_tables|duckdb_columns|pragma)(?![\w$])",
                        re.IGNORECASE)


def _names(sql: str, name: str) -> bool:
    """Whether `sql` holds `name` as a whole identifier (any case, as DuckDB matches names)."""
    return re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", sql, re.IGNORECASE) is not None


def _set_param_defaults(con: duckdb.DuckDBPyConnection) -> None:
    for name, default in all_params().items():
        _set_variable(con, name, default)


def _ensure_views(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """On an on-demand connection, create `name`'s view and what it requires."""
    created = _ON_DEMAND.get(id(con))
    if created is None or name in created:
        return
    for analysis in with_requirements(name):
        if analysis.name not in created:
            _create_view(con, analysis)
            created.add(analysis.name)


def with_requirements(name: str) -> list[AnalysisSql]:
    """`name` and every analysis it builds on, requirements first."""
    analyses = load_analyses()
    needed: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in analyses and current not in needed:
            needed.add(current)
            pending.extend(analyses[current].requires)
    return [analysis for analysis_name, analysis in analyses.items() if analysis_name in needed]


def _create_view(con: duckdb.DuckDBPyConnection, analysis: AnalysisSql) -> None:
    body = _strip_trailing_semicolon(analysis.sql)
    try:
        con.execute(f'create or replace view "{analysis.name}" as {body}')
    except duckdb.Error as error:
        if is_vanished_file_error(error):
            raise  # a dataset file, not this SQL: the caller runs it again
        message = one_line(error)
        raise QueryError(f"analysis/sql/{analysis.name}.sql: {message}") from error


def _strip_trailing_semicolon(sql: str) -> str:
    return re.sub(r";\s*$", "", sql.strip())


# Results kept per connection for callers that know when the dataset
# changes (the dashboard: a page's tables and its findings read the same
# views, and each costs a scan of every kernel on big runs).
# Per connection: the state of the files, and the results computed in it.
_REMEMBERED: dict[int, tuple[str, dict[tuple[Any, ...], pl.DataFrame]]] = {}
# Connections whose analysis views are created on first use: the views made so far.
_ON_DEMAND: dict[int, set[str]] = {}


def remember_results(con: duckdb.DuckDBPyConnection, state: str) -> None:
    """Keep each analysis' result on `con` while the dataset stays in
    `state` (any string that changes with its files); a new state forgets."""
    remembered = _REMEMBERED.get(id(con))
    if remembered is None or remembered[0] != state:
        _REMEMBERED[id(con)] = (state, {})


def forget_results(con: duckdb.DuckDBPyConnection) -> None:
    """Drop what is kept for `con` (its results, its on-demand views' names)."""
    _REMEMBERED.pop(id(con), None)
    _ON_DEMAND.pop(id(con), None)


@contextlib.contextmanager
def results_kept(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """While inside, each analysis runs once on `con` (the dataset is taken
    as unchanged); everything kept is dropped on leaving. For a report,
    whose findings, sections and metrics ask for the same analyses."""
    remember_results(con, "kept")
    try:
        yield
    finally:
        forget_results(con)


def is_spark(con: Any) -> bool:
    """Whether `con` is a SparkConnection (analysis.spark), without importing pyspark."""
    return getattr(con, "engine", None) == "spark"


def run_analysis(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pl.DataFrame:
    """The analysis `name` as a Polars frame, with thresholds overridden.

    Unknown parameter names are a UsageError (a typo must not be ignored).
    The connection's defaults are restored afterwards. Where the caller
    asked (`remember_results`), a result already computed is reused.
    """
    remembered = _REMEMBERED.get(id(con))
    memo = remembered[1] if remembered is not None else None
    key = (name, tuple(sorted(params.items())))
    if memo is not None and key in memo:
        return memo[key]
    result = _run_analysis(con, name, **params)
    if memo is not None:
        memo[key] = result
    return result


def _run_analysis(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pl.DataFrame:
    analyses = load_analyses()
    if name not in analyses:
        raise UsageError(f"unknown analysis {name!r}; known: {', '.join(analyses)}")
    known = all_params()
    unknown = set(params) - set(known)
    if unknown:
        raise UsageError(f"unknown {'parameter' if len(unknown) == 1 else 'parameters'} for {name}: {', '.join(sorted(unknown))}")
    if is_spark(con):  # analysis.spark.SparkConnection: the same view, translated
        return con.run_analysis(name, **params)
    try:
        for key, value in params.items():
            _set_variable(con, key, value)
        # A file a collector merges away while this runs: run it again.
        return retry_vanished_files(functools.partial(_select_analysis, con, name))
    finally:
        for key in params:
            _set_variable(con, key, known[key])


def _select_analysis(con: duckdb.DuckDBPyConnection, name: str) -> pl.DataFrame:
    _ensure_views(con, name)
    try:
        result = con.execute(f'select * from "{name}"')
        # execute(), not sql(): it works whatever the caller left pending
        # on the connection; the extra copy it warns about is small
        # beside the analysis itself.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
            import polars as pl  # here: `gpulens query` never needs it (0.2 s of imports)

            return pl.from_arrow(result.to_arrow_table())
    except duckdb.Error as error:
        if is_vanished_file_error(error):
            raise
        raise QueryError(f"{name}: {one_line(error)}") from error
