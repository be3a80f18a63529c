"""The parity suite's core against a real Spark standalone cluster.

A master and one worker (pyspark's own `bin/spark-class`) start on the
loopback address; the core views run through `spark://127.0.0.1:PORT` and
must give DuckDB's rows; both processes are stopped whatever happens.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pyspark = pytest.importorskip("pyspark")

from gpulens.collector.spark_env import java_executable  # noqa: E402
from conftest import free_port

if java_executable() is None:
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

pytestmark = pytest.mark.slow

# The views the cluster runs: telemetry, kernels, collectives, the as-of join.
CORE_VIEWS = ("time_breakdown", "kernel_stats", "collective_skew", "power_headroom", "dash_skew_steps")
START_TIMEOUT_S = 120


def _wait_for_port(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on port {port} after {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`spark://127.0.0.1:PORT` of a running master with one worker (1 core, 1 GiB)."""
    home = Path(pyspark.__file__).parent
    folder = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(folder), "SPARK_WORKER_DIR": str(folder / "work"),
           "SPARK_DAEMON_MEMORY": "256m"}
    spark_class = str(home / "bin" / "spark-class")
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    try:
        master_log = folder / "master.log"
        with open(master_log, "wb") as out:
            started.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(ui_port)], env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for_port(port, started[0], master_log)
        worker_log = folder / "worker.log"
        with open(worker_log, "wb") as out:
            started.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "1g", "--webui-port", str(worker_ui_port)], env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for_registered(master_log, worker_log, started[1])
        yield url
    finally:
        for process in reversed(started):
            _stop(process)


def _wait_for_registered(master_log: Path, worker_log: Path, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited {worker.returncode}: {worker_log.read_text()[-2000:]}")
        if "Successfully registered with master" in worker_log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"the worker did not register in {START_TIMEOUT_S} s: {worker_log.read_text()[-2000:]}")


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
