"""Parquet files written and read the way every table of the dataset is:
`pyarrow.parquet`, with the promises its callers rely on.

- A write that fails leaves no file behind (the writer, compaction and
  ingest then write again, or report, without a half-file to clean up);
  `write_parquet_atomic` writes under a staging name, syncs and renames,
  so a reader never sees half a file.
- The encodings of the node tables (`parquet_options`) and of the trace
  tables (`trace_parquet_options`) are chosen here, once.
- `write_tables` writes one row group per table of a stream, so the tables
  of a long stream are never all held at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.collector.errors import DatasetError



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


ZSTD_LEVEL = 3


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """Encodings that make slowly-changing metrics nearly free on disk.

    Floats use BYTE_STREAM_SPLIT (the exponent and high mantissa bytes of a
    series compress well once split); strings and lists keep dictionaries.
    """
    float_columns = [f.name for f in schema if pa.types.is_floating(f.type)]
    return {
        "compression": "zstd",
        "compression_level": ZSTD_LEVEL,
        "use_dictionary": [f.name for f in schema if not pa.types.is_floating(f.type)],
        "use_byte_stream_split": float_columns,
        "write_statistics": True,
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
