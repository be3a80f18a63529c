"""Parquet files written and read the way every table of the dataset is:
`pyarrow.parquet`, with two promises its callers rely on.

- A write that fails leaves no file behind (the writer, compaction and
  ingest then write again, or report, without a half-file to clean up).
- `write_tables` writes one row group per table of a stream, so the tables
  of a long stream are never all held at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


def write_table(table: pa.Table, where: str | Path | BinaryIO, **options: Any) -> None:
    """`pyarrow.parquet.write_table(table, where, **options)`, `where` a
    local path or a file open for writing; a path left half-written by an
    error is removed."""
    _write([table], where, table.schema, options, group_each_table=False)


def write_tables(tables: Iterable[pa.Table], where: str | Path | BinaryIO, schema: pa.Schema,
                 **options: Any) -> None:
    """One file of `tables` (each of `schema`), each its own row group, as
    `pyarrow.parquet.ParquetWriter` writes them with `row_group_size` each
    table's rows: the tables of a stream are never all held at once."""
    _write(tables, where, schema, options, group_each_table=True)


def _write(tables: Iterable[pa.Table], where: str | Path | BinaryIO, schema: pa.Schema, options: dict[str, Any],
           group_each_table: bool) -> None:
    """Without `group_each_table`, Parquet's default row groups (a million rows)."""
    is_path = isinstance(where, (str, Path))
    try:
        with pq.ParquetWriter(str(where) if is_path else where, schema, **options) as writer:
            for table in tables:
                writer.write_table(table, row_group_size=max(1, table.num_rows) if group_each_table else None)
    except BaseException:
        if is_path:
            try:
                os.remove(where)
            except OSError:
                pass
        raise


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """The file's rows, of `columns` (top-level names) where given; a name
    the file lacks raises KeyError naming it."""
    with pq.ParquetFile(path) as reader:
        if columns is not None:
            missing = [name for name in columns if name not in reader.schema_arrow.names]
            if missing:
                raise KeyError(missing[0])
        return reader.read(columns=columns)


def read_schema(path: str | Path) -> pa.Schema:
    """The file's Arrow schema, with its metadata, from its footer alone."""
    return pq.read_schema(path)


def row_groups(path: str | Path) -> Iterator[pa.Table]:
    """The file's row groups in order, read one at a time. The file is
    opened at the first `next`, so an unreadable one raises there."""
    with pq.ParquetFile(path) as reader:
        for index in range(reader.num_row_groups):
            yield reader.read_row_group(index)
