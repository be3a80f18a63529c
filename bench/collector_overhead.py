"""How much the collector costs the node it measures.

    python bench/collector_overhead.py            # 64 GPUs, 10 Hz, 30 s
    python bench/collector_overhead.py --seconds 10 --gpus 16

Prints
  (a) the collector's own CPU time per GPU-sample: the process CPU time of
      a real `Collector` run on the `sim` backend whose samples were all
      computed before the run (so the model's cost is measured separately,
      outside the window, and nothing perturbs the run). Cross-check: a
      second run with the model in place, its CPU time read around each
      call and subtracted, and the cost of those reads (a system call of
      about 1 us each) subtracted too;
  (b) bytes on disk per metric value in the telemetry files it wrote
      (Prometheus' TSDB stores about 1.3 bytes per sample);
  (c) driver calls per GPU-sample with the fake NVML (tests/fakes), on a
      fast tick and on a slow tick;
  (e) the resident memory of the `gpulens collect` command itself, a
      process of its own on the sim backend (8 GPUs at 1 Hz, its defaults
      otherwise), read from /proc as it runs: the most and the last.
  (f) the extra CPU of job attribution (collector/jobs.py): 8 processes on
      each GPU, each with a /proc folder of its own in a fake /proc tree
      (Slurm and Kubernetes processes): the reads of a new process, the
      per-slow-tick check of a known one (its /proc/PID/stat), and the
      whole collector run with every tick slow, with and without
      attribution; from that, the extra per tick at the default cadence
      (a slow tick every 10 s) against the collector's CPU per tick.
Targets: (a) <= 20 us, (b) <= 1.5 bytes, (c) <= 3 calls on a fast tick,
(f) <= 5 % over the collector's CPU per tick.

    python bench/collector_overhead.py --jobs-only --seconds 10   # (f) alone
Every figure is also written to bench/results/collector_overhead-<date>.json,
and those of (f) to bench/results/collector_overhead_jobs-<date>.json
(bench/results.py).

    python bench/collector_overhead.py --nvml 20   # on an NVIDIA node

measures instead (d) the same collector on the real NVML backend, over
this node's GPUs for that many seconds: the process's CPU time per
GPU-sample, the part of it spent inside the backend's reads (driver calls
included), their wall time, and the driver calls per GPU-sample.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import results  # noqa: E402
from gpulens.collector.backend import DeviceSample, ProcessSample  # noqa: E402
from gpulens.collector.jobs import JobReader  # noqa: E402
from gpulens.collector.compact import COMPACT_MERGED_AT, COMPACT_PARTS_AT, MERGED_MARK, maybe_compact  # noqa: E402
from gpulens.collector.daemon import CollectOptions, Collector  # noqa: E402
from gpulens.collector.schema import TELEMETRY_METRICS  # noqa: E402
from gpulens.collector.sim import SimBackend  # noqa: E402
from gpulens.collector.parquet_io import parquet_options  # noqa: E402
from gpulens.collector.writer import STAGING_DIR  # noqa: E402


class _RecordingSim(SimBackend):
    """The sim backend, its own CPU time measured around each call."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.requests: list[tuple[int, int, bool]] = []
        self.cpu_ns = 0

    def sample(self, gpu_index, ts_ns, slow):
        started = time.process_time_ns()
        self.requests.append((gpu_index, ts_ns, slow))
        sample = super().sample(gpu_index, ts_ns, slow)
        self.cpu_ns += time.process_time_ns() - started
        return sample


