"""What `gpulens collect --metrics-address` costs: scrape latency and the
collector's CPU per scrape, with many GPUs.

    python bench/metrics_scrape.py                 # 64 GPUs, 200 scrapes
    python bench/metrics_scrape.py --gpus 8 --scrapes 50

Runs the real command as a process (sim backend, 1 Hz, gpulens names) and
  (a) scrapes /metrics `--scrapes` times, one after the other, as
      Prometheus does (OpenMetrics, gzip), and prints the wall time of each
      scrape from request to last byte: p50, p99, max;
  (b) reads the collector's CPU time (/proc/PID/stat, user + system) over
      a quiet stretch as long as the scraping, and over the scraping: the
      difference, divided by the scrapes, is the CPU one scrape costs the
      collector (its sampling goes on meanwhile, the same in both);
  (c) reads the resident memory of the same command with and without
      --metrics-address (prometheus_client, its HTTP server and ssl).
Records the rows in bench/results/ (bench/results.py). On a shared machine the
CPU of other work lands in the wall times, not in (b).
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402
from processes import stop  # noqa: E402
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ACCEPT = "application/openmetrics-text; version=1.0.0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _collect(gpus: int, out: Path, port: int | None) -> subprocess.Popen:
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", str(gpus),
               "--interval", "1", "--out", str(out)]
    if port is not None:
        command += ["--metrics-address", f"127.0.0.1:{port}"]
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _scrape(url: str) -> tuple[float, bytes]:
    """(seconds from request to last byte, the body decompressed)."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
    elapsed = time.perf_counter() - start
    return elapsed, gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(gpus: int, scrapes: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        port = _free_port()
        process = _collect(gpus, Path(folder) / "with", port)
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            deadline = time.monotonic() + 60
            while True:  # until a tick is served
                try:
                    if b"gpulens_gpu_power_watts{" in _scrape(url)[1]:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the collector served no sample within 60 s")
                time.sleep(0.2)
            latencies, sizes = [], []
            start_cpu, start = _cpu_s(process.pid), time.monotonic()
            for _ in range(scrapes):
                elapsed, body = _scrape(url)
                latencies.append(elapsed)
                sizes.append(len(body))
            scraping_s, scraping_cpu = time.monotonic() - start, _cpu_s(process.pid) - start_cpu
            quiet_cpu_start = _cpu_s(process.pid)
            time.sleep(scraping_s)  # the same stretch without scrapes
            quiet_cpu = _cpu_s(process.pid) - quiet_cpu_start
            rss_with = _rss_mib(process.pid)
        finally:
            stop(process)
        rows.append({
            "gpus": gpus, "scrapes": scrapes, "body_bytes": sizes[-1],
            "latency_p50_ms": round(_quantile(latencies, 0.50) * 1e3, 2),
            "latency_p99_ms": round(_quantile(latencies, 0.99) * 1e3, 2),
            "latency_max_ms": round(max(latencies) * 1e3, 2),
            "collector_cpu_per_scrape_ms": round((scraping_cpu - quiet_cpu) / scrapes * 1e3, 2),
            "collector_cpu_quiet_ms_per_s": round(quiet_cpu / scraping_s * 1e3, 2),
            "clock_tick_ms": round(1e3 / CLOCK_TICKS, 1),
            "rss_with_metrics_mib": round(rss_with, 1),
        })
        process = _collect(gpus, Path(folder) / "without", None)
        try:
            time.sleep(max(8.0, scraping_s))
            rows[-1]["rss_without_metrics_mib"] = round(_rss_mib(process.pid), 1)
        finally:
            stop(process)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    record = results.start("metrics_scrape", {"gpus": args.gpus, "scrapes": args.scrapes})
    for row in measure(args.gpus, args.scrapes):
        record.add(row)
    path = record.write()
    print(f"machine: {record.machine}")
    for row in record.rows:
        print(f"{row['gpus']} GPUs, {row['scrapes']} scrapes of {row['body_bytes']:,} bytes: "
              f"latency p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms, max {row['latency_max_ms']} ms; "
              f"collector CPU {row['collector_cpu_per_scrape_ms']} ms a scrape "
              f"(quiet: {row['collector_cpu_quiet_ms_per_s']} ms/s; /proc counts in {row['clock_tick_ms']} ms ticks); "
              f"RSS {row['rss_with_metrics_mib']} MiB with --metrics-address, {row['rss_without_metrics_mib']} MiB without")
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
