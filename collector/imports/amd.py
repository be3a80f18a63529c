"""`rocm-smi --json` and `amd-smi metric --json` snapshots → telemetry rows.

Each file is one reading of every GPU, without a time of its own: its
rows take the file's modification time (when the command finished
writing it). Neither names the host: give `host`.

rocm-smi keys its GPUs `card0`, `card1`, ... with text values
(`"Average Graphics Package Power (W)": "36.0"`, `"sclk clock speed:":
"(300Mhz)"`); amd-smi lists them (`[{"gpu": 0, ...}]`, or under
`gpu_data` in later releases) with `{"value": ..., "unit": ...}` objects
or bare numbers. `N/A` is NULL. The mappings are `ROCM_SMI_FIELDS` and
`AMD_SMI_FIELDS`, in preference order where several keys give a column.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.collector.errors import ImportSourceError, UsageError, one_line
from gpulens.collector.imports.rows import WideRows, fill_devices

_MIB = 1 << 20
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

# rocm-smi key → (column, factor), first present wins per column.
ROCM_SMI_FIELDS: list[tuple[str, str, float]] = [
    ("Average Graphics Package Power (W)", "power_w", 1),
    ("Current Socket Graphics Package Power (W)", "power_w", 1),
    ("Max Graphics Package Power (W)", "power_limit_w", 1),
    ("GPU use (%)", "gpu_util_pct", 1),
    ("GPU memory use (%)", "mem_util_pct", 1),
    # the collector's temp_c on AMD is the hotspot (junction), else the edge
    ("Temperature (Sensor junction) (C)", "temp_c", 1),
    ("Temperature (Sensor edge) (C)", "temp_c", 1),
    ("Temperature (Sensor memory) (C)", "mem_temp_c", 1),
    ("sclk clock speed:", "sm_clock_mhz", 1),
    ("mclk clock speed:", "mem_clock_mhz", 1),
    ("VRAM Total Used Memory (B)", "mem_used_bytes", 1),
    ("VRAM Total Memory (B)", "mem_total_bytes", 1),
    ("PCIe Replay Count", "pcie_replay_count", 1),
]
ROCM_SMI_DEVICE_FIELDS = {"Card series": "model", "PCI Bus": "pci_bus_id", "Serial Number": "serial",
                          "Unique ID": "gpu_uuid"}

# amd-smi metric path (section, key) → column, first present wins per column.
AMD_SMI_FIELDS: list[tuple[tuple[str, ...], str]] = [
    (("power", "socket_power"), "power_w"),
    (("power", "average_socket_power"), "power_w"),
    (("usage", "gfx_activity"), "gpu_util_pct"),
    (("usage", "umc_activity"), "mem_util_pct"),
    (("clock", "gfx_0", "clk"), "sm_clock_mhz"),
    (("clock", "mem_0", "clk"), "mem_clock_mhz"),
    (("temperature", "hotspot"), "temp_c"),
    (("temperature", "edge"), "temp_c"),
    (("temperature", "mem"), "mem_temp_c"),
    (("mem_usage", "used_vram"), "mem_used_bytes"),
    (("mem_usage", "total_vram"), "mem_total_bytes"),
    (("energy", "total_energy_consumption"), "energy_j"),
    (("pcie", "replay_count"), "pcie_replay_count"),
    (("ecc", "total_correctable_count"), "ecc_corrected_count"),
    (("ecc", "total_uncorrectable_count"), "ecc_uncorrected_count"),
]
# amd-smi's units → the column's (its "MB" are MiB, as amdsmi reports them).
_UNIT_FACTORS = {"W": 1, "mW": 1e-3, "J": 1, "mJ": 1e-3, "uJ": 1e-6, "MB": _MIB, "GB": 1 << 30, "B": 1,
                 "MHz": 1, "C": 1, "%": 1}
# The default unit of a column where amd-smi gives a bare number.
_BARE_FACTORS = {"mem_used_bytes": _MIB, "mem_total_bytes": _MIB}


class AmdJsonReader:
    def __init__(self, path: Path, host: str | None, fmt: str) -> None:
        if host is None:
            raise UsageError(f"{path}: {fmt} JSON names no host: give --host NAME")
        self.path = Path(path)
        self.source = str(path)
        self.host = host
        self.fmt = fmt
        self.devices: dict[tuple[str, int], dict[str, Any]] = {}

    def tables(self) -> Iterator[pa.Table]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            ts_us = os.stat(self.path).st_mtime_ns // 1000
        except json.JSONDecodeError as error:
            raise ImportSourceError(self.source, f"not JSON ({error.msg})", error.lineno) from error
        except (OSError, UnicodeDecodeError) as error:
            raise ImportSourceError(self.source, f"cannot read it ({one_line(error)})") from error
        rows = WideRows(vendor="amd")
        if self.fmt == "rocm-smi":
            self._rocm_smi(document, ts_us, rows)
        else:
            self._amd_smi(document, ts_us, rows)
        if len(rows):
            table = rows.table()
            fill_devices(table, self.devices)
            yield table

    def _rocm_smi(self, document: Any, ts_us: int, rows: WideRows) -> None:
        if not isinstance(document, dict):
            raise ImportSourceError(self.source, "not rocm-smi JSON (no card0, card1, ... keys)")
        driver = (document.get("system") or {}).get("Driver version")
        for key, card in document.items():
            match = re.fullmatch(r"card(\d+)", key)
            if match is None or not isinstance(card, dict):
                continue
            gpu = int(match.group(1))
            device = {"ts": ts_us, "host": self.host, "gpu_index": gpu, "vendor": "amd", "driver_version": driver}
            for field, column in ROCM_SMI_DEVICE_FIELDS.items():
                value = card.get(field)
                device[column] = None if _missing(value) else str(value)
            for field, column, factor in ROCM_SMI_FIELDS:
                number = _rocm_number(card.get(field))
                if number is not None:
                    rows.set(self.host, gpu, ts_us, column, number * factor, gpu_uuid=device["gpu_uuid"])
            device["power_limit_w"] = _rocm_number(card.get("Max Graphics Package Power (W)"))
            device["mem_total_bytes"] = _int(_rocm_number(card.get("VRAM Total Memory (B)")))
            self.devices[(self.host, gpu)] = device

    def _amd_smi(self, document: Any, ts_us: int, rows: WideRows) -> None:
        gpus = document.get("gpu_data") if isinstance(document, dict) else document
        if not isinstance(gpus, list):
            raise ImportSourceError(self.source, "not amd-smi metric JSON (a list of GPUs, or gpu_data)")
        for entry in gpus:
            if not isinstance(entry, dict) or not isinstance(entry.get("gpu"), int):
                raise ImportSourceError(self.source, "an amd-smi GPU entry without its gpu number")
            gpu = entry["gpu"]
            seen: set[str] = set()
            for path, column in AMD_SMI_FIELDS:
                if column in seen:
                    continue
                value = _amd_value(_dig(entry, path), column)
                if value is not None:
                    rows.set(self.host, gpu, ts_us, column, value)
                    seen.add(column)
            self.devices[(self.host, gpu)] = {"ts": ts_us, "host": self.host, "gpu_index": gpu, "vendor": "amd"}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "N/A"))


def _rocm_number(value: Any) -> float | None:
    """`"36.0"` → 36.0, `"(300Mhz)"` → 300.0; `N/A` → None."""
    if _missing(value):
        return None
    match = _NUMBER.search(str(value))
    return float(match.group()) if match else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _dig(entry: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = entry
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _amd_value(value: Any, column: str) -> float | None:
    if isinstance(value, dict):
        unit = value.get("unit")
        number = value.get("value")
        factor = _UNIT_FACTORS.get(unit, 1) if unit else _BARE_FACTORS.get(column, 1)
    else:
        number, factor = value, _BARE_FACTORS.get(column, 1)
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return None  # "N/A", or missing
    return number * factor
