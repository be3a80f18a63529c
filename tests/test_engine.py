"""`--engine spark` on the commands: its one-line errors, its ingest, its query.

The parity of every view is tests/test_engine_parity.py; the standalone
cluster is tests/test_spark_cluster.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, bench_module


def _gpulens(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _env_without_java(tmp_path: Path) -> dict[str, str]:
    """PATH of this Python's folder alone (no java there), no JAVA_HOME."""
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)
    return env


def test_query_engine_spark_without_java_says_what_to_install(tmp_path: Path):
    pytest.importorskip("pyspark")
    done = _gpulens(["query", str(REPO_ROOT / "sample_traces" / "demo-training"), "select 1", "--engine", "spark"],
                    _env_without_java(tmp_path))
    assert (done.returncode, done.stderr.strip().splitlines()) == (1, [
        "gpulens: error: --engine spark needs a Java 17+ runtime (no java on PATH): "
        "apt-get install openjdk-17-jre-headless, or set JAVA_HOME"])


def test_report_engine_spark_with_java_home_lacking_java_says_so(tmp_path: Path):
    pytest.importorskip("pyspark")
    env = _env_without_java(tmp_path)
    env["JAVA_HOME"] = str(tmp_path)
    done = _gpulens(["report", str(REPO_ROOT / "sample_traces" / "demo-training"), "--format", "md",
                     "--engine", "spark"], env)
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == (1, [
        "gpulens: error: --engine spark needs a Java 17+ runtime (JAVA_HOME has no bin/java): "
        "apt-get install openjdk-17-jre-headless, or set JAVA_HOME"])


def test_ingest_engine_spark_without_java_says_what_to_install(tmp_path: Path):
    pytest.importorskip("pyspark")
    done = _gpulens(["ingest", str(tmp_path), "--out", str(tmp_path / "data"), "--engine", "spark"],
                    _env_without_java(tmp_path))
    assert (done.returncode, done.stderr.strip().splitlines()) == (1, [
        "gpulens: error: --engine spark needs a Java 17+ runtime (no java on PATH): "
        "apt-get install openjdk-17-jre-headless, or set JAVA_HOME"])


def test_check_spark_available_without_pyspark_names_the_extra(monkeypatch):
    import importlib.util

    from gpulens.collector.spark_env import EngineUnavailable, check_spark_available

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    with pytest.raises(EngineUnavailable, match=r"^--engine spark needs pyspark: pip install 'gpulens\[spark\]'$"):
        check_spark_available()


def test_spark_master_without_engine_spark_is_a_usage_error():
    from gpulens.analysis.engine import open_engine
    from gpulens.collector.errors import UsageError

    with pytest.raises(UsageError, match="^--spark-master needs --engine spark$"):
        open_engine(REPO_ROOT / "sample_traces" / "demo-training", spark_master="local[2]")


# --- with Spark ------------------------------------------------------------

def _spark_or_skip():
    pytest.importorskip("pyspark")
    from gpulens.collector.spark_env import java_executable

    if java_executable() is None:
        pytest.skip("no Java runtime for Spark")


@pytest.fixture(scope="module")
def spark():
    _spark_or_skip()
    from gpulens.collector.spark_env import spark_session
    from tests.test_engine_parity import TEST_CONF

    session = spark_session("local[2]", TEST_CONF)
    yield session
    session.stop()


def _tables(dataset: Path) -> dict[str, list[str]]:
    """Every trace table's rows, sorted, without the column that says when
    the ingest ran: as bench/spark_ingest.py compares 1,024 ranks."""
    return bench_module("spark_ingest").table_rows(dataset)


@pytest.mark.slow
def test_ingest_on_spark_writes_the_tables_of_a_serial_ingest(spark, tmp_path: Path):
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.ingest.distributed import ingest_paths_on_spark
    from gpulens.collector.sim_trace import write_training_traces

    traces = tmp_path / "traces"
    write_training_traces(traces, ranks=24, steps=2, kernels_per_step=60, seed=7, world_hosts=3)
    serial = ingest_paths([traces], tmp_path / "serial", run="job", jobs=1)
    spread = ingest_paths_on_spark([traces], tmp_path / "spark", run="job", session=spark)
    assert (len(spread.results), spread.failures) == (len(serial.results), [])
    assert _tables(tmp_path / "spark") == _tables(tmp_path / "serial")


@pytest.mark.slow
def test_ingest_on_spark_of_a_file_another_run_holds_says_it_moved(spark, tmp_path: Path):
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.ingest.distributed import ingest_paths_on_spark
    from gpulens.collector.sim_trace import write_training_traces

    (trace,) = write_training_traces(tmp_path / "traces", ranks=1, steps=1, kernels_per_step=60, seed=7)
    ingest_paths([trace], tmp_path / "data", run="old", jobs=1)
    report = ingest_paths_on_spark([trace], tmp_path / "data", run="new", session=spark)
    assert report.moved == [(str(trace), ("old",), "new")]


@pytest.mark.slow
def test_query_engine_spark_prints_duckdb_rows(tmp_path: Path):
    _spark_or_skip()
    dataset = str(REPO_ROOT / "sample_traces" / "demo-training")
    sql = "select rank, count(*) as kernels from kernels group by rank order by rank"
    duck = _gpulens(["query", dataset, sql, "--format", "csv"], dict(os.environ))
    spark = _gpulens(["query", dataset, sql, "--format", "csv", "--engine", "spark", "--spark-master", "local[1]"],
                     dict(os.environ))
    assert (spark.returncode, spark.stdout) == (0, duck.stdout)
