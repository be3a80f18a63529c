"""How fast `gpulens import` reads an nvidia-smi log, and whether its memory
grows with the log's length.

    python bench/import_telemetry.py              # 8 GPUs x 7 days at 1 Hz: 4.84 M rows
    python bench/import_telemetry.py --days 1     # 691,200 rows

Synthesises (seeded) an `nvidia-smi --query-gpu=... --format=csv -l 1` log
with units, as nvidia-smi writes it by default (`250.5 W`, `40 %`,
`1024 MiB`), 13 fields a row, the GPUs of a poll a few milliseconds
apart; then imports it in a fresh process (by default in a virtual
environment of gpulens' core dependencies alone, as a node has it:
bench/node_site.py) and prints
  - rows per second of wall time, and per CPU-second of the process
    (user + system, all its threads: the CSV reader parses blocks on
    several), both over the import alone, its modules already loaded:
    "per core";
  - the process's peak resident memory (ru_maxrss);
  - the same for the same import run again in the same process, without
    what a process pays once (its memory first faulted in; where pandas is
    installed, pyarrow loads it at its first conversion of a Python value);
  - the CPU time per row of each stage, each run again alone in the same
    process: reading (the import's own path: the compiled scanner, which
    parses and converts in one pass, where it is built), and writing (the
    second import's CPU time less the reading); and, for comparison, the
    pure path's parsing (pyarrow's CSV reader, to text) and converting
    (Arrow compute);
  - the 1-minute load average (the machine may be shared: wall times
    depend on it, CPU times much less);
and does the same for a log a quarter as long (at least 2 hours), to
compare the two peaks: the import streams, so its memory should not grow
with the log. Target: at least 1 M rows per CPU-second.

The import runs as the `gpulens` command runs it (OpenBLAS without its
thread pool: dashboard/cli.py), in `--rounds` fresh processes (default
5); the figures are their medians, as the CPU time of one process on a
shared VM varies by a quarter from minute to minute. Each round also
times, in a fresh process, a named peer at the same job: DuckDB with one
thread turning the same log into a typed zstd Parquet file with SQL
(trim, casts; it does none of the import's poll alignment, reason names,
odd-value checks or devices rows), and prints the ratio of their CPU
times, which the VM's moods leave about where it is.

Records the figures in bench/results/ (bench/results.py): a row per log
length, and the verdicts (target_met, memory_flat) among the params.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import results  # noqa: E402
from node_site import build_node_venv  # noqa: E402

FIELDS = ("timestamp, index, uuid, power.draw [W], enforced.power.limit [W], utilization.gpu [%], "
          "utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, "
          "clocks.current.sm [MHz], clocks.current.memory [MHz], clocks_event_reasons.active")
START = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
CHUNK_S = 3600
TARGET_ROWS_PER_CPU_S = 1_000_000


def synthesise(path: Path, days: float, gpus: int, seed: int) -> int:
    """Write the log; its data rows."""
    rng = np.random.default_rng(seed)
    seconds = int(days * 86400)
    uuids = np.array([f"GPU-{seed:08x}-0000-4000-8000-{g:012x}" for g in range(gpus)])
    written = 0
    with open(path, "wb") as handle:
        handle.write((FIELDS + "\n").encode())
        for chunk_start in range(0, seconds, CHUNK_S):
            n_polls = min(CHUNK_S, seconds - chunk_start)
            poll = np.repeat(np.arange(chunk_start, chunk_start + n_polls, dtype=np.int64), gpus)
            gpu = np.tile(np.arange(gpus), n_polls)
            n = len(poll)
            ts_ms = int(START.timestamp() * 1000) + poll * 1000 + 100 + gpu * 2 + rng.integers(0, 2, n)
            util = np.clip(rng.normal(80, 25, n), 0, 100).round()
            power = np.round(90 + util * 6 + rng.normal(0, 15, n), 2)
            reasons = np.where(power > 650, "0x0000000000000004", "0x0000000000000000")
            mem_used = rng.integers(1000, 80000, n)

            stamp = pc.strftime(pa.array(ts_ms, type=pa.timestamp("ms")), format="%Y/%m/%d %H:%M:%S")
            table = pa.table({
                "timestamp": stamp,
                "index": _cell(gpu),
                "uuid": _cell(uuids[gpu]),
                "power": _cell(power, "W"),
                "limit": pa.array(np.full(n, " 700.00 W")),
                "util": _cell(util.astype(np.int64), "%"),
                "mem_util": _cell((util * 0.4).round().astype(np.int64), "%"),
                "mem_used": _cell(mem_used, "MiB"),
                "mem_total": pa.array(np.full(n, " 81559 MiB")),
                "temp": _cell(np.round(40 + util * 0.3).astype(np.int64)),
                "sm": _cell(np.where(power > 650, 1755, 1980), "MHz"),
                "mem": pa.array(np.full(n, " 2619 MHz")),
                "reasons": _cell(reasons),
            })
            csv.write_csv(table, handle, write_options=csv.WriteOptions(include_header=False, quoting_style="none"))
            written += n
    return written


def _cell(values: np.ndarray, unit: str | None = None) -> pa.Array:
    """Values as nvidia-smi writes them after its ", " separator: " 250.5 W"."""
    strings = pc.cast(pa.array(values), pa.string())
    parts = [" ", strings] + ([" ", unit] if unit else [])
    return pc.binary_join_element_wise(*parts, "")


# A child's CPU seconds so far, all its threads (the code a child runs starts with it).
CPU_S = ("def cpu_s():\n"
         "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
         "    return usage.ru_utime + usage.ru_stime\n")


# The environment the `gpulens` command gives itself before numpy loads
# (dashboard/cli.py `_no_blas_pool`); a user's own setting stands.
COMMAND_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}


def _last_line(python: Path, code: str, log: Path, out: Path) -> str:
    """The last line a fresh `python` prints running `code` on `log` and
    `out`, in the command's environment."""
    done = subprocess.run([str(python), "-c", code, str(log), str(out)], capture_output=True, text=True,
                          check=True, cwd=python.parent, env=COMMAND_ENV)
    return done.stdout.strip().splitlines()[-1]


