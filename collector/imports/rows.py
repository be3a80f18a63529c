"""Series of one value per metric → wide telemetry rows (one per GPU and time).

Scrapes and Prometheus answers come one metric at a time; the contract's
`telemetry` has one row per GPU per sample with a column per metric.
`WideRows` gathers the values by (host, GPU, time) and turns them into a
table of `TELEMETRY_SCHEMA`, NULL where no series gave a value.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from gpulens.collector.schema import TELEMETRY_SCHEMA
from gpulens.collector.throttle import decode_clock_event_reasons

_INTEGER_COLUMNS = frozenset(f.name for f in TELEMETRY_SCHEMA if pa.types.is_integer(f.type))


class WideRows:
    def __init__(self, vendor: str = "nvidia") -> None:
        self.vendor = vendor
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
            return
        if value is not None and not math.isfinite(value):
            value = None  # NaN: the exporter had no reading
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
