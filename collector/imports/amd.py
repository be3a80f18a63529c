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
from gpulens.collector.imports.rows import WideRows, counted, fill_devices, is_odd
from gpulens.collector.imports.scrape import read_text

_MIB = 1 << 20
# A rocm-smi value: a number, perhaps in parentheses, perhaps followed by
# its unit (`"36.0"`, `"(300Mhz)"`); the number as Python reads one
# (`nan`, `inf` and `1e400` too: those are odd values, counted).
_ROCM_VALUE = re.compile(r"\(?\s*([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf(?:inity)?))\s*[A-Za-z%]*\s*\)?",
                         re.IGNORECASE)
# The largest GPU index (the gpu_index column is int32).
_MAX_GPU_INDEX = (1 << 31) - 1

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
        self._dropped: dict[str, int] = {}

    @property
    def warnings(self) -> list[str]:
        """The odd values dropped, counted."""
        line = counted("odd value{s} dropped", self._dropped)
        return [line] if line else []

    def _odd(self, column: str) -> None:
        self._dropped[column] = self._dropped.get(column, 0) + 1

    def tables(self) -> Iterator[pa.Table]:
        text = read_text(self.path, self.source)
        try:
            document = json.loads(text)
            ts_us = os.stat(self.path).st_mtime_ns // 1000
        except json.JSONDecodeError as error:
            raise ImportSourceError(self.source, f"not JSON ({error.msg})", error.lineno) from error
        except RecursionError:
            raise ImportSourceError(self.source, "JSON nested too deep to be a snapshot") from None
        except OSError as error:
            raise ImportSourceError(self.source, f"cannot read it ({one_line(error)})") from error
        rows = WideRows(vendor="amd", dropped=self._dropped)
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
                if number == "odd":
                    self._odd(column)
                elif number is not None:
                    rows.set(self.host, gpu, ts_us, column, number * factor, gpu_uuid=device["gpu_uuid"])
            device["power_limit_w"] = _plain(_rocm_number(card.get("Max Graphics Package Power (W)")), "power_limit_w")
            device["mem_total_bytes"] = _int(_plain(_rocm_number(card.get("VRAM Total Memory (B)")), "mem_total_bytes"))
            self.devices[(self.host, gpu)] = device

    def _amd_smi(self, document: Any, ts_us: int, rows: WideRows) -> None:
        gpus = document.get("gpu_data") if isinstance(document, dict) else document
        if not isinstance(gpus, list):
            raise ImportSourceError(self.source, "not amd-smi metric JSON (a list of GPUs, or gpu_data)")
        for entry in gpus:
            gpu = entry.get("gpu") if isinstance(entry, dict) else None
            if isinstance(gpu, bool) or not isinstance(gpu, int):
                raise ImportSourceError(self.source, "an amd-smi GPU entry without its gpu number")
            if not 0 <= gpu <= _MAX_GPU_INDEX:
                raise ImportSourceError(self.source, f"gpu {gpu if abs(gpu) < 10**12 else 'number'} is not a GPU index")
            if (self.host, gpu) in self.devices:
                raise ImportSourceError(self.source, f"gpu {gpu} is listed twice")
            seen: set[str] = set()
            for path, column in AMD_SMI_FIELDS:
                if column in seen:
                    continue
                value = _amd_value(_dig(entry, path), column)
                if value == "odd":
                    self._odd(column)
                    seen.add(column)
                elif value is not None:
                    rows.set(self.host, gpu, ts_us, column, value)
                    seen.add(column)
            self.devices[(self.host, gpu)] = {"ts": ts_us, "host": self.host, "gpu_index": gpu, "vendor": "amd"}


def _missing(value: Any) -> bool:
    """`N/A`, empty, or a bracketed answer (`[Not Supported]`)."""
    return value is None or (isinstance(value, str) and (value.strip() in ("", "N/A") or value.strip().startswith("[")))


def _rocm_number(value: Any) -> float | str | None:
    """`"36.0"` → 36.0, `"(300Mhz)"` → 300.0; `N/A` → None; text that is
    no number (`"1,036.0"`, `"abc"`) → `"odd"`."""
    if _missing(value):
        return None
    match = _ROCM_VALUE.fullmatch(str(value).strip())
    try:
        return float(match.group(1)) if match else "odd"
    except ValueError:
        return "odd"


def _plain(value: float | str | None, column: str) -> float | None:
    """A devices column's value: None where it is missing or odd."""
    return None if value is None or value == "odd" or is_odd(column, value) else value


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _dig(entry: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = entry
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _amd_value(value: Any, column: str) -> float | str | None:
    """A metric's value in the column's unit; None where amd-smi has none
    (`"N/A"`, missing); `"odd"` where its unit is none amd-smi writes."""
    if isinstance(value, dict):
        unit = value.get("unit")
        number = value.get("value")
        if unit and unit not in _UNIT_FACTORS:
            return "odd" if isinstance(number, (int, float)) and not isinstance(number, bool) else None
        factor = _UNIT_FACTORS[unit] if unit else _BARE_FACTORS.get(column, 1)
    else:
        number, factor = value, _BARE_FACTORS.get(column, 1)
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return None  # "N/A", or missing
    try:
        return float(number) * factor
    except OverflowError:  # an integer beyond any float
        return "odd"
