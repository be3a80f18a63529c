"""Make the benchmark tables of docs/performance.md (and the README's
fleet summary) from the latest results files in bench/results/ (see
bench/results.py), so that no figure there is typed by hand.

    python bench/make_docs.py            # rewrite the marked regions
    python bench/make_docs.py --check    # exit 1 where the page differs

Each table sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`;
everything between the two marks is replaced. A test (tests/test_docs.py)
checks that each page equals what this script makes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402

PAGE = results.REPO_ROOT / "docs" / "performance.md"
PAGES = [results.REPO_ROOT / "README.md", PAGE]
_REGION = re.compile(r"(<!-- bench:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S)


def _mib(n: int | None) -> str:
    return "" if n is None else f"{n / 2**20:,.0f} MiB"


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _verdict(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "**missed**")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def provenance(result: dict[str, Any]) -> str:
    """One line: when, at which commit, on what machine and under what load."""
    machine = result["machine"]
    load = ", ".join(f"{value:.2f}" for value in machine["load_average"])
    sha, _, dirty = result["commit"].partition("+")
    commit = f"`{sha[:12]}`" + (" with uncommitted changes" if dirty else "")
    return (f"Run {result['date']}, commit {commit}, on {machine['model']}, "
            f"{machine['cpus']} cores, {machine['memory_bytes'] / 2**30:.1f} GiB; load average (1, 5, 15 min) "
            f"at start {load}.\n\n")


def _params(result: dict[str, Any], names: list[str]) -> str:
    shown = [f"`--{name.replace('_', '-')} {result['params'][name]}`" for name in names
             if result["params"].get(name) is not None]
    return ("Options: " + " ".join(shown) + ".\n\n") if shown else ""


def ingest_vs_hta(result: dict[str, Any]) -> str:
    rows = []
    for row in result["rows"]:
        if row["kind"] == "fixed_cost":
            rows.append(["fixed cost: one simulated rank", f"{row['events']:,}", f"{row['gpulens_wall_s']:.2f} s",
                         f"{row['hta_wall_s']:.2f} s" if "hta_wall_s" in row else "",
                         f"{row['ratio']:.1f}×" if "ratio" in row else "", ""])
        elif row["kind"] == "input" and "gpulens_wall_s" in row:
            hta = ""
            if "hta_wall_s" in row:
                capped = f", {row['hta_events']:,} events" if row["hta_events"] != row["events"] else ""
                hta = f"{row['hta_wall_s']:.2f} s (`TraceAnalysis()` alone {row['hta_load_s']:.2f} s{capped}), {_mib(row['hta_peak_bytes'])}"
            files = f"{row['files']} file" + ("s" if row["files"] != 1 else "")
            rows.append([f"{row['input']} ({files}, load average {row['load_average']:.1f})", f"{row['events']:,}",
                         f"{row['gpulens_wall_s']:.2f} s, {_mib(row['gpulens_peak_bytes'])}", hta,
                         f"{row['speed_x']:.1f}×" if "speed_x" in row else "",
                         f"1/{row['memory_ratio']:.1f}" if "memory_ratio" in row else ""])
        elif row["kind"] == "memory_vs_ranks":
            rows.append([f"gpulens' peak memory, {row['ranks']} against {2 * row['ranks']} ranks of one size", "",
                         f"{_mib(row['peak_bytes'])} against {_mib(row['twice_ranks_peak_bytes'])}", "", "",
                         f"{row['ratio']:.2f}"])
    # Results from before the memory round (2026-11-29) hold summed RSS.
    memory = "PSS" if any("gpulens_peak_rss_sum_bytes" in row for row in result["rows"]) else "summed RSS"
    table = _table(["input", "events", f"gpulens: wall, peak memory ({memory})", f"HTA: wall, peak memory ({memory})",
                    "speed", "memory"], rows)
    params = _params(result, ["events", "ranks", "steps", "small_ranks", "rounds", "small_input_rounds", "jobs"])
    return provenance(result) + params + table


def ingest_vs_hta_verdicts(result: dict[str, Any]) -> str:
    rows = [[row["target"], row["subject"], row["measured"], _verdict(row["met"])]
            for row in result["rows"] if row["kind"] == "verdict"]
    return _table(["target", "input", "measured", "verdict"], rows)


def collector_overhead(result: dict[str, Any]) -> str:
    rows = [[row["measure"], f"{_number(row['value'])} {row['unit']}", row["target"] or "", _verdict(row["met"])]
            for row in result["rows"]]
    params = _params(result, ["gpus", "hz", "seconds", "nvml"])
    return provenance(result) + params + _table(["measure", "result", "target", "verdict"], rows)


def analysis_latency(result: dict[str, Any]) -> str:
    rows = [[f"`{row['analysis']}`" + (" (scan)" if row["scan"] else ""), f"{row['rows']:,}", f"{row['wall_s']:.2f}",
             f"{row['cpu_s']:.2f}", f"{row['peak_mib']:,}"] for row in result["rows"]]
    within = sum(row["wall_s"] <= 1.0 for row in result["rows"])
    params = _params(result, ["kernels", "ranks", "telemetry_hours", "hosts"])
    summary = f"{within} of {len(result['rows'])} views within 1 s.\n\n"
    return provenance(result) + params + summary + _table(["analysis", "rows", "wall s", "CPU s", "peak MiB"], rows)


def dashboard_render(result: dict[str, Any]) -> str:
    pages = list(dict.fromkeys(row["page"] for row in result["rows"] if row["start_up"] != "peer"))
    start_ups = list(dict.fromkeys(row["start_up"] for row in result["rows"] if row["start_up"] != "peer"))
    seconds = {(row["start_up"], row["page"]): row["seconds"] for row in result["rows"]}
    peer = seconds.get(("peer", "peer"))
    rows = [[start_up] + [_number(seconds.get((start_up, page))) for page in pages] for start_up in start_ups]
    line = f"The peer, a bare Streamlit app with one Plotly chart: {peer:.2f} s.\n\n" if peer is not None else ""
    return provenance(result) + line + _table(["start-up"] + pages, rows)


def nvml_read_costs(result: dict[str, Any]) -> str:
    rows = [[row["read"], _number(row["wall_us"], 0), _number(row["cpu_us"], 0)] for row in result["rows"]]
    gpu = f"GPU: {result['params'].get('gpu_name', '?')}, driver {result['params'].get('driver', '?')}.\n\n"
    return provenance(result) + gpu + _table(["read", "wall µs", "CPU µs"], rows)


def nvml_vs_nvidia_smi(result: dict[str, Any]) -> str:
    rows = [[row["field"], f"`{row['metric']}`", f"{row['agreed']} of {row['pairs']}", _number(row["max_difference"], 3)]
            for row in result["rows"]]
    return provenance(result) + _table(["nvidia-smi field", "our metric", "agreed", "largest difference"], rows)


def record_real_trace(result: dict[str, Any]) -> str:
    rows = [[key, _number(value)] for row in result["rows"] for key, value in row.items() if key != "files"]
    return provenance(result) + _table(["recorded", "value"], rows)


# region name -> (the bench whose latest file it shows, its renderer)
def metrics_scrape(result: dict[str, Any]) -> str:
    rows = [[str(row["gpus"]), str(row["scrapes"]), f"{row['body_bytes']:,}", _number(row["latency_p50_ms"], 1),
             _number(row["latency_p99_ms"], 1), _number(row["collector_cpu_per_scrape_ms"], 1),
             _number(row["collector_cpu_quiet_ms_per_s"], 1), f"{_number(row['rss_without_metrics_mib'], 1)} → "
             f"{_number(row['rss_with_metrics_mib'], 1)}"]
            for row in result["rows"]]
    return provenance(result) + _table(
        ["GPUs", "scrapes", "body bytes", "p50 ms", "p99 ms", "collector CPU per scrape, ms",
         "collector CPU sampling alone, ms/s", "resident MiB without → with the endpoint"], rows)


_JOB_MEASURES = [
    ("cold_read_us_per_process", "a new process's reads (stat, environ, cgroup, status), once", "µs CPU"),
    ("known_us_per_process", "a known process, checked at each slow tick (its /proc/PID/stat)", "µs CPU"),
    ("collector_tick_us_today", "the collector's CPU per tick without attribution", "µs"),
    ("extra_per_tick_us_at_default_cadence", "extra per tick at the default cadence (a slow tick every 10 s)", "µs"),
]


def collector_overhead_jobs(result: dict[str, Any]) -> str:
    values = {row["measure"]: row["value"] for row in result["rows"]}
    rows = [[label, f"{_number(values[key], 1)} {unit}", "", ""] for key, label, unit in _JOB_MEASURES if key in values]
    for key, label in (("extra_share_at_default_cadence", "extra share of the collector's CPU per tick"),
                       ("extra_share_measured_at_default_cadence", "the same, from whole collector runs")):
        if key in values:
            rows.append([label, f"{values[key]:.1%}", "≤ 5 %", _verdict(values[key] <= 0.05)])
    params = _params(result, ["gpus", "processes_per_gpu", "hz", "seconds"])
    return provenance(result) + params + _table(["measure", "result", "target", "verdict"], rows)


def import_telemetry(result: dict[str, Any]) -> str:
    rows = [[f"{row['days']:g} days × {row['gpus']} GPUs", f"{row['rows']:,}", f"{_number(row['wall_s'])} s",
             _import_cpu(row), f"{row['rows_per_cpu_s'] / 1e6:.2f} M", f"{row['again_rows_per_cpu_s'] / 1e6:.2f} M",
             _stages(row), _mib(row["peak_rss_mib"] * 2**20), _vs_peer(row)]
            for row in result["rows"]]
    params = result["params"]
    rounds = f", medians of {params['rounds']} processes" if params.get("rounds") else ""
    peer = f"; the peer: {params['peer']}" if params.get("peer") else ""
    verdicts = (f"Target ≥ 1 M rows per CPU-second: {_verdict(params.get('target_met'))}{rounds}; memory flat in "
                f"the log's length: {_verdict(params.get('memory_flat'))} ({params.get('rss_growth_mib', 0):+.0f} "
                f"MiB){peer}.\n\n")
    return provenance(result) + verdicts + _table(
        ["log", "rows", "wall", "CPU", "rows per CPU-s", "again, same process", "µs CPU a row: read / write "
         "(pure path: parse / convert)", "peak memory", "× the peer's speed"], rows)


def _import_cpu(row: dict[str, Any]) -> str:
    """The import's CPU time, and the range of its rounds where it had several."""
    rounds = row.get("cpu_s_rounds")
    spread = f" ({_number(min(rounds))}-{_number(max(rounds))})" if rounds and len(rounds) > 1 else ""
    return f"{_number(row['cpu_s'])} s{spread}"


