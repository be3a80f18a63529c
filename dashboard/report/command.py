"""`gpulens report`: every analysis of a dataset (or of raw traces) in one file.

Exit codes: 0 written; 1 bad input (missing, empty or corrupt file, a
dataset that cannot be read or holds nothing) or a --fail-on metric that
cannot be computed; 2 a bad flag; 3 a metric regressed past its --fail-on
threshold (the report is still written); 4 the report is written but part
of it failed, such as a Parquet file that could not be read (stderr and the
report say which; 4 wins over 3, a comparison of part of the data is no
verdict). Errors are raised as
`GpulensError`; `dashboard.cli.main` prints them as one line.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import click

from gpulens.collector.errors import DatasetError, UsageError, raise_if_terminated, terminated_on_sigterm
from gpulens.collector.progress import StderrProgress
from gpulens.collector.parquet_io import new_temporary_file

FORMATS = ("html", "md", "json")
_SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default=None,
              help="File to write ('-': stdout). Default: report.html for html, stdout for md and json.")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="html: one self-contained page with charts; md: findings and key tables; json: everything, "
                   "machine-readable. Default: from the --output suffix (.html, .md, .json); json for '-'; else html.")
@click.option("--compare", "baseline", type=click.Path(path_type=Path), default=None,
              help="Baseline to show deltas against: a dataset, trace files, or a JSON report.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="METRIC:PCT",
              help="Exit 3 if METRIC got worse than the baseline by more than PCT % (repeatable). Metrics: "
                   "step_time, busbw, transfer_busbw, idle_share, exposed_comm_share, tklqt_per_step, "
                   "energy_per_step, power_throttled_share, data_loader_idle_share, sync_idle_share.")
@click.option("--dataset", "keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="When INPUTS are trace files: ingest them into this dataset and keep it (default: a temporary one).")
@click.option("--run", "run_name", default=None, help="Run name for ingested trace files (default: from their names).")
@click.option("--title", default=None, help="Title of the report.")
@click.option("--job", default=None,
              help="Only this job (job_holds' name: slurm-<job id>, pod-<namespace>/<pod>): the telemetry of the GPUs it "
                   "held while it held them, and the trace runs of its processes.")
@click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
              help="What runs the analyses: duckdb (embedded) or spark (pip install 'gpulens[spark]', Java 17+).")
@click.option("--spark-master", default=None, metavar="URL",
              help="With --engine spark: local[*] (the default), spark://host:7077, k8s://..., yarn or sc://host:15002.")
def report(inputs: tuple[str, ...], output: Path | None, output_format: str | None, baseline: Path | None,
           fail_on: tuple[str, ...], keep: Path | None, run_name: str | None, title: str | None,
           job: str | None = None, engine: str = "duckdb", spark_master: str | None = None) -> None:
    """Run every analysis on a dataset or on trace files and write a report.

    INPUTS is one dataset folder (with telemetry/ or traces/ in it), or
    trace files and folders, which are ingested first as one run.

    \b
        gpulens report gpulens-data -o report.html
        gpulens report traces/job42/ --format md > findings.md
        gpulens report new-data --compare baseline.json --fail-on step_time:5 --fail-on busbw:10 -o report.json

    \b
    Exit codes: 0 written; 1 bad input; 2 a bad flag; 3 a --fail-on
    metric regressed; 4 written but incomplete: part of the data could not
    be read (stderr and the report's top say which).
    """
    from gpulens.dashboard.report.build import IncompleteReport, build_report, incomplete_message
    from gpulens.dashboard.report.compare import RegressionFound, parse_fail_on
    from gpulens.dashboard.report.inputs import refuse_output_among_inputs, resolve_inputs

    output_format = output_format or _format_for(output)
    thresholds = parse_fail_on(fail_on)
    if thresholds and baseline is None:
        raise UsageError("--fail-on needs --compare BASELINE")
    if output is None:
        output = Path("report.html") if output_format == "html" else Path("-")
    if output != Path("-"):
        refuse_output_among_inputs(output, list(inputs), baseline)

    terminal = sys.stderr.isatty()
    # SIGTERM unwinds (Terminated), so that the scratch folder, which holds
    # the traces' ingested dataset, goes too.
    with terminated_on_sigterm(), tempfile.TemporaryDirectory(prefix="gpulens-report-") as scratch:
        # Ingest first, with ingest's own progress bar: its worker processes
        # must fork before any progress thread runs.
        dataset, temporary = resolve_inputs(list(inputs), Path(scratch) / "dataset", keep, run=run_name, progress=terminal)
        baseline_dataset, label = _resolve_baseline(baseline, Path(scratch) / "baseline")
        with _Progress(terminal) as progress:
            built = build_report(dataset, compare=baseline_dataset, fail_on=thresholds, inputs=list(inputs),
                                 temporary=temporary, title=title, progress=progress, compare_label=label, job=job,
                                 engine=engine, spark_master=spark_master)
            progress("writing")
            data = _render(built, output_format)
        # Where DuckDB swallowed it instead (the signal came in one of the
        # Python callbacks it calls while planning), the report is done, but
        # SIGTERM still means no report and exit 143.
        raise_if_terminated()
    _write(output, data)
    counts = {s: sum(1 for f in built.findings if f.severity == s) for s in ("critical", "warning", "info")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    if output != Path("-"):
        click.echo(f"{output}: {output_format} report written; findings: {summary}", err=True)
    if built.problems:  # render_html adds the charts that failed
        raise IncompleteReport(incomplete_message(str(output), built.problems))
    comparison = built.comparison
    if comparison is not None and comparison.regressions:
        raise RegressionFound(comparison.failure_message())


def _resolve_baseline(baseline: Path | None, scratch: Path) -> tuple[Path | None, str | None]:
    """The baseline as a dataset or JSON report; trace files are ingested into `scratch`."""
    from gpulens.collector.errors import TraceError
    from gpulens.collector.ingest.formats import UNKNOWN_FORMAT
    from gpulens.dashboard.report.compare import is_json_report
    from gpulens.dashboard.report.inputs import is_dataset, resolve_inputs

    if baseline is None or is_json_report(baseline) or is_dataset(baseline):
        return baseline, None
    try:
        dataset, _ = resolve_inputs([str(baseline)], scratch, keep=None)
    except TraceError as error:
        if error.problem != UNKNOWN_FORMAT:
            raise
        # A baseline may also be a JSON report, so the trace formats alone mislead.
        raise TraceError(str(baseline), "neither a gpulens JSON report nor a trace gpulens can read (expected a JSON "
                                        "report from `gpulens report --format json`, Kineto JSON, Nsight Systems "
                                        "SQLite, a rocprofv3 database, CSV or JSON, or an NCCL log)") from None
    return dataset, f"traces {baseline} (ingested)"


def _format_for(output: Path | None) -> str:
    if output is None or output == Path("-"):
        return "html" if output is None else "json"
    return _SUFFIX_FORMATS.get(output.suffix.lower(), "html")


def _render(built, output_format: str) -> bytes:
    if output_format == "json":
        from gpulens.dashboard.report.jsonout import render_json

        return render_json(built)
    if output_format == "md":
        from gpulens.dashboard.report.markdown import render_markdown

        return render_markdown(built).encode()
    from gpulens.dashboard.report.html import render_html

    return render_html(built).encode()


def _write(output: Path, data: bytes) -> None:
    """Write the report to `output` ('-': stdout).

    A regular file is replaced atomically (a reader never sees half a
    report; a failed write leaves the old one), keeping its permission bits;
    a link's target is replaced, not the link. A FIFO or device is written
    into: renaming over it would replace it with a plain file.
    """
    if output == Path("-"):
        _write_stdout(data)
        return
    try:
        existing = os.stat(output)  # follows links
    except FileNotFoundError:
        existing = None
    except OSError as error:
        raise DatasetError(f"{output}: cannot write the report ({error.strerror or error})") from None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        try:
            with open(output, "wb") as stream:
                stream.write(data)
        except OSError as error:
            raise DatasetError(f"{output}: cannot write the report ({error.strerror or error})") from None
        return
    target = Path(os.path.realpath(output))
    temporary = None
    try:
        temporary = new_temporary_file(target.parent, prefix=f".{target.name}.")
        temporary.write_bytes(data)
        if existing is not None:
            os.chmod(temporary, stat.S_IMODE(existing.st_mode))
        os.replace(temporary, target)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise DatasetError(f"{output}: cannot write the report ({error.strerror or error})") from None


def _write_stdout(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # a reader that stopped early: dashboard.cli exits quietly
    except OSError as error:  # a full disk (ENOSPC), a broken device (EIO)
        raise DatasetError(f"cannot write the report to standard output ({error.strerror or error})") from None


class _Progress(StderrProgress):
    """The report's bar on a terminal: one step a part, named as it starts."""

    def __init__(self, enabled: bool) -> None:
        from gpulens.dashboard.report.sections import SECTIONS

        # findings, the sections, charts, baseline, writing
        super().__init__(enabled, len(SECTIONS) + 4, "report: {task.description:<32}")

    def __call__(self, label: str) -> None:
        # Between two parts: where a stop's exception was swallowed (in one
        # of DuckDB's own Python callbacks), the report stops here.
        raise_if_terminated()
        self.update(description=label, advance=1)
