"""gpulens.collector.compact: a partition's flush files merged into few big ones."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import pyarrow.parquet as pq

from gpulens.analysis.dataset import open_dataset
from gpulens.collector import compact
from gpulens.collector.compact import finish_interrupted, maybe_compact
from gpulens.collector.errors import DatasetError
from gpulens.collector.writer import DatasetWriter
from conftest import signal_self

T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
PARTITION = Path("telemetry") / "host=node-a" / "date=2026-01-01"


def _flushes(root: Path, count: int, gpus: int = 2) -> DatasetWriter:
    """`count` flushes of one sample per GPU, a second apart."""
    writer = DatasetWriter(root, "node-a")
    for second in range(count):
        for gpu in range(gpus):
            writer.add("telemetry", {"ts": T0_US + second * 1_000_000, "gpu_index": gpu, "gpu_uuid": f"GPU-{gpu}",
                                     "vendor": "sim", "power_w": 100.0 * gpu + second})
        writer.flush()
    return writer


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / PARTITION).glob("*.parquet"))


def _power_rows(root: Path) -> list[tuple]:
    con = open_dataset(root, with_analyses=False)
    return con.execute("select gpu_index, epoch_us(ts), power_w from telemetry order by 1, 2").fetchall()


def test_fifty_nine_flushes_stay_as_written(tmp_path):
    _flushes(tmp_path, 59)
    assert len(_files(tmp_path)) == 59


def test_the_sixtieth_flush_merges_the_partition_into_one_file_with_every_row(tmp_path):
    _flushes(tmp_path, 60)
    files = _files(tmp_path)
    assert len(files) == 1 and "-merged-" in files[0]
    rows = _power_rows(tmp_path)
    assert len(rows) == 120
    assert rows[:2] == [(0, T0_US, 0.0), (0, T0_US + 1_000_000, 1.0)]
    assert rows[-1] == (1, T0_US + 59_000_000, 159.0)


def test_merged_rows_keep_time_order(tmp_path):
    _flushes(tmp_path, 60)
    table = pq.read_table(tmp_path / PARTITION / _files(tmp_path)[0])
    keys = list(zip(table.column("ts").to_pylist(), table.column("gpu_index").to_pylist()))
    assert keys == sorted(keys)


def test_a_merge_writes_row_groups_of_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setattr(compact, "MERGE_ROW_GROUP_ROWS", 50)
    _flushes(tmp_path, 60)  # 120 rows, 2 a file
    metadata = pq.ParquetFile(tmp_path / PARTITION / _files(tmp_path)[0]).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [50, 50, 20]


def test_merging_files_written_before_a_column_was_added_fills_it_with_null(tmp_path):
    folder = tmp_path / PARTITION
    folder.mkdir(parents=True)
    old = pa.table({"ts": pa.array([T0_US], pa.timestamp("us", tz="UTC")), "gpu_index": pa.array([0], pa.int32())})
    pq.write_table(old, folder / f"part-{T0_US}-1-00000.parquet")
    new = old.append_column("power_w", pa.array([250.0]))
    pq.write_table(new.set_column(0, "ts", pa.array([T0_US + 1], pa.timestamp("us", tz="UTC"))),
                   folder / f"part-{T0_US + 1}-1-00001.parquet")
    [merged] = maybe_compact(folder, tmp_path / ".staging", parts_at=2)
    assert pq.read_table(merged).column("power_w").to_pylist() == [None, 250.0]


def test_merged_files_are_merged_again_when_their_tier_fills(tmp_path):
    writer = _flushes(tmp_path, 4)
    folder, staging = tmp_path / PARTITION, tmp_path / ".staging"
    maybe_compact(folder, staging, parts_at=2, merged_at=2)
    assert len(_files(tmp_path)) == 1
    del writer
    _flushes(tmp_path, 2)
    maybe_compact(folder, staging, parts_at=2, merged_at=2)
    assert len(_files(tmp_path)) == 1
    assert len(_power_rows(tmp_path)) == 12


def test_files_a_crash_left_beside_their_merged_file_are_removed_on_the_next_start(tmp_path):
    _flushes(tmp_path, 3)
    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / PARTITION, backup)
    maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    for part in backup.iterdir():  # as if the crash came before the removals
        shutil.copy(part, tmp_path / PARTITION / part.name)
    assert len(_files(tmp_path)) == 4
    assert finish_interrupted(tmp_path) == 3
    assert len(_power_rows(tmp_path)) == 6


def test_gpulens_compact_merges_a_whole_dataset_and_keeps_its_rows(tmp_path):
    _flushes(tmp_path, 30)
    before = _power_rows(tmp_path)
    result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "compact", str(tmp_path)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert "30 node-table files merged into 1" in result.stdout
    assert len(_files(tmp_path)) == 1
    assert _power_rows(tmp_path) == before


def test_gpulens_compact_on_a_missing_folder_is_one_line_and_exit_1(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "compact", str(tmp_path / "nope")],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert (result.returncode, result.stderr.strip()) == (1, f"gpulens: error: {tmp_path / 'nope'}: no such dataset directory")


def test_a_merge_that_cannot_read_a_file_names_that_file_and_keeps_every_file(tmp_path):
    _flushes(tmp_path, 3)
    folder = tmp_path / PARTITION
    damaged = sorted(folder.glob("*.parquet"))[1]
    damaged.write_bytes(damaged.read_bytes()[:-20])  # the footer cut off
    with pytest.raises(DatasetError, match=f"^{re.escape(str(damaged))}: not a readable Parquet file, left as it is "):
        maybe_compact(folder, tmp_path / ".staging", parts_at=3)
    assert len(_files(tmp_path)) == 3
    assert not list((tmp_path / ".staging").glob("*.tmp"))


def _compact(capsys, dataset: Path) -> tuple[int, str, str]:
    from gpulens.dashboard import cli

    code = cli.main(["compact", str(dataset)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_gpulens_compact_names_a_corrupt_file_alone_in_its_folder_and_exits_1(tmp_path, capsys):
    _flushes(tmp_path, 1)
    (damaged,) = (tmp_path / PARTITION).glob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:-20])  # the footer cut off
    code, out, err = _compact(capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.startswith(f"gpulens: error: {damaged}: not a readable Parquet file, left as it is (Parquet magic bytes")
    assert _files(tmp_path) == [damaged.name]


def test_gpulens_compact_on_a_file_says_it_is_not_a_directory(tmp_path, capsys):
    afile = tmp_path / "telemetry.parquet"
    afile.write_bytes(b"PAR1")
    assert _compact(capsys, afile) == (1, "", f"gpulens: error: {afile}: not a directory\n")


def test_gpulens_compact_on_a_dataset_it_may_not_write_is_one_line_and_changes_nothing(tmp_path, capsys, monkeypatch):
    _flushes(tmp_path, 30)
    before = _files(tmp_path)
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        # As for a user who may only read the dataset (chmod does not stop root, who may run the tests).
        if Path(path).is_relative_to(tmp_path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    shutil.rmtree(tmp_path / ".staging")  # a copy of a dataset, say, made without it
    monkeypatch.setattr(os, "mkdir", mkdir)
    assert _compact(capsys, tmp_path) == (1, "", f"gpulens: error: {tmp_path}: cannot write to the output directory (Permission denied)\n")
    assert _files(tmp_path) == before


# --- stopped by SIGTERM or Ctrl-C ----------------------------------------------------


def test_a_merge_stopped_while_it_removes_the_old_folder_still_finishes(tmp_path, monkeypatch):
    _flushes(tmp_path, 3)
    remove_tree = compact._remove_tree
    calls = []

    def interrupted_at_the_second(folder):
        calls.append(folder)  # the first: clearing the way before the merge
        if len(calls) == 2:
            raise KeyboardInterrupt
        remove_tree(folder)

    monkeypatch.setattr(compact, "_remove_tree", interrupted_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    monkeypatch.undo()
    assert (len(_files(tmp_path)), len(_power_rows(tmp_path))) == (1, 6)
    assert list((tmp_path / ".staging").glob("compact-*")) == []


def test_a_merge_by_rename_stopped_while_it_removes_its_inputs_still_removes_them_all(tmp_path, monkeypatch):
    # Where folders cannot be exchanged (NFS): stopped halfway, the merged
    # file and the inputs left beside it would both be read until the next
    # writer's finish_interrupted.
    _flushes(tmp_path, 3)
    monkeypatch.setattr(compact, "exchange", _cannot_exchange)
    unlink = Path.unlink
    calls = []

    def interrupted_at_the_second(path, missing_ok=False):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", interrupted_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    monkeypatch.undo()
    assert len(_files(tmp_path)) == 1
    assert len(_power_rows(tmp_path)) == 6


def _cannot_exchange(a, b):
    raise compact.SwapUnsupported(errno.EINVAL, "Invalid argument", str(a))


def test_gpulens_compact_stopped_by_sigterm_exits_143_and_keeps_every_file(tmp_path, capsys, monkeypatch):
    _flushes(tmp_path, 30)
    before, rows_before = _files(tmp_path), _power_rows(tmp_path)
    row_groups = compact._row_groups

    def signalled_as_it_writes(files, schema):
        signal_self(signal.SIGTERM)
        yield from row_groups(files, schema)

    monkeypatch.setattr(compact, "_row_groups", signalled_as_it_writes)
    # Where compact left SIGTERM as it found it, the signal must not end pytest.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        assert _compact(capsys, tmp_path) == (143, "", "gpulens: terminated\n")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (_files(tmp_path), _power_rows(tmp_path)) == (before, rows_before)
    assert list((tmp_path / ".staging").glob("*.tmp")) == []


# --- readers during a merge ------------------------------------------------------------

READER = """
import json, os, sys, time
import duckdb
root, ready, stop = sys.argv[1:4]
con = duckdb.connect()
seen, vanished, other = {}, 0, []
while True:
    done = os.path.exists(stop)  # one more query after the merges ended
    try:
        total = con.execute("select count(*) from read_parquet(?)", [root + "/telemetry/**/*.parquet"]).fetchone()[0]
        seen[total] = seen.get(total, 0) + 1
    except duckdb.Error as error:  # a file merged away between the listing and its opening: run again
        if "No such file or directory" in str(error):
            vanished += 1
        else:
            other.append(str(error)[:200])
    open(ready, "a").close()
    if done:
        break
