"""Ingest many trace files into a dataset: expand, parse in parallel, report.

A directory or glob of per-rank files is one run with many ranks. Each
file is parsed *and written* by one process, this one or a worker (which
sends back only its row counts: big tables never travel through
pickling); see `store` for the layout and why writes are per source file.

The exceptions:
- A Kineto file of at least one and a half cores' share of the work (one
  big trace, or one big rank beside small ones): processes read its parts at once
  (`plan._split_big_files`, `kineto.read_part`), then one puts them
  together and writes the file (`_assembled`), so one file no longer
  leaves the other cores idle. A 620,000-event rank alone on two cores:
  3.4 → 2.4 s.
- Many small files (a job of hundreds of ranks): one process parses a
  group of them and writes them together, one file per table for the
  group (`plan.group_small_sources`, `store.write_sources`), since each
  file written costs more than its rows do. 64 ranks of 5,000 events:
  40 → 24 ms of CPU a rank.

This module holds the entry point and what one task does (parse and write
a source or a group of them, assemble a split file's parts). The arguments
become sources in `sources`, the work is cut up in `plan` and run in
`pool` (this process beside its workers), and what comes back is in
`results`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from gpulens.collector.errors import DatasetError, TraceError, one_line, raise_if_terminated
from gpulens.collector.ingest.base import timing_warnings, with_host
from gpulens.collector.ingest.buffer import content_bytes
from gpulens.collector.ingest.formats import UNKNOWN_FORMAT, detect_format, module_for
from gpulens.collector.ingest.plan import _split_big_files, group_small_sources
from gpulens.collector.ingest.pool import (Assembly, PartOutcome, _read_part, _run, prepare_ingest_process,
                                          release_freed_memory)
from gpulens.collector.ingest.results import FileFailure, FileResult, IngestReport, SkippedFile
from gpulens.collector.ingest.sources import (ROCPROF, TRACE_SUFFIXES, Source, _expand, common_stem, default_run_name,
                                      find_traces, sources_of, trace_stem)
from gpulens.collector.ingest.store import (STAGING_DIR, read_runs, remove_abandoned_staging, runs_holding, sanitise_run,
                                    source_id, write_source, write_sources)

if TYPE_CHECKING:
    from gpulens.collector.ingest.base import ParsedTrace


def ingest_paths(paths: Iterable[str | Path], out: Path, run: str | None = None, jobs: int | None = None,
                 progress: bool = False, host: str | None = None) -> IngestReport:
    """Ingest trace files, directories and globs into the dataset at `out`.

    The files of one call are one run (one rank per file, usually), named
    `run` or, by default, after the folder when one folder is given, else
    after the stem the files share (`job_rank0`, `job_rank1` → `job`).
    `host` is the host of the traces that name none.
    Folders are searched recursively; files in them that are no known
    format are skipped. `jobs` processes parse at once: this one and
    `jobs - 1` workers (default: the CPU count). Files that fail are reported, never raised;
    the others are still ingested.
    """
    plan = plan_ingest(paths, Path(out), run, host)
    tasks = plan.tasks
    # Read once for the planning steps: a gzip file's size is in its last bytes
    # (53 ms a pass over 2,000 files, before any file is parsed).
    file_sizes = {file: content_bytes(file) for task in tasks for file in task.files}
    planned = group_small_sources(_split_big_files(tasks, jobs, file_sizes), jobs, file_sizes)
    # Closed at once if this stops early (SIGTERM, Ctrl-C), so that it stops
    # its workers and removes its staging folder now, not when collected.
    with contextlib.closing(_run(planned, plan.out, jobs, progress, ingest_task, file_sizes)) as outcomes:
        for outcome in outcomes:
            raise_if_terminated()  # a stop (SIGTERM, Ctrl-C) whose exception was swallowed where it landed
            plan.add(outcome)
    return plan.finished()


@dataclass
class IngestPlan:
    """One ingest call, planned before any file is parsed: its sources (one
    run), and the report its outcomes go into. Serial and Spark ingest
    (`distributed`) both plan with `plan_ingest` and end with `finished`."""

    out: Path
    run: str | None  # as the caller named it (None: the default name)
    tasks: list[Source]
    report: IngestReport  # holds the arguments that named no file, so far
    elsewhere: dict[str, list[str]]  # source id → the other runs that hold it now
    new_dataset: bool
    started: float = field(default_factory=time.perf_counter)

    def add(self, outcome: FileResult | FileFailure | SkippedFile) -> None:
        if isinstance(outcome, FileResult):
            self.report.results.append(outcome)
        elif isinstance(outcome, SkippedFile):
            self.report.skipped.append(outcome)
        else:
            self.report.failures.append(outcome)

    def finished(self) -> IngestReport:
        """The report, in path order, with what moved between runs, the run's
        stored name, and every source of its runs."""
        report = self.report
        report.results.sort(key=lambda r: r.path)
        report.failures.sort(key=lambda f: f.path)
        report.moved = [(result.path, tuple(before), result.run)
                        for result in report.results if (before := self.elsewhere.get(source_id(result.path)))]
        if self.run is not None and report.results and (stored := sanitise_run(self.run)) != self.run:
            report.run_renamed = (self.run, stored)
        report.earlier = sources_in_runs(self.out, report.runs)
        if self.new_dataset and not report.results:
            _remove_if_empty(self.out / STAGING_DIR, self.out)  # nothing ingested: leave no empty dataset behind
        report.seconds = time.perf_counter() - self.started
        return report


def plan_ingest(paths: Iterable[str | Path], out: Path, run: str | None = None,
                host: str | None = None) -> IngestPlan:
    """Check that `out` can be written, expand `paths` into sources (one
    run), and find which of them other runs of the dataset hold now."""
    started = time.perf_counter()
    new_dataset = not out.exists()
    check_writable(out)
    tasks, failures = _expand(list(paths), out, run, host)
    ids = {source_id(member.path) for task in tasks for member in task.members}
    elsewhere = runs_holding(out, ids, tasks[0].run) if tasks else {}
    return IngestPlan(out, run, tasks, IngestReport(failures=failures), elsewhere, new_dataset, started)


def _remove_if_empty(*folders: Path) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (another ingest came), or gone
            return


def sources_in_runs(out: Path, runs: list[str]) -> list[tuple[str, str, int, str]]:
    """(run, format, rank, source path) of every source the dataset holds
    in `runs`, this call's included."""
    found = []
    for run in runs:
        for row in read_runs(out, run, ["source_format", "rank", "source_path"]).to_pylist():
            if row["rank"] is not None:
                found.append((run, row["source_format"], row["rank"], row["source_path"]))
    return found