def import_in_child(log: Path, out: Path, python: Path) -> dict:
    """Import `log` in a fresh Python; its wall time, CPU time and peak RSS,
    then the CPU time of its stages run alone, and the highest 1-minute
    load average seen (the machine may be shared: wall times depend on it)."""
    code = (
        "import json, os, resource, sys, time\n"
        "from pathlib import Path\n"
        "from gpulens.collector.imports import import_source\n"
        "from gpulens.collector.imports import nvsmi_native\n"
        "from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader\n"
        "import pyarrow.compute, pyarrow.csv, pyarrow.parquet\n"
        + CPU_S +
        "load = os.getloadavg()[0]\n"
        "before = cpu_s()\n"
        "start = time.perf_counter()\n"
        "result = import_source(sys.argv[1], Path(sys.argv[2]), host='bench')\n"
        "wall = time.perf_counter() - start\n"
        "cpu = cpu_s() - before\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "load = max(load, os.getloadavg()[0])\n"
        "# Again into another folder: what the first paid once (pyarrow imports\n"
        "# pandas at its first conversion of a Python value) is paid now.\n"
        "before = cpu_s()\n"
        "import_source(sys.argv[1], Path(sys.argv[2] + '-again'), host='bench')\n"
        "again = cpu_s() - before\n"
        "# The stages again, alone: reading as the import reads (no writing);\n"
        "# then the pure path's parsing, and parsing and converting.\n"
        "before = cpu_s()\n"
        "for table in NvidiaSmiReader(Path(sys.argv[1]), 'bench').tables(): pass\n"
        "read = cpu_s() - before\n"
        "scanner = nvsmi_native.available()\n"
        "nvsmi_native._SCANNER = None\n"
        "before = cpu_s()\n"
        "for table in NvidiaSmiReader(Path(sys.argv[1]), 'bench').parsed_blocks(): pass\n"
        "parse = cpu_s() - before\n"
        "before = cpu_s()\n"
        "for table in NvidiaSmiReader(Path(sys.argv[1]), 'bench').tables(): pass\n"
        "parse_convert = cpu_s() - before\n"
        "print(json.dumps({'rows': result.rows, 'wall_s': wall, 'cpu_s': cpu, 'peak_rss_mib': peak, 'again_cpu_s': again,\n"
        "                  'parse_cpu_s': parse, 'parse_convert_cpu_s': parse_convert, 'read_cpu_s': read,\n"
        "                  'scanner': scanner, 'loadavg_1m': load}))\n"
    )
    return json.loads(_last_line(python, code, log, out))




def import_cpu_in_child(log: Path, out: Path, python: Path) -> float:
    """The CPU seconds of importing `log` in a fresh process, its modules
    already loaded (a round after the first)."""
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from gpulens.collector.imports import import_source\n"
        + CPU_S +
        "before = cpu_s()\n"
        "import_source(sys.argv[1], Path(sys.argv[2]), host='bench')\n"
        "print(cpu_s() - before)\n"
    )
    return float(_last_line(python, code, log, out))


