"""How long each analysis takes on a big dataset.

    python bench/analysis_latency.py                 # 10M kernels, 8 ranks, 1 day of 8-GPU telemetry
    python bench/analysis_latency.py --kernels 1e6   # smaller
    python bench/analysis_latency.py --keep DIR      # keep the synthesised dataset in DIR
    python bench/analysis_latency.py --hosts 16      # a fleet: 16 nodes' telemetry

Synthesises, with a seed, a dataset in the contract's schema: a training
run of 8 ranks with `--kernels` GPU kernels in all (compute on one stream,
NCCL on another, memcpy/memset, each with its launching runtime call,
profiler steps and collectives with sequence numbers, one late rank), and
one day of 1 Hz telemetry from the same 8-GPU host, on the same epoch as
the trace. Each rank's tables go through `collector.derive`, as ingest
does, and that time is printed apart (it is ingest's cost, paid once).
Then it opens the dataset and materialises every analysis view
(`analysis/sql/*.sql`) in turn, printing wall time, CPU time and the
process's peak memory after each; the building blocks with a row per
kernel or per telemetry sample (`scoped_kernels`, `kernel_launches`,
`host_telemetry`, `power_samples`) are timed as a full scan instead.
Target: <= 1 s each on a 2-core machine. Every figure is also written to
bench/results/analysis_latency-<date>.json (bench/results.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import results  # noqa: E402

from gpulens.analysis.dataset import open_dataset  # noqa: E402
from gpulens.analysis.registry import load_analyses, run_analysis  # noqa: E402
from gpulens.collector.derive import derive_trace_tables  # noqa: E402
from gpulens.collector.parquet_io import parquet_options, trace_parquet_options  # noqa: E402
from gpulens.collector.schema import TRACE_SCHEMAS, TELEMETRY_SCHEMA  # noqa: E402

# Building blocks with a row per kernel or sample: other views and people's own SQL
# filter and aggregate them, nobody fetches 10 million rows, so they are
# timed as a scan computing every column of every row ("(scan)").
ROW_LEVEL_VIEWS = ("scoped_kernels", "kernel_launches", "host_telemetry", "power_samples")

T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
HOST = "bench-node-01"
RUN = "bench-training"


def _write(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **parquet_options(table.schema))


def _trace_table(name: str, columns: dict[str, object], n: int) -> pa.Table:
    schema = TRACE_SCHEMAS[name]
    arrays = []
    for field in schema:
        if field.name in columns:
            arrays.append(pa.array(columns[field.name], type=field.type))
        else:
            arrays.append(pa.nulls(n, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def synthesise_rank(root: Path, rank: int, kernels: int, steps: int, rng: np.random.Generator) -> float:
    """Write one rank's trace tables as ingest does; seconds spent deriving."""
    per_step = kernels // steps
    n = per_step * steps
    comm_every = 25  # one NCCL kernel in 25
    step_of = np.repeat(np.arange(steps), per_step)
    position = np.tile(np.arange(per_step), steps)
    is_comm = (position % comm_every) == comm_every - 1
    is_memory = (position % 97) == 5
    dur_ns = rng.lognormal(mean=9.5, sigma=1.0, size=n).astype(np.int64) + 2_000  # ~13 us median
    dur_ns[is_comm] = rng.lognormal(mean=12.0, sigma=0.6, size=int(is_comm.sum())).astype(np.int64)
    # CPU launches: one call every ~9 us; the GPU runs each kernel when both it
    # and the previous kernel on its stream are ready (queueing when busy).
    call_gap_ns = rng.integers(4_000, 14_000, size=n)
    call_start_ns = T0_NS + 60_000_000_000 + np.cumsum(call_gap_ns) + rank * 3_000
    call_dur_ns = rng.integers(2_500, 9_000, size=n)
    ready_ns = call_start_ns + call_dur_ns + rng.integers(1_000, 6_000, size=n)
    if rank == 5:  # the late rank: its work runs 20% behind
        ready_ns = ready_ns + (np.arange(n) // 50) * 400
    start_ns = np.empty(n, dtype=np.int64)
    end_ns = np.empty(n, dtype=np.int64)
    # Two streams: a running max per stream (vectorised per stream).
    for stream_mask in (~is_comm, is_comm):
        idx = np.nonzero(stream_mask)[0]
        r, d = ready_ns[idx], dur_ns[idx]
        # start_i = max(ready_i, end_{i-1}); end = start + d -> prefix-max form
        shifted = r - np.concatenate(([0], np.cumsum(d)[:-1]))
        s = np.maximum.accumulate(shifted) + np.concatenate(([0], np.cumsum(d)[:-1]))
        start_ns[idx] = s
        end_ns[idx] = s + d
    correlation_id = np.arange(n, dtype=np.int64) + 50_000
    category = np.where(is_comm, "communication", np.where(is_memory, "memory", "compute"))
    kind = np.where(is_memory, "memcpy", "kernel")
    names = np.array(["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "void at::native::vectorized_elementwise_kernel<4>",
                      "void at::native::reduce_kernel<512, 1>", "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>"])
    name = names[position % len(names)].astype(object)
    name[is_comm] = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    name[is_memory] = "Memcpy HtoD (Pinned -> Device)"
    folder = root / "traces" / f"run={RUN}"
    tables: dict[str, pa.Table] = {}
    tables["kernels"] = _trace_table("kernels", {
        "run": [RUN] * n, "rank": np.full(n, rank, dtype=np.int32), "device": np.full(n, rank, dtype=np.int32),
        "stream": np.where(is_comm, 20, 7), "name": name, "category": category, "kind": kind,
        "start_ns": start_ns, "end_ns": end_ns, "dur_ns": end_ns - start_ns, "correlation_id": correlation_id,
        "external_id": correlation_id,
    }, n)
    first_in_step = np.searchsorted(step_of, np.arange(steps))
    step_start = call_start_ns[first_in_step] - 1_000
    step_end = np.append(step_start[1:], end_ns.max() + 1_000)
    # Each step ends with the loop reading its loss (`.item()`): a 1 µs cudaStreamSynchronize.
    sync_start = step_end - 2_000
    tables["api_calls"] = _trace_table("api_calls", {
        "run": [RUN] * (n + steps), "rank": np.full(n + steps, rank, dtype=np.int32), "pid": np.full(n + steps, 4000 + rank),
        "tid": np.full(n + steps, 4000 + rank),
        "name": np.concatenate([np.where(is_memory, "cudaMemcpyAsync", "cudaLaunchKernel"), np.full(steps, "cudaStreamSynchronize")]),
        "start_ns": np.concatenate([call_start_ns, sync_start]),
        "end_ns": np.concatenate([call_start_ns + call_dur_ns, sync_start + 1_000]),
        "dur_ns": np.concatenate([call_dur_ns, np.full(steps, 1_000)]),
        "correlation_id": np.concatenate([correlation_id, np.arange(steps) + 10 * n]),
    }, n + steps)
    # Each step opens with the loop fetching its batch (a DataLoader's next()), 900 ns here.
    fetch_end = step_start + 900
    tables["annotations"] = _trace_table("annotations", {
        "run": [RUN] * 2 * steps, "rank": np.full(2 * steps, rank, dtype=np.int32),
        "name": [f"ProfilerStep#{s}" for s in range(steps)] + ["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"] * steps,
        "pid": np.full(2 * steps, 4000 + rank), "tid": np.full(2 * steps, 4000 + rank),
        "kind": ["profiler_step"] * steps + ["user"] * steps, "step": np.concatenate([np.arange(steps), np.full(steps, None)]),
        "start_ns": np.concatenate([step_start, step_start]), "end_ns": np.concatenate([step_end, fetch_end]),
        "dur_ns": np.concatenate([step_end - step_start, fetch_end - step_start]),
    }, 2 * steps)
    comm_idx = np.nonzero(is_comm)[0]
    c = len(comm_idx)
    tables["collectives"] = _trace_table("collectives", {
        "run": [RUN] * c, "rank": np.full(c, rank, dtype=np.int32), "process_group": ["0"] * c, "process_group_desc": ["default_pg"] * c,
        "seq": np.arange(c), "op": ["all_reduce"] * c, "bytes": np.full(c, 64 * 2**20), "group_size": np.full(c, 8, dtype=np.int32),
        "dtype": ["bfloat16"] * c, "in_nelems": np.full(c, 32 * 2**20), "out_nelems": np.full(c, 32 * 2**20),
        "start_ns": start_ns[comm_idx], "end_ns": end_ns[comm_idx], "cpu_start_ns": call_start_ns[comm_idx],
        "cpu_end_ns": call_start_ns[comm_idx] + call_dur_ns[comm_idx], "kernel_name": name[comm_idx],
        "correlation_id": correlation_id[comm_idx], "external_id": correlation_id[comm_idx],
    }, c)
    tables["runs"] = _trace_table("runs", {
        "run": [RUN], "rank": [rank], "world_size": [8], "host": [HOST], "device_name": ["NVIDIA H100 80GB HBM3"],
        "source_path": [f"synthetic/rank{rank}"], "source_format": ["kineto"], "epoch_offset_ns": [0], "time_base": ["epoch"],
    }, 1)
    # What ingest adds when it writes a file (collector.derive), timed: it
    # is ingest's cost, paid once, not the analyses'.
    derive_started = time.perf_counter()
    tables = derive_trace_tables(tables)
    derive_s = time.perf_counter() - derive_started
    for name, table in tables.items():
        if table.num_rows:
            path = folder / name / f"rank{rank}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, **trace_parquet_options(table.schema))  # as ingest writes them
    return derive_s


def synthesise_telemetry(root: Path, gpus: int, seconds: int, rng: np.random.Generator, hosts: int = 1) -> int:
    """`hosts` nodes of `gpus` GPUs, `seconds` at 1 Hz; the traces ran on the
    first (HOST), and each other is drawn the same way with its power scaled
    by 1 - 0.02 × its number (a fleet: nodes apart in power)."""
    rows = _synthesise_host(root, HOST, gpus, seconds, rng, 1.0)
    for number in range(1, hosts):
        rows += _synthesise_host(root, f"bench-node-{number + 1:02d}", gpus, seconds, rng, 1.0 - 0.02 * number)
    return rows


def _synthesise_host(root: Path, host: str, gpus: int, seconds: int, rng: np.random.Generator, power_scale: float) -> int:
    n = gpus * seconds
    ts_us = np.tile(T0_NS // 1000 + np.arange(seconds, dtype=np.int64) * 1_000_000, gpus)
    gpu = np.repeat(np.arange(gpus, dtype=np.int32), seconds)
    phase = (np.arange(n) % 2) == 0
    util = np.where(phase, 97.0, 58.0) + rng.normal(0, 2, n)
    power_w = np.round(np.minimum(700.0, 72 + util * 6.3 + rng.normal(0, 9, n)), 3)
    power_w[gpu == 3] = np.minimum(700.0, power_w[gpu == 3] * 1.12)
    power_w = np.round(power_w * power_scale, 3)
    capped = power_w >= 700.0
    columns = {
        "ts": pa.array(ts_us, pa.int64()).cast(TELEMETRY_SCHEMA.field("ts").type),
        "host": [host] * n, "gpu_index": gpu, "gpu_uuid": [f"GPU-{g}" for g in gpu], "vendor": ["nvidia"] * n,
        "power_w": power_w, "power_instant_w": power_w + rng.normal(0, 5, n), "power_max_w": power_w + 6,
        "power_limit_w": np.full(n, 700.0), "energy_j": np.round(np.cumsum(power_w.reshape(gpus, seconds), axis=1).ravel(), 3),
        "gpu_util_pct": np.clip(util, 0, 100).astype(np.float32), "mem_util_pct": np.clip(util * 0.6, 0, 100).astype(np.float32),
        "sm_clock_mhz": np.where(capped, 1750, 1980).astype(np.int32), "mem_clock_mhz": np.full(n, 2619, dtype=np.int32),
        "temp_c": np.round(40 + power_w * 0.05).astype(np.float32), "mem_used_bytes": np.full(n, 68 * 2**30),
        "mem_total_bytes": np.full(n, 80 * 2**30), "throttle_reasons": [["sw_power_cap"] if c else [] for c in capped],
        "throttle_reasons_mask": np.where(capped, 4, 0), "power_violation_ns": np.cumsum(capped.reshape(gpus, seconds), axis=1).ravel() * 1_000_000_000,
        "thermal_violation_ns": np.zeros(n, dtype=np.int64), "pcie_tx_bytes_per_s": np.full(n, 2e9), "pcie_rx_bytes_per_s": np.full(n, 8e9),
        "link_tx_bytes_per_s": np.where(phase, 1e10, 3.1e11), "link_rx_bytes_per_s": np.where(phase, 1e10, 3.1e11),
    }
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in TELEMETRY_SCHEMA]
    arrays = [a if isinstance(a, (pa.Array, pa.ChunkedArray)) else pa.array(a, type=f.type) for a, f in zip(arrays, TELEMETRY_SCHEMA)]
    table = pa.Table.from_arrays(arrays, schema=TELEMETRY_SCHEMA)
    _write(table, root / "telemetry" / f"host={host}" / "date=2026-01-01" / "part-bench.parquet")
    devices = pa.table({
        "ts": pa.array([T0_NS // 1000] * gpus, pa.int64()).cast(TELEMETRY_SCHEMA.field("ts").type), "host": [host] * gpus,
        "gpu_index": pa.array(range(gpus), pa.int32()), "gpu_uuid": [f"GPU-{g}" for g in range(gpus)], "vendor": ["nvidia"] * gpus,
        "model": ["NVIDIA H100 80GB HBM3"] * gpus, "pci_bus_id": [f"00000000:{0x18 + g:02X}:00.0" for g in range(gpus)],
        "power_limit_w": [700.0] * gpus, "link_kind": ["nvlink"] * gpus,
        "link_count": pa.array([18] * gpus, pa.int32()), "link_peak_bytes_per_s": [450e9] * gpus, "pcie_peak_bytes_per_s": [63.015e9] * gpus,
    })
    _write(devices, root / "devices" / f"host={host}" / "part-bench.parquet")
    return n


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=float, default=10e6, help="GPU kernels in all, over 8 ranks")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--telemetry-hours", type=float, default=24.0)
    parser.add_argument("--hosts", type=int, default=1, help="nodes of 8 GPUs in the telemetry (a fleet: > 1)")
    parser.add_argument("--keep", type=Path, default=None, help="write the dataset here and keep it")
    args = parser.parse_args()

    record = results.start("analysis_latency", {name: (str(value) if isinstance(value, Path) else value)
                                                for name, value in vars(args).items()})
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), platform.machine())
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpulens-analysis-bench-"))
    rng = np.random.default_rng(7)
    started = time.perf_counter()
    if not (root / "traces").exists():
        per_rank = int(args.kernels) // args.ranks
        derive_s = sum(synthesise_rank(root, rank, per_rank, steps=max(10, per_rank // 1250), rng=rng)
                       for rank in range(args.ranks))
        telemetry_rows = synthesise_telemetry(root, 8, int(args.telemetry_hours * 3600), rng, hosts=args.hosts)
        print(f"dataset: {int(args.kernels):,} kernels over {args.ranks} ranks, {telemetry_rows:,} telemetry rows, "
              f"synthesised in {time.perf_counter() - started:.1f} s at {root}")
        print(f"derived columns (collector.derive, paid at ingest): {derive_s:.1f} s CPU for all ranks, "
              f"{int(args.kernels) / derive_s / 1e6:.1f} M kernels/s")
        record.params.update(telemetry_rows=telemetry_rows, derive_s=round(derive_s, 2))
    con = open_dataset(root)
    kernels = con.execute("select count(*) from kernels").fetchone()[0]
    print(f"analyses on {kernels:,} kernels (peak memory so far {peak_rss_mib():.0f} MiB); target <= 1 s each\n")
    print(f"{'analysis':<26} {'rows':>10} {'wall_s':>8} {'cpu_s':>8} {'peak_mib':>9}")
    slow = []
    for name in load_analyses():
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if name in ROW_LEVEL_VIEWS:
            # every column of every row computed, not fetched into Python
            row_count = con.execute(f"select count(*), max(columns(*)) from {name}").fetchall()[0][0]
        else:
            row_count = run_analysis(con, name).height
        wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
        mark = "" if wall_s <= 1.0 else "  > 1 s"
        if wall_s > 1.0:
            slow.append(name)
        if name in ROW_LEVEL_VIEWS:
            mark = "  (scan)" + mark
        print(f"{name:<26} {row_count:>10,} {wall_s:>8.2f} {cpu_s:>8.2f} {peak_rss_mib():>9.0f}{mark}")
        record.add({"analysis": name, "scan": name in ROW_LEVEL_VIEWS, "rows": row_count, "wall_s": round(wall_s, 3),
                    "cpu_s": round(cpu_s, 3), "peak_mib": round(peak_rss_mib())})
    print(f"\n{len(load_analyses()) - len(slow)} of {len(load_analyses())} analyses within 1 s" + (f"; slower: {', '.join(slow)}" if slow else ""))
    record.params["kernels_found"] = kernels
    print(f"recorded in {record.write()}")
    if args.keep is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