def check_writable(out: Path) -> None:
    """Raise DatasetError, before any file is parsed, where the dataset
    folder cannot be made or written: one line, not one per file. What an
    earlier ingest killed on this machine left in its staging folder goes."""
    try:
        (out / STAGING_DIR).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out / STAGING_DIR):
            pass
    except OSError as error:
        raise DatasetError(f"{out}: cannot write the dataset there: {error.strerror or error}") from None
    remove_abandoned_staging(out)


def ingest_file(path: str, run: str, out: str, explicit: bool = True,
                parts: tuple[str, ...] = (), host: str | None = None) -> FileResult | FileFailure | SkippedFile:
    """Detect, parse and write one file (the unit a worker runs), or the
    `parts` of one rocprofv3 process together, `path` naming them.

    `explicit` is false for files found in a folder: those of no known
    format come back as SkippedFile rather than FileFailure. `host`: the
    host of traces that name none.
    """
    try:
        return _ingest_file(path, run, out, explicit, parts, host)
    finally:
        release_freed_memory()


def _ingest_file(path: str, run: str, out: str, explicit: bool,
                 parts: tuple[str, ...], host: str | None) -> FileResult | FileFailure | SkippedFile:
    started = time.perf_counter()
    run = sanitise_run(run)
    parsed = _parse(path, run, explicit, parts, out, host)
    if isinstance(parsed, (FileFailure, SkippedFile)):
        return parsed
    return _written(path, *parsed, run, out, started)


def _parse(path: str, run: str, explicit: bool, parts: tuple[str, ...], out: str,
           host: str | None = None) -> tuple[str, ParsedTrace] | FileFailure | SkippedFile:
    """Detect and parse one source: (its format, what it holds), or why not;
    `host` given to a trace that names none, and boot-clock times placed on
    the epoch where a boot of their host fits (this machine's, or one its
    collector recorded in the dataset at `out`)."""
    try:
        format_name = ROCPROF if parts else detect_format(path)
    except TraceError as error:
        if not explicit and error.problem == UNKNOWN_FORMAT:
            return SkippedFile(path, error.problem)
        return FileFailure(path, error.problem)
    try:
        if parts:
            parsed = module_for(ROCPROF).parse_process([Path(part) for part in parts], run)
        else:
            parsed = module_for(format_name).parse(Path(path), run)
        with_host(parsed, host)
        if parsed.boot_clock is not None:
            from gpulens.collector import boot_clock  # rocprofv3 only: kept off Kineto's import path

            boot_clock.place(parsed, Path(out))
        return format_name, parsed
    except TraceError as error:
        return FileFailure(error.path if parts else path, error.problem)  # a process's part: the file itself
    except MemoryError:  # past the worker's bound (pool.worker_memory_bytes)
        return FileFailure(path, "out of memory: reading it needs more than this ingest process may use "
                                 "(GPULENS_INGEST_WORKER_MEMORY_BYTES)")
    except Exception as error:  # a parser bug must not stop the other files
        return FileFailure(path, one_line(f"unexpected error: {type(error).__name__}: {error}"))


def _written(path: str, format_name: str, parsed: ParsedTrace, run: str, out: str,
             started: float) -> FileResult | FileFailure:
    """Write a parsed source into the dataset; what it gave."""
    try:
        rows = write_source(Path(out), run, source_id(path), parsed.tables)
    except DatasetError as error:
        return FileFailure(path, str(error))
    except Exception as error:
        return FileFailure(path, one_line(f"unexpected error: {type(error).__name__}: {error}"))
    return _result(path, format_name, parsed, run, rows, time.perf_counter() - started)


