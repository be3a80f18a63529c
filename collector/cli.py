"""Commands of the collector layer: `collect`, `devices`, `ingest`.

Commands raise `GpulensError`; `dashboard.cli.main` turns it into one line
on stderr and the exit code. Heavy imports happen inside the commands so
`gpulens --help` stays fast on a node.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpulens.collector.backends import BACKEND_NAMES

if TYPE_CHECKING:
    from gpulens.collector.ingest.results import IngestReport

DEFAULT_DATASET = "gpulens-data"


def _backend_options(function):
    options = [
        click.option("--backend", type=click.Choice(BACKEND_NAMES), default="auto", show_default=True,
                     help="Sampling backend: NVML, amdsmi, the simulated node, or the first that starts."),
        click.option("--sim-gpus", type=int, default=8, show_default=True, help="GPUs of the simulated node (--backend sim)."),
        click.option("--sim-profile", type=click.Choice(["training", "inference"]), default="training", show_default=True,
                     help="Workload the simulated node runs."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulated node."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _open(backend: str, sim_gpus: int, sim_profile: str, seed: int):
    from gpulens.collector.backends import open_backend

    options = {"gpus": sim_gpus, "profile": sim_profile, "seed": seed} if backend == "sim" else {}
    return open_backend(backend, **options)


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path(DEFAULT_DATASET), show_default=True,
              help="Dataset directory to write (the systemd unit uses /var/lib/gpulens).")
@click.option("--interval", "interval_s", type=float, default=1.0, show_default=True, help="Seconds between samples (at least 0.01).")
@click.option("--duration", "duration_s", type=float, default=None, help="Stop after this many seconds (default: run until stopped).")
@click.option("--flush-every", "flush_every_s", type=float, default=60.0, show_default=True,
              help="Seconds between Parquet flushes: at most this much is lost to a kill -9.")
@click.option("--max-buffered-mb", "max_buffered_mb", type=float, default=256.0, show_default=True,
              help="While the dataset's disk refuses writes (full, read-only), keep this much in memory, "
                   "then drop the oldest samples.")
@click.option("--slow-every", "slow_every_s", type=float, default=10.0, show_default=True,
              help="Seconds between slow reads (processes, ECC, inventory).")
@click.option("--host", default=None, help="Host name to record (default: this machine's).")
@click.option("--watch-traces", "watch_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also ingest each new trace file that appears in this folder once it is complete.")
@click.option("--run", "run_name", default=None,
              help="Run name for traces ingested by --watch-traces (default: slurm-<job id> under Slurm, else the folder's name).")
@click.option("--proc-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/proc"), show_default=True,
              help="The host's /proc, where each GPU process's job (Slurm, Kubernetes) is read (the sim backend's processes carry their own).")
@click.option("--no-telemetry", is_flag=True, default=False,
              help="With --watch-traces: only ingest traces, sampling no GPU (a login node, a file server).")
@click.option("--metrics-address", default=None, metavar="HOST[:PORT]",
              help="Also serve the latest sample as OpenMetrics at http://HOST:PORT/metrics for Prometheus "
                   "(port 19400 if none is given; off by default).")
@click.option("--metrics-names", type=click.Choice(["gpulens", "dcgm"]), default="gpulens", show_default=True,
              help="With --metrics-address: gpulens's metric names, or dcgm-exporter's (DCGM_FI_DEV_POWER_USAGE, ...) "
                   "for dashboards written for it.")
@_backend_options
def collect(out, interval_s, duration_s, flush_every_s, max_buffered_mb, slow_every_s, host, watch_dir, run_name,
            proc_root, no_telemetry, metrics_address, metrics_names, backend, sim_gpus, sim_profile, seed):
    """Sample GPU telemetry into a Parquet dataset until stopped.

    SIGTERM or Ctrl-C flushes what is buffered and exits 0.
    """
    import socket

    from gpulens.collector.daemon import CollectOptions, Collector
    from gpulens.collector.errors import UsageError
    logging.basicConfig(level=logging.INFO, format="gpulens collect: %(message)s", stream=sys.stderr)
    if run_name is not None and watch_dir is None:
        raise UsageError("--run names the traces of --watch-traces; give --watch-traces DIR too")
    if metrics_names != "gpulens" and metrics_address is None:
        raise UsageError("--metrics-names chooses the names of --metrics-address; give --metrics-address HOST:PORT too")
    options = CollectOptions(
        out=out, interval_s=interval_s, flush_every_s=flush_every_s, slow_every_s=slow_every_s,
        duration_s=duration_s, host=host or socket.gethostname(), max_buffered_mb=max_buffered_mb,
        proc_root=proc_root,
    )
    options.validate()  # before --no-telemetry too, which waits --duration
    if no_telemetry:
        if watch_dir is None:
            raise UsageError("--no-telemetry leaves nothing to do without --watch-traces DIR")
        if metrics_address is not None:
            raise UsageError("--metrics-address serves telemetry, which --no-telemetry turns off")
        from gpulens.collector.ingest import watch_process

        watch_process.settle_as_child()  # where the collector below started it
        _watch_only(watch_dir, out, run_name, duration_s, host=host)
        return
    endpoint = server = None
    if metrics_address is not None:
        # Only here: prometheus_client brings the HTTP server and ssl with it.
        from gpulens.collector.metrics_endpoint import MetricsEndpoint, MetricsServer

        endpoint = MetricsEndpoint(options.host, metrics_names)
        server = MetricsServer(endpoint, metrics_address)  # before the backend opens: a taken port fails fast
        logging.getLogger("gpulens.collector").info("serving %s metrics at http://%s/metrics", metrics_names,
                                                    _http_host(server.host, server.port))
    watcher = None
    try:
        source = _open(backend, sim_gpus, sim_profile, seed)
        collector = Collector(source, options, observer=endpoint)
        collector.install_signal_handlers()
        # Traces in the node's own folder that name no host are this node's.
        # Ingested by a process of its own, lower in priority and capped in
        # memory, so that no trace delays a sample (collector.ingest.watch_process).
        if watch_dir:
            from gpulens.collector.ingest import watch_process

            watcher = watch_process.start(watch_dir, out, run_name, host=options.host)
        status = _status_line(collector) if sys.stderr.isatty() else None
        try:
            summary = collector.run()
        finally:
            if status is not None:
                status.close()
    finally:
        if watcher is not None:
            watch_process.stop(watcher)
        if server is not None:
            server.close()
    click.echo(
        f"collected {summary.samples} samples over {summary.ticks} ticks "
        f"({summary.ticks_skipped} skipped) into {out}", err=True,
    )


def _http_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _status_line(collector):
    """Redraw the one-line status after each tick (a terminal only: a
    service's log gets the lines of start, stop and trouble alone)."""
    from gpulens.collector.status_line import StatusLine, status_text

    status = StatusLine(sys.stderr)

    def show(ts_ns: int) -> None:
        summary = collector.summary
        age_s = None if summary.last_flush_ns is None else max(0.0, (ts_ns - summary.last_flush_ns) / 1e9)
        status.show(status_text(summary.samples, collector.gpu_count, age_s, summary.ticks_skipped))

    collector.on_tick(show)
    return status


class _WatcherThread(threading.Thread):
    def __init__(self, watcher, period_s: float = 2.0) -> None:
        super().__init__(name="gpulens-trace-watcher", daemon=True)
        self.watcher = watcher
        self.period_s = period_s
        self.stop = threading.Event()

    def run(self) -> None:
        log = logging.getLogger("gpulens.watch")
        while not self.stop.wait(self.period_s):
            try:
                report = self.watcher.poll()
            except Exception as error:  # the collector must outlive a bad trace folder
                log.error("watching traces: %s", error)
                continue
            if report is not None:
                for level, line in report.notices():
                    log.log(level, "ingested %s" if level == logging.INFO else "%s", line)
        for line in self.watcher.pending():
            log.warning("%s", line)


def _start_trace_watcher(directory: Path, out: Path, run: str | None, period_s: float = 2.0,
                         host: str | None = None) -> _WatcherThread:
    from gpulens.collector.ingest.watch import TraceWatcher

    watcher = TraceWatcher(directory, out, run, host=host)
    logging.getLogger("gpulens.watch").info("watching %s for traces (run %s) into %s%s", directory, watcher.run, out,
                                            "" if directory.is_dir() else " (the folder does not exist yet)")
    thread = _WatcherThread(watcher, period_s)
    thread.start()
    return thread


def _watch_only(directory: Path, out: Path, run: str | None, duration_s: float | None, period_s: float = 2.0,
                host: str | None = None) -> None:
    """`collect --no-telemetry`: the trace watcher alone, until SIGTERM, Ctrl-C or --duration."""
    import signal

    thread = _start_trace_watcher(directory, out, run, period_s, host=host)
    previous = {signum: signal.signal(signum, lambda *_: thread.stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        thread.stop.wait(duration_s)
    finally:
        thread.stop.set()
        thread.join(timeout=30)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@click.command()
@_backend_options
def devices(backend, sim_gpus, sim_profile, seed):
    """Print the GPU inventory: model, UUID, limits, links."""
    from gpulens.collector.daemon import _nominal_peaks

    source = _open(backend, sim_gpus, sim_profile, seed)
    try:
        inventory = source.discover()
    finally:
        source.close()
    header = ("gpu", "model", "uuid", "limit_w", "default_w", "min_w", "max_w", "mem_gib", "pcie", "links", "link_peak_gb_s")
    rows = []
    for d in inventory:
        peaks = _nominal_peaks(d)
        rows.append((
            str(d.gpu_index), d.model, d.gpu_uuid, _fmt(d.power_limit_w), _fmt(d.power_limit_default_w),
            _fmt(d.power_limit_min_w), _fmt(d.power_limit_max_w),
            _fmt(d.mem_total_bytes / 2**30 if d.mem_total_bytes else None),
            f"gen{d.pcie_gen} x{d.pcie_width}" if d.pcie_gen and d.pcie_width else "-",
            f"{d.link_count} {d.link_kind}" if d.link_count else "-",
            _fmt(peaks["link_peak_bytes_per_s"] / 1e9 if peaks["link_peak_bytes_per_s"] else None),
        ))
    click.echo(format_table(header, rows))


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def format_table(header: tuple[str, ...] | list[str], rows: list[tuple[str, ...]]) -> str:
    """A plain aligned text table (numbers right-aligned), aligned by how
    wide each value shows on a terminal (`display_width`)."""
    widths = [display_width(h) for h in header]
    for row in rows:
        widths = [max(w, display_width(c)) for w, c in zip(widths, row)]

    def numeric(text: str) -> bool:
        return text.replace(".", "", 1).replace("-", "", 1).replace("e", "", 1).isdigit()

    def pad(text: str, width: int, right: bool = False) -> str:
        fill = " " * (width - display_width(text))
        return fill + text if right else text + fill

    lines = ["  ".join(pad(h, w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(pad(c, w, right=numeric(c)) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def display_width(text: str) -> int:
    """Terminal columns `text` takes: East Asian wide and full-width
    characters (a CJK annotation name) take two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path(DEFAULT_DATASET), show_default=True,
              help="Dataset directory to write the trace tables into.")
@click.option("--run", "run_name", default=None,
              help="Run name (default: slurm-<job id> under Slurm, from the traces' metadata or the environment; else the folder or file name).")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Most processes parsing at once (default: one per core; under 8 MiB of traces in all, one). A big Kineto file is read by several at once.")
@click.option("--quiet", "-q", is_flag=True, help="No line per file ingested: only warnings, errors and the summary (for runs of thousands of ranks).")
@click.option("--host", default=None, help="The host the traces were recorded on, for those that name none (rocprofv3 CSV outside its host folder, a Kineto trace without one): joins them to that host's telemetry.")
@click.option("--max-trace-bytes", type=click.IntRange(min=1), default=None,
              help="Most bytes a gzip trace may decompress to (default: 100 times its size, at least 256 MiB; "
                   "more is refused as a likely gzip bomb).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: this machine's processes (--jobs); spark: one Spark task per file, over the executors "
                   "(pip install 'gpulens[spark]', Java 17+; --out on storage every executor sees).")
@click.option("--spark-master", default=None, metavar="URL",
              help="With --engine spark: local[*] (the default), spark://host:7077, k8s://... or yarn.")
def ingest(paths, out, run_name, jobs, quiet, host, max_trace_bytes, engine="local", spark_master=None):
    """Ingest kernel traces (Kineto JSON, nsys SQLite, rocprofv3 database or CSV, NCCL logs).

    PATHS are files, folders or globs; the files of one call form one run,
    one rank per file. Bad files are reported one per line and skipped.
    """
    # Before pyarrow loads: Arrow's C++ default allocator, the one its
    # Parquet writer and reader use, is chosen from this variable once, on
    # import; prepare_ingest_process can only change the pool of pyarrow's
    # Python calls. A user's own choice stands.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if max_trace_bytes is not None:  # read by every worker (collector.ingest.buffer)
        from gpulens.collector.ingest.buffer import MAX_TRACE_BYTES_VARIABLE

        os.environ[MAX_TRACE_BYTES_VARIABLE] = str(max_trace_bytes)
    from gpulens.collector.errors import GpulensError, terminated_on_sigterm
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.ingest.batch import prepare_ingest_process

    prepare_ingest_process()  # this process only ingests

    if engine == "spark" or spark_master is not None:
        from gpulens.collector.errors import UsageError
        from gpulens.collector.ingest.distributed import ingest_paths_on_spark
        from gpulens.collector.spark_env import DEFAULT_SPARK_MASTER, check_spark_available

        if engine != "spark":
            raise UsageError("--spark-master needs --engine spark")
        master = spark_master or DEFAULT_SPARK_MASTER
        check_spark_available(master)
        report = ingest_paths_on_spark(list(paths), out, run=run_name, host=host, master=master)
    else:
        with terminated_on_sigterm():
            report = ingest_paths(list(paths), out, run=run_name, jobs=jobs, progress=sys.stderr.isatty(), host=host)
    prefixes = {logging.INFO: "", logging.WARNING: "gpulens: warning: ", logging.ERROR: "gpulens: error: "}
    for level, line in report.notices():
        if level > logging.INFO or not quiet:
            click.echo(prefixes[level] + line, err=True)
    if report.results:
        click.echo(f"gpulens: {report.summary(out)}", err=True)
        _suggest_merging(out, report.runs)
        _suggest_the_scanner(report)
    if report.failures:
        attempted = len(report.failures) + len(report.results)
        if attempted == 1:
            raise click.exceptions.Exit(1)  # the file's own line said it all: one problem, one line
        raise _IngestFailed(f"{len(report.failures)} of {attempted} files could not be ingested")
    if not report.results:
        raise GpulensError("no trace files found in " + ", ".join(paths))


# A run with this many per-source files a table is worth `gpulens compact`:
# each analysis opens every file (a report of 200 ranks, 2,000 files, took
# 7.7 s, 3.4 s merged; of 2,000 ranks 44 s, 3.0 s merged).
SUGGEST_MERGE_AT_SOURCES = 100


def _suggest_merging(out: Path, runs: list[str]) -> None:
    from gpulens.collector.ingest.merge import per_source_files
    from gpulens.collector.ingest.store import run_dir

    for run in runs:
        sources = len(per_source_files(run_dir(out, run), "runs"))
        if sources >= SUGGEST_MERGE_AT_SOURCES:
            click.echo(f"gpulens: run {run} is {sources:,} trace files a table: `gpulens compact {out}` "
                       "merges them into one each, which analyses read faster", err=True)


def _suggest_the_scanner(report: IngestReport) -> None:
    """A note where a large Kineto ingest ran without the compiled scanner
    because none was built (the install found no compiler)."""
    from gpulens.collector.ingest import kineto_native

    hint = kineto_native.not_built_hint(sum(r.events for r in report.results if r.format == "kineto"))
    if hint is not None:
        click.echo(f"gpulens: note: {hint}", err=True)


class _IngestFailed(Exception):
    """Raised after the per-file lines are printed; main prints its summary."""


@click.command()
@click.argument("dataset", type=click.Path(path_type=Path))
def compact(dataset):
    """Merge the telemetry, events and processes files of DATASET into one
    file per host and day, and the per-source trace files of each run of
    16 or more sources into one file per table.

    The collector merges its files as it writes (an hour's flushes into one
    file); this does the same for a whole dataset at once, for datasets an
    older gpulens or a killed collector left as many small files. Ingest
    writes a file per table per trace file: a run of thousands of ranks
    reads several times faster merged. Safe to run while a collector writes
    or an ingest runs, and to run again.
    """
    from gpulens.collector.compact import compact_dataset, finish_interrupted
    from gpulens.collector.errors import DatasetError, terminated_on_sigterm
    from gpulens.collector.ingest.merge import merge_run
    from gpulens.collector.writer import check_writable

    if not dataset.is_dir():
        raise DatasetError(f"{dataset}: " + ("not a directory" if dataset.exists() else "no such dataset directory"))
    check_writable(dataset)  # a read-only dataset: one line, before anything is merged
    # Stopped (SIGTERM, Ctrl-C), the merge in progress removes its staged
    # file and puts back what it had moved; the merges done stay done.
    with terminated_on_sigterm():
        finish_interrupted(dataset)
        before, after = compact_dataset(dataset)
        click.echo(f"{dataset}: {before} node-table files merged into {after}")
        for run_path in sorted(path for path in (dataset / "traces").glob("run=*") if path.is_dir()):
            files_before, files_after = merge_run(dataset, run_path)
            if files_after < files_before:
                click.echo(f"{run_path}: {files_before:,} trace files merged into {files_after:,}")


@click.command("import")
@click.argument("source")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path(DEFAULT_DATASET), show_default=True,
              help="Dataset directory to write the telemetry and devices tables into.")
@click.option("--host", default=None,
              help="Host the telemetry is from (default: the source's own hostname field or Hostname label).")
@click.option("--format", "fmt", type=click.Choice(["nvidia-smi", "scrape", "prometheus", "rocm-smi", "amd-smi"]),
              default=None, help="The source's format (default: told from its content; a URL is a Prometheus server).")
@click.option("--columns", default=None,
              help="The --query-gpu fields of an nvidia-smi log written with noheader, comma-separated, in order.")
@click.option("--since", default=None, help="Import rows at or after this time (ISO 8601, UTC unless it names a zone).")
@click.option("--until", default=None, help="Import rows before this time (ISO 8601). A Prometheus server needs both.")
@click.option("--timezone", default="UTC", show_default=True,
              help="Time zone of an nvidia-smi log's timestamps (IANA name): nvidia-smi writes the node's local time.")
@click.option("--step", "step_s", type=click.FloatRange(min=0.001), default=15.0, show_default=True,
              help="Seconds between the points asked of a Prometheus server: at most its scrape interval to get every sample.")
def import_telemetry(source, out, host, fmt, columns, since, until, timezone, step_s):
    """Import telemetry a site already has into the dataset.

    SOURCE is an nvidia-smi --query-gpu CSV log, a dcgm-exporter or
    nvidia_gpu_exporter scrape file, a Prometheus or VictoriaMetrics URL,
    or rocm-smi / amd-smi JSON. Importing the same source again replaces
    what the earlier import wrote.
    """
    from gpulens.collector.errors import terminated_on_sigterm
    from gpulens.collector.imports import import_source, parse_time
    # SIGTERM unwinds as Ctrl-C does: what was staged is removed.
    with terminated_on_sigterm():
        result = import_source(
            source, out, host=host, fmt=fmt,
            columns=[c.strip() for c in columns.split(",") if c.strip()] if columns else None,
            since=parse_time(since, "--since"), until=parse_time(until, "--until"), timezone=timezone, step_s=step_s,
        )
    for warning in result.warnings:
        click.echo(f"gpulens: warning: {source}: {warning}", err=True)
    click.echo(
        f"gpulens: imported {result.rows:,} telemetry rows of {result.gpus} GPUs on "
        f"{', '.join(result.hosts)} from {source} into {out}"
        + (f" (replacing {result.replaced} files of an earlier import)" if result.replaced else ""), err=True)