# The peer: DuckDB, one thread, the same log to a typed zstd Parquet file,
# as a user would write it in SQL.
PEER = "DuckDB, 1 thread, SQL: the log to typed zstd Parquet"
PEER_CODE = """
import resource, sys
import duckdb
""" + CPU_S + """
log, out = sys.argv[1], sys.argv[2]
columns = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(13)) + "}"
def number(column, sql_type, unit=None, scale=None):
    text = f"rtrim(ltrim({column}, ' '), '{unit}')" if unit else f"trim({column})"
    return f"CAST({text} AS {sql_type})" if scale is None else f"CAST(CAST({text} AS DOUBLE) * {scale} AS BIGINT)"
sql = ("COPY (SELECT "
       "strptime(trim(c0), '%Y/%m/%d %H:%M:%S.%g') AS ts, 'bench' AS host, CAST(trim(c1) AS INTEGER) AS gpu_index, "
       "trim(c2) AS gpu_uuid, 'nvidia' AS vendor, "
       f"{number('c3', 'DOUBLE', ' W')} AS power_w, {number('c4', 'DOUBLE', ' W')} AS power_limit_w, "
       f"{number('c5', 'FLOAT', ' %')} AS gpu_util_pct, {number('c6', 'FLOAT', ' %')} AS mem_util_pct, "
       f"{number('c7', 'BIGINT', ' MiB', 1 << 20)} AS mem_used_bytes, "
       f"{number('c8', 'BIGINT', ' MiB', 1 << 20)} AS mem_total_bytes, "
       f"{number('c9', 'FLOAT')} AS temp_c, {number('c10', 'INTEGER', ' MHz')} AS sm_clock_mhz, "
       f"{number('c11', 'INTEGER', ' MHz')} AS mem_clock_mhz, CAST(trim(c12) AS BIGINT) AS throttle_reasons_mask "
       f"FROM read_csv('{log}', header = true, columns = {columns}, delim = ',', quote = '', escape = '', "
       "auto_detect = false)"
       f") TO '{out}' (FORMAT parquet, COMPRESSION zstd)")
con = duckdb.connect()
con.execute("SET threads = 1")
before = cpu_s()
con.execute(sql)
print(cpu_s() - before)
"""


def peer_cpu_in_child(log: Path, out: Path, python: Path) -> float:
    """The peer's CPU seconds on `log`, in a fresh process."""
    return float(_last_line(python, PEER_CODE, log, out))


VARIANTS_CODE = """
import json, sys, time
from pathlib import Path
import duckdb
import pyarrow as pa, pyarrow.parquet as pq
from pyarrow import csv
from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader
from gpulens.collector.parquet_io import parquet_options
from gpulens.collector.schema import TELEMETRY_SCHEMA
log, scratch = Path(sys.argv[1]), Path(sys.argv[2])
pa.scalar("x")  # what a process pays once, paid before timing
def cpu(run):
    best = None
    for _ in range(3):
        start = time.process_time()
        run()
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return best
reader = NvidiaSmiReader(log, "bench")
tables = list(reader.tables())
rows = sum(t.num_rows for t in tables)
names = [f"f{i}" for i in range(len(reader.plan.names))]
text = {n: pa.string() for n in names}
def arrow_csv(check_utf8, threads):
    options = csv.ConvertOptions(column_types=text, strings_can_be_null=False, check_utf8=check_utf8)
    csv.read_csv(log, read_options=csv.ReadOptions(column_names=names, skip_rows=1, use_threads=threads),
                 convert_options=options)
def duckdb_count():
    con = duckdb.connect()
    con.execute("SET threads=1")
    columns = "{" + ", ".join(f"'{n}': 'VARCHAR'" for n in names) + "}"
    con.sql(f"select count(*) from read_csv('{log}', header=true, columns={columns}, delim=',', quote='', "
            "escape='', auto_detect=false)").fetchall()
def write(**changes):
    options = dict(parquet_options(TELEMETRY_SCHEMA), **changes)
    row_group = options.pop("row_group_rows", 1 << 16)
    with pq.ParquetWriter(scratch / "variant.parquet", TELEMETRY_SCHEMA, **options) as writer:
        for table in tables:
            writer.write_table(table, row_group_size=row_group)
one_table = pa.concat_tables(tables)
def write_one():
    options = parquet_options(TELEMETRY_SCHEMA)
    with pq.ParquetWriter(scratch / "variant.parquet", TELEMETRY_SCHEMA, **options) as writer:
        writer.write_table(one_table, row_group_size=1 << 20)
variants = {
    "parse: pyarrow read_csv to text, 1 thread, UTF-8 checked": lambda: arrow_csv(True, False),
    "parse: pyarrow read_csv to text, 1 thread, UTF-8 not checked": lambda: arrow_csv(False, False),
    "parse: DuckDB read_csv, threads=1, count only": duckdb_count,
    "write: the collector's encodings, row groups of 65,536": lambda: write(),
    "write: the same, row groups of 1,048,576": write_one,
    "write: zstd level 1 (not the collector's)": lambda: write(compression_level=1),
    "write: no BYTE_STREAM_SPLIT (not the collector's)": lambda: write(use_byte_stream_split=False),
    "write: no dictionaries (not the collector's)": lambda: write(use_dictionary=False),
    "write: no statistics (not the collector's)": lambda: write(write_statistics=False),
    "write: no compression (not the collector's)": lambda: write(compression="none", compression_level=None),
}
print(json.dumps({name: round(cpu(run) / rows * 1e6, 3) for name, run in variants.items()}))
"""


