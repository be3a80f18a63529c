"""Commands of the analysis layer: `query`."""

from __future__ import annotations

import collections
import contextlib
import csv
import datetime as dt
import decimal
import io
import shutil
import sys
from pathlib import Path
from typing import TextIO

import click
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.collector.wording import visible_controls

# Rows a table shows on a terminal, the first half and the last (DuckDB's CLI shows 40).
TERMINAL_MAX_ROWS = 40
# The narrowest a column is cut to when a table is fitted to a width.
MIN_COLUMN_WIDTH = 5
ELLIPSIS = "…"


# SQL may start with a `--` comment: an argument, not an unknown option.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("dataset", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table: aligned text; csv: with a header; json: one array of row objects.")
@click.option("--max-rows", type=click.IntRange(min=0), default=None,
              help="table: show this many rows, the first half and the last (0: all). "
                   f"Default: {TERMINAL_MAX_ROWS} on a terminal, all otherwise.")
@click.option("--max-width", type=click.IntRange(min=0), default=None,
              help=f"table: fit each line into this many characters, cutting long values with {ELLIPSIS} "
                   "(0: no limit). Default: the terminal's width on a terminal, no limit otherwise.")
@click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
              help="duckdb: embedded, in this process; spark: Apache Spark (pip install 'gpulens[spark]', Java 17+).")
@click.option("--spark-master", default=None, metavar="URL",
              help="With --engine spark: local[*] (the default), spark://host:7077, k8s://..., yarn or sc://host:15002.")
def query(dataset, sql, output_format, max_rows, max_width, engine, spark_master):
    """Run DuckDB SQL over a dataset's tables.

    Views: telemetry, devices, events, processes, kernels, api_calls,
    cpu_ops, annotations, collectives, nccl_topology, memory_events, runs;
    and every analysis (analysis/sql/*.sql, the README's Analyses section), such as
    power_headroom, time_breakdown, stragglers, data_loading, host_syncs.

        gpulens query gpulens-data "select gpu_index, max(power_w) from telemetry group by 1"

        gpulens query gpulens-data "select rank, idle_share from time_breakdown"

    csv and json write the rows as DuckDB makes them: memory does not grow
    with the result. On a terminal, table shows the first and last 20 rows
    and cuts long values to fit the terminal's width; into a file or a pipe
    it writes every row in full (held in memory to align them: use csv or
    json for big results).

    The SQL reads the dataset and nothing else: files elsewhere, URLs,
    extensions and settings (but threads and memory_limit) are refused, and
    so are COPY, EXPORT and ATTACH (docs/reliability.md).
    """
    from gpulens.analysis.dataset import open_dataset, sandbox, stream_sql
    from gpulens.analysis.registry import create_views_named_in, tables_named_in
    from gpulens.collector.errors import terminated_on_sigterm
    if engine == "spark" or spark_master is not None:
        reader = _spark_query(dataset, sql, engine, spark_master)
        _write(reader, sys.stdout, output_format, max_rows, max_width, plan=False)
        return
    con = open_dataset(dataset, analyses_on_demand=True, tables=tables_named_in(sql), footer_cache=True)
    sandbox(con, dataset)  # the SQL is anyone's: it reads the dataset, and writes and fetches nothing
    # Closed here, not at exit (`gpulens query` ends without Python's
    # teardown), and on SIGTERM or Ctrl-C too, which interrupt the query
    # first: a query that spilled to disk leaves no temporary files.
    with terminated_on_sigterm(on_stop=con.interrupt), contextlib.closing(con):
        create_views_named_in(con, sql)
        # JSON has its own forms of booleans and lists; text takes DuckDB's.
        reader = stream_sql(con, sql, duckdb_text=output_format != "json")
        _write(reader, sys.stdout, output_format, max_rows, max_width, plan=_is_explain(sql))


def _write(reader: pa.RecordBatchReader, out: TextIO, output_format: str, max_rows: int | None,
           max_width: int | None, plan: bool) -> None:
    if output_format == "json":
        write_json(reader, out)
    elif output_format == "csv":
        write_csv(reader, out)
    else:
        terminal = out.isatty()
        if max_rows is None:
            max_rows = TERMINAL_MAX_ROWS if terminal else 0
        if max_width is None:
            max_width = shutil.get_terminal_size().columns if terminal else 0
        write_table(reader, out, max_rows=max_rows, max_width=max_width, plan=plan)


def _spark_query(dataset: Path, sql: str, engine: str, spark_master: str | None) -> pa.RecordBatchReader:
    """The rows of `sql` (DuckDB SQL, translated) run by Spark on the dataset."""
    from gpulens.analysis.dataset import check_statements
    from gpulens.analysis.engine import open_engine

    check_statements(sql)  # read-only, one query, as on DuckDB
    con = open_engine(dataset, engine=engine, spark_master=spark_master)
    try:
        return con.sql(sql).to_arrow_table().to_reader()
    finally:
        con.session.stop()


def write_json(reader: pa.RecordBatchReader, out: TextIO) -> None:
    """One JSON array of row objects, written a batch at a time."""
    keys = _unique(reader.schema.names)
    out.write("[")
    separator = ""
    for batch in reader:
        # By position: a join's two `name` columns are two columns.
        objects = [dict(zip(keys, row)) for row in zip(*(column.to_pylist() for column in batch.columns))]
        if objects:
            out.write(separator + _json_array(objects)[1:-1])
            separator = ","
    out.write("]\n")


