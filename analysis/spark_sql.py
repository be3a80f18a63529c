"""DuckDB SQL as Spark SQL: the analyses' one source of truth on both engines.

Each question stays one file in `analysis/sql/`, written for DuckDB.
`to_spark(sql, params)` makes the Spark SQL that asks the same question:

1. each `getvariable('name')` becomes the parameter's value, a literal
   (Spark's session variables cannot be read by a temporary view);
2. sqlglot translates the DuckDB dialect into Spark's;
3. the rules below mend what sqlglot gets wrong or passes through (each
   found by tests/test_engine_parity.py, which runs every view on both).

A file whose DuckDB-only construct has no portable form and no rule (an
`ASOF JOIN`, an ordered list aggregate) has a Spark twin,
`analysis/sql/spark/<name>.sql`, written in Spark SQL, which is used
instead and which the same parity test checks. `non_portable(sql)` names
such constructs; tests/test_engine_parity.py's lint fails for a file that
uses one and has no twin.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from gpulens.collector.errors import QueryError

TWIN_DIR = Path(__file__).resolve().parent / "sql" / "spark"

_GETVARIABLE = re.compile(r"getvariable\(\s*'([a-z_][a-z0-9_]*)'\s*\)", re.IGNORECASE)


def literal(value: Any) -> str:
    """`value` as a SQL literal both dialects read alike."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value else "cast('NaN' as double)"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def with_params(sql: str, params: dict[str, Any]) -> str:
    """`sql` with each getvariable('name') replaced by the literal of params[name]."""

    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name not in params:
            raise QueryError(f"getvariable('{name}'): no such parameter")
        return "(" + literal(params[name]) + ")"

    return _GETVARIABLE.sub(value, sql)


@cache
def twin(name: str) -> str | None:
    """The Spark twin of analysis `name`, where there is one."""
    path = TWIN_DIR / f"{name}.sql"
    return path.read_text() if path.is_file() else None


def to_spark(sql: str, params: dict[str, Any] | None = None) -> str:
    """DuckDB `sql` as Spark SQL (one statement), with `params` as literals.

    Raises QueryError where sqlglot cannot parse it, knows it cannot write
    a part of it for Spark, or a rule refuses a shape it cannot carry."""
    import sqlglot
    from sqlglot.errors import ErrorLevel, SqlglotError

    from gpulens.analysis.spark_rules import apply_rules

    text = with_params(sql, params or {})
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
        return apply_rules(tree).sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as error:
        raise QueryError(f"cannot translate to Spark SQL: {' '.join(str(error).split())}") from error


def non_portable(sql: str) -> list[str]:
    """What in DuckDB `sql` does not carry to Spark: each needs a twin.

    Where sqlglot is known to drop a part with no error (an ORDER BY
    inside list()), and whatever the translation refuses (a rule's shape,
    sqlglot's unsupported)."""
    import sqlglot
    from sqlglot import exp

    text = with_params(sql, _AnyParam())
    found: list[str] = []
    for function in sqlglot.parse_one(text, read="duckdb").find_all(exp.ArrayAgg):
        if function.find(exp.Order) is not None:
            found.append(f"{function.sql(dialect='duckdb')}: list() with ORDER BY (sqlglot drops the order)")
    try:
        to_spark(text)
    except QueryError as error:
        found.append(str(error))
    return found


class _AnyParam(dict):
    """Parameters for the lint: every name reads as null."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> None:
        return None
