"""`gpulens import` from a real Prometheus (Debian's `prometheus`, which
.ci/run installs): it scrapes a dcgm-exporter-format page served here,
whose values change with each scrape in a known way, every second; the
rows imported over the window must be exactly the values served, at the
scrape times. Loopback only; the fixtures stop what they started."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest

from gpulens.collector.imports import import_source
from gpulens.collector.imports import prometheus as prometheus_import
from conftest import bench_module, free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
HOST = "node-a"
GPUS = 2
UUIDS = [f"GPU-8d1f6e2a-0000-4000-8000-00000000000{g}" for g in range(GPUS)]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed (.ci/run installs it)"),
]


def served_values(n: int, gpu: int) -> dict[str, float]:
    """What scrape `n` serves for `gpu`: every value moves with n."""
    return {"power_w": 100.0 + 10 * n + gpu, "gpu_util_pct": float((7 * n + gpu) % 101),
            "mem_used_bytes": (1000 + n) * 2**20, "sm_clock_mhz": 1000 + n}


def page(n: int, ts_ms: int) -> str:
    lines = []
    for metric, key, scale in (("DCGM_FI_DEV_POWER_USAGE", "power_w", 1), ("DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct", 1),
                               ("DCGM_FI_DEV_FB_USED", "mem_used_bytes", 2**20), ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", 1)):
        lines.append(f"# TYPE {metric} gauge")
        for gpu in range(GPUS):
            value = served_values(n, gpu)[key] / scale
            lines.append(f'{metric}{{gpu="{gpu}",UUID="{UUIDS[gpu]}",device="nvidia{gpu}",'
                         f'modelName="NVIDIA H100 80GB HBM3",Hostname="{HOST}"}} {value:g} {ts_ms}')
    return "\n".join(lines) + "\n"


class Exporter:
    """A dcgm-exporter stand-in: scrape n serves `page(n)`, stamped with the
    time it was served (ms), which Prometheus keeps as the sample's time."""

    def __init__(self) -> None:
        self.served: list[tuple[int, int]] = []  # (n, ts_ms)
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter.lock:
                    n = len(exporter.served)
                    ts_ms = int(time.time() * 1000)
                    exporter.served.append((n, ts_ms))
                body = page(n, ts_ms).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture()
def exporter():
    with Exporter() as running:
        yield running


@pytest.fixture()
def prometheus_url(tmp_path, exporter):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        bench_module("processes").stop(process, timeout_s=10)
        log.close()


def _wait_for_scrapes(exporter: Exporter, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while len(exporter.served) < count:
        assert time.monotonic() < deadline, f"only {len(exporter.served)} scrapes in {timeout_s} s"
        time.sleep(0.1)


def test_import_from_prometheus_equals_the_values_served(tmp_path, exporter, prometheus_url, monkeypatch):
    _wait_for_scrapes(exporter, 7)
    time.sleep(1.0)  # the last scrape appended
    with exporter.lock:
        served = list(exporter.served)
    since = dt.datetime.fromtimestamp(served[0][1] / 1000 - 5, dt.timezone.utc)
    until = dt.datetime.fromtimestamp(served[-1][1] / 1000 + 0.001, dt.timezone.utc)
    # Chunks of 7 points: the window takes several queries, whose seams
    # must neither lose nor repeat a sample.
    monkeypatch.setattr(prometheus_import, "CHUNK_POINTS", 7)
    result = import_source(prometheus_url, tmp_path / "out", fmt="prometheus", since=since, until=until, step_s=0.5)
    expected = [
        (dt.datetime.fromtimestamp(ts_ms / 1000, dt.timezone.utc), HOST, gpu, UUIDS[gpu], served_values(n, gpu))
        for n, ts_ms in served for gpu in range(GPUS)
    ]
    con = duckdb.connect()
    rows = con.sql(f"select ts, host, gpu_index, gpu_uuid, power_w, gpu_util_pct, mem_used_bytes, sm_clock_mhz "
                   f"from read_parquet('{tmp_path}/out/telemetry/**/*.parquet', hive_partitioning = false) "
                   "order by ts, gpu_index").fetchall()
    got = [(ts, host, gpu, uuid, {"power_w": p, "gpu_util_pct": u, "mem_used_bytes": m, "sm_clock_mhz": c})
           for ts, host, gpu, uuid, p, u, m, c in rows]
    assert got == expected
    assert result.rows == len(expected)


def test_import_from_prometheus_twice_is_idempotent(tmp_path, exporter, prometheus_url):
    _wait_for_scrapes(exporter, 3)
    time.sleep(1.0)
    with exporter.lock:
        served = list(exporter.served)
    since = dt.datetime.fromtimestamp(served[0][1] / 1000 - 1, dt.timezone.utc)
    until = dt.datetime.fromtimestamp(served[-1][1] / 1000 + 0.001, dt.timezone.utc)
    first = import_source(prometheus_url, tmp_path / "out", since=since, until=until, step_s=0.5)
    files = sorted(p.name for p in (tmp_path / "out").rglob("*.parquet"))
    second = import_source(prometheus_url, tmp_path / "out", since=since, until=until, step_s=0.5)
    assert (second.rows, sorted(p.name for p in (tmp_path / "out").rglob("*.parquet"))) == (first.rows, files)
    assert first.rows == GPUS * len(served)