class _PrecomputedSim(SimBackend):
    """The sim backend with every sample computed before the run.

    The collector's ticks fall on multiples of the interval, so the model
    is run ahead, in time order, over every grid point the run can use;
    `sample` then only hands the ready sample over. The model's cost is
    thereby paid outside the measured window, and nothing is measured per
    call. A request off the precomputed range is computed live and counted.
    """

    def __init__(self, gpus: int, interval_s: float, seconds: float, **options) -> None:
        super().__init__(gpus=gpus, **options)
        interval_ns = int(round(interval_s * 1e9))
        margin_ns = 5 * 10**9  # set-up time before the first tick, and the last tick's lateness
        first = -(-time.time_ns() // interval_ns) * interval_ns
        last = first + int(seconds * 1e9) + 2 * margin_ns
        devices = super().discover()
        self._ready: list[dict[int, DeviceSample]] = [{} for _ in devices]
        for ts_ns in range(first, last, interval_ns):
            for device in devices:
                # slow=True: the processes list too, dropped on fast ticks.
                self._ready[device.gpu_index][ts_ns] = super().sample(device.gpu_index, ts_ns, True)
        self.live = 0

    def sample(self, gpu_index, ts_ns, slow):
        sample = self._ready[gpu_index].pop(ts_ns, None)
        if sample is None:
            self.live += 1
            return super().sample(gpu_index, ts_ns, slow)
        if not slow:
            sample.processes = None
        return sample


class _ManyProcessesSim(_PrecomputedSim):
    """`_PrecomputedSim` with `per_gpu` processes on each GPU on slow
    ticks, pids `first_pid`.., whose jobs the collector reads from /proc."""

    def __init__(self, gpus: int, interval_s: float, seconds: float, per_gpu: int, first_pid: int) -> None:
        super().__init__(gpus, interval_s, seconds)
        self._processes = [
            [ProcessSample(pid=first_pid + gpu * per_gpu + k, used_mem_bytes=8 << 30, process_name="python")
             for k in range(per_gpu)]
            for gpu in range(gpus)
        ]

    def sample(self, gpu_index, ts_ns, slow):
        sample = super().sample(gpu_index, ts_ns, slow)
        sample.processes = self._processes[gpu_index] if slow else None
        return sample


def write_fake_proc(root: Path, pids: list[int]) -> None:
    """A /proc folder per pid, alternately a Slurm task (cgroup v1, readable
    environ) and a Kubernetes container (cgroup v2, systemd driver, nested
    PID namespace), as large as real ones (an environ of ~3 KiB)."""
    padding = "".join(f"VAR_{i}={'x' * 40}\0" for i in range(60))
    for n, pid in enumerate(pids):
        folder = root / str(pid)
        folder.mkdir(parents=True)
        fields = ["S"] + ["0"] * 18 + [str(100_000 + pid)] + ["0"] * 30
        (folder / "stat").write_text(f"{pid} (python) " + " ".join(fields) + "\n")
        if n % 2 == 0:
            (folder / "cgroup").write_text("".join(f"{i}:c{i}:/slurm/uid_1000/job_{pid // 64}/step_0/task_{n % 8}\n"
                                                   for i in range(12, 0, -1)))
            (folder / "environ").write_text(f"SLURM_JOB_ID={pid // 64}\0SLURM_STEP_ID=0\0SLURM_PROCID={n % 8}\0"
                                            f"SLURM_JOB_USER=alice\0{padding}")
            nspid = f"{pid}"
        else:
            uid = f"{pid:08x}_4b5a_6978_8a9b_0c1d2e3f4a5b"
            (folder / "cgroup").write_text("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                                           f"{uid}.slice/cri-containerd-{pid:064x}.scope\n")
            (folder / "environ").write_text(f"POD_NAME=trainer-{pid}\0POD_NAMESPACE=ml\0{padding}")
            nspid = f"{pid}\t{n % 8 + 1}"
        (folder / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nNSpid:\t{nspid}\nUid:\t0\t0\t0\t0\n")


def measure_job_attribution(gpus: int, per_gpu: int, hz: float, seconds: float, out: Path,
                            slow_every_s: float = 10.0) -> dict[str, float]:
    """(f): the extra CPU of job attribution with `per_gpu` processes a GPU."""
    first_pid = 200_000
    pids = list(range(first_pid, first_pid + gpus * per_gpu))
    proc = out / "proc"
    write_fake_proc(proc, pids)

    # The reader alone: every process new, then every process known.
    reader = JobReader(proc)
    cpu_start = time.process_time_ns()
    for pid in pids:
        reader.identity(pid)
    cold_ns = time.process_time_ns() - cpu_start
    known_ns = []
    for _ in range(20):
        cpu_start = time.process_time_ns()
        for pid in pids:
            reader.identity(pid)
        reader.forget_others(set(pids))
        known_ns.append(time.process_time_ns() - cpu_start)
    known_ns.sort()

    # The collector, every tick slow, with and without attribution, then at
    # the default cadence without (today's figure per tick).
    def run(proc_root: Path | None, slow_s: float, name: str) -> tuple[float, int]:
        backend = _ManyProcessesSim(gpus, 1.0 / hz, seconds, per_gpu, first_pid)
        options = CollectOptions(out=out / name, interval_s=1.0 / hz, slow_every_s=slow_s, duration_s=seconds,
                                 host="bench", proc_root=proc_root)
        collector = Collector(backend, options)
        cpu_start = time.process_time()
        summary = collector.run()
        return (time.process_time() - cpu_start) / summary.ticks * 1e6, summary.ticks

    Collector(SimBackend(gpus=gpus), CollectOptions(out=out / "warm-up", interval_s=1.0 / hz, duration_s=1.0,
                                                    flush_every_s=0.5, host="bench", proc_root=None)).run()
    slow_without_us, ticks = run(None, 1.0 / hz, "slow-without")
    slow_with_us, _ = run(proc, 1.0 / hz, "slow-with")
    today_us, _ = run(None, slow_every_s, "today")
    known_us = known_ns[len(known_ns) // 2] / 1e3
    slow_ticks_share = (1.0 / hz) / slow_every_s
    return {
        "gpus": gpus,
        "processes": len(pids),
        "cold_read_us_per_process": cold_ns / len(pids) / 1e3,
        "cold_tick_ms": cold_ns / 1e6,
        "known_slow_tick_us": known_us,
        "known_us_per_process": known_us / len(pids),
        "collector_slow_tick_us_without": slow_without_us,
        "collector_slow_tick_us_with": slow_with_us,
        "collector_extra_slow_tick_us": slow_with_us - slow_without_us,
        # less the first tick's reads of every process, spread over the run
        "collector_extra_slow_tick_us_steady": slow_with_us - slow_without_us - cold_ns / 1e3 / ticks,
        "ticks_per_run": ticks,
        "collector_tick_us_today": today_us,
        "extra_per_tick_us_at_default_cadence": known_us * slow_ticks_share,
        "extra_share_at_default_cadence": known_us * slow_ticks_share / today_us,
        "extra_share_measured_at_default_cadence":
            (slow_with_us - slow_without_us - cold_ns / 1e3 / ticks) * slow_ticks_share / today_us,
    }


def print_job_attribution(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as out:
        f = measure_job_attribution(args.gpus, args.processes_per_gpu, args.hz, args.seconds, Path(out))
    print(f"(f) job attribution, {f['gpus']} GPUs x {args.processes_per_gpu} processes ({f['processes']}) at "
          f"{args.hz:g} Hz for {args.seconds:g} s a run:")
    print(f"    a new process: {f['cold_read_us_per_process']:.0f} us CPU (stat, environ, cgroup, status); "
          f"all {f['processes']} new at once: {f['cold_tick_ms']:.1f} ms, once")
    print(f"    a slow tick with every process known: {f['known_slow_tick_us']:.0f} us "
          f"({f['known_us_per_process']:.1f} us a process: its /proc/PID/stat)")
    print(f"    the collector, every tick slow: {f['collector_slow_tick_us_with']:.0f} us a tick with attribution, "
          f"{f['collector_slow_tick_us_without']:.0f} us without: {f['collector_extra_slow_tick_us']:.0f} us more, "
          f"{f['collector_extra_slow_tick_us_steady']:.0f} us less the first tick's reads")
    print(f"    at the default cadence (a slow tick every 10 s): {f['extra_per_tick_us_at_default_cadence']:.1f} us a tick "
          f"more, against {f['collector_tick_us_today']:.0f} us a tick today: "
          f"{f['extra_share_at_default_cadence']:.2%} (from the collector runs, steady: "
          f"{f['extra_share_measured_at_default_cadence']:.2%})   target <= 5 %")
    record = results.start("collector_overhead_jobs", {"gpus": args.gpus, "processes_per_gpu": args.processes_per_gpu,
                                                       "hz": args.hz, "seconds": args.seconds})
    for key, value in f.items():
        record.add({"measure": key, "value": value})
    print(f"    recorded in {record.write()}")


def clock_read_overhead_ns(reads: int = 200_000) -> float:
    """CPU time that the two clock reads around each sim call cost outside
    the window they measure (so it lands on the collector's side).

    Each `process_time_ns` read is a system call (about 1 us on a VM); the
    window between the two reads holds part of their cost, the rest falls
    before and after it. Measured here as the loop's whole cost per
    iteration minus the mean window, with nothing inside the window.
    """
    clock = time.process_time_ns
    inside_ns = 0
    loop_start = clock()
    for _ in range(reads):
        started = clock()
        inside_ns += clock() - started
    whole_ns = clock() - loop_start
    return max(0.0, (whole_ns - inside_ns) / reads)


def _options(out: Path, hz: float, seconds: float) -> CollectOptions:
    return CollectOptions(out=out, interval_s=1.0 / hz, duration_s=seconds, host="bench")


def measure_collector(gpus: int, hz: float, seconds: float, out: Path) -> dict[str, float]:
    # Warm up first (imports, first flush): a daemon pays those once.
    Collector(SimBackend(gpus=gpus), CollectOptions(out=out / "warm-up", interval_s=1.0 / hz, duration_s=1.0, flush_every_s=0.5, host="bench")).run()

    # (a) The model run ahead: the process's CPU time is the collector's.
    backend = _PrecomputedSim(gpus, 1.0 / hz, seconds)
    collector = Collector(backend, _options(out / "measured", hz, seconds))
    cpu_start = time.process_time()
    summary = collector.run()
    cpu_total_s = time.process_time() - cpu_start

    # Cross-check: the model run in place, its CPU time read around each
    # call and subtracted, with the clock reads' own cost (the part outside
    # their windows) taken off too.
    in_place = _RecordingSim(gpus=gpus)
    cpu_start = time.process_time()
    in_place_summary = Collector(in_place, _options(out / "in-place", hz, seconds)).run()
    cpu_in_place_s = time.process_time() - cpu_start
    cpu_sim_s = in_place.cpu_ns / 1e9
    cpu_clock_s = clock_read_overhead_ns() * len(in_place.requests) / 1e9
    # And the model alone, replayed hot (lower than in place: warm caches).
    replay = SimBackend(gpus=gpus)
    cpu_start = time.process_time()
    for gpu_index, ts_ns, slow in in_place.requests:
        replay.sample(gpu_index, ts_ns, slow)
    cpu_replay_s = time.process_time() - cpu_start

    files = sorted((out / "measured" / "telemetry").glob("**/*.parquet"))
    merging = measure_merging(files, gpus * round(hz * CollectOptions(out=out).flush_every_s), out)
    bytes_on_disk = sum(f.stat().st_size for f in files)
    values = 0
    for f in files:
        table = pq.read_table(f, columns=list(TELEMETRY_METRICS))
        values += sum(len(col) - col.null_count for col in table.columns)
    return {
        "samples": summary.samples,
        "ticks": summary.ticks,
        "ticks_skipped": summary.ticks_skipped,
        "live_samples": backend.live,
        "cpu_total_s": cpu_total_s,
        "us_per_sample": cpu_total_s / summary.samples * 1e6,
        "cpu_in_place_s": cpu_in_place_s,
        "cpu_sim_s": cpu_sim_s,
        "cpu_clock_s": cpu_clock_s,
        "cpu_replay_s": cpu_replay_s,
        "us_per_sample_in_place": (cpu_in_place_s - cpu_sim_s - cpu_clock_s) / in_place_summary.samples * 1e6,
        "merge_hourly_us": merging["hourly"],
        "merge_daily_us": merging["daily"],
        "telemetry_bytes": bytes_on_disk,
        "metric_values": values,
        "bytes_per_value": bytes_on_disk / values if values else float("nan"),
    }


def measure_merging(files: list[Path], rows_per_flush: int, out: Path) -> dict[str, float]:
    """CPU per row of the writer's two merge tiers (collector/compact.py),
    which a 30 s run never reaches. The run's telemetry, repeated a minute
    later and later (ts moved on), makes flush files of the size the
    default 60 s flush writes; a tier's worth of them is merged the way
    the writer does it. Each row is merged twice over its life, once per
    tier, so the two figures add up."""
    run = pa.concat_tables([pq.read_table(f) for f in files])
    ts_us = pc.cast(run["ts"], pa.int64())
    span_us = int(pc.max(ts_us).as_py() - pc.min(ts_us).as_py()) + 1

    def later(table: pa.Table, by_us: int) -> pa.Table:
        moved = pc.cast(pc.add(pc.cast(table["ts"], pa.int64()), by_us), table.schema.field("ts").type)
        return table.set_column(table.schema.get_field_index("ts"), "ts", moved)

    copies = -(-rows_per_flush // run.num_rows)
    flush = pa.concat_tables([later(run, k * span_us) for k in range(copies)]).slice(0, rows_per_flush)
    flush_span_us = span_us * copies
    result = {}
    for tier, (count, mark) in {"hourly": (COMPACT_PARTS_AT, ""), "daily": (COMPACT_MERGED_AT, MERGED_MARK)}.items():
        folder = out / f"merge-{tier}" / "telemetry" / "host=bench" / "date=2026-01-01"
        folder.mkdir(parents=True)
        for k in range(count):
            pq.write_table(later(flush, k * flush_span_us), folder / f"part-{k:05d}{mark}{k}.parquet",
                           **parquet_options(flush.schema))
        staging = out / f"merge-{tier}" / STAGING_DIR
        cpu_start = time.process_time()
        written = maybe_compact(folder, staging)
        cpu_s = time.process_time() - cpu_start
        assert len(written) == 1, f"the {tier} merge did not run"
        result[tier] = cpu_s / (count * flush.num_rows) * 1e6
        shutil.rmtree(out / f"merge-{tier}")
    return result


def measure_driver_calls(gpus: int = 8, ticks: int = 100, slow_every: int = 10) -> dict[str, float]:
    """Driver calls per GPU-sample with the fake NVML, fast and slow ticks.

    Runs `ticks` ticks of 8 H100s through the real NvmlBackend, one slow
    tick in `slow_every`, after a first (full) read, and averages the calls
    the fake saw per GPU on each kind of tick.
    """
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from fakes.fake_pynvml import h100_sxm, make_fake_pynvml  # type: ignore[import-not-found]

    from gpulens.collector.nvml import NvmlBackend

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


class _TimedNvml:
    """Wraps an NvmlBackend: CPU and wall time of each sample, by tick kind."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.cpu_ns = {True: 0, False: 0}
        self.wall_ns: dict[bool, list[int]] = {True: [], False: []}

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def sample(self, gpu_index, ts_ns, slow):
        cpu, wall = time.process_time_ns(), time.perf_counter_ns()
        try:
            return self._backend.sample(gpu_index, ts_ns, slow)
        finally:
            self.wall_ns[slow].append(time.perf_counter_ns() - wall)
            self.cpu_ns[slow] += time.process_time_ns() - cpu


def measure_real_nvml(hz: float, seconds: float, out: Path, record: results.Record) -> None:
    """(d): the collector on this node's GPUs through the real driver."""
    from gpulens.collector.nvml import NvmlBackend, _load_pynvml
    from nvml_vs_nvidia_smi import CountingNvml

    # Warm up first (imports, the first flush), as for (a): a daemon pays those once.
    Collector(NvmlBackend(), CollectOptions(out=out / "warm-up", interval_s=1.0 / hz, duration_s=1.0,
                                            flush_every_s=0.5, host="bench")).run()
    nvml = CountingNvml(_load_pynvml())
    backend = _TimedNvml(NvmlBackend(nvml_module=nvml))
    devices = backend.discover()
    options = CollectOptions(out=out / "nvml", interval_s=1.0 / hz, duration_s=seconds, host="bench")
    cpu_start = time.process_time()
    summary = Collector(backend, options).run()
    cpu_total_s = time.process_time() - cpu_start
    samples = summary.samples
    slow_samples, fast_samples = len(backend.wall_ns[True]), len(backend.wall_ns[False])
    calls = sum(len(ns) for ns in nvml.calls.values())

    def spread(ns: list[int]) -> str:
        ns = sorted(ns)
        return f"median {ns[len(ns) // 2] / 1e3:.0f} us, p99 {ns[int(len(ns) * 0.99)] / 1e3:.0f} us" if ns else "none"

    print(f"(d) real NVML: {len(devices)} x {devices[0].model if devices else '?'} (driver "
          f"{devices[0].driver_version if devices else '?'}) at {hz:g} Hz for {seconds:g} s: {samples} GPU-samples "
          f"over {summary.ticks} ticks ({summary.ticks_skipped} skipped)")
    print(f"    collector CPU per GPU-sample: {cpu_total_s / samples * 1e6:.0f} us "
          f"(process {cpu_total_s:.2f} s CPU), of which inside the backend's reads: "
          f"{sum(backend.cpu_ns.values()) / samples / 1e3:.0f} us")
    print(f"    wall time of a read: fast tick {spread(backend.wall_ns[False])} ({fast_samples}); "
          f"slow tick {spread(backend.wall_ns[True])} ({slow_samples})")
    print(f"    driver calls per GPU-sample, all ticks: {calls / samples:.2f}")
    for name, ns in sorted(nvml.calls.items(), key=lambda item: -sum(item[1])):
        print(f"      {name}: {len(ns)} calls, {spread(ns)}")
    model = devices[0].model if devices else "?"
    fast, slow = sorted(backend.wall_ns[False]), sorted(backend.wall_ns[True])
    rows = [("(d) collector CPU per GPU-sample", cpu_total_s / samples * 1e6, "µs"),
            ("(d) of which inside the backend's reads", sum(backend.cpu_ns.values()) / samples / 1e3, "µs"),
            ("(d) wall time of one GPU's read, fast tick, median", fast[len(fast) // 2] / 1e3 if fast else None, "µs"),
            ("(d) wall time of one GPU's read, slow tick, median", slow[len(slow) // 2] / 1e3 if slow else None, "µs"),
            ("(d) NVML calls per GPU-sample, all ticks", calls / samples, "calls")]
    for measure, value, unit in rows:
        record.add({"measure": f"{measure} ({len(devices)} x {model}, {hz:g} Hz)", "value": value, "unit": unit,
                    "target": None, "met": None})


def measure_daemon_memory(seconds: float, gpus: int = 8) -> dict[str, float]:
    """Resident memory (MiB) of `gpulens collect` on the sim backend, read
    from /proc/PID/status every 0.1 s: the most seen and the last."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", str(gpus),
             "--duration", str(seconds), "--out", out],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        most = last = 0.0
        while process.poll() is None:
            try:
                with open(f"/proc/{process.pid}/status") as status:
                    rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
            except (OSError, StopIteration):  # gone between poll and read, or a zombie
                break
            last = rss_kib / 1024
            most = max(most, last)
            time.sleep(0.1)
        process.wait()
    return {"most_mib": most, "last_mib": last}


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
    parser.add_argument("--processes-per-gpu", type=int, default=8, help="(f): processes on each GPU")
    parser.add_argument("--jobs-only", action="store_true", help="measure (f), job attribution, alone")
    parser.add_argument("--nvml", type=float, metavar="SECONDS",
                        help="measure (d) on this node's GPUs through the real NVML, for SECONDS, instead")
    args = parser.parse_args()

    record = results.start("collector_overhead", vars(args))
    print(f"machine: {machine_line()}")
    if args.nvml:
        with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as out:
            measure_real_nvml(args.hz, args.nvml, Path(out), record)
        print(f"recorded in {record.write()}")
        return 0
    if args.jobs_only:
        print_job_attribution(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as out:
        m = measure_collector(args.gpus, args.hz, args.seconds, Path(out))
    print(f"collector: sim backend, {args.gpus} GPUs at {args.hz:g} Hz for {args.seconds:g} s: "
          f"{m['samples']} GPU-samples over {m['ticks']} ticks ({m['ticks_skipped']} skipped)")
    print(f"(a) collector CPU per GPU-sample: {m['us_per_sample']:.1f} us "
          f"(process {m['cpu_total_s']:.2f} s CPU, the sim model's samples computed before the run; "
          f"{m['live_samples']} computed live)   target <= 20 us")
    print(f"    cross-check, model in place: {m['us_per_sample_in_place']:.1f} us "
          f"(process {m['cpu_in_place_s']:.2f} s CPU minus the model's {m['cpu_sim_s']:.2f} s read around each call "
          f"and {m['cpu_clock_s']:.3f} s of those clock reads; the model replayed hot: {m['cpu_replay_s']:.2f} s)")
    print(f"    plus merging the flush files later (a 30 s run merges none): {m['merge_hourly_us']:.1f} us a sample "
          f"when {COMPACT_PARTS_AT} minute files become one, {m['merge_daily_us']:.1f} us when {COMPACT_MERGED_AT} merged files do; "
          f"with (a): {m['us_per_sample'] + m['merge_hourly_us'] + m['merge_daily_us']:.1f} us")
    print(f"(b) telemetry on disk: {m['telemetry_bytes']} bytes for {m['metric_values']} metric values = "
          f"{m['bytes_per_value']:.2f} bytes per value   target <= 1.5 (Prometheus ~1.3)")
    calls = measure_driver_calls()
    print(f"(c) NVML driver calls per GPU-sample (fake NVML): fast tick {calls['fast']:.1f}, "
              f"slow tick {calls['slow']:.1f}   target <= 3 on a fast tick")
    memory = measure_daemon_memory(min(args.seconds, 15.0))
    print(f"(e) `gpulens collect` resident memory (sim backend, 8 GPUs at 1 Hz, {min(args.seconds, 15.0):g} s): "
          f"at most {memory['most_mib']:.0f} MiB, {memory['last_mib']:.0f} MiB at the end")
    merged_us = m["us_per_sample"] + m["merge_hourly_us"] + m["merge_daily_us"]
    for measure, value, unit, target, met in [
        ("(a) collector CPU per GPU-sample, the sim model's samples computed before the run", m["us_per_sample"], "µs",
         "≤ 20 µs", m["us_per_sample"] <= 20),
        ("(a) cross-check: the model run in place, its CPU time subtracted", m["us_per_sample_in_place"], "µs", None, None),
        ("(a) with the later merging of the flush files", merged_us, "µs", None, None),
        ("(b) telemetry bytes on disk per metric value", m["bytes_per_value"], "bytes", "≤ 1.5 (Prometheus ≈ 1.3)",
         m["bytes_per_value"] <= 1.5),
        ("(c) NVML driver calls per GPU-sample, fake NVML, 8 × H100, fast tick", calls["fast"], "calls", "≤ 3",
         calls["fast"] <= 3),
        ("(c) the same, slow tick", calls["slow"], "calls", None, None),
        ("(e) resident memory of `gpulens collect` (sim backend, 8 GPUs at 1 Hz), at most", memory["most_mib"], "MiB",
         None, None),
    ]:
        record.add({"measure": measure, "value": value, "unit": unit, "target": target, "met": met})
    record.params.update(samples=m["samples"], ticks_skipped=m["ticks_skipped"])
    print(f"recorded in {record.write()}")
    print_job_attribution(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
