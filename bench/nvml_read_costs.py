"""What each NVML read costs on this node, and how its PCIe byte counters count.

    python bench/nvml_read_costs.py [--gpu 0] [--reps 20] [--watch-pcie SECONDS]

Prints, for GPU --gpu:
- each field of the collector's `nvmlDeviceGetFieldValues` batch read
  alone, then the whole batch: wall and CPU time (median of --reps), the
  value type NVML answers with and the value;
- the plain functions that read the same things, for comparison;
- with --watch-pcie, the PCIe TX/RX byte counters read as fast as the
  driver answers for that many seconds (run a copy beside it): the largest
  value seen and every drop, which tells the counter's width, and
  `nvmlDeviceGetPcieThroughput` over the same time.

Needs the NVIDIA driver and nvidia-ml-py. Every read's cost is also
written to bench/results/nvml_read_costs-<date>.json (bench/results.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import pynvml as nv  # noqa: E402

import results  # noqa: E402
from gpulens.collector.nvml import _COUNTER_FIELDS, _VALUE_FIELDS, VALUE_TYPE_ATTRS, gpm_metrics_request  # noqa: E402

# value type -> (its name, the member of the value union that holds it)
_TYPES = {getattr(nv, const): (const.removeprefix("NVML_VALUE_TYPE_"), attr) for const, attr in VALUE_TYPE_ATTRS.items()}


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, float, Any]:
    """(median wall us, median CPU us, last result) of `reps` calls."""
    walls, cpus, result = [], [], None
    for _ in range(reps):
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        try:
            result = fn()
        except nv.NVMLError as error:
            result = f"error: {error}"
        cpus.append(time.process_time_ns() - cpu)
        walls.append(time.perf_counter_ns() - wall)
    return statistics.median(walls) / 1e3, statistics.median(cpus) / 1e3, result


def field_value(entry: Any) -> str:
    if entry.nvmlReturn != nv.NVML_SUCCESS:
        return f"error: {nv.NVMLError(entry.nvmlReturn)}"
    kind, attr = _TYPES.get(entry.valueType, (str(entry.valueType), "ullVal"))
    return f"{kind} {getattr(entry.value, attr)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--watch-pcie", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--gpm", type=float, default=0.0, metavar="SECONDS",
                        help="also time GPM samples and print GPM's metrics over intervals of SECONDS")
    args = parser.parse_args()
    record = results.start("nvml_read_costs", vars(args))
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(args.gpu)
    print(f"GPU {args.gpu}: {nv.nvmlDeviceGetName(h)}, driver {nv.nvmlSystemGetDriverVersion()}")
    record.params.update(gpu_name=str(nv.nvmlDeviceGetName(h)), driver=str(nv.nvmlSystemGetDriverVersion()))

    def add(read: str, wall_us: float, cpu_us: float) -> None:
        record.add({"read": read, "wall_us": round(wall_us, 1), "cpu_us": round(cpu_us, 1)})

    fields = [(getattr(nv, const), const) for const, *_ in _VALUE_FIELDS + _COUNTER_FIELDS
              if "NVLINK" not in const]
    print(f"{'read':<52} {'wall us':>9} {'cpu us':>9}  value")
    for field_id, const in fields:
        wall, cpu, result = timed(lambda: nv.nvmlDeviceGetFieldValues(h, [(field_id, 0)]), args.reps)
        shown = result if isinstance(result, str) else field_value(result[0])
        print(f"{'field ' + const.removeprefix('NVML_FI_DEV_'):<52} {wall:>9.0f} {cpu:>9.0f}  {shown}")
        add("field " + const.removeprefix("NVML_FI_DEV_"), wall, cpu)
    batch = [(field_id, 0) for field_id, _ in fields]
    wall, cpu, _ = timed(lambda: nv.nvmlDeviceGetFieldValues(h, batch), args.reps)
    print(f"{'the batch (' + str(len(batch)) + ' fields)':<52} {wall:>9.0f} {cpu:>9.0f}")
    add(f"the batch ({len(batch)} fields)", wall, cpu)
    without_pcie = [(f, 0) for f, const in fields if "PCIE_COUNT" not in const]
    wall, cpu, _ = timed(lambda: nv.nvmlDeviceGetFieldValues(h, without_pcie), args.reps)
    print(f"{'the batch without the PCIe byte counters':<52} {wall:>9.0f} {cpu:>9.0f}")
    add("the batch without the PCIe byte counters", wall, cpu)

    functions: list[tuple[str, Callable[[], Any]]] = [
        ("nvmlDeviceGetPowerUsage", lambda: nv.nvmlDeviceGetPowerUsage(h)),
        ("nvmlDeviceGetTotalEnergyConsumption", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("nvmlDeviceGetViolationStatus(power)",
         lambda: nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_POWER).violationTime),
        ("nvmlDeviceGetPcieReplayCounter", lambda: nv.nvmlDeviceGetPcieReplayCounter(h)),
        ("nvmlDeviceGetPcieThroughput(TX) KB/s", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)),
        ("nvmlDeviceGetPcieThroughput(RX) KB/s", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)),
        ("nvmlDeviceGetUtilizationRates", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
        ("nvmlDeviceGetTemperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        ("nvmlDeviceGetMemoryInfo", lambda: nv.nvmlDeviceGetMemoryInfo(h).used),
        ("nvmlDeviceGetClockInfo(SM)", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
    ]
    for name, fn in functions:
        wall, cpu, result = timed(fn, args.reps)
        print(f"{name:<52} {wall:>9.0f} {cpu:>9.0f}  {result}")
        add(name, wall, cpu)

    if args.watch_pcie > 0:
        counters = [(nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]
        readings: list[tuple[int, int, int]] = []
        kinds = set()
        deadline = time.perf_counter() + args.watch_pcie
        throughput: list[tuple[int, int]] = []
        while time.perf_counter() < deadline:
            tx, rx = nv.nvmlDeviceGetFieldValues(h, counters)
            kinds.add(_TYPES.get(tx.valueType, (str(tx.valueType), None))[0])
            readings.append((time.perf_counter_ns(), tx.value.ullVal, rx.value.ullVal))
            if len(readings) % 10 == 0:
                try:
                    throughput.append((nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES),
                                       nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)))
                except nv.NVMLError:
                    pass
        span_s = (readings[-1][0] - readings[0][0]) / 1e9
        print(f"PCIe counters read {len(readings)} times in {span_s:.2f} s, value type(s) {sorted(map(str, kinds))}")
        for column, name in ((1, "TX"), (2, "RX")):
            values = [r[column] for r in readings]
            drops = [(a, b) for a, b in zip(values, values[1:]) if b < a]
            forward = sum(b - a if b >= a else b + 2**32 - a for a, b in zip(values, values[1:]))
            print(f"  {name}: first {values[0]}, max {max(values)} (2^32 = {2**32}), {len(drops)} drops "
                  f"(first: {drops[:3]}); counted as 32-bit: {forward / span_s / 1e9:.2f} GB/s")
        if throughput:
            print(f"  nvmlDeviceGetPcieThroughput over the same time, KB/s: TX median "
                  f"{statistics.median(t for t, _ in throughput)}, RX median {statistics.median(r for _, r in throughput)}")
    if args.gpm > 0:
        gpm(h, args.gpm, args.reps, add)
    nv.nvmlShutdown()
    print(f"recorded in {record.write()}")
    return 0


GPM_METRICS = ("SM_UTIL", "SM_OCCUPANCY", "GRAPHICS_UTIL", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL", "PCIE_TX_PER_SEC",
               "PCIE_RX_PER_SEC", "NVLINK_TOTAL_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC")


def gpm(h: Any, interval_s: float, reps: int, add: Callable[[str, float, float], None]) -> None:
    """GPM (Hopper and newer): support, the cost of a sample, and its metrics."""
    try:
        support = nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    except nv.NVMLError as error:
        print(f"GPM: nvmlGpmQueryDeviceSupport: {error}")
        return
    print(f"GPM supported: {support}")
    if not support:
        return
    samples = [nv.nvmlGpmSampleAlloc() for _ in range(2)]
    wall, cpu, result = timed(lambda: nv.nvmlGpmSampleGet(h, samples[0]), reps)
    print(f"{'nvmlGpmSampleGet':<52} {wall:>9.0f} {cpu:>9.0f}  {'' if not isinstance(result, str) else result}")
    add("nvmlGpmSampleGet", wall, cpu)
    ids = [getattr(nv, f"NVML_GPM_METRIC_{name}") for name in GPM_METRICS]

    def metrics() -> Any:
        return nv.nvmlGpmMetricsGet(gpm_metrics_request(nv, *samples, ids))

    time.sleep(0.05)
    nv.nvmlGpmSampleGet(h, samples[1])
    wall, cpu, _ = timed(metrics, reps)
    print(f"{'nvmlGpmMetricsGet (' + str(len(ids)) + ' metrics)':<52} {wall:>9.0f} {cpu:>9.0f}")
    add(f"nvmlGpmMetricsGet ({len(ids)} metrics)", wall, cpu)
    for _ in range(4):
        nv.nvmlGpmSampleGet(h, samples[0])
        time.sleep(interval_s)
        nv.nvmlGpmSampleGet(h, samples[1])
        result = metrics()
        shown = []
        for i, name in enumerate(GPM_METRICS):
            entry = result.metrics[i]
            value = f"{entry.value:.1f}" if entry.nvmlReturn == nv.NVML_SUCCESS else f"err {entry.nvmlReturn}"
            shown.append(f"{name}={value}")
        print(f"GPM over {interval_s:g} s: " + ", ".join(shown))
    for sample in samples:
        nv.nvmlGpmSampleFree(sample)


if __name__ == "__main__":
    sys.exit(main())
