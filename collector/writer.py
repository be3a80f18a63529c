"""Buffered, crash-safe Parquet writing for the node tables.

Rows are buffered per table as column lists (cheap to append, one Arrow
array per column at flush) and written to

    telemetry/host=H/date=D/part-<first ts µs>-<pid>-<seq>.parquet
    events/host=H/date=D/part-....parquet
    processes/host=H/date=D/part-....parquet
    devices/host=H/part-....parquet

Each file is written under `.staging/` in the dataset root (same
filesystem), fsynced and renamed into place, so a reader never sees half a
file and a `kill -9` leaves only complete files behind; the staging folder
is swept on the next start. A flush that fails (disk full, say) keeps its
rows buffered for the next try and raises `DatasetError` naming the file.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.compact import finish_interrupted, maybe_compact
from gpulens.collector.parquet_io import write_parquet_atomic
from gpulens.collector.errors import DatasetError
from gpulens.collector.schema import NODE_SCHEMAS, SCHEMA_VERSION

STAGING_DIR = ".staging"
# While flushes fail (a full or read-only disk), rows are kept in memory up
# to this much, then the oldest samples are dropped: see DatasetWriter.shed_oldest.
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
_US_PER_DAY = 86_400_000_000
_EPOCH_DAY = dt.date(1970, 1, 1)
def check_writable(root: Path) -> None:
    """Raise DatasetError unless `root` can hold a dataset."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / STAGING_DIR
        probe.mkdir(exist_ok=True)
        test_file = probe / f".probe-{os.getpid()}"
        test_file.write_bytes(b"")
        test_file.unlink()
    except OSError as error:
        raise DatasetError(f"{root}: cannot write to the output directory ({error.strerror or error})") from error
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")


def sweep_staging(root: Path) -> int:
    """Remove temporary files a killed writer left behind; returns how many."""
    staging = root / STAGING_DIR
    removed = 0
    if staging.is_dir():
        for leftover in staging.glob("*.tmp"):
            leftover.unlink(missing_ok=True)
            removed += 1
    return removed


class TableBuffer:
    """Rows of one table: the latest as the dicts they arrived in, the
    rest already converted to Arrow record batches.

    Every `CHUNK_ROWS` rows become columns at once, while those dicts and
    the values in them are still in the CPU cache, and the dicts are freed.
    Keeping every dict until the flush and reading them a column at a time
    cost several times as much: a minute of 64 GPUs' rows is ~50 MB of
    scattered Python objects, and each pass over them missed the cache.
    Arrow columns also take an eighth of the memory.

    A chunk's rows are read with one `itemgetter` call each (a C loop over
    the schema's keys); a chunk where some row lacks a key is read with
    `dict.get` instead, at three times the cost. So a backend that returns
    every metric key, None where unsupported, is the cheap case.
    """

    CHUNK_ROWS = 1024

    def __init__(self, schema: pa.Schema, constants: dict[str, Any] | None = None) -> None:
        self.schema = schema
        # Columns with one value for the whole buffer (the writer's host).
        self.constants = {name: value for name, value in (constants or {}).items() if name in schema.names}
        self.names = tuple(name for name in schema.names if name not in self.constants)
        self._getter = itemgetter(*self.names) if len(self.names) > 1 else lambda row: (row[self.names[0]],)
        self.batches: list[pa.RecordBatch] = []
        self.pending: list[dict[str, Any]] = []
        self._rows_in_batches = 0

    def __len__(self) -> int:
        return self._rows_in_batches + len(self.pending)

    def append(self, row: dict[str, Any]) -> None:
        pending = self.pending
        pending.append(row)
        if len(pending) >= self.CHUNK_ROWS:
            self._convert_pending()

    def _convert_pending(self) -> None:
        rows = self.pending
        if not rows:
            return
        try:
            tuples = list(map(self._getter, rows))
        except KeyError:
            names = self.names
            tuples = [tuple(map(row.get, names)) for row in rows]
        columns = dict(zip(self.names, zip(*tuples)))
        arrays = []
        for name, dtype in zip(self.schema.names, self.schema.types):
            if name in self.constants:
                arrays.append(pa.repeat(pa.scalar(self.constants[name], type=dtype), len(rows)))
            else:
                arrays.append(_to_array(columns[name], dtype))
        self.batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self._rows_in_batches += len(rows)
        self.pending = []

    def to_table(self) -> pa.Table:
        self._convert_pending()
        return pa.Table.from_batches(self.batches, schema=self.schema)

    @property
    def nbytes(self) -> int:
        """Memory held by the converted rows (the pending few are not counted)."""
        return sum(batch.nbytes for batch in self.batches)

    def drop_oldest(self) -> int:
        """Drop the oldest chunk of converted rows; how many rows went."""
        if not self.batches:
            return 0
        dropped = self.batches.pop(0).num_rows
        self._rows_in_batches -= dropped
        return dropped

    def clear(self) -> None:
        self.batches = []
        self.pending = []
        self._rows_in_batches = 0


