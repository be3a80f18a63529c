"""A job of many ranks ingested on Spark gives the rows of a serial ingest.

    python bench/spark_ingest.py                      # 1,024 simulated ranks
    python bench/spark_ingest.py --ranks 256 --spark-master spark://head:7077

Synthesises, with a seed, `--ranks` small Kineto traces of one training job
(`collector.sim_trace`, 8 ranks a host), then ingests the folder twice with
the `gpulens` command: `--jobs N` on this machine, and `--engine spark`
(`--spark-master`, default `local[2]`), each into its own dataset. Every
trace table of the two is read back and compared row for row, sorted,
without the column that says when the ingest ran (`runs.ingested_at`).
Prints and records (bench/results.py) each ingest's wall time, the rows of
each table and whether the two datasets are the same. No speed target: on
one machine Spark's per-task cost is overhead; the point is that a
cluster's executors, each running the same per-file code, write the
dataset a serial ingest writes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402


def table_rows(dataset: Path) -> dict[str, list[str]]:
    """Every trace table's rows, sorted, without `runs.ingested_at`."""
    import duckdb

    from gpulens.analysis.dataset import TABLE_GLOBS, table_files
    from gpulens.collector.schema import TRACE_SCHEMAS

    con = duckdb.connect()
    found = {}
    for table in TRACE_SCHEMAS:
        if not table_files(dataset, table):
            continue
        source = f"read_parquet('{dataset / TABLE_GLOBS[table]}', union_by_name = true)"
        columns = "* exclude (ingested_at)" if table == "runs" else "*"
        found[table] = sorted(map(repr, con.sql(f"select {columns} from {source}").fetchall()))
    return found


def ingest(traces: Path, out: Path, extra: list[str]) -> float:
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(traces), "--out", str(out), "--run", "job",
               "--quiet", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--kernels-per-step", type=int, default=60)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes of the serial ingest")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()

    from gpulens.collector.sim_trace import write_training_traces

    record = results.start("spark_ingest", {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                            if k != "work_dir"})
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpulens-spark-ingest-"))
    try:
        traces = work / "traces"
        shutil.rmtree(traces, ignore_errors=True)
        started = time.perf_counter()
        write_training_traces(traces, ranks=args.ranks, steps=args.steps, kernels_per_step=args.kernels_per_step,
                              seed=args.seed, world_hosts=max(1, args.ranks // 8))
        files = sorted(traces.iterdir())
        size = sum(path.stat().st_size for path in files)
        print(f"{len(files):,} rank files, {size / 1e6:,.1f} MB, synthesised in {time.perf_counter() - started:.1f} s")
        walls = {}
        for engine, extra in (("serial", ["--jobs", str(args.jobs)]),
                              ("spark", ["--engine", "spark", "--spark-master", args.spark_master])):
            out = work / engine
            shutil.rmtree(out, ignore_errors=True)
            walls[engine] = ingest(traces, out, extra)
            print(f"  {engine:6s} ingest: {walls[engine]:.1f} s")
        serial, spark = table_rows(work / "serial"), table_rows(work / "spark")
        same = serial == spark
        for table in sorted(set(serial) | set(spark)):
            rows_serial, rows_spark = len(serial.get(table, [])), len(spark.get(table, []))
            equal = serial.get(table) == spark.get(table)
            print(f"  {table:20s} {rows_serial:>10,} rows serial, {rows_spark:>10,} on Spark: {'same' if equal else 'DIFFERENT'}")
            record.add({"kind": "table", "table": table, "serial_rows": rows_serial, "spark_rows": rows_spark,
                        "same": equal})
        record.add({"kind": "ingest", "files": len(files), "bytes": size, "serial_wall_s": round(walls["serial"], 3),
                    "spark_wall_s": round(walls["spark"], 3), "same": same})
        print(f"the two datasets are {'the same, row for row' if same else 'DIFFERENT'}")
        print(f"recorded in {record.write()}")
        if not same:
            raise SystemExit(1)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
