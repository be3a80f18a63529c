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


def _query(capsys, dataset: Path, sql: str, output_format: str = "table") -> tuple[int, str, str]:
    from dashboard import cli

    code = cli.main(["query", str(dataset), sql, "--format", output_format])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_query_keeps_a_joins_two_columns_of_one_name_apart(tmp_path, capsys):
    sql = "select 'gemm' as name, 50 as dur_ns, 'cudaLaunchKernel' as name, 4 as dur_ns"
    assert _query(capsys, tmp_path, sql, "csv")[1] == "name,dur_ns,name,dur_ns\ngemm,50,cudaLaunchKernel,4\n"
    assert json.loads(_query(capsys, tmp_path, sql, "json")[1]) == [
        {"name": "gemm", "dur_ns": 50, "name_1": "cudaLaunchKernel", "dur_ns_1": 4}]


def test_query_csv_writes_every_digit_of_a_double(tmp_path, capsys):
    assert _query(capsys, tmp_path, "select 8859630.123456::double as energy_j", "csv")[1] == "energy_j\n8859630.123456\n"


def test_query_json_keeps_a_sum_beyond_64_bits_an_exact_integer(tmp_path, capsys):
    sql = "select sum(x) as total_ns from (values (3995705045432082993983::hugeint), (1::hugeint)) t(x)"
    assert _query(capsys, tmp_path, sql, "json")[1] == '[{"total_ns":3995705045432082993984}]\n'


def test_query_json_keeps_a_sum_of_bigints_an_integer(tmp_path, capsys):
    assert _query(capsys, tmp_path, "select sum(x) as s from (values (1::bigint), (2::bigint)) t(x)", "json")[1] == '[{"s":3}]\n'


def test_query_refuses_a_statement_that_writes_files(dataset, capsys):
    target = dataset / "out.csv"
    code, out, err = _query(capsys, dataset, f"copy (select * from kernels) to '{target}'")
    assert (code, out, target.exists()) == (2, "", False)
    assert err == ("gpulens: error: SQL error: COPY statements are not run: gpulens query only reads the dataset "
                   "(write results with --format csv or json)\n")


def test_query_runs_one_query_at_a_time(tmp_path, capsys):
    assert _query(capsys, tmp_path, "select 1; select 2")[::2] == (2, "gpulens: error: SQL error: one query at a time (2 given)\n")


def test_query_runs_settings_before_its_query(tmp_path, capsys):
    assert _query(capsys, tmp_path, "set threads = 1; select 2 as b", "csv")[:2] == (0, "b\n2\n")


def test_query_may_start_with_a_sql_comment(tmp_path, capsys):
    assert _query(capsys, tmp_path, "-- the answer\nselect 42 as answer", "csv")[:2] == (0, "answer\n42\n")
