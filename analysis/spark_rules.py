"""The rules that mend sqlglot's DuckDB→Spark translation (analysis.spark_sql)."""

from __future__ import annotations

from sqlglot import exp


def apply_rules(tree: exp.Expression) -> exp.Expression:
    return tree