def _to_array(values: list[Any], dtype: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(dtype):
        # Python ints (µs) → int64 → timestamp: converting ints straight to
        # a zoned timestamp type costs ~20 µs a value; this costs ~20 ns.
        return pc.cast(pa.array(values, type=pa.int64()), dtype)
    return pa.array(values, type=dtype)


class DatasetWriter:
    """Buffers node-table rows for one host and flushes them as Parquet."""

    def __init__(self, root: Path, host: str, max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES) -> None:
        self.root = Path(root)
        self.host = host
        self.max_buffered_bytes = max_buffered_bytes
        check_writable(self.root)
        sweep_staging(self.root)
        finish_interrupted(self.root)
        self._root_identity = _identity(self.root)
        self._buffers = {name: TableBuffer(schema, {"host": host}) for name, schema in NODE_SCHEMAS.items()}
        self._sequence = itertools.count()
        self.files_written: list[Path] = []
        self.rows_dropped: dict[str, int] = {}

    def buffered_bytes(self) -> int:
        return sum(buffer.nbytes for buffer in self._buffers.values())

    def shed_oldest(self) -> int:
        """While flushes fail, keep memory under `max_buffered_bytes`: drop
        the oldest chunks of samples (telemetry, then processes; events and
        the inventory are small and kept). How many rows were dropped now;
        `rows_dropped` keeps the totals by table."""
        dropped = 0
        for name in ("telemetry", "processes"):
            buffer = self._buffers[name]
            while self.buffered_bytes() > self.max_buffered_bytes and (rows := buffer.drop_oldest()):
                self.rows_dropped[name] = self.rows_dropped.get(name, 0) + rows
                dropped += rows
        return dropped

    def root_replaced(self) -> bool:
        """Whether the dataset folder was removed (or removed and made
        again) since this writer began: what it wrote there is gone."""
        return _identity(self.root) != self._root_identity

    def adopt_root(self) -> None:
        """Write into the folder at `root` from now on, making it if needed."""
        check_writable(self.root)
        self._root_identity = _identity(self.root)

    def add(self, table: str, row: dict[str, Any]) -> None:
        """Buffer one row of `table` (`host` is filled in at the flush)."""
        self._buffers[table].append(row)

    def appender(self, table: str) -> Callable[[dict[str, Any]], None]:
        """`add` for one table, bound once (the sampling loop's hot path)."""
        return self._buffers[table].append

    def add_event(
        self,
        ts_ns: int,
        kind: str,
        detail: str,
        gpu_index: int | None = None,
        gpu_uuid: str | None = None,
        value: int | None = None,
    ) -> None:
        """Buffer one `events` row (see EVENTS_SCHEMA for the kinds)."""
        self.add(
            "events",
            {"ts": ts_ns // 1000, "gpu_index": gpu_index, "gpu_uuid": gpu_uuid, "kind": kind, "detail": detail, "value": value},
        )

    def add_many(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.add(table, row)

    def buffered_rows(self, table: str = "telemetry") -> int:
        return len(self._buffers[table])

    def flush(self) -> list[Path]:
        """Write every non-empty buffer; the buffers are cleared only once written."""
        written: list[Path] = []
        for name, buffer in self._buffers.items():
            if len(buffer) == 0:
                continue
            table = buffer.to_table()
            paths = self._write_table(name, table)
            written.extend(paths)
            buffer.clear()
        self.files_written.extend(written)
        return written

    def _write_table(self, name: str, table: pa.Table) -> list[Path]:
        # Rows stay in arrival order, which is time order. Sorting a flush
        # by GPU first saved nothing on disk (zstd finds each GPU's repeats
        # either way: 1.19 vs 1.18 bytes a value at 64 GPUs, 1.25 vs 1.34
        # for an hour of bursty inference) and was a tenth of the
        # collector's CPU; merged files are sorted (collector/compact.py).
        host_dir = self.root / name / f"host={partition_value(self.host)}"
        staging = self.root / STAGING_DIR
        if name == "devices":
            return [write_parquet_atomic(table, host_dir / self._file_name(table), staging)]
        written = []
        # UTC day numbers by integer division: formatting every timestamp
        # as a date string cost ~1 us a row.
        day_numbers = pc.cast(table["ts"], pa.int64()).to_numpy() // _US_PER_DAY
        first_day, last_day = int(day_numbers.min()), int(day_numbers.max())
        if first_day == last_day:  # the usual flush: no copy per day
            parts = [(first_day, table)]
        else:
            parts = [(int(day), table.filter(pa.array(day_numbers == day))) for day in np.unique(day_numbers)]
        for day_number, part in parts:
            day = _EPOCH_DAY + dt.timedelta(days=day_number)
            destination = host_dir / f"date={day.isoformat()}" / self._file_name(part)
            written.append(write_parquet_atomic(part, destination, staging))
            # Few big files, not a file a flush: see collector/compact.py.
            written.extend(maybe_compact(destination.parent, staging))
        return written

    def _file_name(self, table: pa.Table) -> str:
        first_ts = pc.min(table["ts"]).value if table.num_rows else 0
        return f"part-{first_ts}-{os.getpid()}-{next(self._sequence):05d}.parquet"


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(folder)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def partition_value(value: str) -> str:
    """A hive partition value that is safe as a folder name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in value) or "unknown"


__all__ = [
    "DatasetWriter",
    "STAGING_DIR",
    "SCHEMA_VERSION",
    "check_writable",
    "partition_value",
    "sweep_staging",
]