def _vs_peer(row: dict[str, Any]) -> str:
    if "vs_peer" not in row:
        return "–"
    return f"{row['vs_peer']:.1f}× ({row['peer_rows_per_cpu_s'] / 1e6:.2f} M rows per CPU-s)"


def _stages(row: dict[str, Any]) -> str:
    """The import's stages, CPU µs a row: reading (the compiled scanner's
    one pass, where the row says it ran) and writing, then the pure path's
    parsing and converting. Results from before the scanner have only the
    pure path's three stages."""
    pure = f"{_number(row['parse_us_per_row'])} / {_number(row['convert_us_per_row'])}"
    if "read_us_per_row" not in row:
        return f"{pure} / {_number(row['write_us_per_row'])} (parse / convert / write)"
    reader = "" if row.get("scanner") else " (scanner not built)"
    return f"{_number(row['read_us_per_row'])}{reader} / {_number(row['write_us_per_row'])} ({pure})"


def _engine_runs(result: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each analysis' row on each engine."""
    by_analysis: dict[str, dict[str, dict[str, Any]]] = {}
    for row in result["rows"]:
        if "engine" in row:
            by_analysis.setdefault(row["analysis"], {})[row["engine"]] = row
    return by_analysis


def _peak(row: dict[str, Any]) -> str:
    """Python's peak, and the JVM's where there is one (results before the
    two were apart have their sum only)."""
    if row.get("python_peak_rss_mib") is None:
        return _mib(None if row.get("peak_rss_mib") is None else row["peak_rss_mib"] * 2**20)
    python = _mib(row["python_peak_rss_mib"] * 2**20)
    return python if not row.get("jvm_peak_rss_mib") else f"{python} + JVM {_mib(row['jvm_peak_rss_mib'] * 2**20)}"


def _sweep_table(result: dict[str, Any]) -> str:
    sweep = [row for row in result["rows"] if row.get("kind") == "memory_sweep"]
    if not sweep:
        return ""
    def mib(value: float | None) -> str:
        return _mib(None if value is None else value * 2**20)

    rows = [[f"{row['hosts']:,}", f"{row['rows_scanned_max']:,}", mib(row["python_peak_rss_mib"]),
             mib(row["jvm_peak_rss_mib"]), f"{row['wall_s']:,.1f} s",
             "ran" if not row["errors"] else "failed"] for row in sweep]
    where = sweep[0].get("spark_master", "local")
    return ("\nSpark's driver memory against the number of hosts (the telemetry analyses "
            f"{', '.join(f'`{name}`' for name in sweep[0]['analyses'])}, each host count in a fresh driver; "
            f"cluster: {where}):\n\n"
            + _table(["hosts", "telemetry rows", "driver Python peak", "driver JVM peak", "wall, in all", ""], rows))


def engines(result: dict[str, Any]) -> str:
    rows = []
    for name, engines_run in _engine_runs(result).items():
        duck, spark = engines_run.get("duckdb", {}), engines_run.get("spark", {})
        rows.append([f"`{name}`", f"{_number(duck.get('wall_s'))} s", f"{_number(spark.get('wall_s'))} s",
                     _peak(duck), _peak(spark), f"{duck.get('rows_scanned', 0):,}", _number(duck.get("rows_out")),
                     "ran" if not (duck.get("error") or spark.get("error")) else "failed"])
    params = _params(result, ["hosts", "telemetry_hours", "ranks", "kernels", "spark_master"])
    return provenance(result) + params + _table(
        ["analysis", "DuckDB", "Spark", "DuckDB peak", "Spark peak", "rows scanned", "rows out", ""], rows) + _sweep_table(result)


def spark_ingest(result: dict[str, Any]) -> str:
    def same(row: dict[str, Any]) -> str:
        return "same" if row["same"] else "DIFFERENT"

    runs = [[f"{row['files']:,} rank files, {row['bytes'] / 1e6:,.1f} MB", f"{row['serial_wall_s']:.1f} s",
             f"{row['spark_wall_s']:.1f} s", same(row)] for row in result["rows"] if row["kind"] == "ingest"]
    tables = [[f"`{row['table']}`", f"{row['serial_rows']:,}", f"{row['spark_rows']:,}", same(row)]
              for row in result["rows"] if row["kind"] == "table"]
    params = _params(result, ["ranks", "jobs", "spark_master"])
    return (provenance(result) + params + _table(["input", "serial ingest", "Spark ingest", "datasets"], runs) + "\n"
            + _table(["table", "rows, serial", "rows, Spark", "rows"], tables))


def engines_summary(result: dict[str, Any]) -> str:
    """The README's short form of `engines`: each engine's totals, the
    slowest analyses, and the driver's memory against the hosts."""
    runs = _engine_runs(result)
    first = next((row for row in result["rows"] if "engine" in row), {})
    scale = (f"{_number(first.get('hosts', '?'))} hosts, {first.get('telemetry_rows', 0):,} telemetry rows, "
             f"{_number(first.get('ranks', '?'))} ranks, {first.get('kernels', 0):,} kernels")
    rows = []
    for engine, label in (("duckdb", "DuckDB"), ("spark", "Spark")):
        ran = [r[engine] for r in runs.values() if engine in r and not r[engine].get("error")]
        if not ran:
            continue
        walls = sorted(row["wall_s"] for row in ran)
        slowest = max(ran, key=lambda row: row["wall_s"])
        rows.append([label, f"{len(ran)} of {len(runs)}", f"{sum(walls):,.1f} s", f"{walls[len(walls) // 2]:,.2f} s",
                     f"`{slowest['analysis']}` {slowest['wall_s']:,.1f} s", _peak(max(ran, key=lambda row: row['peak_rss_mib']))])
    sweep = [row for row in result["rows"] if row.get("kind") == "memory_sweep"]
    memory = ""
    if sweep:
        memory = ("\nThe Spark driver's peak memory over the telemetry of " + ", ".join(f"{row['hosts']}" for row in sweep)
                  + " hosts (a standalone cluster, the executor apart): JVM "
                  + ", ".join(_mib(row["jvm_peak_rss_mib"] * 2**20) for row in sweep)
                  + "; Python " + ", ".join(_mib(row["python_peak_rss_mib"] * 2**20) for row in sweep) + ".\n")
    return (f"Measured {result['date']} at commit `{result['commit'][:12]}` on {result['machine']['cpus']} cores, "
            f"Spark `{result['params'].get('spark_master')}`, {scale}:\n\n"
            + _table(["engine", "analyses run", "in all", "median", "slowest", "peak memory"], rows) + memory)


def spark_ingest_summary(result: dict[str, Any]) -> str:
    runs = [row for row in result["rows"] if row["kind"] == "ingest"]
    if not runs:
        return "No ingest was recorded.\n"
    row = runs[-1]
    verdict = "the same rows, table for table," if row["same"] else "DIFFERENT rows"
    return (f"A job of {row['files']:,} rank files ingested on Spark gives {verdict} as a serial ingest "
            f"({result['date']}, commit `{result['commit'][:12]}`: {row['serial_wall_s']:.1f} s serial, "
            f"{row['spark_wall_s']:.1f} s on Spark `{result['params'].get('spark_master')}`).\n")


REGIONS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "ingest_vs_hta": ("ingest_vs_hta", ingest_vs_hta),
    "ingest_vs_hta_verdicts": ("ingest_vs_hta", ingest_vs_hta_verdicts),
    "collector_overhead": ("collector_overhead", collector_overhead),
    "analysis_latency": ("analysis_latency", analysis_latency),
    "dashboard_render": ("dashboard_render", dashboard_render),
    "nvml_read_costs": ("nvml_read_costs", nvml_read_costs),
    "nvml_vs_nvidia_smi": ("nvml_vs_nvidia_smi", nvml_vs_nvidia_smi),
    "record_real_trace": ("record_real_trace", record_real_trace),
    "metrics_scrape": ("metrics_scrape", metrics_scrape),
    "collector_overhead_jobs": ("collector_overhead_jobs", collector_overhead_jobs),
    "import_telemetry": ("import_telemetry", import_telemetry),
    "engines": ("engines", engines),
    "spark_ingest": ("spark_ingest", spark_ingest),
    "engines_summary": ("engines", engines_summary),
    "spark_ingest_summary": ("spark_ingest", spark_ingest_summary),
}


def render_region(name: str, folder: Path = results.RESULTS_DIR) -> str:
    if name not in REGIONS:
        raise SystemExit(f"{PAGE}: no renderer for the region bench:{name}")
    bench, renderer = REGIONS[name]
    result = results.latest(bench, folder)
    if result is None:
        return f"No results file yet: `python bench/{bench}.py` writes one.\n"
    return renderer(result)


def render(text: str, folder: Path = results.RESULTS_DIR) -> str:
    """`text` with every marked region made afresh from the latest files."""
    return _REGION.sub(lambda m: m.group(1) + render_region(m.group("name"), folder) + m.group(4), text)


def regions(text: str) -> list[str]:
    return [m.group("name") for m in _REGION.finditer(text)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a page differs")
    args = parser.parse_args()
    differ = False
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        made = render(text)
        if args.check:
            if made != text:
                print(f"{page}: its tables differ from bench/results/; run python bench/make_docs.py", file=sys.stderr)
                differ = True
            continue
        page.write_text(made, encoding="utf-8")
        print(f"{page}: {len(regions(made))} tables made from bench/results/")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
