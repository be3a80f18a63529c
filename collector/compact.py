"""Merging a partition's small Parquet files into few big ones.

The collector writes one file per flush: at the default minute flushes a
day of telemetry is 1,440 files per host. Every query over a glob of them
opens every file's footer first (DuckDB took 0.3-0.6 s per telemetry view
on such a day, 9 s to register the analyses), so the writer merges them
as it goes, in two tiers:

  - when a partition (`<table>/host=H/date=D/`) holds COMPACT_PARTS_AT flush
    files, they become one `part-<first ts>-merged-<n>.parquet`;
  - when it holds COMPACT_MERGED_AT merged files, those become one.

A day at minute flushes is then at most 24 + 60 files, and the rows merged
each time are an hour's, not the day's. A merge streams: it reads one
row group at a time and writes the rows in time order (the files' name
order, then each file's own order) in row groups of MERGE_ROW_GROUP_ROWS,
with the writer's encodings; its memory does not grow with the rows.

Safety: the merged file is written atomically (staging, fsync, rename)
and records the files it replaces in its metadata; only then are those
removed. A crash in between leaves both, and the next writer on that
dataset (`finish_interrupted`) removes the replaced files, so rows are
never lost and duplicates do not outlive a restart. A query already
running when files are merged may miss them for that once (they are
gone by the time it opens them: the query functions of analysis.dataset
run it again). A query that lists a partition's files in the instant
between the merged file's rename and its inputs' removal (the unlinks of
at most COMPACT_PARTS_AT files, well under a millisecond) counts those
rows twice, for that once: no rename can swap several files at once, and
a lock taken by every reader was judged too costly for so short a window.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from gpulens.collector import parquet_io
from gpulens.collector.errors import DatasetError, even_if_interrupted, one_line

COMPACT_PARTS_AT = 60
COMPACT_MERGED_AT = 24
MERGED_MARK = "-merged-"
_SOURCES_KEY = b"gpulens.merged_from"
PARTITIONED_TABLES = ("telemetry", "events", "processes")
# Rows per row group of a merged file (DuckDB's own row groups are 122,880).
MERGE_ROW_GROUP_ROWS = 1 << 16
_merge_numbers = itertools.count(1)  # keeps a process's merged file names apart


def is_merged(path: Path) -> bool:
    return MERGED_MARK in path.name


def maybe_compact(folder: Path, staging: Path, parts_at: int = COMPACT_PARTS_AT,
                  merged_at: int = COMPACT_MERGED_AT) -> list[Path]:
    """Merge `folder`'s files where a tier is full; the files written.

    Skipped (until the next flush) while another process merges files of
    the same dataset (`gpulens compact`)."""
    parts = sorted(p for p in folder.glob("part-*.parquet") if not is_merged(p))
    if len(parts) < parts_at and len(list(folder.glob(f"part-*{MERGED_MARK}*.parquet"))) < merged_at:
        return []
    written = []
    with _merge_lock(staging, wait=False) as locked:
        if not locked:
            return []
        if len(parts) >= parts_at:
            written.append(_merge_locked(parts, staging))
        merged = sorted(p for p in folder.glob("part-*.parquet") if is_merged(p))
        if len(merged) >= merged_at:
            written.append(_merge_locked(merged, staging))
    return written


def compact_dataset(root: Path) -> tuple[int, int]:
    """Merge every node-table partition of a dataset into one file each
    (`gpulens compact`); (files before, files after). Waits for a
    collector that is merging files of the same dataset."""
    before = after = 0
    staging = root / ".staging"
    for table in PARTITIONED_TABLES:
        for folder in sorted({p.parent for p in (root / table).glob("host=*/date=*/part-*.parquet")}):
            with _merge_lock(staging, wait=True):
                files = sorted(folder.glob("part-*.parquet"))
                before += len(files)
                if len(files) >= 2:
                    _merge_locked(files, staging)
                else:
                    _read_schemas(files)  # no merge reads it: check it as one would
            after += 1
    return before, after


@contextlib.contextmanager
def _merge_lock(staging: Path, wait: bool) -> Iterator[bool]:
    """One merger at a time per dataset: two merging the same files would
    each write them again."""
    staging.mkdir(parents=True, exist_ok=True)
    with open(staging / "merge.lock", "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _merge_locked(files: list[Path], staging: Path) -> Path:
    """Replace `files` (one partition's) with one merged file; the caller
    holds the merge lock.

    Streamed: the files are read one row group at a time, in name order
    (which is time order: names start with the first `ts`), and written
    as row groups of about MERGE_ROW_GROUP_ROWS rows, so a merge holds
    one row group, not the hour. Merging an hour of 64 GPUs at 10 Hz
    whole (and sorting it) took 1.7 GB and 11.6 s of CPU."""
    from gpulens.collector.parquet_io import write_parquet_atomic

    try:
        schema = pa.unify_schemas(_read_schemas(files), promote_options="permissive")
    except pa.ArrowException as error:  # columns of one name but types that do not mix
        raise DatasetError(f"{files[0].parent}: cannot merge its files ({one_line(error)})") from error
    schema = schema.with_metadata({_SOURCES_KEY: json.dumps([p.name for p in files]).encode()})
    first = files[0].name.removeprefix("part-").split("-")[0]
    destination = files[0].parent / f"part-{first}{MERGED_MARK}{os.getpid()}-{len(files)}-{next(_merge_numbers)}.parquet"
    try:
        write_parquet_atomic(_row_groups(files, schema), destination, staging, schema=schema)
    except (OSError, pa.ArrowException) as error:
        raise DatasetError(f"{files[0].parent}: cannot merge its files ({error})") from error
    # Stopped halfway, both the merged file and some of its inputs would be
    # read (until the next writer's `finish_interrupted`): all of them go.
    even_if_interrupted(_remove, files)
    return destination


def _remove(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)


def _read_schemas(files: list[Path]) -> list[pa.Schema]:
    """Each file's schema, without its metadata; DatasetError naming the
    first file that cannot be read, so that the user knows which to move
    aside (it is left as it is)."""
    schemas = []
    for path in files:
        try:
            schemas.append(parquet_io.read_schema(path).remove_metadata())
        except (OSError, pa.ArrowException) as error:
            raise _unreadable(path, error) from error
    return schemas


def _unreadable(path: Path, error: Exception) -> DatasetError:
    if isinstance(error, OSError) and error.strerror:
        return DatasetError(f"{path}: cannot read it ({error.strerror})")
    return DatasetError(f"{path}: not a readable Parquet file, left as it is ({one_line(error)})")


def _row_groups(files: list[Path], schema: pa.Schema) -> Iterator[pa.Table]:
    """The files' rows, in order, in tables of about MERGE_ROW_GROUP_ROWS."""
    return in_row_groups(_conformed_row_groups(files, schema))


def _conformed_row_groups(files: list[Path], schema: pa.Schema) -> Iterator[pa.Table]:
    for path in files:
        groups = parquet_io.row_groups(path)
        while True:
            try:
                row_group = next(groups, None)
            except (OSError, pa.ArrowException) as error:  # its footer, or a damaged page past a sound one
                raise _unreadable(path, error) from error
            if row_group is None:
                break
            yield _conform(row_group, schema)


def in_row_groups(parts: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """The parts' rows, in order, regrouped into tables of about
    MERGE_ROW_GROUP_ROWS: each one row group of a merged file."""
    pending: list[pa.Table] = []
    rows = 0
    for part in parts:
        pending.append(part)
        rows += part.num_rows
        if rows >= MERGE_ROW_GROUP_ROWS:
            yield pa.concat_tables(pending)
            pending, rows = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns, in its order and types (a column an
    older file lacks is NULL)."""
    arrays = [
        table.column(field.name).cast(field.type) if field.name in table.column_names
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def finish_interrupted(root: Path) -> int:
    """Remove files a merged file replaced but a crash left behind; how many."""
    removed = 0
    for table in PARTITIONED_TABLES:
        for merged in (root / table).glob(f"host=*/date=*/part-*{MERGED_MARK}*.parquet"):
            try:
                metadata = parquet_io.read_schema(merged).metadata or {}
            except (OSError, pa.ArrowException):
                continue
            for name in json.loads(metadata.get(_SOURCES_KEY, b"[]")):
                source = merged.parent / name
                if source != merged and source.exists():
                    source.unlink(missing_ok=True)
                    removed += 1
    return removed
