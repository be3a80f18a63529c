"""`gpulens query` runs anyone's SQL: it reads the dataset and nothing else.

Each statement below once wrote a file, fetched a URL or tried to install an
extension; after each, every file of the dataset is as it was."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from conftest import write_telemetry, write_trace_table


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_telemetry(root, "node-a", [{"ts": 1_767_225_600_000_000 + k * 1_000_000, "gpu_index": 0, "power_w": 300.0 + k}
                                     for k in range(3)])
    write_trace_table(root, "r", "kernels", {
        "run": ["r"], "rank": [0], "name": ["gemm"], "category": ["compute"], "kind": ["kernel"],
        "start_ns": [0], "end_ns": [50], "dur_ns": [50]}, source="x")
    return root


def _checksums(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _query(capsys, dataset: Path, sql: str) -> tuple[int, str, str]:
    from gpulens.dashboard import cli

    code = cli.main(["query", str(dataset), sql, "--format", "csv"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _kernels_file(dataset: Path) -> Path:
    return dataset / "traces" / "run=r" / "kernels" / "x.parquet"


BYPASSES = {
    "log_query_path": "set log_query_path = '{kernels}'; select 1",
    "profiling_output": "pragma profiling_output = '{kernels}'",
    "profiling_output_set": "set profiling_output = '{kernels}'; select 1",
    "enable_profiling": "pragma enable_profiling = 'json'",
    "read_csv_url": "select * from read_csv('https://example.com/x.csv')",
    "read_parquet_url": "select * from read_parquet('http://127.0.0.1:9/x.parquet')",
    "copy_into_dataset": "copy (select 1 as a) to '{kernels}' (format parquet)",
    "copy_outside": "copy (select 1 as a) to '{outside}/out.csv'",
    "attach_in_dataset": "attach '{dataset}/traces/x.duckdb'",
    "attach_outside": "attach '{outside}/x.duckdb'",
    "export": "export database '{dataset}/traces/exported'",
    "install": "install httpfs",
    "load": "load httpfs",
    "create_secret": "create secret s (type s3, key_id 'a', secret 'b')",
    "create_persistent_secret": "create persistent secret p (type s3, key_id 'a', secret 'b')",
    "external_access_back_on": "set enable_external_access = true; select 1",
    "unlock": "set lock_configuration = false; select 1",
    "allow_more": "set allowed_directories = ['/']; select 1",
    "read_elsewhere": "select * from read_csv('{outside}/secret.csv')",
    "glob_elsewhere": "select * from glob('{outside}/*')",
    "enable_logging": "call enable_logging(storage = 'file', storage_path = '{dataset}/traces')",
}


@pytest.mark.parametrize("name", sorted(BYPASSES))
def test_query_sandbox_refuses_a_bypass_and_leaves_the_dataset_unchanged(name, dataset, tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.csv").write_text("password\nhunter2\n")
    before = _checksums(dataset)
    sql = BYPASSES[name].format(kernels=_kernels_file(dataset), dataset=dataset, outside=outside)
    code, out, err = _query(capsys, dataset, sql)
    assert (code, "hunter2" in out, err.startswith("gpulens: error: SQL error: "), err.count("\n")) == (2, False, True, 1)
    assert _checksums(dataset) == before
    assert sorted(p.name for p in outside.iterdir()) == ["secret.csv"]


def test_query_sandbox_figures_are_recorded():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hostile_figures import record

    record(query_bypasses_tried=len(BYPASSES))


def test_query_sandbox_still_reads_every_table_after_a_refused_bypass(dataset, capsys):
    _query(capsys, dataset, BYPASSES["log_query_path"].format(kernels=_kernels_file(dataset)))
    assert _query(capsys, dataset, "select (select count(*) from kernels) as k, (select count(*) from telemetry) as t") \
        == (0, "k,t\n1,3\n", "")


def test_query_sandbox_reads_a_dataset_file_by_its_path(dataset, capsys):
    sql = f"select name from read_parquet('{_kernels_file(dataset)}')"
    assert _query(capsys, dataset, sql) == (0, "name\ngemm\n", "")


def test_query_sandbox_lets_threads_change(dataset, capsys):
    assert _query(capsys, dataset, "set threads = 1; select current_setting('threads') as threads") == (0, "threads\n1\n", "")


def test_query_sandbox_names_the_locked_setting(dataset, capsys):
    err = _query(capsys, dataset, "set log_query_path = '/tmp/x'; select 1")[2]
    assert err == ('gpulens: error: SQL error: Invalid Input Error: Cannot change configuration option "log_query_path" '
                   "- the configuration has been locked\n")
