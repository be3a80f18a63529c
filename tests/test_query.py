"""`gpulens query`: views over the dataset, formats and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.dataset import TABLES, open_dataset
from collector.schema import TRACE_SCHEMAS, TELEMETRY_SCHEMA
from collector.writer import DatasetWriter
from conftest import write_trace_table

REPO_ROOT = Path(__file__).resolve().parents[1]


def _gpulens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dashboard.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    writer = DatasetWriter(tmp_path, "node-a")
    for k in range(3):
        for gpu in (0, 1):
            writer.add("telemetry", {"ts": 1_767_225_600_000_000 + k * 1_000_000, "gpu_index": gpu, "gpu_uuid": f"GPU-{gpu}",
                                     "vendor": "sim", "power_w": 300.0 + 100 * gpu + k})
    writer.flush()
    for rank in (0, 3):
        write_trace_table(tmp_path, "job-1", "kernels", {
            "run": ["job-1", "job-1"], "rank": [rank, rank], "name": ["gemm", "ncclDevKernel_AllReduce"],
            "category": ["compute", "communication"], "kind": ["kernel", "kernel"],
            "start_ns": [0, 100], "end_ns": [50, 400], "dur_ns": [50, 300],
        }, source=f"rank{rank}")
    return tmp_path


def test_views_expose_run_and_rank_as_ordinary_columns(dataset):
    con = open_dataset(dataset)
    rows = con.execute("select rank, sum(dur_ns) from kernels where run = 'job-1' group by rank order by rank").fetchall()
    assert rows == [(0, 350), (3, 350)]


def test_table_without_files_is_an_empty_view_with_the_contract_columns(tmp_path):
    con = open_dataset(tmp_path)
    for table in TABLES:
        assert con.execute(f"select count(*) from {table}").fetchone()[0] == 0
    columns = [c[0] for c in con.execute("describe collectives").fetchall()]
    assert columns == TRACE_SCHEMAS["collectives"].names
    columns = [c[0] for c in con.execute("describe telemetry").fetchall()]
    assert columns == TELEMETRY_SCHEMA.names


def test_query_json_prints_one_array_of_row_objects(dataset):
    result = _gpulens("query", str(dataset), "select gpu_index, max(power_w) as max_power_w from telemetry group by 1 order by 1", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"gpu_index": 0, "max_power_w": 302.0}, {"gpu_index": 1, "max_power_w": 402.0}]


def test_query_csv_has_a_header_row(dataset):
    result = _gpulens("query", str(dataset), "select gpu_index, count(*) as samples from telemetry group by 1 order by 1", "--format", "csv")
    assert result.stdout.splitlines() == ["gpu_index,samples", "0,3", "1,3"]


def test_query_table_prints_aligned_rows_and_a_count(dataset):
    result = _gpulens("query", str(dataset), "select rank, count(*) as kernels from kernels group by 1 order by 1")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["rank", "kernels"]
    assert lines[2].split() == ["0", "2"] and lines[-1] == "(2 rows)"


def test_query_json_writes_a_time_difference_as_duckdb_does(dataset):
    result = _gpulens("query", str(dataset), "select gpu_index, max(ts) - min(ts) as span from telemetry group by 1 order by 1", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"gpu_index": 0, "span": "00:00:02"}, {"gpu_index": 1, "span": "00:00:02"}]


@pytest.mark.parametrize("interval", [
    "interval 90 minute", "interval 1500 millisecond", "interval 14 month + interval 3 day + interval 4 hour",
    "interval 0 second", "-interval 5 second", "interval 1 year - interval 2 day", "-interval 14 month",
    "interval 1 day", "interval 25 hour", "interval 1 microsecond",
])
def test_interval_text_matches_duckdbs_own(interval):
    import duckdb

    from analysis.cli import interval_text

    value, text = duckdb.sql(f"select {interval} as v, v::varchar").arrow().read_all().to_pylist()[0].values()
    assert interval_text(value) == text


def test_bad_sql_gives_duckdb_message_on_one_line_and_exit_2(dataset):
    result = _gpulens("query", str(dataset), "select nosuchcolumn from telemetry")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuchcolumn" in lines[0] and lines[0].startswith("gpulens: error: SQL error:")


def test_missing_dataset_names_the_path(tmp_path):
    result = _gpulens("query", str(tmp_path / "nope"), "select 1")
    assert result.returncode != 0
    assert result.stderr.strip() == f"gpulens: error: {tmp_path / 'nope'}: no such dataset directory"
