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

Safety: a reader sees a partition's files before a merge or after it,
never both. The merged file is written (staging, fsync) into a new folder
under `.staging/`, beside hard links to the partition's other files (newer
flushes, imports, earlier merged files); that folder and the partition
are then exchanged in one step (`swap.exchange`, renameat2's
RENAME_EXCHANGE), so a query that lists the partition lists either the
inputs or the merged file, whole, never both: none counts a row twice. A
flush written into the partition while it was being merged is moved into
the new one right after the exchange (a query in that instant may miss
that newest file, as one a moment earlier would have). The old folder,
now under `.staging/`, is then removed. A plan file beside it
(`compact-<pid>-<n>.json`) names the partition and the files the merge
read or linked: a crash before the
exchange leaves the dataset as it was, one after it is finished by the
next writer on that dataset (`finish_interrupted`), which also moves any
newer flush left in the old folder. A query already running may miss
the merged files for that once (they are gone by the time it opens them:
the query functions of analysis.dataset run it again).

Where the file system cannot exchange two folders (NFS, some FUSE file
systems) or make hard links, the merge falls back to renaming the merged
file into place and then removing its inputs: a query that lists the
partition in that instant (well under a millisecond) counts those rows
twice, for that once. The merged file records the files it replaces in
its metadata, so a crash between the rename and the removals is finished
by `finish_interrupted` too.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from gpulens.collector import parquet_io
from gpulens.collector.errors import DatasetError, even_if_interrupted, one_line
from gpulens.collector.swap import SwapUnsupported, exchange

COMPACT_PARTS_AT = 60
COMPACT_MERGED_AT = 24
MERGED_MARK = "-merged-"
_SOURCES_KEY = b"gpulens.merged_from"
PARTITIONED_TABLES = ("telemetry", "events", "processes")
# Rows per row group of a merged file (DuckDB's own row groups are 122,880).
MERGE_ROW_GROUP_ROWS = 1 << 16
_merge_numbers = itertools.count(1)  # keeps a process's merged file names apart
# A merge's next partition folder under `.staging/`, and its plan beside it.
SWAP_PREFIX = "compact-"


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
    number = next(_merge_numbers)
    folder = files[0].parent
    name = f"part-{first}{MERGED_MARK}{os.getpid()}-{len(files)}-{number}.parquet"
    # The partition as it will be, built aside, then exchanged with it.
    upcoming = staging / f"{SWAP_PREFIX}{os.getpid()}-{number}"
    try:
        _remove_tree(upcoming)
        upcoming.mkdir(parents=True)
        write_parquet_atomic(_row_groups(files, schema), upcoming / name, staging, schema=schema)
    except (OSError, pa.ArrowException) as error:
        _remove_tree(upcoming)
        raise DatasetError(f"{files[0].parent}: cannot merge its files ({error})") from error
    except BaseException:
        _remove_tree(upcoming)
        raise
    inputs = {path.name for path in files}
    plan = upcoming.with_name(upcoming.name + ".json")
    try:
        linked = _link_the_rest(folder, upcoming, inputs)
        _same_owner_and_mode(folder, upcoming)
        # What the next writer needs to finish the merge if this process dies.
        plan.write_text(json.dumps({"partition": str(folder.relative_to(staging.parent)), "merged": name,
                                    "known": sorted(inputs | linked)}))
        exchange(upcoming, folder)
        parquet_io.fsync_dir(folder.parent)
    except (SwapUnsupported, _NoLinks):
        return _merge_by_rename(files, upcoming, folder, name, plan)
    except OSError as error:
        even_if_interrupted(_settle, upcoming, folder, name, inputs, plan)
        raise DatasetError(f"{folder}: cannot merge its files ({error.strerror or error})") from error
    except BaseException:
        even_if_interrupted(_settle, upcoming, folder, name, inputs, plan)
        raise
    # `upcoming` is now the old partition: what was flushed since the links
    # were made moves over, and the rest goes.
    even_if_interrupted(_settle, upcoming, folder, name, inputs | linked, plan)
    return folder / name


