"""The dataset's tables and where their files live, and how a query that
lost a file to a merge runs again: what every other module of analysis
builds on (so it imports none of them).
"""

from __future__ import annotations

import decimal
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from gpulens.collector.errors import QueryError
from gpulens.collector.schema import TRACE_SCHEMAS

# Where each table's files live, relative to the dataset root.
TABLE_GLOBS: dict[str, str] = {
    "telemetry": "telemetry/**/*.parquet",
    "devices": "devices/**/*.parquet",
    "events": "events/**/*.parquet",
    "processes": "processes/**/*.parquet",
    **{name: f"traces/*/{name}/*.parquet" for name in TRACE_SCHEMAS},
}
TABLES: tuple[str, ...] = tuple(TABLE_GLOBS)

# How DuckDB says a file it was reading has gone: a file its glob listed and
# that was removed before the scan opened it, or a glob that now matches
# nothing. A collector merging its flush files (collector/compact.py)
# exchanges the partition's folder for one holding the merged file, so a
# query that listed the old files just before fails once and works when
# run again.
_VANISHED_FILE = re.compile(
    r'Cannot open file "(?P<file>[^"]+)": No such file or directory'
    r'|No files found that match the pattern "(?P<pattern>[^"]+)"'
)
# What a DuckDB query raises: its own errors, and (the last two) the same
# errors come through its Arrow stream.
DUCKDB_ERRORS = (duckdb.Error, pa.ArrowException, OSError)
VANISHED_FILE_TRIES = 3
VANISHED_FILE_PAUSE_S = 0.1  # before the second run; twice that before the third

_T = TypeVar("_T")


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def exact_number(value: decimal.Decimal) -> int | float:
    """A DECIMAL result as a plain number: sum() of a BIGINT column is a
    HUGEINT, which arrives as a Decimal; keep a whole one an exact int."""
    return int(value) if value == value.to_integral_value() else float(value)


def table_files(root: Path, table: str) -> list[Path]:
    return sorted(p for p in root.glob(TABLE_GLOBS[table]) if p.is_file())


def is_vanished_file_error(error: BaseException) -> bool:
    """Whether a DuckDB error says a file it was reading has gone."""
    return _VANISHED_FILE.search(str(error)) is not None


def retry_vanished_files(action: Callable[[], _T], tries: int = VANISHED_FILE_TRIES) -> _T:
    """`action()`, run again after a short pause (`tries` runs in all) while
    it fails because a file it read has gone; then a QueryError naming the
    file. Other errors pass through unchanged, and are not retried.

    `action` must be safe to run again: it must not have written anything.
    """
    for attempt in range(1, tries + 1):
        try:
            return action()
        except DUCKDB_ERRORS as error:
            if not is_vanished_file_error(error):
                raise
            if attempt == tries:
                raise vanished_file_error(error, f"tried {tries} times") from error
        time.sleep(VANISHED_FILE_PAUSE_S * attempt)
    raise ValueError(f"tries must be at least 1, not {tries}")


def vanished_file_error(error: BaseException, detail: str) -> QueryError:
    match = _VANISHED_FILE.search(str(error))
    assert match is not None
    if match["file"]:
        return QueryError(f"{match['file']}: no such file ({detail})")
    return QueryError(f"{match['pattern']}: no file matches ({detail})")