def variants_in_child(log: Path, scratch: Path) -> dict[str, float]:
    """CPU microseconds per row of the alternatives tried for parsing and
    writing (best of 3 each), on `log` held in memory once converted."""
    done = subprocess.run([sys.executable, "-c", VARIANTS_CODE, str(log), str(scratch)], capture_output=True,
                          text=True, check=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_in_child(python: Path) -> float:
    """Peak RSS of a Python that only imports the importer (MiB)."""
    code = ("import resource, gpulens.collector.imports, gpulens.collector.imports.nvidia_smi\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd=python.parent)
    return float(done.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=7.0, help="length of the longer log (default 7)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="folder to keep the logs and datasets in")
    parser.add_argument("--rounds", type=int, default=5,
                        help="fresh processes per log length, for the import and for the peer; medians are kept")
    parser.add_argument("--variants", action="store_true",
                        help="also time, on the shorter log, the alternatives tried for parsing and writing")
    parser.add_argument("--gpulens-env", choices=["node", "current"], default="node",
                        help="node: the import runs in a virtual environment of gpulens' core dependencies alone, "
                             "as `pip install gpulens` puts it on a node (no pandas, which pyarrow imports at its "
                             "first conversion of a Python value); current: this environment as it is")
    args = parser.parse_args()
    # The commit and load are read now, before the run, which takes minutes.
    record = results.start("import_telemetry", {"days": args.days, "gpus": args.gpus, "seed": args.seed,
                                                "target_rows_per_cpu_s": TARGET_ROWS_PER_CPU_S,
                                                "gpulens_env": args.gpulens_env, "rounds": args.rounds,
                                                "peer": PEER})
    print(f"machine: {record.machine} (wall times depend on the load; CPU times much less)")
    lengths = [max(args.days / 4, 2 / 24), args.days]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpulens-bench-import-", dir=args.keep))
    python = Path(sys.executable)
    if args.gpulens_env == "node":
        python = build_node_venv(scratch / "node-venv")
        print(f"the import runs as a node install has it: gpulens' core dependencies alone ({python})")
    baseline = baseline_in_child(python)
    print(f"a Python with the importer loaded, before reading anything: {baseline:.0f} MiB peak RSS")
    rows = []
    try:
        for days in lengths:
            log = scratch / f"nvidia-smi-{days:g}d.csv"
            started = time.perf_counter()
            n = synthesise(log, days, args.gpus, args.seed)
            made_s = time.perf_counter() - started
            measured = import_in_child(log, scratch / f"data-{days:g}d", python)
            assert measured["rows"] == n, (measured["rows"], n)
            # Rounds, the import and the peer in turn, each in a fresh process.
            import_cpu, peer_cpu = [measured["cpu_s"]], []
            for round_ in range(args.rounds):
                if round_:
                    out = scratch / f"data-{days:g}d-{round_}"
                    import_cpu.append(import_cpu_in_child(log, out, python))
                    shutil.rmtree(out, ignore_errors=True)
                peer_cpu.append(peer_cpu_in_child(log, scratch / "peer.parquet", python))
            cpu_s, peer_s = statistics.median(import_cpu), statistics.median(peer_cpu)
            row = {
                "days": days, "gpus": args.gpus, "rows": n, "log_bytes": log.stat().st_size,
                "wall_s": round(measured["wall_s"], 3), "cpu_s": round(cpu_s, 3),
                "cpu_s_rounds": [round(c, 3) for c in import_cpu],
                "rows_per_s": round(n / measured["wall_s"]), "rows_per_cpu_s": round(n / cpu_s),
                "peer_cpu_s": round(peer_s, 3), "peer_cpu_s_rounds": [round(c, 3) for c in peer_cpu],
                "peer_rows_per_cpu_s": round(n / peer_s), "vs_peer": round(peer_s / cpu_s, 2),
                "peak_rss_mib": round(measured["peak_rss_mib"], 1),
                "loadavg_1m": round(measured["loadavg_1m"], 2),
                # The same import again in the same process: without what a
                # process pays once (pandas, loaded by pyarrow: startup_cpu_s).
                "again_cpu_s": round(measured["again_cpu_s"], 3),
                "again_rows_per_cpu_s": round(n / measured["again_cpu_s"]),
                "startup_cpu_s": round(measured["cpu_s"] - measured["again_cpu_s"], 3),
                # CPU microseconds per row of each stage, run again: reading
                # as the import reads (the compiled scanner where `scanner`),
                # writing (the rest of the import: staging, Parquet, renames);
                # the pure path's parsing (pyarrow's CSV reader, to text) and
                # converting (Arrow compute), for comparison.
                "scanner": measured["scanner"],
                "read_us_per_row": round(measured["read_cpu_s"] / n * 1e6, 3),
                "write_us_per_row": round((measured["again_cpu_s"] - measured["read_cpu_s"]) / n * 1e6, 3),
                "parse_us_per_row": round(measured["parse_cpu_s"] / n * 1e6, 3),
                "convert_us_per_row": round((measured["parse_convert_cpu_s"] - measured["parse_cpu_s"]) / n * 1e6, 3),
            }
            if args.variants and days == lengths[0]:
                row["variants_us_per_row"] = variants = variants_in_child(log, scratch)
                for name, us in variants.items():
                    print(f"  {name}: {us:.2f} us per row (CPU)")
            rows.append(row)
            print(f"{days:g} days x {args.gpus} GPUs: {n:,} rows, {row['log_bytes'] / 2**20:,.0f} MiB of log "
                  f"(made in {made_s:.1f} s); import {row['wall_s']:.2f} s wall; CPU, median of {args.rounds} "
                  f"processes: {row['cpu_s']:.2f} s ({min(import_cpu):.2f}-{max(import_cpu):.2f}), "
                  f"{row['rows_per_cpu_s'] / 1e6:.2f} M rows per CPU-second; "
                  f"peak RSS {row['peak_rss_mib']:.0f} MiB; load average {row['loadavg_1m']:.1f}")
            print(f"  the peer ({PEER}): {row['peer_cpu_s']:.2f} s CPU ({min(peer_cpu):.2f}-{max(peer_cpu):.2f}), "
                  f"{row['peer_rows_per_cpu_s'] / 1e6:.2f} M rows per CPU-second: the import is "
                  f"{row['vs_peer']:.1f}x its speed")
            print(f"  again in the same process: {row['again_cpu_s']:.2f} s CPU, "
                  f"{row['again_rows_per_cpu_s'] / 1e6:.2f} M rows per CPU-second (the first paid "
                  f"{row['startup_cpu_s']:.2f} s once)")
            print(f"  CPU per row: read {row['read_us_per_row']:.2f} us "
                  f"({'compiled scanner' if row['scanner'] else 'pure path: the scanner is not built'}), "
                  f"write {row['write_us_per_row']:.2f} us (the target: 1.00 us in all); the pure path's "
                  f"parse {row['parse_us_per_row']:.2f} us, convert {row['convert_us_per_row']:.2f} us")
            if args.keep is None:
                log.unlink()
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    short, long = rows
    growth = long["peak_rss_mib"] - short["peak_rss_mib"]
    print(f"peak RSS {short['peak_rss_mib']:.0f} MiB at {short['rows']:,} rows, {long['peak_rss_mib']:.0f} MiB at "
          f"{long['rows']:,} rows ({long['rows'] / short['rows']:.1f}x the rows): "
          f"{'flat' if growth <= 0.25 * short['peak_rss_mib'] else 'GROWS'} ({growth:+.0f} MiB)")
    target = all(r["rows_per_cpu_s"] >= TARGET_ROWS_PER_CPU_S for r in rows)
    print(f"target >= 1 M rows per CPU-second: {'met' if target else 'NOT met'} "
          f"({min(r['rows_per_cpu_s'] for r in rows) / 1e6:.2f} M at the slower length)")
    record.params.update(baseline_rss_mib=round(baseline, 1), target_met=target, rss_growth_mib=round(growth, 1),
                         memory_flat=growth <= 0.25 * short["peak_rss_mib"])
    for row in rows:
        record.add(row)
    print(f"recorded in {record.write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
