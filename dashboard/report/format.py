"""Numbers for people: a value formatted by the unit its column name carries.

Column names carry units (`_ns`, `_w`, `_j`, `_bytes`, `_bytes_per_s`,
`_share`, `_pct`), so one function formats every table and every piece
of evidence the same way in HTML and Markdown. JSON keeps raw values.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from gpulens.analysis.tables import exact_number
from gpulens.analysis.findings import format_duration_ns


# `_ns` columns that are instants, not durations (`start_ns`, `window_end_ns`).
_INSTANT_NS = ("start_ns", "end_ns", "ts_ns", "first_ns", "last_ns")
# Instants from here on (1970-01-12) are on the Unix epoch; trace-relative
# times (traces without a known epoch) are far smaller.
_EPOCH_NS_FROM = 10**15


def format_value(column: str, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(column, v) for v in value)
    if isinstance(value, decimal.Decimal):
        value = exact_number(value)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "–"
    if not isinstance(value, (int, float)):
        return str(value)
    name = column.lower()
    if name.endswith("_ts_us"):
        return dt.datetime.fromtimestamp(value / 1e6, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if name.endswith(_INSTANT_NS):
        # On the epoch: a time of day; trace-relative (no epoch known): as read.
        if abs(value) >= _EPOCH_NS_FROM:
            return dt.datetime.fromtimestamp(value / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
        return str(value)
    if name.endswith("_ns"):
        return format_duration_ns(value)
    if name.endswith("_bytes_per_s"):
        if abs(value) >= 1e9 or value == 0:
            return f"{value / 1e9:,.1f} GB/s"
        return f"{value / 1e6:,.2f} MB/s" if abs(value) >= 1e6 else f"{value / 1e3:,.2f} kB/s"
    if name == "bytes" or name.endswith("_bytes"):
        return size(value)
    if name.endswith(("_share", "utilisation", "share_last", "share_of_peak")):
        return f"{value:.1%}"
    if name.endswith("_pct"):
        return f"{value:.1f} %"
    if name.endswith("_w"):
        return f"{value:,.0f} W"
    if name.endswith("_j"):
        return f"{value / 1e3:,.2f} kJ" if abs(value) >= 1e4 else f"{value:,.2f} J"
    if "extra_nodes" in name:
        # a count of nodes, fractional: two decimals, signed as the
        # dashboard shows it (-0.25: the budget is a quarter node short)
        return f"{value:+,.2f}"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def size(nbytes: float) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def format_subject(subject: dict[str, Any]) -> str:
    """`{"run": "r1", "rank": 5}` → `run r1, rank 5`."""
    return ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in subject.items())


# How a key reads when several of its values are named at once.
_PLURALS = {"rank": "ranks", "gpu_index": "GPUs"}


def format_subjects(subjects: list[dict[str, Any]]) -> str:
    """Many subjects in one phrase: those that differ only in a rank or a
    GPU index as that key's ranges (`run r1, ranks 2-7`), else each in
    turn (`host a, gpu index 1; host b, gpu index 0`)."""
    from gpulens.collector.ingest.results import rank_ranges

    keys = list(subjects[0]) if subjects else []
    if subjects and all(list(subject) == keys for subject in subjects):
        varying = [key for key in keys if len({str(subject[key]) for subject in subjects}) > 1]
        if len(varying) == 1 and varying[0] in _PLURALS:
            key = varying[0]
            values = [subject[key] for subject in subjects]
            if all(isinstance(value, int) for value in values):
                common = {k: v for k, v in subjects[0].items() if k != key}
                return ", ".join([*filter(None, [format_subject(common)]),
                                  f"{_PLURALS[key]} {rank_ranges(sorted(set(values)))}"])
    return "; ".join(format_subject(subject) for subject in subjects)
