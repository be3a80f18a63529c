"""The parity suite's core against a real Spark standalone cluster.

A master and one worker (pyspark's own `bin/spark-class`) start on the
loopback address; the core views run through `spark://127.0.0.1:PORT` and
must give DuckDB's rows; both processes are stopped whatever happens.
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT, bench_module

pyspark = pytest.importorskip("pyspark")

from gpulens.collector.spark_env import java_executable  # noqa: E402

if java_executable() is None:
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

pytestmark = pytest.mark.slow

# The views the cluster runs: telemetry, kernels, collectives, the as-of join.
CORE_VIEWS = ("time_breakdown", "kernel_stats", "collective_skew", "power_headroom", "dash_skew_steps")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`spark://127.0.0.1:PORT` of a running master with one worker (1 core, 1 GiB)."""
    with bench_module("spark_cluster").standalone_cluster(tmp_path_factory.mktemp("cluster"), 1, "1g") as url:
        yield url


@pytest.fixture(scope="module")
def cluster_spark(cluster):
    from gpulens.collector.spark_env import spark_session
    from tests.test_engine_parity import TEST_CONF

    session = spark_session(cluster, {**TEST_CONF, "spark.executor.memory": "512m", "spark.cores.max": "1"})
    yield session
    session.stop()


def test_cluster_session_runs_on_the_standalone_master(cluster_spark, cluster):
    assert (cluster_spark.sparkContext.master, cluster_spark.range(10).count()) == (cluster, 10)


@pytest.mark.parametrize("view", CORE_VIEWS)
def test_view_same_rows_on_a_standalone_cluster(cluster_spark, view: str):
    from tests.test_engine_parity import check_view

    check_view(REPO_ROOT / "sample_traces" / "demo-training", cluster_spark, view)
