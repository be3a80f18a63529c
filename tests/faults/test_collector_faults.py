"""The collector against a failing disk and a careless operator, for real:
a tmpfs that fills up and empties, a read-only remount and back, the
output folder removed, two collectors at once, and kill -9.

Each checks that every file left is readable, that no more than one flush
interval of samples is lost (none where memory could keep them), and that
the collector recovers by itself when the fault clears.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import duckdb
import pytest

from .conftest import (FLUSH_EVERY_S, INTERVAL_S, event_kinds, every_file_readable, missing_ticks, start_collector,
                       stop, wait_for_files)

pytestmark = pytest.mark.slow


def _fill(folder: Path) -> Path:
    """Fill the file system holding `folder` to the last byte."""
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_keeps_rows_in_memory_and_writes_them_when_it_empties(tmpfs) -> None:
    out = tmpfs.path / "data"
    collector = start_collector(out)
    wait_for_files(out, "telemetry/**/*.parquet")
    filler = _fill(tmpfs.path)
    time.sleep(6 * FLUSH_EVERY_S)  # several flushes fail
    filler.unlink()
    time.sleep(4 * FLUSH_EVERY_S)  # and then succeed again
    code, stderr = stop(collector)
    assert code == 0, stderr
    errors = [line for line in stderr.splitlines() if "ERROR" in line or "disk full" in line]
    assert len(errors) == 1 and "disk full" in errors[0], stderr  # said once, not at every flush
    assert "writing again after" in stderr
    every_file_readable(out)
    assert missing_ticks(out) <= 0
    kinds = event_kinds(out)
    assert kinds.index("write_failed") < kinds.index("write_recovered")


def test_a_read_only_remount_mid_run_loses_nothing_once_writable_again(tmpfs) -> None:
    out = tmpfs.path / "data"
    collector = start_collector(out)
    wait_for_files(out, "telemetry/**/*.parquet")
    tmpfs.remount("ro")
    try:
        time.sleep(6 * FLUSH_EVERY_S)
        assert collector.poll() is None, "the collector must outlive a read-only disk"
    finally:
        tmpfs.remount("rw")
    time.sleep(4 * FLUSH_EVERY_S)
    code, stderr = stop(collector)
    assert code == 0, stderr
    assert stderr.count("Read-only file system") == 1, stderr
    every_file_readable(out)
    assert missing_ticks(out) <= 0


def test_a_disk_still_read_only_at_stop_is_one_line_and_exit_1(tmpfs) -> None:
    out = tmpfs.path / "data"
    collector = start_collector(out)
    wait_for_files(out, "telemetry/**/*.parquet")
    tmpfs.remount("ro")
    try:
        time.sleep(2 * FLUSH_EVERY_S)
        code, stderr = stop(collector)
    finally:
        tmpfs.remount("rw")
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith("gpulens: error: ") and "Traceback" not in stderr
    every_file_readable(out)


def test_a_removed_output_folder_is_made_again_with_the_inventory(tmp_path: Path) -> None:
    out = tmp_path / "data"
    collector = start_collector(out)
    wait_for_files(out, "telemetry/**/*.parquet")
    # Removed as `rm -rf` would, but at once: the collector writes meanwhile.
    out.rename(tmp_path / "removed")
    shutil.rmtree(tmp_path / "removed")
    time.sleep(4 * FLUSH_EVERY_S)
    code, stderr = stop(collector)
    assert code == 0, stderr
    assert stderr.count("the dataset folder was removed") == 1
    every_file_readable(out)
    devices = duckdb.connect().execute(f"select count(distinct gpu_index) from read_parquet('{out}/devices/**/*.parquet')").fetchone()
    assert devices == (4,)
    assert "dataset_recreated" in event_kinds(out)


def test_a_second_collector_on_the_same_host_refuses_to_start(tmp_path: Path) -> None:
    out = tmp_path / "data"
    first = start_collector(out)
    wait_for_files(out, "telemetry/**/*.parquet")
    second = start_collector(out)
    _, stderr = second.communicate(timeout=60)
    assert second.returncode == 1
    assert stderr.strip().splitlines() == [
        f"gpulens: error: {out}: another collector writes host=node-a here (pid {first.pid} on {os.uname().nodename}, "
        + stderr.split("on " + os.uname().nodename + ", ")[1].strip()]
    assert "give this one its own --host" in stderr
    code, _ = stop(first)
    assert code == 0
    every_file_readable(out)
    rows, distinct = duckdb.connect().execute(f"select count(*), count(distinct (ts, gpu_index)) "
                                f"from read_parquet('{out}/telemetry/**/*.parquet')").fetchone()
    assert rows == distinct


def test_kill_9_at_random_points_loses_at_most_one_flush(tmp_path: Path) -> None:
    out = tmp_path / "data"
    chance = random.Random(47)
    lost_limit = round(FLUSH_EVERY_S / INTERVAL_S) + 2  # one flush, and the tick under way
    for _ in range(4):
        collector = start_collector(out)
        wait_for_files(out, f"telemetry/**/*-{collector.pid}-*.parquet")
        time.sleep(chance.uniform(0.1, 1.0))
        collector.send_signal(signal.SIGKILL)
        collector.wait(timeout=60)
        before = every_file_readable(out)
        assert before
        # The next start takes over the dead one's lease at once (same machine).
        collector = start_collector(out)
        wait_for_files(out, f"telemetry/**/*-{collector.pid}-*.parquet")
        code, stderr = stop(collector)
        assert code == 0, stderr
    every_file_readable(out)
    con = duckdb.connect()
    # Within each run (collector_start to the next), at most one flush is missing.
    gaps = con.execute(f"""
        with ticks as (select distinct ts from read_parquet('{out}/telemetry/**/*.parquet')),
        steps as (select ts, ts - lag(ts) over (order by ts) as gap from ticks)
        select count(*) from steps where gap > interval {lost_limit * INTERVAL_S * 1000:.0f} millisecond
    """).fetchone()[0]
    starts = con.execute(f"select count(*) from read_parquet('{out}/events/**/*.parquet') "
                     "where kind = 'collector_start'").fetchone()[0]
    assert starts == 8
    assert gaps <= 8  # the gaps between runs, where no collector ran: none inside a run
