"""gpulens.open: a dataset's analyses, SQL and findings from Python, and
docs/notebook.md, whose code runs as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import polars as pl
import pytest

import gpulens
from gpulens.collector.errors import DatasetError, QueryError, UsageError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO = REPO_ROOT / "sample_traces" / "demo-training"


@pytest.fixture(scope="module")
def demo() -> gpulens.Dataset:
    with gpulens.open(DEMO) as ds:
        yield ds


def test_analysis_gives_the_view_as_a_polars_frame(demo: gpulens.Dataset) -> None:
    breakdown = demo.analysis("time_breakdown")
    assert isinstance(breakdown, pl.DataFrame)
    assert breakdown.height == 8 and breakdown["rank"].sort().to_list() == list(range(8))


def test_analysis_takes_the_sql_files_thresholds(demo: gpulens.Dataset) -> None:
    strict = demo.analysis("launch_outliers", launch_delay_outlier_ns=20_000)
    default = demo.analysis("launch_outliers")
    assert strict.height > default.height
    assert demo.analysis("launch_outliers").height == default.height  # the default is back afterwards


def test_analysis_refuses_a_threshold_the_file_does_not_take(demo: gpulens.Dataset) -> None:
    with pytest.raises(UsageError, match="unknown parameter for short_kernels: short_kernel_max_ns"):
        demo.analysis("short_kernels", short_kernel_max_ns=1)


def test_analyses_lists_every_sql_file(demo: gpulens.Dataset) -> None:
    assert demo.analyses() == sorted(path.stem for path in (REPO_ROOT / "analysis" / "sql").glob("*.sql"))


def test_sql_reads_tables_and_analysis_views(demo: gpulens.Dataset) -> None:
    counted = demo.sql("select count(*) as kernels from kernels")
    assert counted.to_dicts() == [{"kernels": 16_000}]
    joined = demo.sql("select count(*) as ranks from time_breakdown join runs using (run, rank)")
    assert joined["ranks"].to_list() == [8]


def test_sql_writes_no_file(demo: gpulens.Dataset, tmp_path: Path) -> None:
    with pytest.raises(QueryError):
        demo.sql(f"copy (select 1) to '{tmp_path / 'x.csv'}'")
    assert list(tmp_path.iterdir()) == []


def test_findings_are_the_reports_most_severe_first(demo: gpulens.Dataset) -> None:
    found = demo.findings()
    assert found[0].id == "straggler_rank" and found[0].subject == {"run": "demo-training", "rank": 5}
    order = ["critical", "warning", "info"]
    assert [order.index(f.severity) for f in found] == sorted(order.index(f.severity) for f in found)


def test_a_closed_dataset_says_so(tmp_path: Path) -> None:
    ds = gpulens.open(DEMO)
    ds.close()
    with pytest.raises(UsageError, match="closed"):
        ds.analysis("time_breakdown")


def test_open_of_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=str(tmp_path / "nope")):
        gpulens.open(tmp_path / "nope")


def test_importing_gpulens_loads_neither_duckdb_nor_polars() -> None:
    import subprocess
    import sys

    code = "import sys, gpulens; print(sorted({'duckdb', 'polars'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_every_code_block_of_the_notebook_page_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "docs" / "notebook.md").read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, "docs/notebook.md", "exec"), namespace)
    assert "straggler_rank" in printed.getvalue() and "80 profiler steps" in printed.getvalue()
