"""Check the NVML backend against nvidia-smi on a real NVIDIA node.

    python bench/nvml_vs_nvidia_smi.py                      # 10 pairs a GPU, 0.5 s apart
    python bench/nvml_vs_nvidia_smi.py --pairs 20 --csv pairs.csv --label load

For each pair, on each GPU: a full read by `collector.nvml.NvmlBackend`
(a slow tick, so every metric is read fresh), one `nvidia-smi
--query-gpu=...` of the same GPU, and a second full read. nvidia-smi's
value should lie between our two reads (a gauge that moved in between) or
equal them; the table prints, per metric, how many pairs agreed and the
largest difference from the nearer of our two reads.

Also prints what each NVML read costs on this machine (wall time of a
fast-tick and a slow-tick `sample`, and of each driver function), since
the collector's per-sample CPU target is measured on the sim backend.

Needs the NVIDIA driver, nvidia-smi and nvidia-ml-py; no GPU load of its
own (run a job beside it to compare under load). The agreement of each
metric is also written to bench/results/nvml_vs_nvidia_smi-<date>.json
(bench/results.py).
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402
from gpulens.collector.nvml import NvmlBackend, _load_pynvml  # noqa: E402

MIB = 2**20

# nvidia-smi field -> (our metric, how to turn our value into nvidia-smi's unit, tolerance).
# Tolerances are the rounding of nvidia-smi's printout, no more: any larger
# gap that our two reads do not bracket is a disagreement.
COMPARED: dict[str, tuple[str, Callable[[Any], float], float]] = {
    "power.draw.average": ("power_w", float, 0.01),
    "power.draw.instant": ("power_instant_w", float, 0.01),
    "enforced.power.limit": ("power_limit_w", float, 0.01),
    "utilization.gpu": ("gpu_util_pct", float, 0.0),
    "utilization.memory": ("mem_util_pct", float, 0.0),
    "clocks.sm": ("sm_clock_mhz", float, 0.0),
    "clocks.mem": ("mem_clock_mhz", float, 0.0),
    "temperature.gpu": ("temp_c", float, 0.0),
    "temperature.memory": ("mem_temp_c", float, 0.0),
    "memory.used": ("mem_used_bytes", lambda v: v / MIB, 1.0),
    "memory.total": ("mem_total_bytes", lambda v: v / MIB, 1.0),
    "clocks_event_reasons.active": ("throttle_reasons_mask", float, 0.0),
}


class CountingNvml:
    """pynvml, with the wall time of every `nvml*` function call recorded."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.calls: dict[str, list[int]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not (name.startswith("nvml") and callable(value)) or isinstance(value, type):
            return value
        calls = self.calls[name]

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return value(*args, **kwargs)
            finally:
                calls.append(time.perf_counter_ns() - started)

        return timed


