"""gpulens.collector.compact: a partition's flush files merged into few big ones."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
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


def test_a_merge_stopped_while_it_removes_its_inputs_still_removes_them_all(tmp_path, monkeypatch):
    # Stopped halfway, the merged file and the inputs left beside it would
    # both be read until the next writer's finish_interrupted.
    _flushes(tmp_path, 3)
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
