"""How much the collector costs the node it measures.

    python bench/collector_overhead.py            # 64 GPUs, 10 Hz, 30 s
    python bench/collector_overhead.py --seconds 10 --gpus 16

Prints
  (a) the collector's own CPU time per GPU-sample: the process CPU time of
      a real `Collector` run on the `sim` backend, minus the sim model's
      own cost, measured separately around each of its calls;
  (b) bytes on disk per metric value in the telemetry files it wrote
      (Prometheus' TSDB stores about 1.3 bytes per sample);
  (c) driver calls per GPU-sample with the fake NVML (tests/fakes), on a
      fast tick and on a slow tick.
Targets: (a) <= 20 us, (b) <= 1.5 bytes, (c) <= 3 calls on a fast tick.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import pyarrow.parquet as pq  # noqa: E402

from collector.daemon import CollectOptions, Collector  # noqa: E402
from collector.schema import TELEMETRY_METRICS  # noqa: E402
from collector.sim import SimBackend  # noqa: E402


class _RecordingSim(SimBackend):
    """The sim backend, remembering which samples were asked for."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.requests: list[tuple[int, int, bool]] = []
        self.cpu_ns = 0

    def sample(self, gpu_index, ts_ns, slow):
        # The model's own CPU time, measured where it runs (cold caches
        # between ticks included); the two clock reads count as the model's.
        started = time.process_time_ns()
        self.requests.append((gpu_index, ts_ns, slow))
        sample = super().sample(gpu_index, ts_ns, slow)
        self.cpu_ns += time.process_time_ns() - started
        return sample


def measure_collector(gpus: int, hz: float, seconds: float, out: Path) -> dict[str, float]:
    # Warm up first (imports, first flush): a daemon pays those once.
    Collector(SimBackend(gpus=gpus), CollectOptions(out=out / "warm-up", interval_s=1.0 / hz, duration_s=1.0, flush_every_s=0.5, host="bench")).run()
    out = out / "measured"
    backend = _RecordingSim(gpus=gpus)
    collector = Collector(backend, CollectOptions(out=out, interval_s=1.0 / hz, duration_s=seconds, host="bench"))
    cpu_start = time.process_time()
    summary = collector.run()
    cpu_total_s = time.process_time() - cpu_start

    cpu_sim_s = backend.cpu_ns / 1e9
    # Cross-check: the same calls replayed in a tight loop (hot caches, so
    # lower than in place).
    replay = SimBackend(gpus=gpus)
    cpu_start = time.process_time()
    for gpu_index, ts_ns, slow in backend.requests:
        replay.sample(gpu_index, ts_ns, slow)
    cpu_replay_s = time.process_time() - cpu_start

    files = sorted((out / "telemetry").glob("**/*.parquet"))
    bytes_on_disk = sum(f.stat().st_size for f in files)
    values = 0
    for f in files:
        table = pq.read_table(f, columns=list(TELEMETRY_METRICS))
        values += sum(len(col) - col.null_count for col in table.columns)
    return {
        "samples": summary.samples,
        "ticks": summary.ticks,
        "ticks_skipped": summary.ticks_skipped,
        "cpu_total_s": cpu_total_s,
        "cpu_sim_s": cpu_sim_s,
        "cpu_replay_s": cpu_replay_s,
        "us_per_sample": (cpu_total_s - cpu_sim_s) / summary.samples * 1e6,
        "telemetry_bytes": bytes_on_disk,
        "metric_values": values,
        "bytes_per_value": bytes_on_disk / values if values else float("nan"),
    }


def measure_driver_calls(gpus: int = 8, ticks: int = 100, slow_every: int = 10) -> dict[str, float]:
    """Driver calls per GPU-sample with the fake NVML, fast and slow ticks.

    Runs `ticks` ticks of 8 H100s through the real NvmlBackend, one slow
    tick in `slow_every`, after a first (full) read, and averages the calls
    the fake saw per GPU on each kind of tick.
    """
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from fakes.fake_pynvml import h100_sxm, make_fake_pynvml  # type: ignore[import-not-found]

    from collector.nvml import NvmlBackend

    module = make_fake_pynvml([h100_sxm(i) for i in range(gpus)])
    fake = module.fake
    backend = NvmlBackend(nvml_module=module)
    devices = backend.discover()
    ts_ns = 1_767_225_600_000_000_000
    for device in devices:  # the first read of each GPU reads everything
        backend.sample(device.gpu_index, ts_ns, slow=True)
    calls = {True: [], False: []}
    for tick in range(1, ticks + 1):
        ts_ns += 100_000_000
        fake.advance(0.1, ts_ns // 1000)
        slow = tick % slow_every == 0
        fake.reset_calls()
        for device in devices:
            backend.sample(device.gpu_index, ts_ns, slow)
        calls[slow].append(fake.count() / len(devices))
    backend.close()
    return {"fast": sum(calls[False]) / len(calls[False]), "slow": sum(calls[True]) / len(calls[True])}


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    print(f"machine: {machine_line()}")
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as out:
        m = measure_collector(args.gpus, args.hz, args.seconds, Path(out))
    print(f"collector: sim backend, {args.gpus} GPUs at {args.hz:g} Hz for {args.seconds:g} s: "
          f"{m['samples']} GPU-samples over {m['ticks']} ticks ({m['ticks_skipped']} skipped)")
    print(f"(a) collector CPU per GPU-sample: {m['us_per_sample']:.1f} us "
          f"(process {m['cpu_total_s']:.2f} s CPU minus the sim model's {m['cpu_sim_s']:.2f} s measured in place; "
          f"{m['cpu_replay_s']:.2f} s when replayed hot)   target <= 20 us")
    print(f"(b) telemetry on disk: {m['telemetry_bytes']} bytes for {m['metric_values']} metric values = "
          f"{m['bytes_per_value']:.2f} bytes per value   target <= 1.5 (Prometheus ~1.3)")
    calls = measure_driver_calls()
    print(f"(c) NVML driver calls per GPU-sample (fake NVML): fast tick {calls['fast']:.1f}, "
              f"slow tick {calls['slow']:.1f}   target <= 3 on a fast tick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
