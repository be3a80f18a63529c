import datetime as dt
import os

import duckdb
import pyarrow.parquet as pq
import pytest

from gpulens.collector.errors import DatasetError
from gpulens.collector.schema import TELEMETRY_METRICS
from gpulens.collector.parquet_io import new_temporary_file
from gpulens.collector.writer import STAGING_DIR, DatasetWriter, TableBuffer, sweep_staging

MIDNIGHT_US = int(dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)


def _row(ts_us: int, gpu: int, power_w: float | None = 400.0) -> dict:
    return {"ts": ts_us, "gpu_index": gpu, "gpu_uuid": f"GPU-{gpu}", "vendor": "sim", "power_w": power_w}


def test_flush_writes_hive_partitioned_files_readable_by_duckdb(tmp_path):
    writer = DatasetWriter(tmp_path, "node-a")
    for k in range(10):
        writer.add("telemetry", _row(MIDNIGHT_US + k * 1_000_000, 0))
    [path] = writer.flush()
    assert path.parent == tmp_path / "telemetry" / "host=node-a" / "date=2026-03-01"
    rows = duckdb.connect().execute(f"select count(*), min(host), sum(power_w) from '{path}'").fetchone()
    assert rows == (10, "node-a", 4000.0)


def test_flush_splits_rows_at_utc_midnight(tmp_path):
    writer = DatasetWriter(tmp_path, "node-a")
    writer.add("telemetry", _row(MIDNIGHT_US - 1_000_000, 0))
    writer.add("telemetry", _row(MIDNIGHT_US, 0))
    paths = writer.flush()
    assert sorted(p.parent.name for p in paths) == ["date=2026-02-28", "date=2026-03-01"]


def test_missing_metric_is_written_as_null_not_zero(tmp_path):
    writer = DatasetWriter(tmp_path, "n")
    writer.add("telemetry", _row(MIDNIGHT_US, 0, power_w=None))
    [path] = writer.flush()
    table = pq.read_table(path)
    assert table["power_w"].to_pylist() == [None]
    assert table["sm_clock_mhz"].to_pylist() == [None]


def test_flush_keeps_rows_in_arrival_order(tmp_path):
    writer = DatasetWriter(tmp_path, "n")
    for k in (0, 1, 2):
        for gpu in (1, 0):
            writer.add("telemetry", _row(MIDNIGHT_US + k, gpu))
    [path] = writer.flush()
    table = pq.read_table(path)
    assert table["gpu_index"].to_pylist() == [1, 0, 1, 0, 1, 0]
    assert [t.value for t in table["ts"]] == [MIDNIGHT_US, MIDNIGHT_US, MIDNIGHT_US + 1, MIDNIGHT_US + 1, MIDNIGHT_US + 2, MIDNIGHT_US + 2]


def test_rows_converted_in_chunks_read_back_whole(tmp_path, monkeypatch):
    # Rows become Arrow batches every CHUNK_ROWS; a flush joins them with the rest.
    monkeypatch.setattr(TableBuffer, "CHUNK_ROWS", 4)
    writer = DatasetWriter(tmp_path, "n")
    for k in range(10):
        writer.add("telemetry", _row(MIDNIGHT_US + k, k % 2))
    assert writer.buffered_rows() == 10
    [path] = writer.flush()
    table = pq.read_table(path)
    assert [t.value for t in table["ts"]] == [MIDNIGHT_US + k for k in range(10)]
    assert table["host"].to_pylist() == ["n"] * 10
    assert writer.buffered_rows() == 0


def test_a_row_without_every_metric_key_is_null_where_it_has_none(tmp_path):
    writer = DatasetWriter(tmp_path, "n")
    # Every metric key (the cheap case) beside a row with only some.
    writer.add("telemetry", {**dict.fromkeys(TELEMETRY_METRICS), **_row(MIDNIGHT_US, 0), "temp_c": 41.0})
    writer.add("telemetry", _row(MIDNIGHT_US, 1, power_w=350.0))
    [path] = writer.flush()
    table = pq.read_table(path)
    assert table["power_w"].to_pylist() == [400.0, 350.0]
    assert table["temp_c"].to_pylist() == [41.0, None]


def test_failed_flush_keeps_rows_for_the_next_try(tmp_path):
    writer = DatasetWriter(tmp_path, "n")
    writer.add("telemetry", _row(MIDNIGHT_US, 0))
    blocker = tmp_path / "telemetry"
    blocker.write_text("not a directory")  # the partition folder cannot be made
    with pytest.raises(DatasetError, match="cannot write"):
        writer.flush()
    assert writer.buffered_rows("telemetry") == 1
    blocker.unlink()
    assert len(writer.flush()) == 1
    assert writer.buffered_rows("telemetry") == 0


def test_unwritable_root_is_one_clear_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(DatasetError, match=str(not_a_dir / "sub")):
        DatasetWriter(not_a_dir / "sub", "n")


def test_leftover_temporary_files_are_swept_on_start(tmp_path):
    staging = tmp_path / STAGING_DIR
    staging.mkdir()
    (staging / "part-1.parquet.123.tmp").write_bytes(b"PAR1 half")
    DatasetWriter(tmp_path, "n")
    assert list(staging.glob("*.tmp")) == []
    assert sweep_staging(tmp_path) == 0


def test_a_new_temporary_file_has_the_mode_of_any_new_file_not_mkstemps(tmp_path):
    previous = os.umask(0o027)
    try:
        temporary = new_temporary_file(tmp_path, prefix=".runs-")
    finally:
        os.umask(previous)
    assert (temporary.parent, temporary.name.startswith(".runs-"), oct(temporary.stat().st_mode & 0o777)) == (
        tmp_path, True, "0o640")
