"""Every analysis on DuckDB and on Spark, over the same synthetic fleet.

    python bench/engines.py                                  # 64 nodes x 8 GPUs x 24 h (44 M rows), 1,024 ranks
    python bench/engines.py --hosts 4 --telemetry-hours 1 --ranks 16 --kernels 1e5   # smaller
    python bench/engines.py --analyses time_breakdown,power_headroom --spark-master local[2]

Synthesises, with a seed, a fleet dataset in the contract's schema (the
generators of bench/analysis_latency.py): `--hosts` nodes of 8 GPUs with
`--telemetry-hours` of 1 Hz telemetry, and a run of `--ranks` ranks with
`--kernels` GPU kernels in all. Then each engine runs in its own process
(so one's memory does not count against the other): each analysis of
`analysis/sql/` in turn, its wall time, the peak memory so far, and the
rows it scans (the rows of the tables it reads) per second. The figures go
to stdout and to bench/results/ (bench/results.py), one row per engine and
analysis. No speed target: the figures show where Spark's fixed cost stops
mattering.

Each analysis is computed in full, every row and column, but its rows are
counted where they are made, not brought into the Python process: some
views are a row per sample or kernel (`power_samples` is 44 M rows at the
default scale), which nobody collects over a fleet. DuckDB streams the
result in Arrow batches and drops them; Spark writes it to its `noop`
sink, counting the rows on the way (an Observation).

Memory is the peak resident set of the Python process and, on Spark, of
its JVM apart. In `local[N]` the driver and the executors share that JVM,
bounded by `spark.driver.memory` (`--spark-driver-memory`, 6g: Spark's
default 1g ran out of heap at 64 hosts). `--memory-sweep 8,16,32,64` also
runs the telemetry analyses over the first 8, 16, ... hosts of the
dataset on a standalone cluster on the loopback address (a master and a
worker, bench/spark_cluster.py), each host count in a fresh driver: there
the driver (this Python and its JVM) is apart from the executor, so its
peak shows whether the driver's memory grows with the number of hosts
(the target: it does not). A Spark process that dies part way (a JVM out
of memory) leaves the rows it finished and a row for each analysis it did
not run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402
from processes import children  # noqa: E402

SEED = 7
# What a kept dataset holds (hosts, telemetry rows, ranks, kernels), written
# beside it once synthesised.
SCALE_FILE = "bench-scale.json"


def synthesise(root: Path, hosts: int, hours: float, ranks: int, kernels: int) -> dict[str, int]:
    import numpy as np

    from analysis_latency import synthesise_rank, synthesise_telemetry

    rng = np.random.default_rng(SEED)
    per_rank = max(1, kernels // ranks)
    for rank in range(ranks):
        synthesise_rank(root, rank, per_rank, steps=max(10, per_rank // 1250), rng=rng)
    telemetry_rows = synthesise_telemetry(root, 8, int(hours * 3600), rng, hosts=hosts)
    return {"hosts": hosts, "telemetry_rows": telemetry_rows, "ranks": ranks, "kernels": per_rank * ranks}


def python_peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def jvm_peak_rss_mib() -> float:
    """The peak resident set of this process's children now alive (the JVM)."""
    return sum(_peak_of(pid) for pid in children(os.getpid()))