def _json_array(objects: list[dict]) -> str:
    import orjson

    try:
        return orjson.dumps(objects, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # an integer beyond 64 bits (a HUGEINT sum): JSON has room for it, orjson not
        import json

        return json.dumps(objects, default=_json_default, separators=(",", ":"), ensure_ascii=False)


def write_csv(reader: pa.RecordBatchReader, out: TextIO) -> None:
    """A header row, then the rows, written a batch at a time."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(reader.schema.names)
    for batch in reader:
        writer.writerows(_rows(batch))
        out.write(buffer.getvalue())
        buffer.seek(0)
        buffer.truncate()
    out.write(buffer.getvalue())


def _is_explain(sql: str) -> bool:
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return False
    return bool(statements) and statements[-1].type.name == "EXPLAIN"


def write_table(reader: pa.RecordBatchReader, out: TextIO, max_rows: int = 0, max_width: int = 0,
                plan: bool = False) -> None:
    """Aligned text and a row count. With `max_rows`, the first and last
    rows (only those are kept) around a `…` line; with `max_width`, values
    cut to fit lines of that many characters.

    Names and values are shown as text (`visible_controls`): an ANSI escape,
    a BEL, a NUL or a newline in a value is written as `\\x1b`, `\\x07`,
    `\\x00`, `\\n`. Only an EXPLAIN's plan (`plan`) keeps its lines."""
    head: list[tuple[str, ...]] = []
    tail: collections.deque[tuple[str, ...]] = collections.deque(maxlen=max_rows // 2)
    head_size = (max_rows + 1) // 2 if max_rows else None
    total = 0
    for batch in reader:
        total += batch.num_rows
        taken = batch.num_rows if head_size is None else min(batch.num_rows, head_size - len(head))
        head.extend(_rows(batch.slice(0, taken)))
        rest = batch.num_rows - taken
        if rest and tail.maxlen:
            tail.extend(_rows(batch.slice(batch.num_rows - min(rest, tail.maxlen))))
    shown = len(head) + len(tail)
    head, rest = _visible(head, plan), _visible(list(tail), plan)
    names = [visible_controls(name) for name in reader.schema.names]
    out.write(_format_table(names, head, rest, hidden=shown < total, max_width=max_width) + "\n")
    plural = "s" if total != 1 else ""
    if shown < total:
        out.write(f"({total:,} row{plural}, {shown:,} shown; --format csv or json for all)\n")
    else:
        out.write(f"({total:,} row{plural})\n")


def _visible(rows: list[tuple[str, ...]], plan: bool) -> list[tuple[str, ...]]:
    return [tuple(visible_controls(cell, keep_newlines=plan) for cell in row) for row in rows]


def _format_table(names: list[str], head: list[tuple[str, ...]], tail: list[tuple[str, ...]], hidden: bool,
                  max_width: int) -> str:
    from gpulens.collector.cli import display_width, format_table

    # A value of several lines (an EXPLAIN plan) takes as many lines of its column.
    if any("\n" in "".join(row) for row in head + tail):
        head = [line for row in head for line in _lines(row)]
        tail = [line for row in tail for line in _lines(row)]
    natural = [display_width(name) for name in names]
    for column, texts in enumerate(zip(*head, *tail)):
        natural[column] = max(natural[column], max(map(display_width, texts)))
    widths = _fitted_widths(natural, max_width)
    body = [*head, *([tuple(ELLIPSIS for _ in names)] if hidden else []), *tail]
    if widths != natural:
        body = [tuple(_cut(cell, width) for cell, width in zip(row, widths)) for row in body]
    return format_table([_cut(name, width) for name, width in zip(names, widths)], body)


def _lines(row: tuple[str, ...]) -> list[tuple[str, ...]]:
    cells = [cell.split("\n") for cell in row]
    height = max(len(lines) for lines in cells)
    return [tuple(lines[k] if k < len(lines) else "" for lines in cells) for k in range(height)]


def _fitted_widths(natural: list[int], max_width: int) -> list[int]:
    """Column widths whose line fits `max_width`: the widest columns are cut
    to one width, no narrower than MIN_COLUMN_WIDTH."""
    gaps = 2 * (len(natural) - 1)
    if not max_width or not natural or sum(natural) + gaps <= max_width:
        return natural
    low, high = MIN_COLUMN_WIDTH, max(natural)  # the widest cut that fits lies between
    while low < high:
        cap = (low + high + 1) // 2
        if sum(min(width, cap) for width in natural) + gaps <= max_width:
            low = cap
        else:
            high = cap - 1
    return [min(width, low) for width in natural]


def _cut(text: str, width: int) -> str:
    """`text` in at most `width` terminal columns, cut with `…`."""
    from gpulens.collector.cli import display_width

    if display_width(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        used += display_width(char)
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS


def _rows(batch: pa.RecordBatch) -> list[tuple[str, ...]]:
    """A batch's rows as text. By position: a join's two `name` columns are two columns."""
    return list(zip(*(_texts(column) for column in batch.columns)))


def _texts(column: pa.Array) -> list[str]:
    """A column's values as `_text` writes them; the common types without a
    Python call per value."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.cast(column, pa.string()).fill_null("").to_pylist()
    if pa.types.is_floating(kind):
        return ["" if value is None else repr(value) for value in column.to_pylist()]
    return [_text(value) for value in column.to_pylist()]


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
        from gpulens.analysis.tables import exact_number  # imported with the query it serves

        return exact_number(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
