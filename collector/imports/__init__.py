"""`gpulens import`: telemetry a site already has, into the dataset's
`telemetry` and `devices` tables, with the collector's columns and units.

Sources (`FORMATS`), told apart by their content unless `format` is given:

- `nvidia-smi`: `nvidia-smi --query-gpu=... --format=csv` logs
  (`imports.nvidia_smi`);
- `scrape`: a Prometheus text-format scrape of dcgm-exporter or
  nvidia_gpu_exporter (`imports.scrape`);
- `prometheus`: a live Prometheus or VictoriaMetrics, by its HTTP API
  (`imports.prometheus`), for dcgm-exporter's metric names;
- `rocm-smi`, `amd-smi`: `rocm-smi --json` and `amd-smi metric --json`
  (`imports.amd`).

Each source becomes one set of files named by `source_key`, written by
`imports.store.ImportStore`: nothing is in place until the whole source
has been read, and importing the same source again replaces what the
earlier import wrote.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
import zoneinfo
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.collector.errors import ImportSourceError, UsageError
from gpulens.collector.imports.store import ImportResult, ImportStore

FORMATS = ("nvidia-smi", "scrape", "prometheus", "rocm-smi", "amd-smi")
# What of a log names it (see source_key), and how much of a file is read
# to tell its format.
KEY_BYTES = 64 << 10
KEY_LINES = 2
SNIFF_BYTES = 8 << 10
# Rows dated before 1970 or more than this far past the importing machine's
# clock are dropped (counted): the clock of the node that wrote them was off.
FUTURE_SLACK_US = 86_400_000_000


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def detect_format(source: str) -> str:
    """The format of `source` from its content (a URL: `prometheus`)."""
    if is_url(source):
        return "prometheus"
    head = _head(Path(source), SNIFF_BYTES).decode("utf-8", "replace")
    stripped = head.lstrip()
    if not stripped:
        raise ImportSourceError(source, "the file is empty")
    if stripped[0] in "{[":
        if '"card' in stripped[:2000]:
            return "rocm-smi"
        return "amd-smi"
    first = next((line.strip() for line in head.splitlines() if line.strip()), "")
    if first.startswith("# HELP") or first.startswith("# TYPE") or _looks_like_sample(first):
        return "scrape"
    if "," in first:
        return "nvidia-smi"
    raise ImportSourceError(source, "unknown format: not an nvidia-smi CSV log, a Prometheus scrape, "
                                    "or rocm-smi/amd-smi JSON (give --format)")


def _looks_like_sample(line: str) -> bool:
    name = line.split("{", 1)[0].split(" ", 1)[0]
    return bool(name) and (name.startswith(("DCGM_FI_", "nvidia_smi_")) or ("{" in line and "}" in line and "," not in line.split("{", 1)[0]))


def _head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except FileNotFoundError:
        raise ImportSourceError(str(path), "no such file") from None
    except IsADirectoryError:
        raise ImportSourceError(str(path), "a directory: give one file") from None
    except OSError as error:
        raise ImportSourceError(str(path), f"cannot read it ({error.strerror})") from None


def source_key(source: str, fmt: str, host: str | None, extra: str = "") -> str:
    """A source's import key, from its format, the host given, `extra`
    (a server's window) and its identity: a URL; an
    nvidia-smi log's first KEY_LINES non-blank lines (its header and first
    poll), so that a log that has grown since it was imported keeps its
    key and its import replaces the earlier one; any other file's whole
    content (a scrape or a snapshot is small, and one of the next minute
    is a different source)."""
    digest = hashlib.sha256()
    digest.update(f"{fmt}\0{host or ''}\0{extra}\0".encode())
    if is_url(source):
        digest.update(source.encode())
    elif fmt == "nvidia-smi":
        lines = [line for line in _head(Path(source), KEY_BYTES).splitlines() if line.strip()]
        digest.update(b"\n".join(lines[:KEY_LINES]))
    else:
        digest.update(_read_all(Path(source)))
    return digest.hexdigest()[:16]


def _read_all(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ImportSourceError(str(path), f"cannot read it ({error.strerror})") from None


def parse_time(value: str | None, option: str) -> dt.datetime | None:
    """An ISO 8601 time (UTC where it names no zone), or None."""
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {value!r}: not an ISO 8601 time (2024-05-01T12:00:00Z)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def import_source(
    source: str,
    out: Path,
    host: str | None = None,
    fmt: str | None = None,
    columns: list[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    timezone: str = "UTC",
    step_s: float = 15.0,
) -> ImportResult:
    """Import one source into the dataset at `out`; what was written.

    `since`/`until` keep the rows in [since, until) (a live Prometheus:
    the window asked for, required there). Raises ImportSourceError
    naming the file (and line) or server, DatasetError, UsageError."""
    fmt = fmt or detect_format(source)
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    if (fmt == "prometheus") != is_url(source):
        raise UsageError(f"{source}: --format prometheus takes a server's URL, the other formats a file")
    if columns and fmt != "nvidia-smi":
        raise UsageError("--columns names the fields of an nvidia-smi log without a header")
    if timezone != "UTC":
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise UsageError(f"--timezone {timezone}: not a time zone (an IANA name: Europe/Paris, UTC)") from None
    if since and until and since >= until:
        raise UsageError("--since must be before --until")
    # A file imported again, whatever the options, replaces its earlier
    # import (a corrected --timezone must not leave the wrong rows beside
    # the right ones); a server's windows are sources of their own.
    window = f"{since.isoformat() if since else ''}/{until.isoformat() if until else ''}/{step_s}"
    key = source_key(source, fmt, host, extra=window if is_url(source) else "")
    reader = _reader(source, fmt, host, columns, timezone, since, until, step_s)
    latest_us = time.time_ns() // 1000 + FUTURE_SLACK_US
    misdated = 0
    with ImportStore(Path(out), key) as store:
        for table in reader.tables():
            table, dropped = _dated_now(table, latest_us)
            misdated += dropped
            table = _in_window(table, since, until)
            store.add(table)
        for device in reader.devices.values():
            store.set_device(device)
        if store.result.rows == 0:
            raise ImportSourceError(source, "no telemetry rows" + (" in the window given" if since or until else "")
                                    + (f" ({_misdated(misdated)})" if misdated else ""))
        result = store.commit()
    result.warnings = list(reader.warnings) + ([_misdated(misdated) + ", the rest kept"] if misdated else [])
    return result


def _dated_now(table: pa.Table, latest_us: int) -> tuple[pa.Table, int]:
    """`table` without its rows dated before 1970 or after `latest_us`,
    and how many those were."""
    ts_us = table["ts"].cast(pa.int64())
    low, high = pc.min_max(ts_us).values()
    if low.as_py() is None or (low.as_py() >= 0 and high.as_py() <= latest_us):
        return table, 0
    keep = pc.and_(pc.greater_equal(ts_us, 0), pc.less_equal(ts_us, latest_us))
    kept = table.filter(keep)
    return kept, table.num_rows - kept.num_rows


def _misdated(rows: int) -> str:
    return (f"{rows:,} row{'s' if rows != 1 else ''} dated before 1970 or more than a day ahead of this machine's "
            "clock dropped")


def _reader(source: str, fmt: str, host: str | None, columns: list[str] | None, timezone: str,
            since: dt.datetime | None, until: dt.datetime | None, step_s: float):
    if fmt == "nvidia-smi":
        from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader

        return NvidiaSmiReader(Path(source), host, columns, timezone)
    if fmt == "scrape":
        from gpulens.collector.imports.scrape import ScrapeReader

        return ScrapeReader(Path(source), host)
    if fmt == "prometheus":
        from gpulens.collector.imports.prometheus import PrometheusReader

        if since is None or until is None:
            raise UsageError("--format prometheus needs the window to import: --since and --until")
        return PrometheusReader(source, host, since, until, step_s)
    from gpulens.collector.imports.amd import AmdJsonReader

    return AmdJsonReader(Path(source), host, fmt)


def _in_window(table: pa.Table, since: dt.datetime | None, until: dt.datetime | None) -> pa.Table:
    if since is not None:
        table = table.filter(pc.greater_equal(table["ts"], pa.scalar(since, pa.timestamp("us", tz="UTC"))))
    if until is not None:
        table = table.filter(pc.less(table["ts"], pa.scalar(until, pa.timestamp("us", tz="UTC"))))
    return table


__all__ = ["FORMATS", "ImportResult", "detect_format", "import_source", "parse_time", "source_key"]
