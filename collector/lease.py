"""One collector per host and dataset: a lease in a file.

Two collectors writing the same `host=` partitions of one dataset write
every sample twice, with different values, and node sums count each tick
once or twice at random. The first collector takes a lease: a small JSON
file, `<dataset>/.locks/collector-host=<H>.json`, naming its holder (host
name, boot id, pid, a random token) and when it was last renewed. A
second collector refuses to start while the lease is live.

`flock` alone does not do: on NFS it is advisory, emulated, or silently
local to one client, and a dataset on a shared file system is the usual
fleet setup. The file is created with O_EXCL (atomic on NFSv3 and later)
and renewed by writing a temporary file and renaming it over the lease
(atomic everywhere), so a reader never sees half a lease.

A lease ends when its holder releases it (a clean stop), when it was not
renewed for `lease_s` seconds (a holder killed, a node gone), or, on the
holder's own machine, when its process no longer runs (so a collector
restarted after a kill -9 needs no wait). Taking over an ended lease is a
rename followed by a read: of two collectors taking over at once, the one
whose token is not in the file afterwards steps back.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpulens.collector.errors import DatasetError
from gpulens.collector.writer import partition_value

LOCKS_DIR = ".locks"
# How long after a renewal a silent holder is taken for gone, at least.
MIN_LEASE_S = 30.0


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Holder:
    token: str
    hostname: str
    boot_id: str | None
    pid: int
    renewed_ns: int
    lease_s: float

    def ended(self, now_ns: int) -> bool:
        """Whether this holder's lease has ended, seen from here at `now_ns`."""
        if now_ns - self.renewed_ns > self.lease_s * 1e9:
            return True
        if self.hostname == socket.gethostname() and self.boot_id == _boot_id():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True  # killed on this machine: no need to wait the lease out
            except PermissionError:
                return False  # it runs, as another user
        return False

    def describe(self, now_ns: int) -> str:
        age_s = max(0.0, (now_ns - self.renewed_ns) / 1e9)
        return f"pid {self.pid} on {self.hostname}, renewed {age_s:.0f} s ago"


class LeaseTakenOver(DatasetError):
    """The lease is another collector's now: not a disk fault, said every time."""


class CollectorLease:
    """The lease on one host's partitions of one dataset."""

    def __init__(self, root: Path, host: str, lease_s: float, clock_ns=time.time_ns) -> None:
        self.root = Path(root)
        self.host = host
        self.path = self.root / LOCKS_DIR / f"collector-host={partition_value(host)}.json"
        self.lease_s = max(MIN_LEASE_S, lease_s)
        self._clock_ns = clock_ns
        self._token = secrets.token_hex(16)
        self._held = False

    def _mine(self, now_ns: int) -> Holder:
        return Holder(self._token, socket.gethostname(), _boot_id(), os.getpid(), now_ns, self.lease_s)

    def _read(self) -> Holder | None:
        try:
            return Holder(**json.loads(self.path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            # Unreadable or not ours to read: taken as held, never broken.
            raise DatasetError(f"{self.path}: unreadable collector lease; if no collector writes host={self.host} "
                               "into this dataset, remove the file") from None

    def _write_over(self, holder: Holder) -> None:
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # the dataset folder may have been made again
            temporary.write_text(json.dumps(asdict(holder)), encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise DatasetError(f"{self.path}: cannot write the collector lease ({error.strerror or error})") from None

    def acquire(self) -> None:
        """Take the lease, or raise DatasetError naming its live holder."""
        now_ns = self._clock_ns()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = self._read()
            if holder is not None and holder.token == self._token:
                self._held = True  # ours already (renewed into a folder made again)
                return
            if holder is not None and not holder.ended(now_ns):
                raise DatasetError(
                    f"{self.root}: another collector writes host={self.host} here ({holder.describe(now_ns)}); "
                    "stop it, or give this one its own --host") from None
            self._take_over(now_ns)
        except OSError as error:
            raise DatasetError(f"{self.path}: cannot take the collector lease ({error.strerror or error})") from error
        else:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(asdict(self._mine(now_ns))))
        self._held = True

    def _take_over(self, now_ns: int) -> None:
        self._write_over(self._mine(now_ns))
        time.sleep(0.05)  # let a rival's rename land first, if there is one
        holder = self._read()
        if holder is None or holder.token != self._token:
            raise DatasetError(f"{self.root}: another collector took over host={self.host} at the same moment; "
                               "stop it, or give this one its own --host")

    def renew(self) -> None:
        """Mark the lease live again; DatasetError if it is no longer ours
        (taken over after this process stalled longer than the lease)."""
        if not self._held:
            return
        holder = self._read()
        if holder is not None and holder.token != self._token:
            self._held = False
            raise LeaseTakenOver(f"{self.root}: the collector lease on host={self.host} was taken over "
                               f"({holder.describe(self._clock_ns())})")
        self._write_over(self._mine(self._clock_ns()))

    def release(self) -> None:
        """Give the lease up (a clean stop), if still ours."""
        if not self._held:
            return
        self._held = False
        try:
            holder = self._read()
            if holder is not None and holder.token == self._token:
                self.path.unlink()
        except (OSError, DatasetError):
            pass  # a lease left behind ends on its own
