"""gpulens.analysis.registry: SQL files become views, with parameters as variables."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gpulens.analysis import registry
from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.registry import tables_named_in
from gpulens.collector.errors import UsageError
from conftest import write_trace_table

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "demo-training"


@pytest.fixture()
def sql_dir(tmp_path, monkeypatch):
    folder = tmp_path / "sql"
    folder.mkdir()
    (folder / "b_doubled.sql").write_text("-- requires: a_base\n-- param: factor = 2\nselect x * getvariable('factor') as y from a_base\n")
    (folder / "a_base.sql").write_text("select unnest([1, 2, 3]) as x\n")
    monkeypatch.setattr(registry, "SQL_DIR", folder)
    registry.load_analyses.cache_clear()
    yield folder
    registry.load_analyses.cache_clear()


def test_views_are_created_after_what_they_require(sql_dir):
    assert list(registry.load_analyses()) == ["a_base", "b_doubled"]
    con = duckdb.connect()
    registry.register_analysis_views(con)
    assert con.execute("select sum(y) from b_doubled").fetchone()[0] == 12


def test_run_analysis_overrides_a_parameter_then_restores_the_default(sql_dir):
    con = duckdb.connect()
    registry.register_analysis_views(con)
    assert registry.run_analysis(con, "b_doubled", factor=10)["y"].to_list() == [10, 20, 30]
    assert con.execute("select sum(y) from b_doubled").fetchone()[0] == 12


def test_on_demand_a_view_is_created_with_what_it_requires_when_first_run(sql_dir):
    con = duckdb.connect()
    registry.register_analyses_on_demand(con)
    assert not con.execute("select view_name from duckdb_views() where not internal").fetchall()
    assert registry.run_analysis(con, "b_doubled")["y"].to_list() == [2, 4, 6]
    views = {name for (name,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert views == {"a_base", "b_doubled"}


@pytest.mark.parametrize("name", list(registry.load_analyses()))
def test_every_analysis_declares_every_analysis_it_reads(name):
    # On demand, a view is created with only what its `requires:` header
    # names: a missing name fails here, not on a dashboard page.
    con = open_dataset(SAMPLE, analyses_on_demand=True)
    registry._ensure_views(con, name)
    assert con.execute(f'select count(*) from "{name}"').fetchone()[0] >= 0


def test_unknown_parameter_is_a_usage_error(sql_dir):
    con = duckdb.connect()
    registry.register_analysis_views(con)
    with pytest.raises(UsageError, match="^unknown parameter for b_doubled: factr$"):
        registry.run_analysis(con, "b_doubled", factr=3)
    with pytest.raises(UsageError, match="^unknown parameters for b_doubled: factr, scale$"):
        registry.run_analysis(con, "b_doubled", factr=3, scale=2)


def test_cycle_in_requirements_is_reported(sql_dir):
    (sql_dir / "a_base.sql").write_text("-- requires: b_doubled\nselect 1 as x\n")
    registry.load_analyses.cache_clear()
    with pytest.raises(ValueError, match="cycle"):
        registry.load_analyses()


def test_step_windows_marks_the_last_step(tmp_path):
    write_trace_table(tmp_path, "r1", "annotations", {
        "run": ["r1"] * 3, "rank": [0] * 3, "name": ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"],
        "kind": ["profiler_step"] * 3, "step": [4, 5, 6],
        "start_ns": [0, 100, 200], "end_ns": [100, 200, 250], "dur_ns": [100, 100, 50],
    })
    con = open_dataset(tmp_path)
    rows = con.execute("select step, step_ns, is_last, last_step_start_ns from step_windows order by step").fetchall()
    assert rows == [(4, 100, False, 200), (5, 100, False, 200), (6, 50, True, 200)]


def test_tables_named_in_sql_are_the_tables_it_names_in_any_case():
    assert tables_named_in("select * from Kernels k join runs using (run, rank)") == {"kernels", "runs"}


def test_tables_named_in_sql_include_those_its_analyses_read():
    assert tables_named_in("select * from kernel_stats where rank = 3") == {"kernels", "kernel_names"}


def test_tables_named_in_sql_naming_hardware_peaks_include_the_tables_of_its_models():
    assert tables_named_in("select * from hardware_peaks") == {"runs", "devices"}


def test_tables_named_in_sql_that_lists_the_catalogue_are_all_tables():
    assert tables_named_in("show tables") is None
