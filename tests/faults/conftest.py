"""Fixtures of the fault suite: a small tmpfs mounted for one test, and
`gpulens collect` run as its own process.

The mounts need root (CI runs as root) and a kernel that lets this
process mount: where it may not, every test that needs one skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest


class Tmpfs:
    def __init__(self, path: Path, size_kib: int) -> None:
        self.path = path
        self.size_kib = size_kib

    def remount(self, *options: str) -> None:
        """Remount with `options`; a remount read-only fails (EBUSY) while a
        file is open for writing, as the collector's may be: tried again."""
        for _ in range(200):
            done = subprocess.run(["mount", "-o", ",".join(["remount", *options]), str(self.path)],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                return
            time.sleep(0.01)
        raise AssertionError(f"cannot remount {self.path} {options}: {done.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Tmpfs:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    size_kib = 4096
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield Tmpfs(mount_point, size_kib)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], timeout=30)


INTERVAL_S = 0.05
FLUSH_EVERY_S = 0.25


def start_collector(out: Path, *extra: str, gpus: int = 4) -> subprocess.Popen:
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", str(gpus),
               "--interval", str(INTERVAL_S), "--flush-every", str(FLUSH_EVERY_S), "--slow-every", "1",
               "--out", str(out), "--host", "node-a", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_files(folder: Path, pattern: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not list(folder.glob(pattern)):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {pattern} under {folder} after {timeout_s} s")
        time.sleep(0.05)


def stop(process: subprocess.Popen) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def every_file_readable(root: Path) -> list[Path]:
    """Each Parquet file under `root` opened and read whole; the files."""
    files = sorted(root.rglob("*.parquet"))
    for path in files:
        duckdb.connect().execute(f"select count(*) from read_parquet('{path}')").fetchall()
    return files


def missing_ticks(root: Path, gpus: int = 4) -> int:
    """Ticks between the first and last sample that no file holds, less
    those the collector itself said it skipped (a busy machine). At most 0:
    a tick skipped as the collector stops is counted but has no successor."""
    con = duckdb.connect()
    first, last, present, rows = con.execute(
        f"select min(ts), max(ts), count(distinct ts), count(*) from read_parquet('{root}/telemetry/**/*.parquet')"
    ).fetchone()
    skipped = con.execute(f"select coalesce(sum(value), 0) from read_parquet('{root}/events/**/*.parquet') "
                      "where kind = 'ticks_skipped'").fetchone()[0]
    assert rows == present * gpus, "a tick must hold every GPU once: no duplicate, no half tick"
    expected = round((last - first).total_seconds() / INTERVAL_S) + 1
    return expected - present - int(skipped)


def event_kinds(root: Path) -> list[str]:
    return [kind for (kind,) in duckdb.connect().execute(
        f"select kind from read_parquet('{root}/events/**/*.parquet') order by ts").fetchall()]
