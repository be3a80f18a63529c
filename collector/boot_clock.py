"""Boot-clock traces placed on the epoch, where a boot's start is known.

rocprofiler-sdk stamps its events with the boot-time clock (CLOCK_BOOTTIME:
nanoseconds since the machine booted), so a rocprofv3 trace holds no time
of day, and its kernels cannot be laid over the collector's telemetry
(which is on the epoch) for energy per step or power per phase. The epoch
time at which a boot began, `time.time_ns() - CLOCK_BOOTTIME` (its
*origin*), turns one into the other, and two sources know it:

- this machine, for its current boot: a trace ingested on the machine and
  in the boot that recorded it (`gpulens collect --watch-traces` on the
  node, or `gpulens ingest` there after the job);
- the collector, which records each boot's origin in `events` (kind
  `boot_clock`, `value` the origin in ns, `detail` the kernel's boot id
  and the machine's own name, `record_detail`) when it starts and whenever the origin moves by more than
  `RECORD_DRIFT_NS` (a clock step): a trace ingested elsewhere into the
  dataset the node's collector writes (a login node watching a shared
  folder with `--no-telemetry`) is placed with the boot of its host that
  fits.

A wrong placement would silently pair kernels with the wrong power samples,
so a boot is taken only when everything known agrees:

- the trace names its host (this machine, or one whose collector recorded
  its boots), case aside;
- its last event lies within that boot: within this boot's uptime so far,
  or before the next recorded boot began;
- the file was last written after that last event as placed
  (`FILE_TIME_SLACK_NS` for file-time granularity and clock skew) and at
  most `MAX_WRITE_DELAY_NS` after it. A trace of an earlier boot was
  written before the later boot began, at least its own last event's
  uptime before the placement that boot would give; a file written (or
  copied, which resets its time) much later cannot be dated;
- exactly one boot passes.

Otherwise the times stay on the boot clock (`runs.time_base = 'trace'`),
and the runs row's `time_note` says why. The origin drifts only by the
clock adjustments (NTP) made since it was read: well under a millisecond
over hours, against telemetry sampled every 100 ms or more.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.arrays import replace_column

# Imported where first needed (socket, pyarrow.parquet, collector.writer):
# every ingest imports this module, and only rocprofv3 traces use them.

# How long after a trace's last event its file may have been written.
MAX_WRITE_DELAY_NS = 3600 * 10**9
# File times are coarser than the clocks (a few ms on ext4; 1-2 s elsewhere),
# and a shared folder's server stamps them with its own clock.
FILE_TIME_SLACK_NS = 2 * 10**9
# The collector records the origin again when it has moved by more than this.
RECORD_DRIFT_NS = 10**7
# The columns of the trace tables that are instants (durations stay as they are).
INSTANT_COLUMNS = ("start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns")
EVENT_KIND = "boot_clock"
_BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
_KEPT = "ts on the boot clock (CLOCK_BOOTTIME)"


@dataclass(frozen=True)
class BootClock:
    """This machine's name and boot, read once."""

    hostname: str
    uptime_ns: int | None  # CLOCK_BOOTTIME now; None where there is none (not Linux)
    origin_ns: int | None  # the epoch time at which CLOCK_BOOTTIME read 0
    boot_id: str | None = None  # the kernel's id of this boot (Linux)

    @classmethod
    def now(cls) -> BootClock:
        import socket

        boot_clock = getattr(time, "CLOCK_BOOTTIME", None)
        if boot_clock is None:  # macOS, Windows: no boot-time clock to place traces by
            return cls(socket.gethostname(), None, None)
        # Read between two epoch reads, so the origin is good to their spread.
        before = time.time_ns()
        uptime = time.clock_gettime_ns(boot_clock)
        after = time.time_ns()
        try:
            boot_id = _BOOT_ID_FILE.read_text().strip() or None
        except OSError:
            boot_id = None
        return cls(socket.gethostname(), uptime, (before + after) // 2 - uptime, boot_id)


@dataclass(frozen=True)
class RecordedBoot:
    """A boot of a host, as its collector recorded it in `events`: each
    record (when it was made, epoch ns; the origin then), in time order. A
    boot has several where the clock was stepped (NTP setting it soon after
    boot, say), or the collector restarted."""

    boot_id: str | None
    records: tuple[tuple[int, int], ...]

    @property
    def origin_ns(self) -> int:
        return self.records[0][1]

    def origin_at(self, boot_ns: int) -> int:
        """The origin in force when the boot clock read `boot_ns`: that of
        the last record made before then (the first, before any)."""
        at_ns = self.records[0][1] + boot_ns
        return max((record for record in self.records if record[0] <= at_ns), default=self.records[0])[1]


@dataclass(frozen=True)
class BootClockTrace:
    """What a parser of boot-clock times hands over for placing."""

    host: str | None
    path: Path  # the file whose write time dates the trace's end
    no_host: str = "the trace names no host"  # why `host` is None, for the note


@dataclass(frozen=True)
class Placement:
    offset_ns: int | None  # add to the trace's times; None: left on the boot clock
    note: str


@dataclass(frozen=True)
class _Boot:
    origin_ns: int
    current: bool  # this machine's current boot (else one a collector recorded)
    name: str  # how the notes name it: "this boot", "booted 2026-01-01 00:00:00 UTC"


def record_detail(clock: BootClock) -> str:
    """The `detail` of a boot_clock event: the boot id, and the machine's own
    name, which traces carry even where the collector runs as `--host X`."""
    return f"boot_id={clock.boot_id or ''} hostname={clock.hostname}"


def _detail_fields(detail: str | None) -> dict[str, str]:
    return dict(field.split("=", 1) for field in (detail or "").split() if "=" in field)


def recorded_boots(dataset: Path, host: str) -> list[RecordedBoot]:
    """The boots of `host` its collector recorded in the dataset's `events`
    (under that host name, or that machine name where the collector ran as
    another `--host`), oldest first: one per boot id (per origin where the
    id is unknown)."""
    # The host's own partition first; the others only where it has no
    # record, as a fleet's partitions are many.
    events = Path(dataset) / "events"
    own = _host_partitions(events, host)
    boots = _read_boots(host.lower(), _signature(own))
    if not boots:
        boots = _read_boots(host.lower(), _signature([child for child in _host_partitions(events) if child not in own]))
    return list(boots)


def _host_partitions(folder: Path, host: str | None = None) -> list[Path]:
    """A node table's `host=H` folders below `folder` (H as the writer makes
    a host name a folder name): `host`'s, whatever its case, or every
    host's where it is None."""
    from gpulens.collector.writer import partition_value

    if not folder.is_dir():
        return []
    wanted = None if host is None else f"host={partition_value(host)}".lower()
    return [child for child in folder.iterdir()
            if child.name.startswith("host=") and (wanted is None or child.name.lower() == wanted)]


def _signature(folders: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """The Parquet files below `folders`, with their times and sizes: read
    once per process while they stay so (ingest asks for every rocprofv3
    file of a run, and a folder of them is one host's)."""
    signature = []
    for path in sorted(path for folder in folders for path in folder.rglob("*.parquet")):
        try:
            stat = path.stat()
        except OSError:
            continue  # merged away meanwhile (collector.compact)
        signature.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(signature)


@functools.lru_cache(maxsize=16)
def _read_boots(host: str, files: tuple[tuple[str, int, int], ...]) -> tuple[RecordedBoot, ...]:
    from gpulens.collector import parquet_io

    records: dict[str | int, list[tuple[int, int]]] = {}
    for path, _, _ in files:
        try:
            table = parquet_io.read_table(path, ["ts", "host", "kind", "detail", "value"])
        except (OSError, pa.ArrowException, KeyError):
            continue  # not this collector's (or half-written elsewhere): its boots are not vouched for
        rows = pc.filter(table, pc.equal(table["kind"], EVENT_KIND))
        for ts_us, row_host, detail, origin_ns in zip(pc.cast(rows["ts"], pa.int64()).to_pylist(), rows["host"].to_pylist(),
                                                      rows["detail"].to_pylist(), rows["value"].to_pylist()):
            fields = _detail_fields(detail)
            if origin_ns is None or ts_us is None or host not in {(row_host or "").lower(), fields.get("hostname", "").lower()}:
                continue
            boot_id = fields.get("boot_id") or None
            records.setdefault(boot_id if boot_id is not None else origin_ns, []).append((ts_us * 1000, origin_ns))
    boots = [RecordedBoot(key if isinstance(key, str) else None, tuple(sorted(found))) for key, found in records.items()]
    return tuple(sorted(boots, key=lambda boot: boot.origin_ns))


def placement(trace: BootClockTrace, last_ns: int | None, clock: BootClock,
              recorded: Sequence[RecordedBoot] = ()) -> Placement:
    """Where the boot-clock times of `trace`, its last event at boot time
    `last_ns`, lie on the epoch, if the boots known can say (see the module
    docstring)."""
    if trace.host is None:
        return Placement(None, f"{_KEPT}: {trace.no_host}")
    if last_ns is None:
        return Placement(None, f"{_KEPT}: no event times")
    boots, ruled_out = _boots(trace.host, last_ns, clock, recorded)
    if not boots:
        return Placement(None, f"{_KEPT}: {ruled_out}")
    written_ns = os.stat(trace.path).st_mtime_ns
    fitting = [boot for boot in boots if _file_time_rules_out(boot, last_ns, written_ns) is None]
    if len(fitting) == 1:
        boot = fitting[0]
        how = ("recorded on this host in this boot" if boot.current
               else f"the boot {trace.host}'s collector recorded ({boot.name})")
        return Placement(boot.origin_ns, f"ts on the boot clock, placed on the epoch at ingest: {how}")
    if fitting:
        return Placement(None, f"{_KEPT}: its file's time fits {len(fitting)} boots of {trace.host}, so the boot cannot be told")
    if len(boots) == 1:
        return Placement(None, f"{_KEPT}: {_file_time_rules_out(boots[0], last_ns, written_ns)}")
    return Placement(None, f"{_KEPT}: its file's time fits none of the {len(boots)} boots known of {trace.host}")


def _boots(host: str, last_ns: int, clock: BootClock, recorded: Sequence[RecordedBoot]) -> tuple[list[_Boot], str]:
    """The boots the trace could be from, and, where there are none, why."""
    boots: list[_Boot] = []
    this_host = host.lower() == clock.hostname.lower() and clock.uptime_ns is not None and clock.origin_ns is not None
    if this_host and last_ns <= clock.uptime_ns:
        boots.append(_Boot(clock.origin_ns, True, "this boot"))
    for boot, after in zip(recorded, [*recorded[1:], None]):
        if this_host and clock.boot_id is not None and boot.boot_id == clock.boot_id:
            continue  # this boot, known first hand
        origin_ns = boot.origin_at(last_ns)
        ends_before = after.origin_ns if after is not None else None
        if ends_before is not None and origin_ns + last_ns >= ends_before:
            continue  # the trace's last event would fall after the next boot began
        when = dt.datetime.fromtimestamp(origin_ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        boots.append(_Boot(origin_ns, False, f"booted {when}"))
    if boots:
        return boots, ""
    if this_host:
        return [], ("its last event is past this boot's uptime, so it was recorded in an earlier boot, "
                    "and no collector record of that boot is in the dataset")
    if recorded:
        return [], f"its last event lies past the end of every boot of {host} its collector recorded"
    return [], f"recorded on {host}, ingested on {clock.hostname}, and the dataset holds no boot record of {host}'s collector"


def _file_time_rules_out(boot: _Boot, last_ns: int, written_ns: int) -> str | None:
    """Why the file's write time rules out `boot` (None: it fits)."""
    placed_end_ns = boot.origin_ns + last_ns
    where = "in this boot" if boot.current else f"in the boot {boot.name}"
    if written_ns < placed_end_ns - FILE_TIME_SLACK_NS:
        return f"the file was written before its last event would have happened {where}, so it was recorded in an earlier boot"
    if written_ns > placed_end_ns + MAX_WRITE_DELAY_NS:
        return (f"the file was written more than an hour after its last event {where} "
                "(copied, or an earlier boot's), so the boot cannot be told")
    return None


def place(parsed, dataset: Path | None = None, clock: BootClock | None = None) -> None:
    """Place a parsed trace's boot-clock times on the epoch where a boot fits
    (`parsed.boot_clock` says whose and which file), setting its runs rows'
    `time_base`, `epoch_offset_ns` and `time_note`; a trace on another
    clock is left alone. `dataset`: where to look for collector records."""
    trace: BootClockTrace | None = parsed.boot_clock
    if trace is None:
        return
    clock = clock or BootClock.now()
    recorded = recorded_boots(dataset, trace.host) if dataset is not None and trace.host is not None else []
    tables = {name: table for name, table in parsed.tables.items() if name != "runs"}
    placed = placement(trace, last_time_ns(tables), clock, recorded)
    if placed.offset_ns is not None:
        parsed.tables.update(shifted(tables, placed.offset_ns))
    if "runs" in parsed.tables:
        parsed.tables["runs"] = _runs_placed(parsed.tables["runs"], placed)
    if placed.offset_ns is None and dataset is not None and _has_telemetry(dataset, trace.host):
        # The join the user would expect is lost: say so beside the file's line.
        whose = "telemetry" if trace.host is None else f"{trace.host}'s telemetry"
        parsed.warnings.append(f"no telemetry join: the dataset has {whose}, but "
                               f"{placed.note.removeprefix(_KEPT + ': ')}; its times stay on the boot clock")
    parsed.boot_clock = None


def _has_telemetry(dataset: Path, host: str | None) -> bool:
    """Whether the dataset holds telemetry of `host` (any host, where None)."""
    return bool(_host_partitions(Path(dataset) / "telemetry", host))


def _runs_placed(runs: pa.Table, placed: Placement) -> pa.Table:
    """The runs rows with the placement's time base, offset and note."""
    rows = runs.num_rows
    notes = [json.dumps({**json.loads(text or "{}"), "time_note": placed.note}, sort_keys=True)
             for text in runs["metadata_json"].to_pylist()]
    columns = {"time_base": ["trace" if placed.offset_ns is None else "epoch"] * rows,
               "epoch_offset_ns": [placed.offset_ns] * rows, "metadata_json": notes}
    for name, values in columns.items():
        runs = replace_column(runs, name, pa.array(values, runs.schema.field(name).type))
    return runs


def host_from_folder(path: Path, clock: BootClock) -> str | None:
    """This machine's name, where the folder holding `path` bears it (as
    rocprofv3's default output folder, `%hostname%`, does); else None."""
    folder = path.absolute().parent.name
    return clock.hostname if folder.lower() == clock.hostname.lower() else None


def last_time_ns(tables: dict[str, pa.Table]) -> int | None:
    """The latest instant in the trace tables."""
    latest = [pc.max(table[column]).as_py() for table in tables.values() for column in INSTANT_COLUMNS
              if column in table.column_names and table.num_rows]
    latest = [value for value in latest if value is not None]
    return max(latest) if latest else None


def shifted(tables: dict[str, pa.Table], offset_ns: int) -> dict[str, pa.Table]:
    """The tables with every instant column moved by `offset_ns`."""
    out = {}
    for name, table in tables.items():
        for column in INSTANT_COLUMNS:
            if column in table.column_names:
                moved = pc.add(table[column], pa.scalar(offset_ns, table.schema.field(column).type))
                table = replace_column(table, column, moved)
        out[name] = table
    return out