def _result(path: str, format_name: str, parsed: ParsedTrace, run: str, rows: dict[str, int],
            seconds: float) -> FileResult:
    runs = parsed.tables.get("runs")
    ranks = tuple(sorted({r for r in runs.column("rank").to_pylist() if r is not None})) if runs is not None else ()
    return FileResult(path, format_name, run, ranks, rows, parsed.events or sum(rows.values()), seconds,
                      (*parsed.warnings, *timing_warnings(parsed.tables)))


def ingest_group(task: Source, out: str) -> list[FileResult | FileFailure | SkippedFile]:
    """Parse a group's sources and write them together (`store.write_sources`);
    each one's outcome, in the group's order. A source that fails leaves the
    others to be written."""
    try:
        run = sanitise_run(task.run)
        outcomes: list[FileResult | FileFailure | SkippedFile | None] = []
        parsed: list[tuple[int, str, ParsedTrace, float]] = []  # (its place, format, tables, seconds)
        for source in task.group:
            started = time.perf_counter()
            got = _parse(source.path, run, source.explicit, source.parts, out, source.host)
            if isinstance(got, (FileFailure, SkippedFile)):
                outcomes.append(got)
            else:
                parsed.append((len(outcomes), *got, time.perf_counter() - started))
                outcomes.append(None)  # written below
        if parsed:
            for place, outcome in zip((place for place, *_ in parsed), _written_together(task, parsed, run, out)):
                outcomes[place] = outcome
        return outcomes  # type: ignore[return-value]  # every place is filled now
    finally:
        release_freed_memory()


def _written_together(task: Source, parsed: list[tuple[int, str, ParsedTrace, float]], run: str,
                      out: str) -> list[FileResult | FileFailure]:
    paths = [task.group[place].path for place, *_ in parsed]
    started = time.perf_counter()
    try:
        written = write_sources(Path(out), run, [(source_id(path), tables.tables)
                                                 for path, (_, _, tables, _) in zip(paths, parsed)])
    except DatasetError as error:
        return [FileFailure(path, str(error)) for path in paths]
    except Exception:  # a bug one source meets (in derive): written one by one, that one fails alone
        return [_written(path, format_name, tables, run, out, time.perf_counter() - seconds)
                for path, (_, format_name, tables, seconds) in zip(paths, parsed)]
    share = (time.perf_counter() - started) / len(parsed)  # the writing, shared out evenly
    return [_result(path, format_name, tables, run, rows, seconds + share)
            for path, (_, format_name, tables, seconds), rows in zip(paths, parsed, written)]


def ingest_task(task: Source | Assembly, out: str) -> list[FileResult | FileFailure | SkippedFile | PartOutcome]:
    """Run one task (a source, a group of them, a part of a big file, or
    the joining of a split file's parts): an outcome per source (one, but
    for a group)."""
    if isinstance(task, Assembly):
        return [_assembled(task.task, task.parts, out)]
    if task.group:
        return ingest_group(task, out)
    if task.part is not None:
        return [_read_part(task, out)]
    return [ingest_file(task.path, task.run, out, task.explicit, task.parts, task.host)]


def _assembled(task: Source, parts: list[PartOutcome], out: str) -> FileResult | FileFailure | SkippedFile:
    """Build and write a file from all its parts; where one could not be
    read, or they do not meet, ingest it whole."""
    from gpulens.collector.ingest import kineto

    reads = [read for read in (part.events() for part in parts) if read is not None]
    for part in parts:
        part.read = None  # `reads` holds them now, and only until they are merged
    result: FileResult | FileFailure | SkippedFile | None = None
    if len(reads) == len(parts):
        # The time one process would have taken: reading every part, then this.
        started = time.perf_counter() - sum(part.seconds for part in parts)
        run = sanitise_run(task.run)
        try:
            parsed = with_host(kineto.parse_parts(Path(task.path), run, reads), task.host)
        except TraceError as error:  # a trace with no GPU events
            result = FileFailure(task.path, error.problem)
        except Exception:  # the parts do not meet (NotStreamable), or a parser bug the whole file reports
            pass
        else:
            del reads
            result = _written(task.path, kineto.FORMAT, parsed, run, out, started)
    if result is None:
        result = ingest_file(task.path, task.run, out, task.explicit, host=task.host)
    release_freed_memory()
    return result


# Besides this module's own: what moved to `results`, `sources`, `plan` and
# `pool` that callers import from here.
__all__ = [
    "FileFailure", "FileResult", "IngestPlan", "IngestReport", "SkippedFile", "Source", "STAGING_DIR", "TRACE_SUFFIXES",
    "common_stem", "default_run_name", "find_traces", "group_small_sources", "ingest_file", "ingest_group",
    "ingest_task", "ingest_paths", "plan_ingest", "prepare_ingest_process", "sources_of", "sources_in_runs",
    "trace_stem",
]