def _peak_of(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def computed_rows(con, engine: str, name: str) -> int:
    """Compute the analysis `name` in full on the engine; its rows, counted
    where they are made (see the module's docstring)."""
    result = con.sql(f"select * from {name}")
    if engine == "duckdb":
        return sum(batch.num_rows for batch in result.to_arrow_reader(1 << 16))
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    counted = Observation(f"rows_{name}")
    result.frame.observe(counted, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
    return counted.get["rows"]


def open_for_bench(root: Path, engine: str, master: str, spark_conf: dict[str, str]):
    """The dataset on `engine`; on Spark, a session with `spark_conf`."""
    if engine == "duckdb":
        from gpulens.analysis.engine import open_engine

        return open_engine(root, "duckdb")
    from gpulens.analysis.spark import open_spark_dataset
    from gpulens.collector.spark_env import spark_session

    return open_spark_dataset(root, session=spark_session(master, spark_conf))


def run_engine(engine: str, root: Path, analyses: list[str], master: str, spark_conf: dict[str, str]) -> list[dict]:
    """Each analysis on `engine`, in this process: one row each, each also
    printed to stdout as a JSON line once done (the parent keeps the rows
    of a run that dies part way)."""
    from gpulens.analysis.registry import tables_named_in

    started = time.perf_counter()
    con = open_for_bench(root, engine, master, spark_conf)
    open_s = time.perf_counter() - started
    counts: dict[str, int] = {}

    def table_rows(table: str) -> int:
        if table not in counts:
            counts[table] = con.sql(f"select count(*) from {table}").fetchall()[0][0]
        return counts[table]

    rows = []
    for name in analyses:
        scanned = None
        wall0 = time.perf_counter()
        try:
            scanned = sum(table_rows(table) for table in sorted(tables_named_in(name) or ()))
            wall0 = time.perf_counter()
            out_rows, error = computed_rows(con, engine, name), None
        except Exception as failure:  # a bench reports a failure and goes on
            out_rows, error = None, " ".join(str(failure).split())[:300]
        wall_s = time.perf_counter() - wall0
        python_mib, jvm_mib = python_peak_rss_mib(), jvm_peak_rss_mib()
        rows.append({"engine": engine, "analysis": name, "wall_s": round(wall_s, 4), "open_s": round(open_s, 3),
                     "peak_rss_mib": round(python_mib + jvm_mib, 1), "python_peak_rss_mib": round(python_mib, 1),
                     "jvm_peak_rss_mib": round(jvm_mib, 1), "rows_scanned": scanned,
                     "rows_scanned_per_s": round(scanned / wall_s) if scanned and wall_s > 0 else None,
                     "rows_out": out_rows, "error": error})
        print(json.dumps(rows[-1]), flush=True)
        print(f"{engine:<7} {name:<26} {wall_s:>8.2f} s {python_mib:>7.0f} + {jvm_mib:>5.0f} MiB "
              f"{scanned or 0:>13,} rows scanned {out_rows if out_rows is not None else '-':>11} out"
              + (f"  FAILED: {error}" if error else ""), file=sys.stderr, flush=True)
    return rows


def engine_in_child(engine: str, root: Path, analyses: list[str], master: str, spark_conf: dict[str, str]) -> list[dict]:
    """`run_engine` in a process of its own: the rows it finished, and one
    row saying so where it died part way (a JVM out of memory, say)."""
    child = subprocess.run([sys.executable, __file__, "--engine-only", engine, "--dataset", str(root),
                            "--spark-master", master, "--spark-conf", json.dumps(spark_conf),
                            "--analyses", ",".join(analyses)], stdout=subprocess.PIPE, text=True)
    rows = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    done = {row["analysis"] for row in rows}
    if child.returncode != 0:
        rows.extend({"engine": engine, "analysis": name, "wall_s": None, "rows_out": None,
                     "error": f"not run: the {engine} process ended with status {child.returncode}"}
                    for name in analyses if name not in done)
    return rows


# The analyses that read telemetry alone: what grows with the hosts.
TELEMETRY_ANALYSES = ("power_headroom", "node_power", "power_samples", "telemetry_timeline")


def host_subset(root: Path, hosts: int, into: Path) -> Path:
    """A dataset of `root`'s traces and its first `hosts` hosts' telemetry
    and devices, as hard links (nothing copied; Spark's file listing does
    not follow symbolic links to folders)."""
    kept = {table: set(sorted(p.name for p in (root / table).iterdir())[:hosts])
            for table in ("telemetry", "devices") if (root / table).is_dir()}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in kept and len(relative.parts) > 1 and relative.parts[1] not in kept[relative.parts[0]]:
            continue
        if path.is_file():
            (into / relative).parent.mkdir(parents=True, exist_ok=True)
            os.link(path, into / relative)
    return into


def memory_sweep(root: Path, host_counts: list[int], worker_memory: str) -> list[dict]:
    """The telemetry analyses on Spark over the first N hosts, for each N,
    each in a fresh driver, on a standalone cluster on the loopback address
    (a master and a worker of 2 cores and `worker_memory`): the driver (this
    Python and its JVM) is measured apart from the executor, which runs
    under the worker. One row per N."""
    from spark_cluster import standalone_cluster

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulens-engines-sweep-") as scratch:
        with standalone_cluster(Path(scratch) / "cluster", cores=2, memory=worker_memory) as master:
            conf = {"spark.executor.memory": worker_memory, "spark.cores.max": "2"}
            for hosts in host_counts:
                subset = host_subset(root, hosts, Path(scratch) / f"hosts-{hosts}")
                runs = engine_in_child("spark", subset, list(TELEMETRY_ANALYSES), master, conf)
                ran = [run for run in runs if run.get("wall_s") is not None]
                rows.append({"kind": "memory_sweep", "hosts": hosts, "analyses": list(TELEMETRY_ANALYSES),
                             "spark_master": "standalone: 1 worker, 2 cores, " + worker_memory,
                             "rows_scanned_max": max((run["rows_scanned"] or 0 for run in ran), default=0),
                             "wall_s": round(sum(run["wall_s"] for run in ran), 2),
                             "python_peak_rss_mib": max((run["python_peak_rss_mib"] for run in ran), default=None),
                             "jvm_peak_rss_mib": max((run["jvm_peak_rss_mib"] for run in ran), default=None),
                             "errors": [run["error"] for run in runs if run["error"]]})
                print(f"memory sweep: {hosts} hosts: driver Python {rows[-1]['python_peak_rss_mib']} MiB, "
                      f"driver JVM {rows[-1]['jvm_peak_rss_mib']} MiB peak", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--telemetry-hours", type=float, default=24.0)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--kernels", type=float, default=4e6, help="GPU kernels in all, over the ranks")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--analyses", default=None, help="comma-separated (default: every analysis)")
    parser.add_argument("--memory-sweep", default=None, metavar="N,N,...",
                        help="also the telemetry analyses on Spark over the first N hosts, for each N")
    parser.add_argument("--spark-driver-memory", default="6g",
                        help="the Spark driver's memory; in local[N] the executors run in the driver's JVM "
                             "(Spark's default 1g ran out of heap on dash_power_cap_curve at 64 hosts)")
    parser.add_argument("--sweep-worker-memory", default="6g", help="the sweep's worker: memory for its executor")
    parser.add_argument("--keep", type=Path, default=None, help="write the dataset here and keep it (reused if there)")
    parser.add_argument("--engine-only", choices=["duckdb", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--spark-conf", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    from gpulens.analysis.registry import load_analyses

    analyses = args.analyses.split(",") if args.analyses else list(load_analyses())
    if args.engine_only:  # the child process of one engine
        run_engine(args.engine_only, args.dataset, analyses, args.spark_master, json.loads(args.spark_conf))
        return 0

    record = results.start("engines", {"hosts": args.hosts, "telemetry_hours": args.telemetry_hours,
                                       "ranks": args.ranks, "kernels": int(args.kernels),
                                       "spark_master": args.spark_master, "memory_sweep": args.memory_sweep,
                                       "spark_driver_memory": args.spark_driver_memory,
                                       "sweep_worker_memory": args.sweep_worker_memory if args.memory_sweep else None})
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpulens-engines-bench-"))
    started = time.perf_counter()
    if not (root / SCALE_FILE).exists():
        scale = synthesise(root, args.hosts, args.telemetry_hours, args.ranks, int(args.kernels))
        (root / SCALE_FILE).write_text(json.dumps(scale))
        print(f"dataset: {scale} synthesised in {time.perf_counter() - started:.1f} s at {root}", file=sys.stderr)
    scale = json.loads((root / SCALE_FILE).read_text())
    rows = []
    for engine in ("duckdb", "spark"):
        conf = {"spark.driver.memory": args.spark_driver_memory} if engine == "spark" else {}
        rows.extend({**row, **scale} for row in engine_in_child(engine, root, analyses, args.spark_master, conf))
    if args.memory_sweep:
        counts = [int(n) for n in args.memory_sweep.split(",")]
        rows.extend(memory_sweep(root, [n for n in counts if n <= scale["hosts"]], args.sweep_worker_memory))
    for row in rows:
        record.add(row)
    print(f"results: {record.write()}", file=sys.stderr)
    if args.keep is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
