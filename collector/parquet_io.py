"""Parquet files written and read through pyarrow's own Parquet classes,
without importing `pyarrow.parquet`.

`pyarrow.parquet` imports `pyarrow.fs`, and with it the S3, GCS, Azure and
HDFS filesystems and OpenSSL: 13 ms of every `gpulens ingest` before its
first file, and 8.6 MB of memory in each of its processes (on the 64 small
ranks of `bench/ingest_vs_hta.py`, two processes of 90 MB each). Local
files need none of it: `pyarrow.parquet.write_table` and `ParquetFile`
hand a local path to the compiled `pyarrow._parquet` writer and reader,
which open it themselves. So this calls those classes directly, with the
defaults `pyarrow.parquet` gives them (the files are byte for byte the
same: `tests/test_parquet_io.py`), and falls back to `pyarrow.parquet`
where a pyarrow release no longer has them.

The rarer paths (merging a run's files, telemetry compaction) use
`pyarrow.parquet` itself, imported where they run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

try:
    from pyarrow._parquet import ParquetReader, ParquetWriter
except ImportError:  # a pyarrow without them: `pyarrow.parquet` below
    ParquetReader = ParquetWriter = None

# What `pyarrow.parquet.ParquetWriter` passes where its caller says nothing.
_WRITER_DEFAULTS: dict[str, Any] = {
    "version": "2.6",
    "use_dictionary": True,
    "compression": "snappy",
    "write_statistics": True,
    "use_deprecated_int96_timestamps": False,
    "use_byte_stream_split": False,
    "writer_engine_version": "V2",
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
}


def write_table(table: pa.Table, path: str | Path, **options: Any) -> None:
    """`pyarrow.parquet.write_table(table, path, **options)` for a local
    path; a file left half-written by an error is removed."""
    if ParquetWriter is None:
        import pyarrow.parquet as pq

        pq.write_table(table, path, **options)
        return
    try:
        writer = ParquetWriter(str(path), table.schema, **{**_WRITER_DEFAULTS, **options})
        try:
            writer.write_table(table)
        finally:
            writer.close()
    except Exception:
        try:
            os.remove(path)
        except OSError:
            pass
        raise


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """`pyarrow.parquet.ParquetFile(path).read(columns=columns)`: the file's
    rows, of `columns` (top-level names) where given."""
    if ParquetReader is None:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).read(columns=columns)
    reader = ParquetReader()
    reader.open(str(path))
    try:
        return reader.read_all(column_indices=None if columns is None else _leaves(reader.column_paths, columns))
    finally:
        reader.close()


def _leaves(paths: list[list[str]], columns: list[str]) -> list[int]:
    """The indices of the Parquet leaf columns that make up each of the
    top-level `columns` (a list or struct has several), in their order."""
    indices = []
    for name in columns:
        found = [index for index, path in enumerate(paths) if path[0] == name]
        if not found:
            raise KeyError(name)
        indices.extend(found)
    return indices