class _NoLinks(Exception):
    """The partition's other files cannot be hard-linked (or it holds a folder)."""


def _link_the_rest(folder: Path, upcoming: Path, inputs: set[str]) -> set[str]:
    """Hard links in `upcoming` to every file of `folder` not merged; their names."""
    linked = set()
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name in inputs:
                continue
            if not entry.is_file(follow_symlinks=False):
                raise _NoLinks(entry.path)
            try:
                os.link(entry.path, upcoming / entry.name)
            except FileNotFoundError:
                continue  # merged away, or moved, since it was listed
            except OSError as error:
                raise _NoLinks(entry.path) from error
            linked.add(entry.name)
    return linked


def _same_owner_and_mode(folder: Path, upcoming: Path) -> None:
    """`upcoming` with `folder`'s mode, and its owner where this process may
    set it (`gpulens compact` run as root on a collector's dataset)."""
    status = folder.stat()
    os.chmod(upcoming, status.st_mode & 0o7777)
    if (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(PermissionError):
            os.chown(upcoming, status.st_uid, status.st_gid)


def _settle(aside: Path, folder: Path, merged: str, known: set[str], plan: Path) -> None:
    """Finish a merge by exchange, whichever side of it it stopped: where
    `aside` still holds the merged file, the exchange did not happen and
    `aside` goes; else `aside` is the old partition, and every file in it
    but `known` (the inputs, the files linked) moves into `folder` first."""
    if aside.is_dir() and not (aside / merged).exists():
        with os.scandir(aside) as entries:
            newer = [entry.name for entry in entries if entry.name not in known]
        for entry in newer:
            if not (folder / entry).exists():
                os.replace(aside / entry, folder / entry)
        parquet_io.fsync_dir(folder)
    _remove_tree(aside)
    plan.unlink(missing_ok=True)


def _merge_by_rename(files: list[Path], upcoming: Path, folder: Path, name: str, plan: Path) -> Path:
    """The fallback where folders cannot be exchanged: the merged file is
    renamed into place, then its inputs removed (a query listing the
    partition in between counts them twice)."""
    destination = folder / name
    try:
        os.replace(upcoming / name, destination)
        parquet_io.fsync_dir(folder)
    except OSError as error:
        _remove_tree(upcoming)
        plan.unlink(missing_ok=True)
        raise DatasetError(f"{folder}: cannot merge its files ({error.strerror or error})") from error
    _remove_tree(upcoming)
    plan.unlink(missing_ok=True)
    # Stopped halfway, both the merged file and some of its inputs would be
    # read (until the next writer's `finish_interrupted`): all of them go.
    even_if_interrupted(_remove, files)
    return destination


def _remove_tree(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


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
    """Finish merges a crash stopped: a merge by exchange whose old folder
    is still under `.staging/` (`_settle`), and files a merged file
    replaced but the fallback left behind; how many files were removed."""
    removed = _finish_exchanges(root / ".staging")
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


def _finish_exchanges(staging: Path) -> int:
    """`_settle` the merges by exchange of processes that no longer run;
    how many files went with their old (or unused) folders."""
    removed = 0
    for folder in sorted(staging.glob(f"{SWAP_PREFIX}*")):
        if folder.suffix == ".json" or not _dead(folder.name):
            continue
        plan = folder.with_name(folder.name + ".json")
        files = sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0
        try:
            facts = json.loads(plan.read_text())
            partition, merged, known = staging.parent / facts["partition"], facts["merged"], set(facts["known"])
        except (OSError, ValueError, KeyError, TypeError):
            _remove_tree(folder)  # no plan: stopped before the exchange
        else:
            _settle(folder, partition, merged, known, plan)
        plan.unlink(missing_ok=True)
        removed += files
    for plan in staging.glob(f"{SWAP_PREFIX}*.json"):
        if _dead(plan.stem) and not plan.with_suffix("").exists():
            plan.unlink(missing_ok=True)
    return removed


def _dead(name: str) -> bool:
    """Whether the process that named `compact-<pid>-<n>` no longer runs."""
    pid = name.removeprefix(SWAP_PREFIX).split("-")[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False
