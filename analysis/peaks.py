"""The hardware table as a SQL table: `hardware_peaks`.

For every GPU model named in the dataset (`runs.device_name` from traces,
`devices.model` from the collector), one row with the nominal per-direction
peaks from `collector.hardware`, so analyses can join achieved bandwidth to
the link's peak: `link_peak_bytes_per_s` (NVLink/XGMI, all links of one GPU),
`link_peak_per_link_bytes_per_s`, `pcie_peak_bytes_per_s`. A model the
table does not know has no row (peaks stay NULL rather than guessed).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from gpulens.collector.hardware import lookup_gpu

HARDWARE_PEAKS_SCHEMA = pa.schema(
    [
        ("device_name", pa.string()),
        ("spec_model", pa.string()),
        ("vendor", pa.string()),
        ("link_kind", pa.string()),
        ("link_count", pa.int32()),
        ("link_peak_bytes_per_s", pa.float64()),
        ("link_peak_per_link_bytes_per_s", pa.float64()),
        ("pcie_peak_bytes_per_s", pa.float64()),
        ("tdp_w", pa.float64()),
        ("source", pa.string()),
    ]
)


def hardware_peaks_table(device_names: list[str]) -> pa.Table:
    rows = []
    for name in sorted(set(device_names)):
        spec = lookup_gpu(name)
        if spec is None:
            continue
        rows.append({
            "device_name": name,
            "spec_model": spec.model,
            "vendor": spec.vendor,
            "link_kind": spec.link_kind,
            "link_count": spec.link_count,
            "link_peak_bytes_per_s": spec.link_peak_bytes_per_s,
            "link_peak_per_link_bytes_per_s": spec.link_peak_per_link_bytes_per_s,
            "pcie_peak_bytes_per_s": spec.pcie_peak_bytes_per_s,
            "tdp_w": spec.tdp_w,
            "source": spec.source,
        })
    return pa.Table.from_pylist(rows, schema=HARDWARE_PEAKS_SCHEMA)


# The dataset tables whose GPU models it lists (views it needs to be made).
TABLES_READ = ("runs", "devices")


def register_hardware_peaks(con: duckdb.DuckDBPyConnection) -> None:
    names = [
        name
        for (name,) in con.execute(
            "select distinct device_name from runs where device_name is not null "
            "union select distinct model from devices where model is not null"
        ).fetchall()
    ]
    con.register("_hardware_peaks", hardware_peaks_table(names))
    con.execute("create or replace view hardware_peaks as select * from _hardware_peaks")
