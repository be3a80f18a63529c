"""Parquet files written and read the way every table of the dataset is,
with the promises their callers rely on.

- A write that fails leaves no file behind (the writer, compaction and
  ingest then write again, or report, without a half-file to clean up);
  `write_parquet_atomic` writes under a staging name, syncs and renames,
  so a reader never sees half a file.
- The encodings of the node tables (`parquet_options`) and of the trace
  tables (`trace_parquet_options`) are chosen here, once.
- `write_tables` writes one row group per table of a stream, so the tables
  of a long stream are never all held at once.

Through pyarrow's own Parquet classes (`collector.pyarrow_internals`),
without importing `pyarrow.parquet`. `pyarrow.parquet` imports `pyarrow.fs`,
and with it the S3, GCS, Azure and HDFS filesystems and OpenSSL: 13 ms of
every `gpulens ingest` before its first file (6 % of its fixed cost), and
8.6 MB of memory in each of its processes and in the collector daemon.
Local files need none of it: `pyarrow.parquet`'s writer, `ParquetFile` and
`read_schema` hand a local path or an open file to pyarrow's compiled
Parquet writer and reader. So this calls those classes
directly, with the defaults `pyarrow.parquet` gives them (the files are
byte for byte the same, and `tests/test_parquet_io.py` fails when a pyarrow
release moves or changes them), and falls back to `pyarrow.parquet` where
a pyarrow release no longer has them, or its writer takes other arguments.

Merging a trace run's files (`ingest.merge`, rare) still reads through
`pyarrow.dataset`, imported where it runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow as pa

from gpulens.collector.errors import DatasetError
from gpulens.collector.pyarrow_internals import ParquetReader, ParquetWriter

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
    def size(table: pa.Table) -> int | None:
        return max(1, table.num_rows) if group_each_table else None

    is_path = isinstance(where, (str, Path))
    try:
        writer = _writer(where, is_path, schema, options)
        try:
            for table in tables:
                writer.write_table(table, row_group_size=size(table))
        finally:
            writer.close()
    except BaseException:
        if is_path:
            try:
                os.remove(where)
            except OSError:
                pass
        raise


def _writer(where: str | Path | BinaryIO, is_path: bool, schema: pa.Schema, options: dict[str, Any]) -> Any:
    """pyarrow's compiled writer; `pyarrow.parquet`'s where this pyarrow has
    none, or one that takes other arguments (a later release): arguments
    are checked before the file is opened, so nothing is written twice."""
    if ParquetWriter is not None:
        try:
            return ParquetWriter(str(where) if is_path else where, schema, **{**_WRITER_DEFAULTS, **options})
        except TypeError as error:
            if isinstance(error, pa.ArrowException):  # ArrowTypeError: the schema or options, not the call
                raise
    import pyarrow.parquet as pq

    return pq.ParquetWriter(where, schema, **options)


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """`pyarrow.parquet.ParquetFile(path).read(columns=columns)`: the file's
    rows, of `columns` (top-level names) where given."""
    reader = _open(path)
    try:
        if ParquetReader is None:
            return reader.read(columns=columns)
        return reader.read_all(column_indices=None if columns is None else _leaves(reader.column_paths, columns))
    finally:
        reader.close()


def read_schema(path: str | Path) -> pa.Schema:
    """`pyarrow.parquet.read_schema(path)`: the file's Arrow schema, with its
    metadata, from its footer alone."""
    reader = _open(path)
    try:
        return reader.schema_arrow
    finally:
        reader.close()


def row_groups(path: str | Path) -> Iterator[pa.Table]:
    """The file's row groups in order, read one at a time: as
    `ParquetFile(path).read_row_group(i)` for each. The file is opened at
    the first `next`, so an unreadable one raises there."""
    reader = _open(path)
    try:
        for index in range(reader.num_row_groups):
            yield reader.read_row_group(index)
    finally:
        reader.close()


def _open(path: str | Path) -> Any:
    """pyarrow's compiled reader of `path`; where this pyarrow has none,
    `pyarrow.parquet.ParquetFile`, which has the same `schema_arrow`,
    `num_row_groups`, `read_row_group` and `close`."""
    if ParquetReader is None:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path)
    reader = ParquetReader()
    reader.open(str(path))
    return reader


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


ZSTD_LEVEL = 3


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """Encodings that make slowly-changing metrics nearly free on disk.

    Floats use BYTE_STREAM_SPLIT (the exponent and high mantissa bytes of a
    series compress well once split); times and integers (counters, bytes,
    clocks) are delta-encoded, as in the trace tables: a dictionary on
    them is built and then dropped once a row group's distinct times
    overflow it; strings and lists keep dictionaries. On a week-long
    import's 1.2 M rows: 14.6 -> 13.4 MiB.

    Statistics (min, max, NULL count) are written for times and numbers,
    which queries filter on, not for text and lists: no query prunes on
    a host (a partition folder already), vendor, UUID or reason, and their
    min and max cost a string comparison a value, about 15 ns a row per
    column (a third of the import's write of each).
    """
    floats = {f.name: "BYTE_STREAM_SPLIT" for f in schema if pa.types.is_floating(f.type)}
    integers = {f.name: "DELTA_BINARY_PACKED" for f in schema
                if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)}
    return {
        "compression": "zstd",
        "compression_level": ZSTD_LEVEL,
        "use_dictionary": [f.name for f in schema if f.name not in floats and f.name not in integers],
        "column_encoding": {**floats, **integers},
        "write_statistics": [f.name for f in schema if f.name in floats or f.name in integers],
        "data_page_version": "2.0",
    }


def write_parquet_atomic(table: pa.Table | Iterable[pa.Table], destination: Path, staging: Path,
                         schema: pa.Schema | None = None) -> Path:
    """Write `table` to `destination` via a fsynced file in `staging`.

    `table` may also be an iterable of tables of `schema`, written one row
    group (or more) each, so that a merge never holds all its rows."""
    temporary = staging / f"{destination.name}.{os.getpid()}.tmp"
    try:
        staging.mkdir(parents=True, exist_ok=True)
        destination.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as handle:
            if isinstance(table, pa.Table):
                write_table(table, handle, **parquet_options(table.schema))
            else:
                assert schema is not None, "a stream of tables needs its schema"
                write_tables(table, handle, schema, **parquet_options(schema))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, destination)
        fsync_dir(destination.parent)
    except OSError as error:
        with contextlib.suppress(OSError):  # a read-only or vanished folder: the first error is the one to tell
            temporary.unlink(missing_ok=True)
        reason = "disk full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        raise DatasetError(f"{destination}: cannot write ({reason})") from error
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)  # a source that failed to read, say: nothing half-written stays
        raise
    return destination


def new_temporary_file(folder: Path, prefix: str, suffix: str = ".tmp") -> Path:
    """A new, empty, uniquely named file in `folder`, to write and then
    rename into place, with the mode any new file gets (0666 less the
    umask): mkstemp's 0600 would go with it into the dataset, where other
    users could not read it."""
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        umask = os.umask(0o077)  # read by setting it: a short-lived value no looser than mkstemp's
        os.umask(umask)
        os.fchmod(handle, 0o666 & ~umask)
    except OSError:
        Path(name).unlink(missing_ok=True)
        raise
    finally:
        os.close(handle)
    return Path(name)


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def trace_parquet_options(schema: pa.Schema) -> dict:
    """How trace tables are written.

    Dictionaries only for text (names, categories repeat); on times and ids
    they cost time and make files bigger (v100 trace: 1.0 vs 1.8 MB).
    Integers (times, ids, durations) are delta-encoded: as small as plain
    zstd, a third faster to write, and twice as fast for DuckDB to read (a
    full scan of 10M launched kernels: 1.0 s plain, 0.5 s delta).
    """
    text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    integers = {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)}
    return {"compression": "zstd", "use_dictionary": text, "column_encoding": integers}
