"""Which engine answers the questions: DuckDB (embedded, the default) or Spark.

    con = open_engine("gpulens-data")                                  # DuckDB
    con = open_engine("gpulens-data", engine="spark", spark_master="spark://head:7077")

Both give a connection the analysis functions take (`run_analysis(con,
...)`, `power_headroom(con)`, ...): a DuckDB connection, or a
`SparkConnection` (analysis.spark) that answers the same SQL files,
translated (analysis.spark_sql). The dataset folder is read as it is.

Spark needs the `spark` extra (pyspark) and a Java 17+ runtime; without
either, `check_spark_available` raises an EngineUnavailable that says
what to install, one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulens.analysis.registry import is_spark
from gpulens.collector.errors import UsageError
from gpulens.collector.spark_env import DEFAULT_SPARK_MASTER, EngineUnavailable, check_spark_available, java_executable

ENGINES = ("duckdb", "spark")
DEFAULT_ENGINE = "duckdb"

__all__ = ["DEFAULT_ENGINE", "DEFAULT_SPARK_MASTER", "ENGINES", "EngineUnavailable", "check_spark_available",
           "is_spark", "java_executable", "open_engine"]


def open_engine(path: str | Path, engine: str = DEFAULT_ENGINE, spark_master: str | None = None,
                **duckdb_options: Any) -> Any:
    """A connection to the dataset at `path` on `engine`.

    DuckDB: `open_dataset(path, **duckdb_options)`. Spark: a
    SparkConnection on `spark_master` (default local[*]) with every table
    and analysis as a view. `spark_master` with DuckDB is a UsageError."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if engine == "duckdb":
        if spark_master is not None:
            raise UsageError("--spark-master needs --engine spark")
        from gpulens.analysis.dataset import open_dataset

        return open_dataset(path, **duckdb_options)
    master = spark_master or DEFAULT_SPARK_MASTER
    check_spark_available(master)
    from gpulens.analysis.spark import open_spark_dataset

    return open_spark_dataset(path, master=master)