print(json.dumps({"seen": seen, "vanished": vanished, "other": other}))
"""


@pytest.mark.slow
def test_a_reader_counting_rows_while_gpulens_compact_runs_never_sees_a_row_twice(tmp_path):
    # Real processes: a reader counts the telemetry rows in a loop while
    # `gpulens compact` merges 20 partitions of 12 flush files each, twice
    # over; every count it gets must be the true one (a query that meets a
    # file merged away fails, and is run again by analysis.tables).
    partitions, flushes, gpus = 20, 12, 4
    counts: dict[int, int] = {}
    for round_ in range(2):
        root = tmp_path / f"round{round_}"
        for host in range(partitions):
            writer = DatasetWriter(root, f"node-{host:02d}")
            for second in range(flushes):
                for gpu in range(gpus):
                    writer.add("telemetry", {"ts": T0_US + second * 1_000_000, "gpu_index": gpu,
                                             "gpu_uuid": f"GPU-{gpu}", "vendor": "sim", "power_w": 1.0 * second})
                writer.flush()
        ready, stop = tmp_path / f"ready{round_}", tmp_path / f"stop{round_}"
        reader = subprocess.Popen([sys.executable, "-c", READER, str(root), str(ready), str(stop)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            while not ready.exists() and reader.poll() is None:
                time.sleep(0.01)
            done = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "compact", str(root)],
                                  capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
            stop.touch()
            out, _ = reader.communicate(timeout=120)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        assert (done.returncode, len(list((root / "telemetry").glob("host=*/date=*/*.parquet")))) == (0, partitions)
        result = json.loads(out)
        assert (set(result["seen"]), result["other"]) == ({str(partitions * flushes * gpus)}, [])
        for total, n in result["seen"].items():
            counts[int(total)] = counts.get(int(total), 0) + n
    assert sum(counts.values()) >= 2


def _rows_listed(folder: Path) -> int:
    """The rows a reader that lists `folder` now would count."""
    return sum(pq.read_metadata(path).num_rows for path in folder.glob("*.parquet"))


def test_a_partition_holds_each_row_once_at_every_step_of_a_merge(tmp_path, monkeypatch):
    _flushes(tmp_path, 3)
    folder = tmp_path / PARTITION
    seen = []
    real_exchange, real_settle = compact.exchange, compact._settle

    def exchange(a, b):
        seen.append(_rows_listed(folder))
        real_exchange(a, b)
        seen.append(_rows_listed(folder))

    def settle(*args):
        real_settle(*args)
        seen.append(_rows_listed(folder))

    monkeypatch.setattr(compact, "exchange", exchange)
    monkeypatch.setattr(compact, "_settle", settle)
    maybe_compact(folder, tmp_path / ".staging", parts_at=3)
    assert (seen, len(_files(tmp_path))) == ([6, 6, 6], 1)


def test_a_flush_written_during_a_merge_moves_into_the_merged_partition(tmp_path, monkeypatch):
    writer = _flushes(tmp_path, 3)
    real_exchange = compact.exchange

    def flushed_just_before(a, b):  # a collector's flush lands after the links were made
        writer.add("telemetry", {"ts": T0_US + 9_000_000, "gpu_index": 0, "gpu_uuid": "GPU-0", "vendor": "sim",
                                 "power_w": 9.0})
        writer.flush()
        real_exchange(a, b)

    monkeypatch.setattr(compact, "exchange", flushed_just_before)
    maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    assert (len(_files(tmp_path)), len(_power_rows(tmp_path))) == (2, 7)
    assert list((tmp_path / ".staging").glob("compact-*")) == []


def test_a_merge_that_died_after_its_exchange_is_finished_on_the_next_start(tmp_path, monkeypatch):
    writer = _flushes(tmp_path, 3)
    monkeypatch.setattr(compact, "_settle", lambda *args: None)  # as if killed right after the exchange
    maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    monkeypatch.undo()
    [old] = [p for p in (tmp_path / ".staging").glob("compact-*") if p.is_dir()]
    newer = old / "part-9999-flushed-late.parquet"  # a flush that landed in the old folder
    shutil.copy(next(old.glob("part-*.parquet")), newer)
    dead = _dead_pid()
    for path in (old, old.with_name(old.name + ".json")):
        path.rename(path.with_name(path.name.replace(f"compact-{os.getpid()}-", f"compact-{dead}-")))
    assert (len(_files(tmp_path)), len(_power_rows(tmp_path))) == (1, 6)
    finish_interrupted(tmp_path)
    assert (len(_files(tmp_path)), len(_power_rows(tmp_path))) == (2, 8)
    assert list((tmp_path / ".staging").glob("compact-*")) == []
    del writer


def test_finishing_a_merge_that_died_does_not_bring_back_a_file_since_merged_away(tmp_path, monkeypatch):
    writer = _flushes(tmp_path, 3)
    [earlier] = maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    for second in range(3, 6):
        writer.add("telemetry", {"ts": T0_US + second * 1_000_000, "gpu_index": 0, "gpu_uuid": "GPU-0",
                                 "vendor": "sim", "power_w": 1.0})
        writer.flush()
    monkeypatch.setattr(compact, "_settle", lambda *args: None)  # killed right after the exchange
    maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    monkeypatch.undo()
    [old] = [p for p in (tmp_path / ".staging").glob("compact-*") if p.is_dir()]
    earlier.unlink()  # the earlier merged file (linked in the old folder too) merged away since, say
    dead = _dead_pid()
    for path in (old, old.with_name(old.name + ".json")):
        path.rename(path.with_name(path.name.replace(f"compact-{os.getpid()}-", f"compact-{dead}-")))
    finish_interrupted(tmp_path)
    assert (len(_files(tmp_path)), len(_power_rows(tmp_path))) == (1, 3)


def test_a_merge_that_died_before_its_exchange_leaves_the_partition_as_it_was(tmp_path, monkeypatch):
    _flushes(tmp_path, 3)
    before = _files(tmp_path)

    def killed(a, b):
        raise SystemExit  # stands for kill -9: nothing after this runs in the real case
    monkeypatch.setattr(compact, "exchange", killed)
    monkeypatch.setattr(compact, "even_if_interrupted", lambda step, *args: None)
    with pytest.raises(SystemExit):
        maybe_compact(tmp_path / PARTITION, tmp_path / ".staging", parts_at=3)
    monkeypatch.undo()
    [upcoming] = [p for p in (tmp_path / ".staging").glob("compact-*") if p.is_dir()]
    dead = _dead_pid()
    for path in (upcoming, upcoming.with_name(upcoming.name + ".json")):
        path.rename(path.with_name(path.name.replace(f"compact-{os.getpid()}-", f"compact-{dead}-")))
    finish_interrupted(tmp_path)
    assert (_files(tmp_path), len(_power_rows(tmp_path))) == (before, 6)
    assert list((tmp_path / ".staging").glob("compact-*")) == []


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)
