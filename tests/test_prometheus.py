"""`gpulens collect --metrics-address` scraped by a real Prometheus server
(Debian's `prometheus`, which .ci/run installs), on loopback ports, and the
Grafana dashboard's queries run against it.

One run for the module: Prometheus starts first (1 s scrapes, its own
storage in a temporary folder), then two simulated collectors run for a
bounded time, one serving gpulens's names and one dcgm-exporter's, each
writing its own Parquet dataset. Both processes are stopped by the
fixtures' finalizers whatever happens.

Tolerance. Prometheus stores what a scrape found, at the scrape's time; the
collector ticks on whole seconds and Prometheus scrapes every second at its
own phase, so on a busy machine a late scrape can miss a tick and an early
one carry the same tick twice. `gpulens_sample_timestamp_seconds` says
which tick each scrape carried, so:
- every value Prometheus stored equals the Parquet row of its tick exactly
  (a float64 printed by prometheus_client and parsed by Prometheus, both
  shortest round-trip representations);
- `max_over_time`, `avg_over_time` and the per-node sum over the window
  equal the same figures computed from the Parquet rows of the ticks the
  scrapes carried, to 1e-9 relative (only the summation order differs);
- those ticks are the collector's ticks of the window with at most a
  quarter missed (a scrape delayed past the next tick), so the window's
  figures are the Parquet's over the same window up to those misses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from gpulens.analysis.dataset import open_dataset
from conftest import bench_module, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus")
COLLECT_S = 12
GPUS = 4
HOST = "node-p"
REL = 1e-9

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus server (.ci/run installs it)"),
]


def _stop(process: subprocess.Popen) -> None:
    bench_module("processes").stop(process, timeout_s=15)


def _get(url: str, timeout_s: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str, at: float) -> list[dict]:
        answer = _get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}))
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("prometheus")
    port, gpulens_port, dcgm_port = free_port(), free_port(), free_port()
    (folder / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: gpulens\n    static_configs:\n      - targets: ['127.0.0.1:{gpulens_port}']\n"
        f"  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{dcgm_port}']\n")
    log = (folder / "prometheus.log").open("w")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    request.addfinalizer(lambda: (_stop(process), log.close()))
    server = Prometheus(port)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{server.base}/-/ready", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, (folder / "prometheus.log").read_text()
        time.sleep(0.2)
    server.ports = {"gpulens": gpulens_port, "dcgm": dcgm_port}
    return server


@pytest.fixture(scope="module")
def run(prometheus, tmp_path_factory, request):
    """Both collectors, run to their end; their datasets and the scrape window."""
    folder = tmp_path_factory.mktemp("collect")
    processes = {}
    for names in ("gpulens", "dcgm"):
        command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", str(GPUS),
                   "--host", HOST, "--out", str(folder / names), "--interval", "1", "--duration", str(COLLECT_S),
                   "--metrics-address", f"127.0.0.1:{prometheus.ports[names]}", "--metrics-names", names]
        processes[names] = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        request.addfinalizer(lambda process=processes[names]: _stop(process))
    for process in processes.values():
        _, stderr = process.communicate(timeout=COLLECT_S + 60)
        assert process.returncode == 0, stderr
    # Every scrape of the gpulens job, newest last: (scrape time, tick carried).
    stamps = prometheus.query(f'gpulens_sample_timestamp_seconds{{host="{HOST}"}}[5m]', time.time())
    assert len(stamps) == 1
    scrapes = [(float(t), float(v)) for t, v in stamps[0]["values"]]
    return {"folder": folder, "scrapes": scrapes, "at": scrapes[-1][0],
            "window": f"{int(scrapes[-1][0] - scrapes[0][0]) + 1}s"}


@pytest.fixture(scope="module")
def parquet(run) -> dict[tuple[float, int], float]:
    """power_w of the gpulens collector's Parquet, by (tick in epoch s, GPU)."""
    rows = open_dataset(run["folder"] / "gpulens").execute(
        "select epoch_ms(ts) / 1000.0, gpu_index, power_w from telemetry").fetchall()
    return {(ts, gpu): power for ts, gpu, power in rows}


def _carried(run) -> list[float]:
    return [tick for _, tick in run["scrapes"]]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


def test_prometheus_scraped_several_ticks_missing_at_most_a_quarter(run, parquet):
    carried = sorted(set(_carried(run)))
    ticks = sorted({ts for ts, _ in parquet if carried[0] <= ts <= carried[-1]})
    assert len(carried) >= 4 and len(ticks) - len(carried) <= len(ticks) // 4


def test_every_stored_power_value_equals_the_parquet_row_of_its_tick(prometheus, run, parquet):
    series = prometheus.query(f'gpulens_gpu_power_watts{{host="{HOST}"}}[5m]', run["at"])
    tick_at = dict(run["scrapes"])
    stored = [((tick_at[float(t)], int(s["metric"]["gpu"])), float(v)) for s in series for t, v in s["values"]]
    assert len(series) == GPUS and stored
    assert [(key, value) for key, value in stored if parquet[key] != value] == []


