"""Collect a report: findings, then each analysis's tables, and the data's origin.

    report = build_report(Path("gpulens-data"))
    report.findings          # most severe first (analysis.findings)
    report.sections          # one per question, its tables as Polars frames

A report is plain data; `html`, `markdown` and `jsonout` render it. Every
number comes from `analysis` (the SQL views and the findings builders);
nothing here reads files. An analysis that fails is recorded in
`report.problems` and its section says so: the rest of the report still
renders.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb
import polars as pl

from gpulens.analysis.all_findings import finding_sources
from gpulens.analysis.findings import Finding, sort_findings
from gpulens.analysis.dataset import run_sql
from gpulens.analysis.registry import load_analyses, run_analysis
from gpulens.collector.errors import DatasetError, GpulensError, one_line
from gpulens.collector.wording import counted
from gpulens.dashboard.report.sections import SECTIONS, SectionSpec, TableSpec


class IncompleteReport(GpulensError):
    """The report was written, but part of it failed (a file that could not
    be read, an analysis that raised): `report.problems` says which."""

    exit_code = 4


def incomplete_message(output: str, problems: list[str]) -> str:
    """One line for stderr: how many parts failed, and the first."""
    return f"{output}: report written, but incomplete: {counted(len(problems), 'part')} failed (first: {problems[0]})"

# Chart series are downsampled to about this many time buckets.
TIMELINE_BUCKETS = 600

Progress = Callable[[str], None]


@dataclass
class TableResult:
    spec: TableSpec
    frame: pl.DataFrame

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shown(self) -> bool:
        """Whether the HTML and Markdown show it (the JSON has every table)."""
        return not (self.spec.omit_if_empty and self.frame.is_empty())


@dataclass
class Section:
    spec: SectionSpec
    tables: list[TableResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # Why the section has nothing to show (no traces, no telemetry).
    empty_reason: str | None = None
    error: str | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def title(self) -> str:
        return self.spec.title

    def table(self, name: str) -> pl.DataFrame | None:
        return next((t.frame for t in self.tables if t.name == name), None)


@dataclass
class Source:
    """What a report was made from."""

    inputs: list[str]
    dataset: str | None  # None: a temporary dataset ingested from `inputs`
    rows: dict[str, int]
    hosts: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    trace_files: list[dict[str, Any]]

    @property
    def has_telemetry(self) -> bool:
        return self.rows.get("telemetry", 0) > 0

    @property
    def has_traces(self) -> bool:
        return self.rows.get("kernels", 0) > 0 or self.rows.get("collectives", 0) > 0


@dataclass
class Report:
    title: str
    gpulens_version: str
    source: Source
    findings: list[Finding]
    sections: list[Section]
    metrics: dict[str, float | None]
    # Each trace run's own metrics where the dataset holds two or more runs
    # (`metrics` then blends them); empty otherwise.
    metrics_by_run: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # Chart-only data (downsampled telemetry); not part of the JSON tables.
    series: dict[str, pl.DataFrame] = field(default_factory=dict)
    comparison: Any = None  # dashboard.report.compare.Comparison
    problems: list[str] = field(default_factory=list)

    def section(self, section_id: str) -> Section | None:
        return next((s for s in self.sections if s.id == section_id), None)

    def tables(self) -> dict[str, pl.DataFrame]:
        return {t.name: t.frame for s in self.sections for t in s.tables}


def build_report(
    dataset: Path,
    compare: Path | None = None,
    fail_on: dict[str, float] | None = None,
    inputs: list[str] | None = None,
    temporary: bool = False,
    title: str | None = None,
    progress: Progress | None = None,
    compare_label: str | None = None,
    job: str | None = None,
    engine: str = "duckdb",
    spark_master: str | None = None,
) -> Report:
    """The report of the dataset at `dataset`, compared with `compare` if given.

    `compare` is a baseline dataset, trace files or a JSON report (see
    `compare`), named `compare_label` in the report if given;
    `fail_on` maps metric names to the percentage past which a change for
    the worse counts as a regression. `inputs` are what the user named
    (trace files ingested into `dataset`, which is `temporary`). `job`
    limits the report to one job (`analysis.jobs.restrict_to_job`).
    `engine` runs the analyses: "duckdb", or "spark" on `spark_master`
    (analysis.engine; the same SQL files, the same tables).
    Raises DatasetError for a dataset that cannot be read or holds nothing.
    """
    from gpulens.analysis.engine import open_engine
    from gpulens.analysis.registry import results_kept
    from gpulens.analysis import metrics as metrics_of
    from gpulens.dashboard.report import compare as comparing

    step = progress or (lambda label: None)
    try:
        con = (open_engine(dataset, engine, spark_master) if engine != "duckdb"
               else open_engine(dataset, footer_cache=True, spark_master=spark_master))
    except duckdb.Error as error:  # a corrupt Parquet file, say
        raise DatasetError(f"{dataset}: cannot read the dataset: {one_line(error)}") from None
    if job is not None:
        from gpulens.analysis.jobs import restrict_to_job

        try:
            restrict_to_job(con, job)
        except BaseException:
            con.close()
            raise
    # The findings, the sections and the metrics ask for several of the same
    # analyses (power_headroom, time_breakdown, stragglers): each runs once
    # (a 16-host fleet's report: power_headroom's 2.2 s was paid twice).
    # Closed here, not at exit (`gpulens report` ends without Python's
    # teardown): a DuckDB that spilled to disk removes its files on close.
    with contextlib.closing(con), results_kept(con):
        source = describe_source(con, dataset, inputs or [str(dataset)], temporary)
        if not source.has_telemetry and not source.has_traces:
            raise DatasetError(f"{inputs[0] if inputs else dataset}: no telemetry and no trace rows: nothing to report")
        problems: list[str] = []
        step("findings")
        homes: dict[int, str] = {}
        findings = collect_findings(con, problems, homes)
        sections = []
        for spec in SECTIONS:
            step(spec.title)
            mine = [f for f in findings if homes.get(id(f)) == spec.id]
            sections.append(_build_section(con, spec, source, mine, problems))
        step("charts")
        series = _series(con, source, problems)
        if problems:  # name the files that could not be read, first
            from gpulens.analysis.dataset import unreadable_files

            problems[:0] = unreadable_files(con, Path(dataset))
        whole = {t.name: t.frame for s in sections for t in s.tables if t.spec.where is None and not s.empty_reason}
        metrics = metrics_of.compute_metrics(con, whole)
        metrics_by_run = metrics_of.compute_run_metrics(con, [r["run"] for r in source.runs], whole)
        report = Report(
            title=title or (f"gpulens report: job {job}" if job is not None else _default_title(source)),
            gpulens_version=gpulens_version(),
            source=source,
            findings=findings,
            sections=sections,
            metrics=metrics,
            metrics_by_run=metrics_by_run,
            series=series,
            problems=problems,
        )
        if compare is not None:
            step("baseline")
            baseline = comparing.load_baseline(compare, label=compare_label)
            report.comparison = comparing.compare(report, baseline, fail_on or {})
        elif fail_on:
            from gpulens.collector.errors import UsageError

            raise UsageError("--fail-on needs --compare BASELINE")
        return report


# The report section of each question's findings; the power module's go by page.
_MODULE_SECTIONS = {"gpulens.analysis.launch": "launch", "gpulens.analysis.time_breakdown": "time", "gpulens.analysis.communication": "communication"}


def collect_findings(con: duckdb.DuckDBPyConnection, problems: list[str],
                     homes: dict[int, str] | None = None) -> list[Finding]:
    """Every question's findings, most severe first; one that fails is a problem, not the end.

    `homes`, if given, is filled with id(finding) → the report section it belongs to.
    """
    findings: list[Finding] = []
    for source in finding_sources():
        try:
            found = source(con)
        except (GpulensError, duckdb.Error) as error:
            problems.append(f"findings of {source.__module__}: {one_line(error)}")
            continue
        findings.extend(found)
        if homes is not None:
            for finding in found:
                home = _MODULE_SECTIONS.get(source.__module__)
                home = home or next((spec.id for spec in SECTIONS if finding.page in spec.pages), "")
                homes[id(finding)] = home
    return sort_findings(findings)


def _build_section(con: duckdb.DuckDBPyConnection, spec: SectionSpec, source: Source, findings: list[Finding],
                   problems: list[str]) -> Section:
    section = Section(spec, findings=findings)
    if spec.needs == "traces" and not source.has_traces:
        section.empty_reason = "No kernel traces in this dataset: ingest PyTorch profiler, Nsight Systems, rocprof or NCCL traces to see this."
    elif spec.needs == "telemetry" and not source.has_telemetry:
        section.empty_reason = "No telemetry in this dataset: run `gpulens collect` on the node to see this."
    elif spec.needs == "both" and not (source.has_traces and source.has_telemetry):
        section.empty_reason = "Needs both telemetry and kernel traces of the same node and time."
    analyses = load_analyses()
    for table in spec.tables:
        if table.name not in analyses:
            continue
        if section.empty_reason:
            # Every table keeps its key in the JSON, empty.
            section.tables.append(TableResult(table, pl.DataFrame()))
            continue
        try:
            frame = run_analysis(con, table.name)
        except GpulensError as error:
            message = f"{table.name}: {one_line(error)}"
            problems.append(message)
            section.error = message if section.error is None else section.error
            continue
        if table.where is not None and not frame.is_empty():
            frame = frame.filter(table.where)
        if table.sort and all(c in frame.columns for c in table.sort):
            frame = frame.sort(table.sort, nulls_last=True, maintain_order=True)
        section.tables.append(TableResult(table, frame))
    return section


def _series(con: duckdb.DuckDBPyConnection, source: Source, problems: list[str]) -> dict[str, pl.DataFrame]:
    series: dict[str, pl.DataFrame] = {}
    if source.has_traces:
        try:
            series.update(_typical_steps(con))
        except GpulensError as error:
            problems.append(f"typical steps: {one_line(error)}")
    if not source.has_telemetry:
        return series
    span = _records(con, "select epoch_us(max(ts)) - epoch_us(min(ts)) as span_us from telemetry")[0]["span_us"] or 0
    bucket_s = max(1, math.ceil(span / 1e6 / TIMELINE_BUCKETS))
    analyses = load_analyses()
    for name in ("telemetry_timeline", "dash_node_power_timeline"):
        if name not in analyses:
            continue
        try:
            series[name] = run_analysis(con, name, timeline_bucket_s=bucket_s)
        except GpulensError as error:
            problems.append(f"{name}: {one_line(error)}")
    return series


# Runs whose typical step the report draws, kernel by kernel with its launch queue.
TYPICAL_STEP_RUNS = 3


def _typical_steps(con: duckdb.DuckDBPyConnection) -> dict[str, pl.DataFrame]:
    """For each of the first runs with profiler steps: its lowest rank's step
    of median length, as the kernels page draws a step (its kernels per
    stream, and each stream's launch queue). Keys: `step_kernels/RUN` and
    `step_queue/RUN`."""
    from gpulens.analysis import timeline

    steps = run_analysis(con, "step_launch_summary")  # the launch section's, kept on the connection
    # A rank without profiler steps has one window of step NULL: no step to draw.
    steps = steps.filter(pl.col("step").is_not_null())
    if steps.is_empty():
        return {}
    series: dict[str, pl.DataFrame] = {}
    for run in sorted(steps["run"].unique().to_list())[:TYPICAL_STEP_RUNS]:
        of_run = steps.filter(pl.col("run") == run)
        of_rank = of_run.filter(pl.col("rank") == of_run["rank"].min())
        # The last step of a trace may be cut short by the profiler's stop.
        of_rank = (of_rank.filter(~pl.col("is_last")) if of_rank["is_last"].sum() < of_rank.height else of_rank).sort("step_ns", "step")
        median = of_rank.row((of_rank.height - 1) // 2, named=True)
        rank, step = median["rank"], median["step"]
        kernels = timeline.step_kernel_runs(con, run, rank, step)
        if kernels.height:
            series[f"step_kernels/{run}"] = kernels
            series[f"step_queue/{run}"] = timeline.step_queue_length(con, run, rank, step)
    return series


def describe_source(con: duckdb.DuckDBPyConnection, dataset: Path, inputs: list[str], temporary: bool) -> Source:
    """Rows per table, hosts, runs and trace files of the dataset."""
    from gpulens.analysis.tables import TABLES, quote_identifier

    try:
        # One query, fully fetched: DuckDB 2 keeps a connection busy while a
        # result is only partly fetched (fetchone).
        counts = " union all ".join(
            f"select {i} as i, count(*) as n from {quote_identifier(t)}" for i, t in enumerate(TABLES)
        )
        by_index = {r["i"]: r["n"] for r in _records(con, counts)}
        rows = {table: int(by_index[i]) for i, table in enumerate(TABLES)}
        hosts = _records(con, """
            select host, count(distinct gpu_index) as gpus, count(*) as samples,
                   epoch_us(min(ts)) as first_ts_us, epoch_us(max(ts)) as last_ts_us
            from telemetry group by host order by host""")
        models = {r["host"]: r["models"] for r in _records(con, """
            select host, string_agg(distinct model, ', ' order by model) as models from devices group by host""")}
        for host in hosts:
            host["models"] = models.get(host["host"])
        runs = _records(con, """
            select run, count(distinct rank) as ranks, max(world_size) as world_size,
                   string_agg(distinct source_format, ', ' order by source_format) as formats,
                   string_agg(distinct host, ', ' order by host) as hosts,
                   string_agg(distinct device_name, ', ' order by device_name) as devices
            from runs group by run order by run""")
        files = _records(con, "select run, rank, source_format, source_path from runs order by run, rank, source_path")
    except duckdb.Error as error:
        raise DatasetError(f"{dataset}: cannot read the dataset: {one_line(error)}") from None
    return Source(inputs=inputs, dataset=None if temporary else str(dataset), rows=rows, hosts=hosts, runs=runs,
                  trace_files=files)


def _records(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    # run_sql: a file a running collector merges away meanwhile is read again.
    return pl.from_arrow(run_sql(con, sql)).to_dicts()


def _default_title(source: Source) -> str:
    runs = [r["run"] for r in source.runs]
    hosts = [h["host"] for h in source.hosts]
    subject = ", ".join(runs[:3] + hosts[:3]) or "dataset"
    return f"gpulens report: {subject}"


def gpulens_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpulens")
    except PackageNotFoundError:
        return "unknown"
