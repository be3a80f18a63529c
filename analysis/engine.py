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

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from gpulens.collector.errors import GpulensError, UsageError

ENGINES = ("duckdb", "spark")
DEFAULT_ENGINE = "duckdb"
# Every core of this machine; `spark://host:7077`, `k8s://...`, `yarn` and
# Spark Connect's `sc://host:15002` name a cluster.
DEFAULT_SPARK_MASTER = "local[*]"


class EngineUnavailable(GpulensError):
    """The engine asked for cannot start here (a package or Java missing)."""


def java_executable() -> str | None:
    """The `java` Spark would start: $JAVA_HOME/bin/java, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def check_spark_available(spark_master: str = DEFAULT_SPARK_MASTER) -> None:
    """Raise EngineUnavailable naming what to install for `--engine spark`.

    Spark Connect (`sc://`) runs the JVM on the server: only pyspark is
    needed here."""
    if importlib.util.find_spec("pyspark") is None:
        raise EngineUnavailable("--engine spark needs pyspark: pip install 'gpulens[spark]'")
    if not spark_master.startswith("sc://") and java_executable() is None:
        where = "JAVA_HOME has no bin/java" if os.environ.get("JAVA_HOME") else "no java on PATH"
        raise EngineUnavailable(f"--engine spark needs a Java 17+ runtime ({where}): "
                                "apt-get install openjdk-17-jre-headless, or set JAVA_HOME")


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


def is_spark(con: Any) -> bool:
    """Whether `con` is a SparkConnection (without importing pyspark)."""
    return getattr(con, "engine", None) == "spark"
