"""collector.lease: one collector per host and dataset, NFS-safe."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.collector.errors import DatasetError
from gpulens.collector.lease import CollectorLease


def test_a_second_collector_of_the_same_host_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = CollectorLease(tmp_path, "node-a", lease_s=60)
    first.acquire()
    with pytest.raises(DatasetError, match=rf"another collector writes host=node-a here \(pid {os.getpid()} on "):
        CollectorLease(tmp_path, "node-a", lease_s=60).acquire()


def test_another_host_name_takes_its_own_lease(tmp_path: Path) -> None:
    CollectorLease(tmp_path, "node-a", lease_s=60).acquire()
    CollectorLease(tmp_path, "node-b", lease_s=60).acquire()
    assert sorted(p.name for p in (tmp_path / ".locks").iterdir()) == ["collector-host=node-a.json",
                                                                        "collector-host=node-b.json"]


def test_a_released_lease_can_be_taken_again(tmp_path: Path) -> None:
    first = CollectorLease(tmp_path, "node-a", lease_s=60)
    first.acquire()
    first.release()
    CollectorLease(tmp_path, "node-a", lease_s=60).acquire()


def test_a_lease_not_renewed_in_time_is_taken_over(tmp_path: Path) -> None:
    now = [1_000_000_000_000]
    gone = CollectorLease(tmp_path, "node-a", lease_s=30, clock_ns=lambda: now[0])
    gone.acquire()
    # As if held by a process on another machine (no pid to look at).
    record = json.loads(gone.path.read_text())
    gone.path.write_text(json.dumps({**record, "hostname": "elsewhere"}))
    now[0] += 31 * 10**9
    CollectorLease(tmp_path, "node-a", lease_s=30, clock_ns=lambda: now[0]).acquire()
    with pytest.raises(DatasetError, match="was taken over"):
        gone.renew()


def test_a_live_lease_of_another_machine_is_not_taken_over(tmp_path: Path) -> None:
    now = [1_000_000_000_000]
    other = CollectorLease(tmp_path, "node-a", lease_s=30, clock_ns=lambda: now[0])
    other.acquire()
    record = json.loads(other.path.read_text())
    other.path.write_text(json.dumps({**record, "hostname": "elsewhere"}))
    now[0] += 29 * 10**9
    with pytest.raises(DatasetError, match="pid .* on elsewhere, renewed 29 s ago"):
        CollectorLease(tmp_path, "node-a", lease_s=30, clock_ns=lambda: now[0]).acquire()


def test_the_lease_of_a_killed_collector_on_this_machine_ends_at_once(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from gpulens.collector.lease import CollectorLease; "
            "CollectorLease(Path(sys.argv[1]), 'node-a', lease_s=600).acquire()")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)  # exits holding it
    assert json.loads((tmp_path / ".locks" / "collector-host=node-a.json").read_text())["hostname"] == socket.gethostname()
    CollectorLease(tmp_path, "node-a", lease_s=600).acquire()


def test_an_unreadable_lease_is_never_broken(tmp_path: Path) -> None:
    (tmp_path / ".locks").mkdir()
    (tmp_path / ".locks" / "collector-host=node-a.json").write_text("{half a")
    with pytest.raises(DatasetError, match="unreadable collector lease; if no collector writes host=node-a"):
        CollectorLease(tmp_path, "node-a", lease_s=60).acquire()
