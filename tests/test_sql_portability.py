"""The portability lint: each analysis SQL file carries to Spark, or has a twin.

A construct that sqlglot drops with no error (an ORDER BY inside list()),
or that sqlglot or a rule of analysis.spark_rules refuses, makes a file
DuckDB-only; the lint fails for such a file unless it has a Spark twin,
`analysis/sql/spark/<name>.sql`, which tests/test_engine_parity.py checks.
Needs sqlglot only (no Spark, no Java).
"""

from __future__ import annotations

import pytest

pytest.importorskip("sqlglot")

from gpulens.analysis.registry import load_analyses  # noqa: E402
from gpulens.analysis.spark_sql import TWIN_DIR, non_portable  # noqa: E402


def test_lint_every_non_portable_file_has_a_twin():
    missing = {name: found for name, analysis in load_analyses().items()
               if (found := non_portable(analysis.sql)) and not (TWIN_DIR / f"{name}.sql").is_file()}
    assert missing == {}


def test_lint_every_twin_has_its_duckdb_file():
    assert sorted(path.stem for path in TWIN_DIR.glob("*.sql") if path.stem not in load_analyses()) == []


def test_lint_catches_an_ordered_list_aggregate():
    found = non_portable("select run, list(name order by start_ns) as names from kernels group by run")
    assert found == ["ARRAY_AGG(name ORDER BY start_ns): list() with ORDER BY (sqlglot drops the order)"]


def test_lint_catches_an_asof_join_on_a_strict_inequality():
    snippet = ("select s.run, w.step from collective_skew s "
               "asof left join step_windows w on w.run = s.run and s.start_ns > w.start_ns")
    assert non_portable(snippet) == ["ASOF JOIN: s.start_ns > w.start_ns: only equalities and one >= have a Spark rule"]


def test_lint_passes_an_asof_join_it_carries():
    snippet = ("select s.run, w.step from collective_skew s "
               "asof left join step_windows w on w.run = s.run and s.start_ns >= w.start_ns")
    assert non_portable(snippet) == []


def test_lint_passes_portable_sql():
    assert non_portable("select run, count(*) filter (where dur_ns > 10) as n from kernels group by all") == []
