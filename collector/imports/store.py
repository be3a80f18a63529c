"""Writing one import into a dataset: the collector's layout, staged and
put in place at the end.

An import's telemetry rows arrive as Arrow tables of `TELEMETRY_SCHEMA`
(any number of hosts and days, in time order per GPU). They are split by
host and UTC day and streamed into one file per partition,

    telemetry/host=H/date=D/import-<key>.parquet
    devices/host=H/import-<key>.parquet

written under `.staging/` first, each in row groups of ROW_GROUP_ROWS, so
memory holds at most a row group of each partition the latest rows
reached, whatever the source's length. Only when the whole source has been read are the files
renamed into place; a source that fails halfway (a bad line, a server
that stops answering) leaves the dataset as it was.

`key` names the source (see `imports.source_key`): importing the same
source again writes the same names, which replace the earlier files, and
the earlier import's files in partitions this one no longer covers are
removed, so a re-import is idempotent. The names do not start with
`part-`, so the collector's merging (`collector.compact`) leaves them
alone and they keep their key.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpulens.collector.errors import DatasetError
from gpulens.collector.schema import DEVICES_SCHEMA, TELEMETRY_ENCODED_SCHEMA, TELEMETRY_SCHEMA
from gpulens.collector.imports.rows import numbers
from gpulens.collector.parquet_io import fsync_dir, parquet_options, write_parquet_atomic
from gpulens.collector.writer import STAGING_DIR, check_writable, partition_value, sweep_staging

IMPORT_PREFIX = "import-"
# Rows per row group (as a merged collector file, collector.compact).
ROW_GROUP_ROWS = 1 << 16
# zstd level 1, not the collector's 3: on an import's long columns, after
# the collector's encodings (byte stream split, deltas, dictionaries),
# level 3 found almost nothing more. A week's 1.2 M rows: 14.06 vs 14.05
# MB, and the write 0.28 vs 0.34 CPU µs a row (min of 5, 2026-11-29).
IMPORT_ZSTD_LEVEL = 1
_US_PER_DAY = 86_400_000_000
_EPOCH_DAY = dt.date(1970, 1, 1)


@dataclass
class ImportResult:
    """What an import wrote."""

    rows: int = 0
    hosts: list[str] = field(default_factory=list)
    gpus: int = 0
    first_ts_us: int | None = None
    last_ts_us: int | None = None
    files: list[Path] = field(default_factory=list)
    # Files of an earlier import of the same source that this one replaced.
    replaced: int = 0
    # What the source's reader skipped, counted (one line each).
    warnings: list[str] = field(default_factory=list)


class _Partition:
    """One host-day of telemetry being staged: pending rows, then row groups."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_rows += table.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self.flush(whole_groups_only=True)

    def flush(self, whole_groups_only: bool = False) -> None:
        """Write the pending rows in row groups of ROW_GROUP_ROWS; with
        `whole_groups_only`, the rows past the last whole group stay
        pending (every group but a file's last is then whole)."""
        if not self.pending:
            return
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Dictionary columns are written as the codes they are, where
            # a row group's chunks share one dictionary (hence
            # `unify_dictionaries`): a UUID column cost 62 ns a row hashed
            # again, 16 so. The Arrow schema of such a writer would say
            # "dictionary", and pyarrow would read the columns back so:
            # it is not stored, and the file reads back, from its Parquet
            # types, as TELEMETRY_SCHEMA (tested), its metadata added at
            # `close`.
            options = dict(parquet_options(TELEMETRY_SCHEMA), compression_level=IMPORT_ZSTD_LEVEL)
            self.writer = pq.ParquetWriter(self.path, TELEMETRY_ENCODED_SCHEMA, store_schema=False, **options)
        rows = pa.concat_tables(self.pending).unify_dictionaries()
        whole = rows.num_rows - rows.num_rows % ROW_GROUP_ROWS if whole_groups_only else rows.num_rows
        self.writer.write_table(rows.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
        rest = rows.slice(whole)
        self.pending, self.pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.add_key_value_metadata(TELEMETRY_SCHEMA.metadata)
            self.writer.close()
            self.writer = None
            with open(self.path, "rb+") as handle:
                os.fsync(handle.fileno())


class ImportStore:
    """Stages one import's files in `root` and puts them in place on `commit`.

    Use as a context manager: leaving it by an exception removes what was
    staged and leaves the dataset untouched."""

    def __init__(self, root: Path, key: str) -> None:
        self.root = Path(root)
        self.key = key
        check_writable(self.root)
        sweep_staging(self.root)
        _sweep_dead_imports(self.root / STAGING_DIR)
        self._staging = self.root / STAGING_DIR / f"{IMPORT_PREFIX}{key}-{os.getpid()}"
        shutil.rmtree(self._staging, ignore_errors=True)
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._devices: dict[tuple[str, int], dict[str, Any]] = {}
        self.result = ImportResult()
        self._hosts: set[str] = set()
        self._gpus: set[tuple[str, int]] = set()

    def __enter__(self) -> ImportStore:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is not None:
            self.discard()

    # --- adding ------------------------------------------------------------

    def add(self, table: pa.Table) -> None:
        """Stage telemetry rows (`TELEMETRY_SCHEMA`, or its text columns
        dictionary-encoded, `TELEMETRY_ENCODED_SCHEMA`; each row's `host` set)."""
        if table.num_rows == 0:
            return
        table = table.select(TELEMETRY_SCHEMA.names).cast(TELEMETRY_ENCODED_SCHEMA)
        ts_us = table["ts"].cast(pa.int64()).to_numpy()
        days = ts_us // _US_PER_DAY
        hosts = table["host"].unique().to_pylist()
        first_day, last_day = int(days.min()), int(days.max())
        touched = set()
        for host in hosts:
            if host is None:
                raise ValueError("telemetry rows need a host")
            host_rows = table if len(hosts) == 1 else table.filter(pc.equal(table["host"], host))
            host_days = days if len(hosts) == 1 else days[np.asarray(pc.equal(table["host"], host))]
            if first_day == last_day:
                parts = [(first_day, host_rows)]
            else:
                # Arrow's unique, not np.unique: that loads numpy.ma (40 ms).
                parts = [(int(day), host_rows.take(numbers(np.flatnonzero(host_days == day))))
                         for day in np.sort(pc.unique(numbers(host_days)).to_numpy())]
            for day, part in parts:
                self._partition(host, day).add(part)
                touched.add((host, day))
            self._hosts.add(host)
            for gpu in pc.unique(host_rows["gpu_index"]).to_pylist():
                self._gpus.add((host, gpu))
        # A partition these rows did not reach is likely done (a log is in
        # time order): its pending rows are written now, not held to the
        # end, so that memory holds the rows of the partitions in progress
        # only, however many days the source covers. A later row of it
        # makes another row group.
        for key, partition in self._partitions.items():
            if partition.pending and key not in touched:
                partition.flush()
        result = self.result
        result.rows += table.num_rows
        low, high = int(ts_us.min()), int(ts_us.max())
        result.first_ts_us = low if result.first_ts_us is None else min(result.first_ts_us, low)
        result.last_ts_us = high if result.last_ts_us is None else max(result.last_ts_us, high)

    def set_device(self, row: dict[str, Any]) -> None:
        """Record one GPU's inventory (`DEVICES_SCHEMA` keys; missing ones
        NULL). A later row of the same host and GPU replaces an earlier one."""
        self._devices[(row["host"], row["gpu_index"])] = row

    def _partition(self, host: str, day: int) -> _Partition:
        partition = self._partitions.get((host, day))
        if partition is None:
            name = f"{partition_value(host)}-{day}.parquet"
            partition = self._partitions[(host, day)] = _Partition(self._staging / name)
        return partition

    # --- finishing -----------------------------------------------------------

    def commit(self) -> ImportResult:
        """Put every staged file in place, then remove the files of an
        earlier import of the same source that were not replaced."""
        name = f"{IMPORT_PREFIX}{self.key}.parquet"
        staged: list[tuple[Path, Path]] = []
        try:
            for (host, day), partition in sorted(self._partitions.items()):
                partition.close()
                date = (_EPOCH_DAY + dt.timedelta(days=day)).isoformat()
                folder = self.root / "telemetry" / f"host={partition_value(host)}" / f"date={date}"
                staged.append((partition.path, folder / name))
            for source, destination in staged:
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, destination)
                fsync_dir(destination.parent)
            written = [destination for _, destination in staged]
            written.extend(self._write_devices(name))
        except OSError as error:
            self.discard()
            raise DatasetError(f"{self.root}: cannot write the import ({error.strerror or error})") from error
        keep = set(written)
        replaced = 0
        for pattern in (f"telemetry/host=*/date=*/{name}", f"devices/host=*/{name}"):
            for old in self.root.glob(pattern):
                if old not in keep:
                    old.unlink(missing_ok=True)
                    replaced += 1
        shutil.rmtree(self._staging, ignore_errors=True)
        self.result.files = written
        self.result.replaced = replaced
        self.result.hosts = sorted(self._hosts)
        self.result.gpus = len(self._gpus)
        return self.result

    def _write_devices(self, name: str) -> list[Path]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        for (host, _), row in sorted(self._devices.items(), key=lambda item: (item[0][0], item[0][1])):
            by_host.setdefault(host, []).append(row)
        written = []
        for host, rows in by_host.items():
            columns = {f.name: [row.get(f.name) for row in rows] for f in DEVICES_SCHEMA}
            arrays = [
                pa.array(columns[f.name], type=pa.int64()).cast(f.type) if pa.types.is_timestamp(f.type)
                else pa.array(columns[f.name], type=f.type)
                for f in DEVICES_SCHEMA
            ]
            table = pa.Table.from_arrays(arrays, schema=DEVICES_SCHEMA)
            destination = self.root / "devices" / f"host={partition_value(host)}" / name
            written.append(write_parquet_atomic(table, destination, self.root / STAGING_DIR))
        return written

    def discard(self) -> None:
        """Remove everything staged; the dataset stays as it was."""
        for partition in self._partitions.values():
            if partition.writer is not None:
                try:
                    partition.writer.close()
                except Exception:  # a half-written file is removed next, whatever its state
                    pass
                partition.writer = None
        self._partitions.clear()
        shutil.rmtree(self._staging, ignore_errors=True)


def _sweep_dead_imports(staging: Path) -> None:
    """Remove what imports killed outright (kill -9, a crash) left staged:
    the folders of processes that no longer run."""
    for folder in staging.glob(f"{IMPORT_PREFIX}*-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if folder.is_dir() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