def smi_fields(names: list[str]) -> list[str]:
    """The fields of COMPARED this nvidia-smi knows (older ones lack some)."""
    known = subprocess.run(["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True).stdout
    return [name for name in names if f'"{name}"' in known]


def query_smi(gpu_index: int, fields: list[str]) -> dict[str, float | None]:
    out = subprocess.run(
        ["nvidia-smi", f"--id={gpu_index}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    values: dict[str, float | None] = {}
    for name, text in zip(fields, (part.strip() for part in out.split(","))):
        try:
            values[name] = float(int(text, 16)) if text.startswith("0x") else float(text)
        except ValueError:
            values[name] = None  # [N/A], [Not Supported]
    return values


def compare(ours_before: float | None, smi: float | None, ours_after: float | None, tolerance: float) -> tuple[bool, float | None]:
    """(agrees, difference from the nearer of our reads) for one pair."""
    if smi is None or ours_before is None or ours_after is None:
        return (smi is None and ours_before is None and ours_after is None), None
    low, high = sorted((ours_before, ours_after))
    difference = 0.0 if low <= smi <= high else min(abs(smi - low), abs(smi - high))
    return difference <= tolerance, difference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between pairs")
    parser.add_argument("--label", default="", help="printed with each line (idle, load, ...)")
    parser.add_argument("--csv", type=Path, help="write every pair's values here")
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("nvml_vs_nvidia_smi: nvidia-smi is not on the PATH", file=sys.stderr)
        return 2

    record = results.start("nvml_vs_nvidia_smi", {name: (str(value) if isinstance(value, Path) else value)
                                                  for name, value in vars(args).items()})
    nvml = CountingNvml(_load_pynvml())
    backend = NvmlBackend(nvml_module=nvml)
    devices = backend.discover()
    record.params["gpus"] = [f"{d.model} driver {d.driver_version}" for d in devices]
    fields = smi_fields(list(COMPARED))
    label = f"[{args.label}] " if args.label else ""
    print(f"{label}machine: {platform.node()}, {len(devices)} GPU(s): "
          + "; ".join(f"{d.gpu_index} {d.model} driver {d.driver_version} NVML {d.backend_library_version}" for d in devices))
    print(f"{label}nvidia-smi fields compared: {', '.join(fields)}")

    rows: list[dict[str, Any]] = []
    sample_ns: dict[bool, list[int]] = {True: [], False: []}
    for device in devices:
        backend.sample(device.gpu_index, time.time_ns(), slow=True)  # first read: counters' baselines
    for pair in range(args.pairs):
        for device in devices:
            started = time.perf_counter_ns()
            backend.sample(device.gpu_index, time.time_ns(), slow=False)
            sample_ns[False].append(time.perf_counter_ns() - started)
            started = time.perf_counter_ns()
            before = backend.sample(device.gpu_index, time.time_ns(), slow=True).values
            sample_ns[True].append(time.perf_counter_ns() - started)
            smi = query_smi(device.gpu_index, fields)
            after = backend.sample(device.gpu_index, time.time_ns(), slow=True).values
            for name in fields:
                metric, to_smi_unit, tolerance = COMPARED[name]
                ours = [None if v.get(metric) is None else to_smi_unit(v[metric]) for v in (before, after)]
                agrees, diff = compare(ours[0], smi[name], ours[1], tolerance)
                rows.append({"pair": pair, "gpu_index": device.gpu_index, "field": name, "metric": metric,
                             "ours_before": ours[0], "nvidia_smi": smi[name], "ours_after": ours[1],
                             "agrees": agrees, "difference": diff})
        time.sleep(args.interval)

    print(f"{label}{'nvidia-smi field':<28} {'our metric':<22} {'agree':>7} {'max diff':>9} {'last: ours / smi / ours':>28}")
    for name in fields:
        mine = [r for r in rows if r["field"] == name]
        agreed = sum(r["agrees"] for r in mine)
        diffs = [r["difference"] for r in mine if r["difference"] is not None]
        last = mine[-1]
        shown = " / ".join("-" if v is None else f"{v:g}" for v in (last["ours_before"], last["nvidia_smi"], last["ours_after"]))
        print(f"{label}{name:<28} {COMPARED[name][0]:<22} {agreed:>3}/{len(mine):<3} "
              f"{(max(diffs) if diffs else math.nan):>9.3g} {shown:>28}")
        record.add({"field": name, "metric": COMPARED[name][0], "agreed": agreed, "pairs": len(mine),
                    "max_difference": max(diffs) if diffs else None})
    last_values = backend.sample(devices[0].gpu_index, time.time_ns(), slow=True).values
    unread = sorted(k for k, v in last_values.items() if v is None)
    print(f"{label}metrics NVML left NULL on GPU {devices[0].gpu_index}: {', '.join(unread) or 'none'}")

    def ms(ns: list[int]) -> str:
        ns = sorted(ns)
        return f"median {ns[len(ns) // 2] / 1e3:.0f} us, max {ns[-1] / 1e3:.0f} us ({len(ns)} reads)"

    print(f"{label}a fast-tick sample: {ms(sample_ns[False])}; a slow-tick sample: {ms(sample_ns[True])}")
    for name, ns in sorted(nvml.calls.items(), key=lambda item: -sorted(item[1])[len(item[1]) // 2]):
        print(f"{label}  {name}: {ms(ns)}")
    backend.close()
    if args.csv:
        with args.csv.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print(f"recorded in {record.write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
