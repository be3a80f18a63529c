"""Boot-clock traces placed on the epoch, where this machine can vouch for them.

rocprofiler-sdk stamps its events with the boot-time clock (CLOCK_BOOTTIME:
nanoseconds since the machine booted), so a rocprofv3 database holds no
time of day, and its kernels cannot be laid over the collector's telemetry
(which is on the epoch) for energy per step or power per phase. The offset
between the two clocks, `time.time_ns() - CLOCK_BOOTTIME`, is the epoch
time of the boot, and any process on the machine can read it while the
boot lasts.

So a trace ingested on the machine that recorded it, in the boot that
recorded it (the common case: `gpulens collect --watch-traces`, or
`gpulens ingest` on the node after the job), is placed on the epoch with
that offset. What has to hold, each checked here, since a wrong placement
would silently pair kernels with the wrong samples:

- the trace names its host, and it is this machine (`socket.gethostname()`,
  case aside);
- its last event lies within this boot's uptime so far;
- the file was last written after that event, as placed with this boot's
  offset (2 s of slack for file-time granularity): a trace of an earlier
  boot was written before this boot began, at least its own last event's
  uptime earlier than that placement;
- and at most `MAX_WRITE_DELAY_NS` after it: a file written (or copied,
  which resets its time) much later cannot be told from one of an earlier
  boot.

Otherwise the times stay on the boot clock (`runs.time_base = 'trace'`),
and the runs row's `time_note` says which check failed. The offset drifts
only by the clock adjustments (NTP) made since the trace: well under a
millisecond over hours, against telemetry sampled every 100 ms or more.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

# How long after a trace's last event its file may have been written.
MAX_WRITE_DELAY_NS = 3600 * 10**9
# File times are coarser than the clocks (a few ms on ext4; 1-2 s elsewhere).
FILE_TIME_SLACK_NS = 2 * 10**9
# The columns of the trace tables that are instants (durations stay as they are).
INSTANT_COLUMNS = ("start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns")


@dataclass(frozen=True)
class BootClock:
    """This machine's name and boot, read once."""

    hostname: str
    uptime_ns: int  # CLOCK_BOOTTIME now
    origin_ns: int  # the epoch time at which CLOCK_BOOTTIME read 0

    @classmethod
    def now(cls) -> BootClock:
        # Read between two epoch reads, so the origin is good to their spread.
        before = time.time_ns()
        uptime = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        after = time.time_ns()
        return cls(socket.gethostname(), uptime, (before + after) // 2 - uptime)


@dataclass(frozen=True)
class Placement:
    offset_ns: int | None  # add to the trace's times; None: left on the boot clock
    note: str


def host_from_folder(path: Path, clock: BootClock) -> str | None:
    """This machine's name, where the folder holding `path` bears it (as
    rocprofv3's default output folder, `%hostname%`, does); else None."""
    folder = path.absolute().parent.name
    return clock.hostname if folder.lower() == clock.hostname.lower() else None


def placement(path: Path, host: str | None, last_ns: int | None, clock: BootClock | None = None,
              no_host: str = "the trace names no host") -> Placement:
    """Where the boot-clock times of the trace at `path` (recorded on `host`,
    its last event at boot time `last_ns`) lie on the epoch, if this machine
    can say (see the module docstring); `no_host` says why a trace has none."""
    kept = "ts on the boot clock (CLOCK_BOOTTIME)"
    if host is None:
        return Placement(None, f"{kept}: {no_host}")
    if last_ns is None:
        return Placement(None, f"{kept}: no event times")
    clock = clock or BootClock.now()
    if host.lower() != clock.hostname.lower():
        return Placement(None, f"{kept}: recorded on {host}, ingested on {clock.hostname}")
    if last_ns > clock.uptime_ns:
        return Placement(None, f"{kept}: its last event is past this boot's uptime, so it was recorded in an earlier boot")
    written_ns = os.stat(path).st_mtime_ns
    placed_end_ns = clock.origin_ns + last_ns
    if written_ns < placed_end_ns - FILE_TIME_SLACK_NS:
        return Placement(None, f"{kept}: the file was written before its last event would have happened in this boot, "
                               "so it was recorded in an earlier boot")
    if written_ns > placed_end_ns + MAX_WRITE_DELAY_NS:
        return Placement(None, f"{kept}: the file was written more than an hour after its last event in this boot "
                               "(copied, or an earlier boot's), so the boot cannot be told")
    return Placement(clock.origin_ns, "ts on the boot clock, placed on the epoch at ingest: recorded on this host in this boot")


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
                index = table.schema.get_field_index(column)
                moved = pc.add(table[column], pa.scalar(offset_ns, table.schema.field(index).type))
                table = table.set_column(index, table.schema.field(index), moved)
        out[name] = table
    return out
