"""`gpulens query`: views over the dataset, formats and errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.tables import TABLES
from gpulens.collector.schema import TRACE_SCHEMAS, TELEMETRY_SCHEMA
from gpulens.collector.writer import DatasetWriter
from conftest import write_trace_table

REPO_ROOT = Path(__file__).resolve().parents[1]


def _gpulens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


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

    from gpulens.analysis.cli import interval_text

    value, text = duckdb.sql(f"select {interval} as v, v::varchar").arrow().read_all().to_pylist()[0].values()
    assert interval_text(value) == text


def test_query_writes_every_row_before_it_ends(dataset):
    # Its output, more than a pipe's buffer, must all be flushed before it ends.
    result = _gpulens("query", str(dataset), "select range as i from range(200000)", "--format", "csv")
    lines = result.stdout.splitlines()
    assert (result.returncode, len(lines), lines[1], lines[-1]) == (0, 200_001, "0", "199999")


def test_bad_sql_gives_duckdb_message_on_one_line_and_exit_2(dataset):
    result = _gpulens("query", str(dataset), "select nosuchcolumn from telemetry")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuchcolumn" in lines[0] and lines[0].startswith("gpulens: error: SQL error:")


def test_a_typo_in_a_table_name_suggests_gpulens_tables_and_views(dataset, capsys):
    assert _query(capsys, dataset, "select * from telemetri") == (2, "", (
        "gpulens: error: SQL error: Catalog Error: Table with name telemetri does not exist! "
        "Did you mean 'telemetry', 'host_telemetry' or 'telemetry_timeline'?\n"))


def test_a_typo_in_an_analysis_name_suggests_the_analysis(dataset, capsys):
    assert _query(capsys, dataset, "select * from strangler")[2].endswith("Did you mean 'stragglers'?\n")


def test_a_name_like_no_gpulens_name_points_to_the_help(dataset, capsys):
    assert _query(capsys, dataset, "select * from xyzzy")[2].endswith(
        "does not exist! gpulens query --help lists the tables and views.\n")


def test_missing_dataset_names_the_path(tmp_path):
    result = _gpulens("query", str(tmp_path / "nope"), "select 1")
    assert result.returncode != 0
    assert result.stderr.strip() == f"gpulens: error: {tmp_path / 'nope'}: no such dataset directory"


def test_a_folder_of_trace_files_is_not_queried_as_an_empty_dataset(tmp_path):
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(b"")
    result = _gpulens("query", str(tmp_path), "select count(*) from kernels")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"gpulens: error: {tmp_path}: holds trace files (rank0.pt.trace.json.gz, ...), not a dataset: "
        f"ingest them first (gpulens ingest {tmp_path} --out DATASET) and query DATASET")


def test_an_empty_folder_is_an_empty_dataset(tmp_path):
    result = _gpulens("query", str(tmp_path), "select count(*) as n from kernels", "--format", "csv")
    assert (result.returncode, result.stdout.split()) == (0, ["n", "0"])


def _query(capsys, dataset: Path, sql: str, output_format: str = "table") -> tuple[int, str, str]:
    from gpulens.dashboard import cli

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


def test_query_csv_writes_booleans_lists_and_structs_as_duckdb_does(tmp_path, capsys):
    sql = ("select true as ok, [1, null] as ids, {'a': 1, 'b': null} as s, ['x y', null, 'it''s'] as names, "
           "map {'k': [1.5]} as m, null::int[] as none")
    assert _query(capsys, tmp_path, sql, "csv")[1] == (
        "ok,ids,s,names,m,none\n"
        """true,"[1, NULL]","{'a': 1, 'b': NULL}","[x y, NULL, 'it\\'s']",{k=[1.5]},\n""")


def test_query_table_writes_nested_values_as_duckdb_does_and_null_as_nothing(tmp_path, capsys):
    sql = "select false as ok, [1, null] as ids, {'a': 1, 'b': null} as s, null::int[] as none, 42 as n"
    assert _query(capsys, tmp_path, sql)[1] == (
        "ok     ids        s                    none  n\n"
        "-----  ---------  -------------------  ----  --\n"
        "false  [1, NULL]  {'a': 1, 'b': NULL}        42\n"
        "(1 row)\n")


def test_query_json_keeps_booleans_lists_and_structs_json(tmp_path, capsys):
    sql = "select true as ok, [1, null] as ids, {'a': 1, 'b': null} as s, null::int[] as none"
    assert _query(capsys, tmp_path, sql, "json")[1] == '[{"ok":true,"ids":[1,null],"s":{"a":1,"b":null},"none":null}]\n'


def _query_args(capsys, dataset: Path, *args: str) -> tuple[int, str, str]:
    from gpulens.dashboard import cli

    code = cli.main(["query", str(dataset), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_query_table_cuts_long_values_to_max_width(tmp_path, capsys):
    sql = "select 7 as rank, repeat('x', 5000) as stack, 'gemm' as name"
    assert _query_args(capsys, tmp_path, sql, "--max-width", "40")[1] == (  # 4 + 2 + 28 + 2 + 4
        "rank  stack                         name\n"
        "----  ----------------------------  ----\n"
        "   7  " + "x" * 27 + "…  gemm\n"
        "(1 row)\n")


def test_query_table_aligns_wide_characters_by_their_terminal_width(tmp_path, capsys):
    # A CJK range name takes two terminal columns per character.
    sql = "select * from (values ('前向传播', 12), ('optimizer', 3)) as t(name, n)"
    assert _query(capsys, tmp_path, sql)[1] == (
        "name       n\n"
        "---------  --\n"
        "前向传播   12\n"
        "optimizer   3\n"
        "(2 rows)\n")


def test_query_table_cuts_wide_characters_within_max_width(tmp_path, capsys):
    sql = "select 1 as n, repeat('前', 30) as name"
    lines = _query_args(capsys, tmp_path, sql, "--max-width", "20")[1].splitlines()
    assert lines[2] == "1  " + "前" * 8 + "…"  # 1 + 2 + 16 + 1 columns


def test_query_table_shows_first_and_last_rows_with_max_rows(tmp_path, capsys):
    sql = "select range as step, range * 10 as dur_ns from range(2000)"
    assert _query_args(capsys, tmp_path, sql, "--max-rows", "4")[1] == (
        "step  dur_ns\n"
        "----  ------\n"
        "   0       0\n"
        "   1      10\n"
        "…     …\n"
        "1998   19980\n"
        "1999   19990\n"
        "(2,000 rows, 4 shown; --format csv or json for all)\n")


def test_query_table_writes_every_row_in_full_into_a_file_or_pipe(tmp_path, capsys):
    out = _query(capsys, tmp_path, "select range as i, repeat('x', 5000) as stack from range(100)")[1]
    lines = out.splitlines()
    assert (len(lines), lines[2], lines[101], lines[-1]) == (103, " 0  " + "x" * 5000, "99  " + "x" * 5000, "(100 rows)")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_query_table_fits_a_terminal_by_default(tmp_path, monkeypatch):
    from gpulens.dashboard import cli

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "30")
    assert cli.main(["query", str(tmp_path), "select range as i, repeat('ab', 50) as s from range(100)"]) == 0
    cut = "ab" * 12 + "a…"  # 30 columns: 2 for i, 2 between, 26 for s
    lines = terminal.getvalue().splitlines()
    assert lines == ["i   s", "--  " + "-" * 26, *(f"{i:2}  {cut}" for i in range(20)), "…   …",
                     *(f"{i:2}  {cut}" for i in range(80, 100)), "(100 rows, 40 shown; --format csv or json for all)"]


def test_query_table_gives_an_explain_plan_as_many_lines(tmp_path, capsys):
    out = _query(capsys, tmp_path, "explain select 42 as answer")[1]
    assert ("\\n" in out, len(out.splitlines()) > 5, out.splitlines()[0].split()) == (False, True, ["explain_key", "explain_value"])


def test_query_table_shows_a_newline_in_a_value_as_an_escape(tmp_path, capsys):
    sql = "select 'physical_plan' as key, 'Projection' || chr(10) || '  Dummy Scan' as plan, 1 as n"
    assert _query(capsys, tmp_path, sql)[1] == (
        "key            plan                      n\n"
        "-------------  ------------------------  -\n"
        "physical_plan  Projection\\n  Dummy Scan  1\n"
        "(1 row)\n")


def test_query_writes_rows_across_batches_as_one_result(tmp_path, capsys, monkeypatch):
    import gpulens.analysis.dataset
    import gpulens.analysis.tables

    monkeypatch.setattr(gpulens.analysis.dataset, "STREAM_BATCH_ROWS", 2)
    sql = "select range as step, range % 2 = 0 as even from range(5)"
    assert _query(capsys, tmp_path, sql, "json")[1] == (
        '[{"step":0,"even":true},{"step":1,"even":false},{"step":2,"even":true},'
        '{"step":3,"even":false},{"step":4,"even":true}]\n')
    assert _query(capsys, tmp_path, sql, "csv")[1] == "step,even\n0,true\n1,false\n2,true\n3,false\n4,true\n"
    assert _query_args(capsys, tmp_path, sql, "--max-rows", "3")[1] == (
        "step  even\n----  -----\n   0  true\n   1  false\n…     …\n   4  true\n"
        "(5 rows, 3 shown; --format csv or json for all)\n")


def test_stream_sql_gives_batches_of_the_size_asked(tmp_path):
    from gpulens.analysis.dataset import stream_sql

    reader = stream_sql(open_dataset(tmp_path, with_analyses=False), "select range as i from range(10)", rows_per_batch=4)
    assert [batch.column(0).to_pylist() for batch in reader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


class _Pauses:
    """Stands in for `time` in analysis.dataset: records each pause between
    tries and runs `then` at the first (a file coming back meanwhile)."""

    def __init__(self, then=None):
        self.seconds: list[float] = []
        self.then = then

    def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)
        if self.then is not None:
            self.then()
            self.then = None


def _telemetry_file_away(dataset: Path, monkeypatch, back_at_first_pause: bool) -> _Pauses:
    """Move the dataset's one telemetry file out of its table, as a merge
    removes the files it merged; put it back at the first pause if asked."""
    import gpulens.analysis.dataset
    import gpulens.analysis.tables

    (path,) = dataset.glob("telemetry/**/*.parquet")
    away = dataset / "away.parquet"
    path.rename(away)
    pauses = _Pauses(then=(lambda: away.rename(path)) if back_at_first_pause else None)
    monkeypatch.setattr(gpulens.analysis.tables, "time", pauses)
    return pauses


def test_run_sql_runs_again_when_a_file_vanishes_while_it_runs(dataset, monkeypatch):
    from gpulens.analysis.dataset import run_sql

    con = open_dataset(dataset, with_analyses=False)
    pauses = _telemetry_file_away(dataset, monkeypatch, back_at_first_pause=True)
    assert run_sql(con, "select count(*) as samples from telemetry").to_pylist() == [{"samples": 6}]
    assert pauses.seconds == [0.1]


def test_stream_sql_runs_again_when_a_file_vanishes_before_its_first_rows(dataset, monkeypatch):
    from gpulens.analysis.dataset import stream_sql

    con = open_dataset(dataset, with_analyses=False)
    pauses = _telemetry_file_away(dataset, monkeypatch, back_at_first_pause=True)
    assert stream_sql(con, "select gpu_index from telemetry order by ts, gpu_index").read_all().column(0).to_pylist() == [0, 1] * 3
    assert pauses.seconds == [0.1]


def test_run_analysis_runs_again_when_a_file_vanishes_while_it_runs(dataset, monkeypatch):
    from gpulens.analysis.registry import run_analysis

    con = open_dataset(dataset, analyses_on_demand=True)  # the view too is made while the file is away
    pauses = _telemetry_file_away(dataset, monkeypatch, back_at_first_pause=True)
    assert run_analysis(con, "node_power").select("host", "gpus", "ticks").rows() == [("node-a", 2, 3)]
    assert pauses.seconds == [0.1]


def test_dataset_summary_counts_again_when_a_file_vanishes_while_it_counts(dataset, monkeypatch):
    from gpulens.analysis.dataset import dataset_summary

    con = open_dataset(dataset, with_analyses=False)
    pauses = _telemetry_file_away(dataset, monkeypatch, back_at_first_pause=True)
    assert (dataset_summary(con)["telemetry"], pauses.seconds) == (6, [0.1])


def test_run_analysis_names_a_file_that_stays_missing_not_its_sql(dataset, monkeypatch):
    from gpulens.analysis.registry import run_analysis
    from gpulens.collector.errors import QueryError

    con = open_dataset(dataset, analyses_on_demand=True)
    pauses = _telemetry_file_away(dataset, monkeypatch, back_at_first_pause=False)
    with pytest.raises(QueryError) as raised:
        run_analysis(con, "node_power")
    assert str(raised.value) == f"{dataset.resolve()}/telemetry/**/*.parquet: no file matches (tried 3 times)"
    assert pauses.seconds == [0.1, 0.2]


def test_query_names_a_file_that_stays_missing_on_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import gpulens.analysis.dataset
    import gpulens.analysis.tables

    monkeypatch.setattr(gpulens.analysis.tables, "time", _Pauses())
    missing = tmp_path / "telemetry" / "part-1.parquet"
    code, out, err = _query(capsys, tmp_path, f"select * from read_parquet('{missing}')", "csv")
    assert (code, out, err) == (2, "", f"gpulens: error: {missing}: no file matches (tried 3 times)\n")


class _MergedAwayOnce:
    """A connection whose first query fails as DuckDB fails when a collector
    removes a flush file the query had listed (collector/compact.py)."""

    def __init__(self, con, path: Path):
        self._con, self._path, self.failures = con, path, 0

    def sql(self, sql: str):
        import duckdb

        if not self.failures:
            self.failures += 1
            raise duckdb.IOException(f'IO Error: Cannot open file "{self._path}": No such file or directory')
        return self._con.sql(sql)

    def __getattr__(self, name: str):
        return getattr(self._con, name)


def test_query_runs_again_when_a_merge_removes_a_file_it_listed(dataset, capsys, monkeypatch):
    import gpulens.analysis.dataset
    import gpulens.analysis.tables

    opened: list[_MergedAwayOnce] = []

    def open_merging(path, **options):
        opened.append(_MergedAwayOnce(open_dataset(path, **options), path / "telemetry" / "part-1.parquet"))
        return opened[0]

    monkeypatch.setattr(gpulens.analysis.dataset, "open_dataset", open_merging)
    monkeypatch.setattr(gpulens.analysis.tables, "time", pauses := _Pauses())
    code, out, err = _query(capsys, dataset, "select gpu_index, count(*) as samples from telemetry group by 1 order by 1", "csv")
    assert (code, out, err, opened[0].failures, pauses.seconds) == (0, "gpu_index,samples\n0,3\n1,3\n", "", 1, [0.1])


def test_query_does_not_run_a_failing_statement_again(tmp_path, capsys, monkeypatch):
    import gpulens.analysis.dataset
    import gpulens.analysis.tables

    monkeypatch.setattr(gpulens.analysis.tables, "time", pauses := _Pauses())
    code, _, err = _query(capsys, tmp_path, "select nosuchcolumn from telemetry")
    assert (code, err.startswith("gpulens: error: SQL error: Binder Error"), pauses.seconds) == (2, True, [])


def test_query_into_a_reader_that_stops_early_exits_0_quietly() -> None:
    # `gpulens query ... | head -1`: the reader closes the pipe after a line.
    process = subprocess.Popen(
        [sys.executable, "-m", "gpulens.dashboard.cli", "query", str(REPO_ROOT / "sample_traces" / "demo-training"),
         "select * from kernels", "--format", "csv"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    header = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read()
    assert (header.startswith(b"run,rank,"), process.wait(timeout=120), stderr) == (True, 0, b"")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("output_format", ["csv", "json", "table"])
def test_query_into_a_full_disk_is_one_error_line_and_exit_1(output_format) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "gpulens.dashboard.cli", "query", str(REPO_ROOT / "sample_traces" / "demo-training"),
             "select * from kernels", "--format", output_format],
            cwd=REPO_ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (1, "gpulens: error: cannot write to standard output (No space left on device)\n")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_short_query_result_into_a_full_disk_is_one_error_line_too(tmp_path) -> None:
    # A line stays buffered until the end: the write that fails is the last flush.
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "query", str(tmp_path), "select 42 as answer", "--format", "csv"],
                                cwd=REPO_ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                                env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    assert (result.returncode, result.stderr) == (1, "gpulens: error: cannot write to standard output (No space left on device)\n")


def test_query_reads_an_analysis_view_it_names(dataset, capsys):
    code, out, err = _query(capsys, dataset, "select rank, name, kernel_count, total_ns from kernel_stats order by rank, name", "csv")
    assert (code, out, err) == (0, "rank,name,kernel_count,total_ns\n0,gemm,1,50\n0,ncclDevKernel_AllReduce,1,300\n"
                                   "3,gemm,1,50\n3,ncclDevKernel_AllReduce,1,300\n", "")


def test_query_binds_only_the_analysis_views_its_sql_names(dataset, capsys, monkeypatch):
    # Binding a view reads every file of its tables: 45 of them took 1.8 s
    # of a query over 200 ranks that needed none.
    from gpulens.analysis import registry

    created = []
    create = registry._create_view
    monkeypatch.setattr(registry, "_create_view", lambda con, analysis: (created.append(analysis.name), create(con, analysis)))
    assert _query(capsys, dataset, "select count(*) from kernels")[0] == 0
    assert created == []
    assert _query(capsys, dataset, "select count(*) from KERNEL_STATS")[0] == 0
    assert created == ["kernel_stats"]


def test_query_of_the_catalogue_lists_every_analysis_view(dataset, capsys):
    from gpulens.analysis.registry import load_analyses

    code, out, _ = _query(capsys, dataset, "select view_name from duckdb_views() where not internal", "csv")
    assert code == 0
    assert set(load_analyses()) <= set(out.splitlines()[1:])


def test_gpulens_query_loads_neither_polars_nor_the_dashboard(dataset):
    # The query writes rows itself: polars, plotly and Streamlit are 0.5 s
    # of imports it does not need.
    program = ("import sys; from gpulens.dashboard.cli import main; code = main(sys.argv[1:]); "
               "print(sorted({m.split('.')[0] for m in sys.modules} & {'polars', 'streamlit', 'plotly'}), code)")
    result = subprocess.run([sys.executable, "-c", program, "query", str(dataset), "select name, null as nothing from kernels"],
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.stdout.strip().splitlines()[-1] == "[] 0"


def test_query_opens_only_the_tables_its_sql_reads(dataset, capsys):
    # Opening a table reads the footer of each of its files: over 2,000 rank
    # files a table, ten tables took 5 s of a 5.7 s count of kernels. So a
    # broken telemetry file does not stop a query of kernels.
    next((dataset / "telemetry").rglob("*.parquet")).write_bytes(b"not parquet")
    assert _query(capsys, dataset, "select count(*) as kernels from kernels", "csv") == (0, "kernels\n4\n", "")


def test_query_still_opens_a_table_it_names(dataset, capsys):
    next((dataset / "telemetry").rglob("*.parquet")).write_bytes(b"not parquet")
    code, out, err = _query(capsys, dataset, "select count(*) from Telemetry")
    assert (code, out, "telemetry: unreadable Parquet" in err) == (1, "", True)


def test_query_footer_cache_reads_a_file_rewritten_in_place_anew(dataset):
    con = open_dataset(dataset, footer_cache=True)
    assert con.execute("select count(*) from kernels").fetchone() == (4,)
    write_trace_table(dataset, "job-1", "kernels", {
        "run": ["job-1"], "rank": [0], "name": ["gemm"], "category": ["compute"], "kind": ["kernel"],
        "start_ns": [0], "end_ns": [50], "dur_ns": [50]}, source="rank0")
    assert con.execute("select rank, count(*) from kernels group by rank order by rank").fetchall() == [(0, 1), (3, 2)]


def test_open_dataset_makes_only_the_table_views_asked_for(dataset):
    con = open_dataset(dataset, with_analyses=False, tables={"kernels", "runs"})
    views = {row[0] for row in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert {view for view in views if not view.startswith("_")} == {"kernels", "runs"}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process's CPU time from /proc")
def test_query_stopped_by_sigterm_says_so_and_exits_143(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    # DuckDB stops the query on the signal with an error of its own (or a
    # KeyboardInterrupt); the stop is what gets reported, and the connection
    # is closed, so a query that spilled leaves no temporary files.
    import signal
    import time

    cwd = tmp_path_factory.mktemp("cwd")  # where DuckDB would spill
    query = subprocess.Popen([sys.executable, "-m", "gpulens.dashboard.cli", "query", str(dataset),
                              "select count(*) from range(20000000000) t(i) where i % 7 = 3"],
                             cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.monotonic() + 60
        while _cpu_seconds(query.pid) < 1.5 and time.monotonic() < deadline:  # well into the query
            time.sleep(0.05)
        query.send_signal(signal.SIGTERM)
        _, stderr = query.communicate(timeout=30)
    finally:
        query.kill()
    assert (query.returncode, stderr, list(cwd.iterdir())) == (
        143, "gpulens: terminated\n", [])