def test_max_over_time_of_power_equals_the_parquet_maximum(prometheus, run, parquet):
    result = prometheus.query(f'max_over_time(gpulens_gpu_power_watts{{host="{HOST}"}}[{run["window"]}])', run["at"])
    served = {int(s["metric"]["gpu"]): float(s["value"][1]) for s in result}
    expected = {gpu: max(parquet[(tick, gpu)] for tick in _carried(run)) for gpu in range(GPUS)}
    assert served == expected


def test_avg_over_time_of_power_equals_the_parquet_mean(prometheus, run, parquet):
    result = prometheus.query(f'avg_over_time(gpulens_gpu_power_watts{{host="{HOST}"}}[{run["window"]}])', run["at"])
    served = {int(s["metric"]["gpu"]): float(s["value"][1]) for s in result}
    carried = _carried(run)
    expected = {gpu: sum(parquet[(tick, gpu)] for tick in carried) / len(carried) for gpu in range(GPUS)}
    assert sorted(served) == list(range(GPUS))
    assert [gpu for gpu in served if not _close(served[gpu], expected[gpu])] == []


def test_the_node_sum_at_each_scrape_equals_the_parquet_sum_over_its_gpus(prometheus, run, parquet):
    mismatches = []
    for scraped_at, tick in run["scrapes"]:
        (result,) = prometheus.query(f'sum by (host) (gpulens_gpu_power_watts{{host="{HOST}"}})', scraped_at)
        expected = sum(parquet[(tick, gpu)] for gpu in range(GPUS))
        if not _close(float(result["value"][1]), expected):
            mismatches.append((tick, result["value"][1], expected))
    assert mismatches == []


def test_the_mean_node_power_over_the_window_equals_the_parquets(prometheus, run, parquet):
    (result,) = prometheus.query(
        f'sum by (host) (avg_over_time(gpulens_gpu_power_watts{{host="{HOST}"}}[{run["window"]}]))', run["at"])
    carried = _carried(run)
    expected = sum(parquet[(tick, gpu)] for tick in carried for gpu in range(GPUS)) / len(carried)
    assert _close(float(result["value"][1]), expected)


def test_dcgm_names_carry_dcgm_labels_and_the_collectors_values(prometheus, run):
    con = open_dataset(run["folder"] / "dcgm")
    power = {(str(gpu), value) for gpu, value in con.execute("select gpu_index, power_w from telemetry").fetchall()}
    energy = {(str(gpu), value * 1000) for gpu, value in con.execute("select gpu_index, energy_j from telemetry").fetchall()}
    stored_power = prometheus.query(f'DCGM_FI_DEV_POWER_USAGE{{Hostname="{HOST}"}}[5m]', run["at"])
    stored_energy = prometheus.query(f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{HOST}"}}[5m]', run["at"])
    assert sorted(s["metric"]["gpu"] for s in stored_power) == [str(gpu) for gpu in range(GPUS)]
    assert {"UUID", "modelName", "pci_bus_id", "device"} <= set(stored_power[0]["metric"])
    assert {(s["metric"]["gpu"], float(v)) for s in stored_power for _, v in s["values"]} <= power
    assert {(s["metric"]["gpu"], float(v)) for s in stored_energy for _, v in s["values"]} <= energy


# --- the Grafana dashboard ----------------------------------------------------------

DASHBOARD = json.loads((REPO_ROOT / "deploy" / "grafana-gpulens.json").read_text(encoding="utf-8"))


def _panel_queries() -> list[tuple[str, list[str]]]:
    return [(panel["title"], [target["expr"] for target in panel["targets"]])
            for panel in DASHBOARD["panels"] if panel.get("targets")]


def _substituted(expr: str, run) -> str:
    """What Grafana sends with every host and GPU selected (allValue .*)."""
    for variable, value in (("$__range", run["window"]), ("$host", ".*"), ("$gpu", ".*"), ("$budget", "5600")):
        expr = expr.replace(variable, value)
    return expr


def test_the_dashboard_names_the_datasource_host_gpu_and_budget_variables():
    assert [variable["name"] for variable in DASHBOARD["templating"]["list"]] == ["datasource", "host", "gpu", "budget"]


def test_the_dashboards_host_variable_finds_the_collectors_host(prometheus, run):
    answer = _get(f"{prometheus.base}/api/v1/label/host/values?" + urllib.parse.urlencode({"match[]": "gpulens_gpu_power_watts"}))
    assert HOST in answer["data"]


@pytest.mark.parametrize(("title", "exprs"), _panel_queries(), ids=[title for title, _ in _panel_queries()])
def test_each_dashboard_panel_runs_and_returns_series(prometheus, run, title, exprs):
    series = Counter()
    for expr in exprs:
        series[expr] = len(prometheus.query(_substituted(expr, run), run["at"]))  # raises on a PromQL error
    assert sum(series.values()) > 0, series
