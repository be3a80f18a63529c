"""Starting Apache Spark for `--engine spark`: what it needs, and its session.

Spark needs the `spark` extra (pyspark) and a Java 17+ runtime, except for
Spark Connect (`sc://host:15002`), whose JVM runs on the server. Without
either, `check_spark_available` raises an EngineUnavailable that says what
to install, in one line. Used by the analyses (analysis.engine) and by the
distributed ingest (collector.ingest.distributed).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpulens.collector.errors import GpulensError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Every core of this machine; `spark://host:7077`, `k8s://...`, `yarn` and
# Spark Connect's `sc://host:15002` name a cluster.
DEFAULT_SPARK_MASTER = "local[*]"

# What a session that gpulens starts is given, over Spark's defaults; a
# cluster's spark-defaults.conf and `conf` of the caller go over these.
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # DuckDB's arithmetic: a division by zero or an overflowing cast is NULL.
    "spark.sql.ansi.enabled": "false",
    # size(NULL) is NULL, as len(NULL) is, not -1.
    "spark.sql.legacy.sizeOfNull": "false",
    # host=node01, date=2026-11-29 stay strings: a host named 0042 is not 42.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.parquet.mergeSchema": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


class EngineUnavailable(GpulensError):
    """The engine asked for cannot start here (a package or Java missing)."""


def java_executable() -> str | None:
    """The `java` Spark would start: $JAVA_HOME/bin/java, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def check_spark_available(master: str = DEFAULT_SPARK_MASTER) -> None:
    """Raise EngineUnavailable naming what to install for `--engine spark`."""
    if importlib.util.find_spec("pyspark") is None:
        raise EngineUnavailable("--engine spark needs pyspark: pip install 'gpulens[spark]'")
    if not master.startswith("sc://") and java_executable() is None:
        where = "JAVA_HOME has no bin/java" if os.environ.get("JAVA_HOME") else "no java on PATH"
        raise EngineUnavailable(f"--engine spark needs a Java 17+ runtime ({where}): "
                                "apt-get install openjdk-17-jre-headless, or set JAVA_HOME")


def spark_session(master: str = DEFAULT_SPARK_MASTER, conf: dict[str, str] | None = None) -> SparkSession:
    """The SparkSession on `master` (getOrCreate: one per process).

    Executors on this machine run this Python (gpulens importable); on a
    cluster, gpulens must be installed where the executors run."""
    check_spark_available(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("gpulens")
    if master.startswith("sc://"):
        builder = builder.remote(master)
    else:
        # The executors' Python workers: this Python (with gpulens), not
        # the first python3 on PATH, unless the user chose one.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(master)
    for key, value in {**SESSION_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not master.startswith("sc://"):
        session.sparkContext.setLogLevel("ERROR")
    return session
