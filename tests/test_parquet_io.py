"""gpulens.collector.parquet_io: the files pyarrow.parquet would write and read,
without importing it (nor, through it, S3, GCS, Azure and OpenSSL)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpulens.collector import parquet_io
from gpulens.collector.parquet_io import trace_parquet_options
from gpulens.collector.schema import TRACE_SCHEMAS


def kernels_table() -> pa.Table:
    return pa.table({
        "run": ["r", "r", "r"],
        "rank": [0, 0, 1],
        "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "sm90_xmma_gemm_bf16", None],
        "start_ns": [1_700_000_000_000_000_000, 1_700_000_000_000_400_000, 1_700_000_000_001_000_000],
        "dur_ns": [12_500, 30_002, None],
        "grid": [[4, 1, 1], [132, 1, 1], None],
    })


def test_write_table_gives_the_bytes_pyarrow_parquet_writes(tmp_path: Path) -> None:
    table = kernels_table()
    pq.write_table(table, tmp_path / "pq.parquet", **trace_parquet_options(table.schema))
    parquet_io.write_table(table, tmp_path / "io.parquet", **trace_parquet_options(table.schema))
    assert (tmp_path / "io.parquet").read_bytes() == (tmp_path / "pq.parquet").read_bytes()


def test_write_table_with_no_options_gives_pyarrow_parquets_defaults(tmp_path: Path) -> None:
    table = TRACE_SCHEMAS["runs"].empty_table()
    pq.write_table(table, tmp_path / "pq.parquet")
    parquet_io.write_table(table, tmp_path / "io.parquet")
    assert (tmp_path / "io.parquet").read_bytes() == (tmp_path / "pq.parquet").read_bytes()


def test_write_table_to_an_open_file_gives_the_bytes_pyarrow_parquet_writes(tmp_path: Path) -> None:
    table = kernels_table()
    with open(tmp_path / "pq.parquet", "wb") as handle:
        pq.write_table(table, handle, compression="zstd")
    with open(tmp_path / "io.parquet", "wb") as handle:
        parquet_io.write_table(table, handle, compression="zstd")
    assert (tmp_path / "io.parquet").read_bytes() == (tmp_path / "pq.parquet").read_bytes()


def test_write_tables_writes_each_table_as_a_row_group_as_parquet_writer_does(tmp_path: Path) -> None:
    parts = [kernels_table().slice(0, 2), kernels_table().slice(2, 0), kernels_table().slice(2)]
    with pq.ParquetWriter(tmp_path / "pq.parquet", parts[0].schema, compression="zstd") as writer:
        for part in parts:
            writer.write_table(part, row_group_size=max(1, part.num_rows))
    parquet_io.write_tables(iter(parts), tmp_path / "io.parquet", parts[0].schema, compression="zstd")
    assert (tmp_path / "io.parquet").read_bytes() == (tmp_path / "pq.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "io.parquet").num_row_groups == 3


def test_a_pyarrow_whose_writer_takes_other_arguments_writes_through_pyarrow_parquet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def later_release(*args, **options):
        raise TypeError("__cinit__() got an unexpected keyword argument 'writer_engine_version'")

    monkeypatch.setattr(parquet_io, "ParquetWriter", later_release)
    table = kernels_table()
    pq.write_table(table, tmp_path / "pq.parquet", **trace_parquet_options(table.schema))
    parquet_io.write_table(table, tmp_path / "io.parquet", **trace_parquet_options(table.schema))
    assert (tmp_path / "io.parquet").read_bytes() == (tmp_path / "pq.parquet").read_bytes()


def test_a_write_that_fails_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(pa.ArrowException, match="Unsupported compression"):
        parquet_io.write_table(kernels_table(), tmp_path / "t.parquet", compression="nope")
    assert list(tmp_path.iterdir()) == []


def test_read_table_reads_the_columns_asked_for_as_parquet_file_does(tmp_path: Path) -> None:
    pq.write_table(kernels_table(), tmp_path / "t.parquet")
    read = parquet_io.read_table(tmp_path / "t.parquet", ["grid", "name"])
    assert read.equals(pq.ParquetFile(tmp_path / "t.parquet").read(columns=["grid", "name"]))
    assert read.column_names == ["grid", "name"]


def test_read_table_of_a_column_the_file_lacks_names_it(tmp_path: Path) -> None:
    pq.write_table(kernels_table(), tmp_path / "t.parquet")
    with pytest.raises(KeyError, match="host"):
        parquet_io.read_table(tmp_path / "t.parquet", ["host"])


def test_read_schema_gives_pyarrow_parquets_schema_with_its_metadata(tmp_path: Path) -> None:
    table = kernels_table().replace_schema_metadata({"gpulens.sources": '["a.parquet"]'})
    pq.write_table(table, tmp_path / "t.parquet")
    schema = parquet_io.read_schema(tmp_path / "t.parquet")
    assert schema.equals(pq.read_schema(tmp_path / "t.parquet"), check_metadata=True)
    assert schema.metadata[b"gpulens.sources"] == b'["a.parquet"]'


def test_row_groups_reads_each_row_group_in_order(tmp_path: Path) -> None:
    pq.write_table(kernels_table(), tmp_path / "t.parquet", row_group_size=2)
    assert [group.num_rows for group in parquet_io.row_groups(tmp_path / "t.parquet")] == [2, 1]
    assert pa.concat_tables(parquet_io.row_groups(tmp_path / "t.parquet")).equals(kernels_table())


def test_row_groups_of_an_unreadable_file_raises_at_the_first_group(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_bytes(b"PAR1 not a footer")
    groups = parquet_io.row_groups(tmp_path / "t.parquet")
    with pytest.raises(pa.ArrowInvalid):
        next(groups)


def test_a_pyarrow_without_the_compiled_reader_reads_through_pyarrow_parquet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = kernels_table().replace_schema_metadata({"gpulens.sources": "[]"})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=2)
    expected_schema = pq.read_schema(tmp_path / "t.parquet")
    monkeypatch.setattr(parquet_io, "ParquetReader", None)
    assert parquet_io.read_table(tmp_path / "t.parquet", ["grid", "name"]).equals(table.select(["grid", "name"]))
    assert parquet_io.read_schema(tmp_path / "t.parquet").equals(expected_schema, check_metadata=True)
    assert [group.num_rows for group in parquet_io.row_groups(tmp_path / "t.parquet")] == [2, 1]


def test_files_go_through_pyarrows_compiled_writer_and_reader_not_the_fallback() -> None:
    # Fails when a pyarrow release moves `pyarrow._parquet`'s classes: users
    # then get pyarrow.parquet (the fallback, same files, its import's cost),
    # and parquet_io's docstring and its measured gain need looking at again.
    assert parquet_io.ParquetWriter is not None and parquet_io.ParquetReader is not None
