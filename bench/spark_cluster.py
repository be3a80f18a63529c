"""A Spark standalone cluster on the loopback address: a master and one
worker, started with pyspark's own `bin/spark-class` and stopped on leaving
(tests/test_spark_cluster.py; bench/engines.py, to measure the driver apart
from the executors)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import stop  # noqa: E402

START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def standalone_cluster(folder: Path, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """`spark://127.0.0.1:PORT` of a running master with one worker of
    `cores` and `memory` for its executors; logs and the worker's folder in
    `folder`. Both processes are stopped on leaving, whatever happens."""
    import pyspark

    home = Path(pyspark.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
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
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", str(cores),
                 "--memory", memory, "--webui-port", str(worker_ui_port)], env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for_registered(worker_log, started[1])
        yield url
    finally:
        for process in reversed(started):
            stop(process)


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


def _wait_for_registered(worker_log: Path, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited {worker.returncode}: {worker_log.read_text()[-2000:]}")
        if "Successfully registered with master" in worker_log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"the worker did not register in {START_TIMEOUT_S} s: {worker_log.read_text()[-2000:]}")
