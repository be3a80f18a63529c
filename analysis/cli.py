"""Commands of the analysis layer: `query`."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import sys
from pathlib import Path

import click
import pyarrow as pa


# SQL may start with a `--` comment: an argument, not an unknown option.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("dataset", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table: aligned text; csv: with a header; json: one array of row objects.")
def query(dataset, sql, output_format):
    """Run DuckDB SQL over a dataset's tables.

    Views: telemetry, devices, events, processes, kernels, api_calls,
    cpu_ops, annotations, collectives, nccl_topology, runs.

        gpulens query gpulens-data "select gpu_index, max(power_w) from telemetry group by 1"
    """
    from analysis.dataset import open_dataset, run_sql

    con = open_dataset(dataset)
    table = run_sql(con, sql)
    sys.stdout.write(render(table, output_format))


def render(table, output_format: str) -> str:
    """A pyarrow table as text in `output_format`."""
    names = table.column_names
    # By position: a join's two `name` columns are two columns.
    rows = list(zip(*(column.to_pylist() for column in table.columns))) if names else []
    if output_format == "json":
        import orjson

        keys = _unique(names)
        objects = [dict(zip(keys, row)) for row in rows]
        try:
            return orjson.dumps(objects, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode() + "\n"
        except TypeError:  # an integer beyond 64 bits (a HUGEINT sum): JSON has room for it, orjson not
            import json

            return json.dumps(objects, default=_json_default, separators=(",", ":"), ensure_ascii=False) + "\n"
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([_text(value) for value in row])
        return buffer.getvalue()
    from collector.cli import format_table

    body = [tuple(_text(value) for value in row) for row in rows]
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
    return format_table(names, body) + "\n" + footer + "\n"


def _unique(names: list[str]) -> list[str]:
    """JSON keys for the columns: a repeated name gets `_1`, `_2` (as DuckDB
    names the columns of a table made from such a query)."""
    keys: list[str] = []
    for name in names:
        key, n = name, 0
        while key in keys:
            n += 1
            key = f"{name}_{n}"
        keys.append(key)
    return keys


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # every digit the double holds: an energy in J is not 8.85963e+06
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    return str(value)


def interval_text(value: pa.MonthDayNano) -> str:
    """A DuckDB INTERVAL as DuckDB writes it: `1 year 2 months 3 days 04:05:06.5`."""
    years, months = divmod(abs(value.months), 12)
    sign = "-" if value.months < 0 else ""
    parts = [f"{sign}{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((years, "year"), (months, "month")) if n]
    if value.days:
        parts.append(f"{value.days} day{'s' if abs(value.days) != 1 else ''}")
    if value.nanoseconds or not parts:
        micros = abs(value.nanoseconds) // 1000
        seconds, micros = divmod(micros, 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        fraction = f".{micros:06d}".rstrip("0") if micros else ""
        parts.append(f"{'-' if value.nanoseconds < 0 else ''}{hours:02d}:{minutes:02d}:{seconds:02d}{fraction}")
    return " ".join(parts)


def _json_default(value):
    if isinstance(value, decimal.Decimal):
        # sum() of BIGINT is a HUGEINT (a decimal here): keep it an exact integer.
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
