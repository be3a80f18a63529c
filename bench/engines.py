"""Every analysis on DuckDB and on Spark, over the same synthetic fleet.

    python bench/engines.py                                  # 64 nodes x 8 GPUs x 24 h (44 M rows), 1,024 ranks
    python bench/engines.py --hosts 4 --telemetry-hours 1 --ranks 16 --kernels 1e5   # smaller
    python bench/engines.py --analyses time_breakdown,power_headroom --spark-master local[2]

Synthesises, with a seed, a fleet dataset in the contract's schema (the
generators of bench/analysis_latency.py): `--hosts` nodes of 8 GPUs with
`--telemetry-hours` of 1 Hz telemetry, and a run of `--ranks` ranks with
`--kernels` GPU kernels in all. Then each engine runs in its own process
(so one's memory does not count against the other): each analysis of
`analysis/sql/` in turn, its wall time, the peak memory so far (resident
set of the process, with the Spark driver's JVM, its child), and the rows
it scans (the rows of the tables it reads) per second. The figures go to
stdout and to bench/results/ (bench/results.py), one row per engine and
analysis. No speed target: the figures show where
Spark's fixed cost stops mattering, and whether its driver's memory grows
with the number of hosts (it should not: the rows stay on the executors).
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

SEED = 7


def synthesise(root: Path, hosts: int, hours: float, ranks: int, kernels: int) -> dict[str, int]:
    import numpy as np

    from analysis_latency import synthesise_rank, synthesise_telemetry

    rng = np.random.default_rng(SEED)
    per_rank = max(1, kernels // ranks)
    for rank in range(ranks):
        synthesise_rank(root, rank, per_rank, steps=max(10, per_rank // 1250), rng=rng)
    telemetry_rows = synthesise_telemetry(root, 8, int(hours * 3600), rng, hosts=hosts)
    return {"hosts": hosts, "telemetry_rows": telemetry_rows, "ranks": ranks, "kernels": per_rank * ranks}


def peak_rss_mib() -> float:
    """This process's peak resident set, and its children's now alive (the JVM)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return own + sum(_peak_of(pid) for pid in _children(os.getpid()))


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _peak_of(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_engine(engine: str, root: Path, analyses: list[str], master: str) -> list[dict]:
    """Each analysis on `engine`, in this process: one row each."""
    from gpulens.analysis.engine import open_engine
    from gpulens.analysis.registry import run_analysis, tables_named_in

    started = time.perf_counter()
    con = open_engine(root, engine, master if engine == "spark" else None)
    open_s = time.perf_counter() - started
    counts: dict[str, int] = {}

    def table_rows(table: str) -> int:
        if table not in counts:
            counts[table] = con.sql(f"select count(*) from {table}").fetchall()[0][0]
        return counts[table]

    rows = []
    for name in analyses:
        scanned = sum(table_rows(table) for table in sorted(tables_named_in(name) or ()))
        wall0 = time.perf_counter()
        try:
            out_rows, error = run_analysis(con, name).height, None
        except Exception as failure:  # a bench reports a failure and goes on
            out_rows, error = None, " ".join(str(failure).split())[:300]
        wall_s = time.perf_counter() - wall0
        rows.append({"engine": engine, "analysis": name, "wall_s": round(wall_s, 4), "open_s": round(open_s, 3),
                     "peak_rss_mib": round(peak_rss_mib(), 1), "rows_scanned": scanned,
                     "rows_scanned_per_s": round(scanned / wall_s) if wall_s > 0 else None,
                     "rows_out": out_rows, "error": error})
        print(f"{engine:<7} {name:<26} {wall_s:>8.2f} s {rows[-1]['peak_rss_mib']:>8.0f} MiB "
              f"{scanned:>13,} rows scanned" + (f"  FAILED: {error}" if error else ""), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--telemetry-hours", type=float, default=24.0)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--kernels", type=float, default=4e6, help="GPU kernels in all, over the ranks")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--analyses", default=None, help="comma-separated (default: every analysis)")
    parser.add_argument("--keep", type=Path, default=None, help="write the dataset here and keep it (reused if there)")
    parser.add_argument("--engine-only", choices=["duckdb", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    from gpulens.analysis.registry import load_analyses

    analyses = args.analyses.split(",") if args.analyses else list(load_analyses())
    if args.engine_only:  # the child process of one engine
        print(json.dumps(run_engine(args.engine_only, args.dataset, analyses, args.spark_master)))
        return 0

    record = results.start("engines", {"hosts": args.hosts, "telemetry_hours": args.telemetry_hours,
                                       "ranks": args.ranks, "kernels": int(args.kernels),
                                       "spark_master": args.spark_master})
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpulens-engines-bench-"))
    started = time.perf_counter()
    scale = {"hosts": args.hosts, "ranks": args.ranks}
    if not (root / "traces").exists():
        scale = synthesise(root, args.hosts, args.telemetry_hours, args.ranks, int(args.kernels))
        print(f"dataset: {scale} synthesised in {time.perf_counter() - started:.1f} s at {root}", file=sys.stderr)
    rows = []
    for engine in ("duckdb", "spark"):
        child = subprocess.run([sys.executable, __file__, "--engine-only", engine, "--dataset", str(root),
                                "--spark-master", args.spark_master, "--analyses", ",".join(analyses)],
                               stdout=subprocess.PIPE, text=True, check=True)
        rows.extend({**row, **scale} for row in json.loads(child.stdout.strip().splitlines()[-1]))
    for row in rows:
        record.add(row)
    print(f"results: {record.write()}", file=sys.stderr)
    if args.keep is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
