"""Series of one value per metric → wide telemetry rows (one per GPU and time).

Scrapes and Prometheus answers come one metric at a time; the contract's
`telemetry` has one row per GPU per sample with a column per metric.
`WideRows` gathers the values by (host, GPU, time) and turns them into a
table of `TELEMETRY_SCHEMA`, NULL where no series gave a value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.collector.schema import TELEMETRY_SCHEMA
from gpulens.collector.throttle import decode_clock_event_reasons

_INTEGER_COLUMNS = frozenset(f.name for f in TELEMETRY_SCHEMA if pa.types.is_integer(f.type))
# The metrics that may be below zero (a GPU in a cold room); every other
# one (power, energy, utilisation, clocks, bytes, counters) may not.
SIGNED_COLUMNS = frozenset({"temp_c", "mem_temp_c"})
# The largest value each integer column holds (int32 clocks, int64 bytes).
_INTEGER_MAX = {f.name: (1 << (f.type.bit_width - 1)) - 1 for f in TELEMETRY_SCHEMA if pa.types.is_integer(f.type)}


def numbers(values: np.ndarray) -> pa.Array:
    """A 1-D numpy array of numbers as the Arrow array of its type, sharing
    its buffer. Not `pa.array`: its first call on a numpy array loads
    numpy.ma (40 ms a process, numpy 2)."""
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [None, pa.py_buffer(np.ascontiguousarray(values))])


def is_odd(column: str, value: float) -> bool:
    """Whether a metric's value cannot be a reading: NaN or infinite,
    below zero where the metric cannot be, or beyond its column's type."""
    if not math.isfinite(value):
        return True
    if value < 0 and column not in SIGNED_COLUMNS:
        return True
    return column in _INTEGER_MAX and abs(value) >= _INTEGER_MAX[column]


def odd_mask(column: str, values: pa.Array, dtype: pa.DataType | None = None) -> pa.Array | None:
    """`is_odd` of each of `values` (numbers, NULL where missing), to be
    stored as `dtype` (an integer type bounds them; default: the column's);
    None where none is odd (the usual column: no mask is built)."""
    floating = pa.types.is_floating(values.type)
    limit = (1 << (dtype.bit_width - 1)) - 1 if dtype is not None and pa.types.is_integer(dtype) else \
        _INTEGER_MAX.get(column)
    # The usual column, where nothing is odd, is cleared by its least and
    # greatest value. numpy's reductions, not `pc.min_max`: Arrow's on
    # floats are about 8 ns a value, a tenth of the import's time; and
    # numpy's propagate NaN, which then takes the checks below. NULL slots
    # read as 0, which is never odd.
    if len(values) == 0 or values.null_count == len(values):
        return None
    data = (values.fill_null(0) if values.null_count else values).to_numpy()
    low, high = data.min().item(), data.max().item()
    if ((not floating or (math.isfinite(low) and math.isfinite(high)))
            and (low >= 0 or column in SIGNED_COLUMNS) and (limit is None or max(abs(low), abs(high)) < limit)):
        return None
    checks = []
    if floating:
        checks.append(pc.invert(pc.is_finite(values)))
    if column not in SIGNED_COLUMNS:
        checks.append(pc.less(values, 0))
    if floating and limit is not None:
        checks.append(pc.greater_equal(pc.abs(values), float(limit)))
    mask = None
    for check in checks:
        mask = check if mask is None else pc.or_kleene(mask, check)
    if mask is None or not pc.any(mask).as_py():
        return None
    return pc.fill_null(mask, False)


def counted(what: str, counts: dict[str, int], kept: str = "the rest kept") -> str | None:
    """`3 odd values dropped, the rest kept (power_w 2, temp_c 1)`-style:
    the total of `counts` with `what` (`"odd value{s} dropped"`) and `kept`,
    then each column's count by name; None where nothing was counted."""
    counts = {column: n for column, n in counts.items() if n}
    if not counts:
        return None
    total = sum(counts.values())
    by_column = ", ".join(f"{column} {n:,}" for column, n in sorted(counts.items()))
    return f"{total:,} {what.format(s='' if total == 1 else 's')}, {kept} ({by_column})"


class WideRows:
    def __init__(self, vendor: str = "nvidia", dropped: dict[str, int] | None = None,
                 duplicates: dict[str, int] | None = None) -> None:
        self.vendor = vendor
        # Per column: the odd values set to NULL (`is_odd`), and the values
        # of a series and time given again (the first is kept).
        self.dropped = {} if dropped is None else dropped
        self.duplicates = {} if duplicates is None else duplicates
        self._rows: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._ranks: dict[tuple[str, int, int], dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def set(self, host: str, gpu_index: int, ts_us: int, column: str, value: float | None,
            rank: int = 0, gpu_uuid: str | None = None) -> None:
        """One metric's value; a lower `rank` replaces a higher one's."""
        key = (host, gpu_index, ts_us)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = {"ts": ts_us, "host": host, "gpu_index": gpu_index, "gpu_uuid": gpu_uuid,
                                     "vendor": self.vendor}
            self._ranks[key] = {}
        elif gpu_uuid and not row["gpu_uuid"]:
            row["gpu_uuid"] = gpu_uuid
        ranks = self._ranks[key]
        if column in ranks and ranks[column] <= rank:
            if ranks[column] == rank:
                self.duplicates[column] = self.duplicates.get(column, 0) + 1
            return
        if value is not None and is_odd(column, value):
            self.dropped[column] = self.dropped.get(column, 0) + 1
            value = None
        if value is not None and column in _INTEGER_COLUMNS:
            value = int(round(value))
        row[column] = value
        ranks[column] = rank

    def table(self) -> pa.Table:
        """The rows gathered, in time order, then host and GPU; cleared."""
        rows = [self._rows[key] for key in sorted(self._rows, key=lambda k: (k[2], k[0], k[1]))]
        self._rows, self._ranks = {}, {}
        for row in rows:
            mask = row.get("throttle_reasons_mask")
            if mask is not None:
                row["throttle_reasons"] = decode_clock_event_reasons(mask)
        columns = {f.name: [row.get(f.name) for row in rows] for f in TELEMETRY_SCHEMA}
        arrays = [
            pa.array(columns[f.name], type=pa.int64()).cast(f.type) if f.name == "ts"
            else pa.array(columns[f.name], type=f.type)
            for f in TELEMETRY_SCHEMA
        ]
        return pa.Table.from_arrays(arrays, schema=TELEMETRY_SCHEMA)


def fill_devices(table: pa.Table, devices: dict[tuple[str, int], dict[str, Any]]) -> None:
    """Each GPU's enforced limit and memory size, where its devices row has
    none, from its latest telemetry row that has them."""
    columns = ("power_limit_w", "mem_total_bytes")
    # Without `ts`: Python datetimes of a zoned column would load pandas.
    for row in table.select(["host", "gpu_index", *columns]).to_pylist():
        device = devices.get((row["host"], row["gpu_index"]))
        if device is None:
            continue
        for column in columns:
            if row[column] is not None:
                device[column] = row[column]
