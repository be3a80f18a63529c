"""Ingest many trace files into a dataset: expand, parse in parallel, report.

A directory or glob of per-rank files is one run with many ranks. Each
file is parsed *and written* by one process, this one or a worker (which
sends back only its row counts: big tables never travel through
pickling); see `store` for the layout and why writes are per source file.

The exceptions:
- A Kineto file bigger than its share of the work (one big trace, or one
  big rank beside small ones): workers read its parts at once
  (`_split_big_files`, `kineto.read_part`) and this process puts them
  together and writes the file (`_assemble`), so one file no longer leaves
  the other cores idle. A 620,000-event rank alone on two cores: 3.4 → 2.4 s.
- Many small files (a job of hundreds of ranks): one process parses a
  group of them and writes them together, one file per table for the
  group (`group_small_sources`, `store.write_sources`), since each file
  written costs more than its rows do. 64 ranks of 5,000 events: 40 → 24 ms
  of CPU a rank.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import glob
import logging
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from collector.errors import DatasetError, TraceError, one_line
from collector.ingest.base import timing_warnings, with_host
from collector.ingest.buffer import content_bytes
from collector.ingest.formats import UNKNOWN_FORMAT, detect_format, format_modules, module_for
from collector.ingest.store import (STAGING_DIR, owner_tag, read_runs, remove_abandoned_staging, runs_holding,
                                    sanitise_run, source_id, staging_folder, write_source, write_sources)
from collector.no_pandas import refuse_pandas

if TYPE_CHECKING:
    import multiprocessing.process
    from concurrent.futures import ProcessPoolExecutor

    from collector.ingest.base import ParsedTrace
    from collector.ingest.kineto import PartRead

# File names a directory is searched for (the watcher looks for the same).
# Files found this way whose content is no known format are skipped, not
# failed, so a broad net (.txt, .out: NCCL logs under job-log names) is safe.
TRACE_SUFFIXES: tuple[str, ...] = (
    ".json", ".json.gz", ".sqlite", ".sqlite.gz", ".db", ".db.gz", ".csv", ".csv.gz", ".log", ".txt", ".out",
)
# Below this much trace content in all (decompressed), one process parses
# everything: a forked worker's pool takes ~12 ms to start and stop and, by
# RSS, another ~75 MB (the imported modules it shares with this process),
# more than it saves on a few MB. Two 1.7 MB Kineto files took 0.54 s in
# two processes and 0.62 s in one (medians of 5, noise ±0.1 s) at 180 vs
# 108 MB; 13 MB in three files took 0.82 vs 0.94 s, worth the worker.
PARALLEL_MIN_CONTENT_BYTES = 8 << 20
# The least content a part of a split file is given (see `_split_big_files`):
# four 2 MiB batches, so its fixed costs (a task, its columns pickled back)
# stay small beside its parsing.
SPLIT_MIN_PART_BYTES = 8 << 20
# A command of at least this many small sources writes them in groups
# (`group_small_sources`): fewer would gain little, and re-ingesting one
# source of a group rewrites the group's other sources (`merge._explode`).
GROUP_MIN_SOURCES = 16
# A source bigger than this (content) is written on its own: its own costs
# outweigh a file's fixed ones.
GROUP_SOURCE_MAX_BYTES = 8 << 20
# At most this many sources and this much content a group: the group's
# tables are held in memory together until written. Past eight a group the
# writing gains little (64 ranks of 5,000 events: 17.7 ms of writing a rank
# alone, 6.1 in fours, 4.0 in eights, 3.0 in sixteens); sixteen halves the
# files a run of thousands of ranks leaves.
GROUP_MAX_SOURCES = 16
GROUP_MAX_BYTES = 64 << 20
# Set in ingest workers (`_worker_start`): they spill a part's events to a
# file in the ingest's own staging folder.
_IN_WORKER = False
_SPILL_DIR: str | None = None
ROCPROF = "rocprof"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_ROCPROF_ENDINGS = ("_trace.csv", "_trace.csv.gz")
# Where a shared stem may end in each name: at its end, a separator or a number.
_STEM_END = re.compile(r"$|[-_.\s\d]")
_STEM_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite", ".csv", ".log", ".gz")


@dataclass
class FileResult:
    path: str
    format: str
    run: str
    ranks: tuple[int, ...]
    # Rows written per table.
    rows: dict[str, int]
    # Raw records the parser read (trace events, CSV rows, log lines).
    events: int
    seconds: float
    # What the parser warned of (ParsedTrace.warnings).
    warnings: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """What the file gave, in one line (as `gpulens ingest` prints it)."""
        ranks = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"ranks {rank_ranges(list(self.ranks))}" if self.ranks else "no rank"
        line = f"{self.path}: {self.format}, run {self.run}, {ranks}, {self.rows.get('kernels', 0)} kernels"
        if self.rows.get("collectives"):
            line += f", {self.rows['collectives']} collectives"
        return line

    @property
    def rank(self) -> int | None:
        """The file's rank, where it holds exactly one."""
        return self.ranks[0] if len(self.ranks) == 1 else None


@dataclass
class FileFailure:
    path: str
    problem: str

    @property
    def message(self) -> str:
        """The one line to print: `<file>: <problem>`."""
        return f"{self.path}: {self.problem}"

    def __str__(self) -> str:
        return self.message


@dataclass
class SkippedFile:
    """A file found in a directory that is not a trace (not an error)."""

    path: str
    reason: str


@dataclass(frozen=True)
class SharedRank:
    """One rank of one run that several files of one format claim."""

    run: str
    format: str
    rank: int
    paths: tuple[str, ...]

    @property
    def message(self) -> str:
        return (f"run {self.run}: rank {self.rank} comes from {len(self.paths)} {self.format} files "
                f"({', '.join(self.paths)}); analyses merge them as one rank "
                "(ingest separate jobs with their own --run; where the traces do not say their rank, "
                "put it in each file's or folder's name: rank3/...)")


@dataclass
class IngestReport:
    results: list[FileResult] = field(default_factory=list)
    failures: list[FileFailure] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    seconds: float = 0.0
    # (run, format, rank, source path) of the sources earlier ingests wrote
    # into the runs of this one, for `shared_ranks`.
    earlier: list[tuple[str, str, int, str]] = field(default_factory=list)
    # (source path, the runs that held it, its run now) of the sources this
    # call took from other runs: a source file belongs to one run.
    moved: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)
    # (the --run given, the name stored) where the name had to change to be
    # one folder's name: two different names may then meet in one run.
    run_renamed: tuple[str, str] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def runs(self) -> list[str]:
        return sorted({r.run for r in self.results})

    @property
    def events(self) -> int:
        return sum(r.events for r in self.results)

    def rows(self, table: str | None = None) -> int:
        """Rows written, in one table or in all."""
        return sum(n for r in self.results for t, n in r.rows.items() if table in (None, t))

    @property
    def shared_ranks(self) -> list[SharedRank]:
        """Ranks that two or more files of one format claim in one run.

        Analyses key a run's rows by rank, so such files are merged as one
        rank: two jobs' traces ingested under one run name, or traces that
        do not say their rank (each then rank 0, or the rank its name says).
        """
        files: dict[tuple[str, str, int], list[str]] = {}
        for result in self.results:
            for rank in result.ranks:
                files.setdefault((result.run, result.format, rank), []).append(result.path)
        this_call = {os.path.realpath(result.path) for result in self.results}
        for run, format_name, rank, source in self.earlier:
            if os.path.realpath(source) not in this_call and (run, format_name, rank) in files:
                files[(run, format_name, rank)].append(source)
        return [SharedRank(run, format_name, rank, tuple(sorted(paths)))
                for (run, format_name, rank), paths in sorted(files.items()) if len(paths) > 1]

    def notices(self) -> list[tuple[int, str]]:
        """What to tell the user, as (logging level, line), in the order
        `gpulens ingest` prints it and the watcher logs it: each file's
        line and its warnings, the shared ranks, then the failures."""
        notices: list[tuple[int, str]] = []
        for result in self.results:
            notices.append((logging.INFO, result.line))
            notices.extend((logging.WARNING, f"{result.path}: {warning}") for warning in result.warnings)
        notices.extend((logging.WARNING, shared.message) for shared in self.shared_ranks)
        notices.extend(
            (logging.WARNING, f"{path}: moved from run {', '.join(before)} to run {now} (a trace file belongs to "
                              "one run; to keep it in both, ingest a copy of it)")
            for path, before, now in self.moved)
        if self.run_renamed is not None:
            given, stored = self.run_renamed
            notices.append((logging.WARNING, f"run name {given!r} is stored as {stored!r} (a run name is one folder's "
                                             "name: no slashes, control characters, leading dots or surrounding spaces)"))
        notices.extend((logging.ERROR, failure.message) for failure in self.failures)
        return notices

    def summary(self, out: Path) -> str:
        """One line on what was ingested: files, run, ranks, events, time."""
        files = len(self.results)
        ranks = sorted({rank for result in self.results for rank in result.ranks})
        line = f"ingested {files} file{'s' if files != 1 else ''}"
        if self.runs:
            line += f" into run {', '.join(self.runs)}"
        if ranks:
            line += f" ({'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)})"
        line += f": {self.events:,} events in {self.seconds:.2f} s"
        if self.events_per_s:
            line += f" ({self.events_per_s:,.0f} events/s)"
        if self.skipped:
            line += f"; {len(self.skipped)} other file{'s' if len(self.skipped) != 1 else ''} skipped (not traces)"
        return f"{line}; dataset {out}"

    @property
    def events_per_s(self) -> float | None:
        return self.events / self.seconds if self.seconds > 0 else None

    @property
    def rows_per_s(self) -> float | None:
        return self.rows() / self.seconds if self.seconds > 0 else None


@dataclass(frozen=True)
class Source:
    """What one process parses and writes as one source: a file, or the
    CSVs of one rocprofv3 process."""

    # The file; for a source of several files, what names them together.
    path: str
    run: str
    # Named on the command line (an unknown format is then an error) rather
    # than found in a directory (then it is skipped: READMEs, stats CSVs).
    explicit: bool
    # The files of a source that spans several (rocprofv3 writes a CSV per
    # trace kind per process), parsed and written together; else empty.
    parts: tuple[str, ...] = ()
    # One part of a big Kineto file's content, read by one process; the
    # parts of a file are assembled and written by this process (`_assemble`).
    part: FilePart | None = None
    # Small sources parsed by one process and written together
    # (`group_small_sources`); `path` is then the first one's.
    group: tuple[Source, ...] = ()
    # The host its traces were recorded on, where they name none (`--host`).
    host: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        if self.group:
            return tuple(file for member in self.group for file in member.files)
        return self.parts or (self.path,)

    @property
    def members(self) -> tuple[Source, ...]:
        """The sources this task ingests: its group's, or itself."""
        return self.group or (self,)


@dataclass(frozen=True)
class FilePart:
    """Content offsets [start, end) of part `index` of `count`; end None: to the end."""

    index: int
    count: int
    start: int
    end: int | None


@dataclass
class PartOutcome:
    """What reading one part gave: its events, or None where it could not be
    read on its own (the file is then ingested whole). A worker leaves them
    in a file for this process (`spilled`), not in its reply: see `_spill`."""

    task: Source
    read: PartRead | None
    seconds: float
    spilled: str | None = None

    def events(self) -> PartRead | None:
        """The part's events, read back (once) where a worker spilled them."""
        if self.spilled is not None:
            try:
                with open(self.spilled, "rb") as handle:
                    self.read = pickle.load(handle)
            except OSError:
                self.read = None  # the file is read whole instead
            finally:
                Path(self.spilled).unlink(missing_ok=True)
                self.spilled = None
        return self.read


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
    started = time.perf_counter()
    out = Path(out)
    new_dataset = not out.exists()
    check_writable(out)
    tasks, failures = _expand(list(paths), out, run, host)
    report = IngestReport(failures=failures)
    ids = {source_id(member.path) for task in tasks for member in task.members}
    elsewhere = runs_holding(out, ids, tasks[0].run) if tasks else {}
    # Read once for the planning steps: a gzip file's size is in its last bytes
    # (53 ms a pass over 2,000 files, before any file is parsed).
    file_sizes = {file: content_bytes(file) for task in tasks for file in task.files}
    planned = group_small_sources(_split_big_files(tasks, jobs, file_sizes), jobs, file_sizes)
    # Closed at once if this stops early (SIGTERM, Ctrl-C), so that it stops
    # its workers and removes its staging folder now, not when collected.
    with contextlib.closing(_run(planned, out, jobs, progress, file_sizes)) as outcomes:
        for outcome in _assemble(outcomes, str(out)):
            if isinstance(outcome, FileResult):
                report.results.append(outcome)
            elif isinstance(outcome, SkippedFile):
                report.skipped.append(outcome)
            else:
                report.failures.append(outcome)
    report.results.sort(key=lambda r: r.path)
    report.failures.sort(key=lambda f: f.path)
    report.moved = [(result.path, tuple(before), result.run)
                    for result in report.results if (before := elsewhere.get(source_id(result.path)))]
    if run is not None and report.results and (stored := sanitise_run(run)) != run:
        report.run_renamed = (run, stored)
    report.earlier = sources_in_runs(out, report.runs)
    if new_dataset and not report.results:
        _remove_if_empty(out / STAGING_DIR, out)  # nothing ingested: leave no empty dataset behind
    report.seconds = time.perf_counter() - started
    return report


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
            from collector import boot_clock  # rocprofv3 only: kept off Kineto's import path

            boot_clock.place(parsed, Path(out))
        return format_name, parsed
    except TraceError as error:
        return FileFailure(error.path if parts else path, error.problem)  # a process's part: the file itself
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


def release_freed_memory() -> None:
    """Hand memory freed by the last file back to the system (glibc's
    `malloc_trim`; elsewhere nothing).

    glibc keeps freed heap memory for reuse: after a 216,000-event file a
    process held 155 MB where 117 MB were in use. A process that waits for
    its next file (this one beside its workers, a worker with no file left,
    the collector watching a trace folder) then holds that memory for
    nothing. The call costs well under a millisecond.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


def ingest_task(task: Source, out: str) -> list[FileResult | FileFailure | SkippedFile | PartOutcome]:
    """Run one task (a source, a group of them, or a part of a big file):
    an outcome per source (one, but for a group)."""
    if task.group:
        return ingest_group(task, out)
    if task.part is not None:
        return [_read_part(task, out)]
    return [ingest_file(task.path, task.run, out, task.explicit, task.parts, task.host)]


def _read_part(task: Source, out: str) -> PartOutcome:
    from collector.ingest import kineto

    started = time.perf_counter()
    assert task.part is not None
    try:
        read: PartRead | None = kineto.read_part(Path(task.path), task.part.start, task.part.end)
    except Exception:  # NotStreamable, an unreadable file, a parser bug: the whole file says which
        read = None
    outcome = PartOutcome(task, read, 0.0)
    if read is not None and _IN_WORKER:
        _spill(outcome)
    release_freed_memory()
    outcome.seconds = time.perf_counter() - started
    return outcome


def _spill(outcome: PartOutcome) -> None:
    """Move the outcome's events into a file in the ingest's staging folder
    for them (`_SPILL_DIR`), where this process's reply would carry them
    through a pipe.

    A part's columns are ~14 MB for a quarter of a 620,000-event rank. The
    pipe hands them over 64 KiB at a time, each a wake-up of this process's
    receiving thread among busy workers: the reply took 0.13 s to arrive,
    and the worker waited that long for its next task. Written to the page
    cache and read back, they take ~0.05 s, none of it waiting."""
    if _SPILL_DIR is None:
        return
    try:
        with tempfile.NamedTemporaryFile(dir=_SPILL_DIR, prefix="part-", suffix=".pickle", delete=False) as handle:
            pickle.dump(outcome.read, handle, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return  # the reply carries them after all
    outcome.read, outcome.spilled = None, handle.name


def _task_sizes(tasks: Iterable[Source], file_sizes: dict[str, int] | None) -> dict[Source, int]:
    """Each task's content in bytes: its files' `content_bytes`, taken from
    `file_sizes` where given."""
    size_of = file_sizes.__getitem__ if file_sizes is not None else content_bytes
    return {task: sum(map(size_of, task.files)) for task in tasks}


def _split_big_files(tasks: list[Source], jobs: int | None, file_sizes: dict[str, int] | None = None) -> list[Source]:
    """The tasks, with each Kineto file bigger than its share of the work
    cut into parts that processes read at once (`kineto.read_part`).

    A file is read by one process otherwise, so one big trace (or one big
    rank beside small ones) would keep the other cores idle. A file gets
    parts of about half a core's share of all the content, at most two per
    core and at least SPLIT_MIN_PART_BYTES each: halves, because equal
    bytes are not equal work (a trace's CPU ops, slower to read, come
    before its GPU events; the halves of the V100 trace took 0.42 and
    0.28 s), and smaller parts let the cores even it out. Eight like-sized
    ranks on two cores are not cut at all. A gzip file's parts each
    decompress the content before theirs (gzip cannot seek): ~2 GB/s with
    zlib-ng, small beside the parsing, ~60 MB/s a core.
    """
    # More parts than the cores can take only add work (a gzip file's parts
    # each decompress what comes before them): --jobs 4 on two cores read a
    # 620,000-event .json.gz in 2.8-3.1 s in eight parts, 2.3 s in four.
    cores = min(jobs or os.cpu_count() or 1, _usable_cores())
    if cores < 2:
        return tasks
    sizes = _task_sizes(tasks, file_sizes)
    total = sum(sizes.values())
    if total < PARALLEL_MIN_CONTENT_BYTES:
        return tasks
    share = total / cores
    planned: list[Source] = []
    for task in tasks:
        size = sizes[task]
        count = min(2 * cores, size // SPLIT_MIN_PART_BYTES, round(2 * size / share))
        if count < 2 or task.parts or not _is_kineto(task.path):
            planned.append(task)
            continue
        starts = [size * i // count for i in range(count)]
        ends: list[int | None] = [*starts[1:], None]
        planned.extend(replace(task, part=FilePart(i, count, starts[i], ends[i])) for i in range(count))
    return planned


def group_small_sources(tasks: list[Source], jobs: int | None,
                        file_sizes: dict[str, int] | None = None) -> list[Source]:
    """The tasks, with the small whole sources of a command of many put in
    groups that one process parses and writes together (`ingest_group`).

    Groups are of consecutive sources by path, so that ingesting the same
    files again on the same machine forms the same groups, and each group's
    files replace the last ingest's whole rather than split them apart
    (`merge._explode`). There are at least four groups a core, so the cores
    still share out the work evenly to the end.
    """
    sizes = _task_sizes((task for task in tasks if task.part is None), file_sizes)
    small = sorted((task for task, size in sizes.items() if size <= GROUP_SOURCE_MAX_BYTES), key=lambda t: t.path)
    if len(small) < GROUP_MIN_SOURCES:
        return tasks
    cores = min(jobs or os.cpu_count() or 1, _usable_cores())
    per_group = min(GROUP_MAX_SOURCES, len(small) // (4 * cores))
    if per_group < 2:
        return tasks
    groups: list[list[Source]] = [[]]
    content = 0
    for task in small:
        if len(groups[-1]) == per_group or (groups[-1] and content + sizes[task] > GROUP_MAX_BYTES):
            groups.append([])
            content = 0
        groups[-1].append(task)
        content += sizes[task]
    grouped = set(small)
    return [task for task in tasks if task not in grouped] + [
        replace(group[0], group=tuple(group)) if len(group) > 1 else group[0] for group in groups]


def _usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _is_kineto(path: str) -> bool:
    try:
        return detect_format(path) == "kineto"
    except TraceError:
        return False


def _assemble(outcomes: Iterable[FileResult | FileFailure | SkippedFile | PartOutcome],
              out: str) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """The outcomes, with the parts of each split file put together: once
    all of a file's parts are read, this process builds and writes its
    tables. Where any part could not be read, or the parts do not meet
    exactly, the file is ingested whole, which also gives the usual error."""
    pending: dict[str, list[PartOutcome]] = {}
    for outcome in outcomes:
        if not isinstance(outcome, PartOutcome):
            yield outcome
            continue
        outcome.events()  # read back now, while the other parts are still being read
        parts = pending.setdefault(outcome.task.path, [])
        parts.append(outcome)
        assert outcome.task.part is not None
        if len(parts) < outcome.task.part.count:
            continue
        del pending[outcome.task.path]
        yield _assembled(outcome.task, parts, out)
    for parts in pending.values():  # never all read (cannot happen: every task reports): whole
        yield ingest_file(parts[0].task.path, parts[0].task.run, out, parts[0].task.explicit, host=parts[0].task.host)


def _assembled(task: Source, parts: list[PartOutcome], out: str) -> FileResult | FileFailure | SkippedFile:
    """Build and write a file from all its parts; where one could not be
    read, or they do not meet, ingest it whole."""
    from collector.ingest import kineto

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


def _run(tasks: list[Source], out: Path, jobs: int | None, progress: bool,
         file_sizes: dict[str, int] | None = None) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """Each task's outcome, as `jobs` processes finish them: this one and
    `jobs - 1` workers (none for inputs under PARALLEL_MIN_CONTENT_BYTES).

    This process parses files too rather than wait on a pool of `jobs`: as
    many files are parsed at once, by one process fewer (a process is ~80
    MB before it reads a byte: on two small files, three processes were
    310 MB and two would be ~230). A thread hands the workers their next
    file as each finishes; this one takes files from the same queue,
    largest first, between which it reports what the workers finished.
    If a worker dies, the files it had are reported failed and this
    process parses those not yet handed out.

    The parts of a split file are tasks like files; this process also puts
    them together (`_assemble`). It still reads parts itself: with a pool
    of `jobs` workers instead and this process only assembling, the A100 +
    V100 pair took 1.12 s rather than 1.41 s, but at 261-290 MB rather than
    203-212 (HTA: 688), and one 620,000-event rank took 2.4 s either way.
    """
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    sizes = _task_sizes(tasks, file_sizes) if workers > 1 else {}
    if workers > 1 and sum(sizes.values()) < PARALLEL_MIN_CONTENT_BYTES:
        workers = 1  # too little work to pay for a worker: see PARALLEL_MIN_CONTENT_BYTES
    if workers == 1:
        with _Progress(_files_of(tasks), progress) as bar:
            for task in tasks:
                for outcome in ingest_task(task, str(out)):
                    yield outcome
                    bar.advance(_task_of(outcome))
        return
    # Import the parsers once here: forked workers then share those pages
    # instead of each importing its own copy (~13 MB each). And keep the
    # collector from touching (so copying) the shared objects there.
    format_modules()
    # Imported here: a run small enough for one process never pays for them.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # The workers spill parts' events here (`_spill`); this process removes
    # it at the end, whatever was left in it.
    spill_dir = staging_folder(out, f"parts-{owner_tag()}-")
    gc.freeze()
    queue = _TaskQueue(sorted(tasks, key=sizes.__getitem__, reverse=True))
    finished: SimpleQueue = SimpleQueue()  # the workers' outcomes, then None
    try:
        context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        started, pool_workers = set(multiprocessing.active_children()), []
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=context, initializer=_worker_start,
                                 initargs=(os.getpid(), str(spill_dir))) as pool:
            try:
                # This process takes the largest file: it lives to the end anyway,
                # while a worker with no file left exits (see _feed) and gives
                # its memory back. The first submissions start the workers: before
                # any other thread exists (the feeder, the progress bar), so none
                # is running when they fork.
                own = queue.take(1)
                first = [(pool.submit(ingest_task, task, str(out)), task) for task in queue.take(workers - 1)]
                pool_workers = [process for process in multiprocessing.active_children() if process not in started]
                feeder = threading.Thread(target=_feed, args=(pool, first, queue, str(out), finished), daemon=True)
                feeder.start()
                with _Progress(_files_of(tasks), progress) as bar:
                    workers_done = False
                    while True:
                        mine, own = own or queue.take(1), []
                        if mine:
                            for outcome in ingest_task(mine[0], str(out)):
                                yield outcome
                                bar.advance(_task_of(outcome))
                        elif workers_done:
                            break
                        # What the workers finished meanwhile; once this process has
                        # no file left, everything they still finish (and files put
                        # back in the queue when the pool broke are taken above).
                        while not workers_done and (not mine or not finished.empty()):
                            outcome = finished.get()
                            if outcome is None:
                                workers_done = True
                            else:
                                yield outcome
                                bar.advance(_task_of(outcome))
                feeder.join()
            except BaseException:
                # Stopped early (SIGTERM, Ctrl-C, closed): leaving the pool would
                # wait for every worker to finish its file.
                _stop(pool_workers)
                raise
            finally:
                queue.close()  # if this ends early, the feeder hands out nothing more
    finally:
        gc.unfreeze()
        shutil.rmtree(spill_dir, ignore_errors=True)
        remove_abandoned_staging(out)  # the write folders of workers stopped above


def _stop(workers: list[multiprocessing.process.BaseProcess]) -> None:
    """End the worker processes now (they clean up nothing: see `_worker_start`)."""
    for process in workers:
        if process.is_alive():
            process.terminate()
    for process in workers:
        process.join(5)


class _TaskQueue:
    """Tasks in the order to start them, taken by two threads."""

    def __init__(self, tasks: list[Source]) -> None:
        self._tasks = deque(tasks)
        self._lock = threading.Lock()

    def take(self, n: int) -> list[Source]:
        with self._lock:
            return [self._tasks.popleft() for _ in range(min(n, len(self._tasks)))]

    def put_back(self, task: Source) -> None:
        with self._lock:
            self._tasks.appendleft(task)

    def close(self) -> None:
        with self._lock:
            self._tasks.clear()


def _feed(pool: ProcessPoolExecutor, running: list[tuple[Future, Source]], queue: _TaskQueue, out: str,
          finished: SimpleQueue) -> None:
    """Keep each worker busy with the queue's next task; put every outcome
    on `finished`, then None (always: the caller waits for it)."""
    tasks = dict(running)
    try:
        while tasks:
            done, _ = wait(tasks, return_when=FIRST_COMPLETED)
            for future in done:
                task = tasks.pop(future)
                try:
                    outcomes = future.result()
                except KeyboardInterrupt:  # Ctrl-C reached the worker too; this process stops
                    outcomes = _failed(task, "interrupted")
                except Exception as error:  # the worker process itself died
                    outcomes = _failed(task, one_line(f"worker failed: {type(error).__name__}: {error}"))
                for outcome in outcomes:
                    finished.put(outcome)
                for follow in queue.take(1):
                    try:
                        tasks[pool.submit(ingest_task, follow, out)] = follow
                    except Exception:  # the pool broke (a worker died) or is shutting down
                        queue.put_back(follow)  # for this process, which still parses
    finally:
        # No file is left to hand out: let the workers exit now rather than
        # hold their memory until this process finishes its last file.
        pool.shutdown(wait=False)
        finished.put(None)


def _failed(task: Source, problem: str) -> list[FileFailure | PartOutcome]:
    # A part's failure is its file's only once the whole file fails too (`_assemble`).
    if task.part is not None:
        return [PartOutcome(task, None, 0.0)]
    return [FileFailure(member.path, problem) for member in task.members]


def _worker_start(parent: int, spill_dir: str) -> None:
    """Set up a worker process, which only ingests, for the process `parent`.

    SIGTERM ends it at once (not the handler `gpulens ingest` installs, which
    it inherits): its parent stops it so on SIGTERM or Ctrl-C, then removes
    what it left. And it ends when its parent does, even by SIGKILL: it would
    otherwise wait for its next file forever. A later ingest removes what it
    left then (`store.remove_abandoned_staging`)."""
    global _IN_WORKER, _SPILL_DIR
    _IN_WORKER = True
    _SPILL_DIR = spill_dir
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _end_with_parent(parent)
    prepare_ingest_process()


def _end_with_parent(parent: int) -> None:
    """Have the kernel kill this process when `parent` ends (Linux); elsewhere
    a thread that looks every second."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it ended before the call
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, name="gpulens-parent-watch", daemon=True).start()


def prepare_ingest_process() -> None:
    """Settings for a process that only ingests; only in processes gpulens
    owns (its ingest workers, the `gpulens ingest` command), since they
    would change a caller's process for everyone else in it.

    - pyarrow imports pandas the first time it builds an array, though
      ingest never converts to pandas: `refuse_pandas`.
    - Arrow's buffers come from the C library's allocator, not Arrow's
      default mimalloc. Ingest builds and frees many arrays of a few MB per
      batch; mimalloc hands that memory back and faults it in again (as
      2 MB huge pages, each zeroed), which cost ~15 % of ingest's CPU time
      in system time. With malloc: half the system time, 1/4 less peak
      memory (measured on 8 × 620,000-event ranks: 4.3 → 2.1 s of system
      time, 366 → 282 MB max RSS). This sets the pool of pyarrow's Python
      calls only; the C++ default, which the Parquet writer uses, is read
      from ARROW_DEFAULT_MEMORY_POOL when pyarrow loads, so `gpulens
      ingest` sets that first. Once mimalloc serves even those few writes,
      its per-thread segments cost 8-30 MB of RSS a process (64 ranks of
      5,000 events on two cores: 212 → 184 MB in all).
    """
    import pyarrow as pa

    refuse_pandas()
    pa.set_memory_pool(pa.system_memory_pool())


def _files_of(tasks: list[Source]) -> int:
    """How many files (sources) the tasks are: the parts of one file count
    once, a group's sources each."""
    return len({member.path for task in tasks for member in task.members})


def _task_of(outcome: FileResult | FileFailure | SkippedFile | PartOutcome) -> Source | None:
    return outcome.task if isinstance(outcome, PartOutcome) else None


class _Progress:
    """A rich progress bar on stderr, or nothing. It counts files: each part
    of a file read in parts moves it by its share of the file."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("ingesting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task("ingest", total=total)
            self._done = Fraction(0)

    def __enter__(self) -> "_Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, task: Source | None = None) -> None:
        if self._bar is not None:
            # Counted exactly: six sixths of a file in floats fall short of one.
            self._done += Fraction(1, task.part.count) if task is not None and task.part else 1
            self._bar.update(self._task, completed=float(self._done))


# --- turning arguments into files ------------------------------------------------


def _expand(arguments: list[str | Path], out: Path, run: str | None,
            host: str | None = None) -> tuple[list[Source], list[FileFailure]]:
    """The files the arguments name, all in one run."""
    found: list[tuple[Path, bool]] = []
    failures: list[FileFailure] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found.extend((file, False) for file in find_traces(path, out))
        elif path.exists():
            found.append((path, True))
        elif glob.has_magic(str(argument)):
            # A pattern that names folders (`job/node*`) means what the shell's
            # expansion of it would: the traces in them.
            matches = sorted(Path(p) for p in glob.glob(str(argument), recursive=True))
            files = [(match, True) for match in matches if match.is_file()]
            for folder in (match for match in matches if match.is_dir()):
                files.extend((file, False) for file in find_traces(folder, out))
            found.extend(files)
            if not files:
                failures.append(FileFailure(str(argument), "no files match"))
        else:
            failures.append(FileFailure(str(argument), "no such file or directory"))
    name = sanitise_run(run if run is not None else default_run_name(arguments, [file for file, _ in found]))
    return sources_of(found, name, host), failures


def sources_of(found: list[tuple[Path, bool]], run: str, host: str | None = None) -> list[Source]:
    """The sources among `found` (file, named explicitly): a file each, but
    one for all the CSVs of one rocprofv3 process; a file reached twice
    (through a link and by name) once. The watcher groups its files so too."""
    tasks: list[Source] = []
    seen: set[str] = set()
    processes: dict[str, list[tuple[Path, bool]]] = {}
    for file, explicit in found:
        key = os.path.realpath(file)  # one file through a link and by name is one file
        if key in seen:
            continue
        seen.add(key)
        process = _rocprof_process(file)
        if process is not None:
            processes.setdefault(process, []).append((file, explicit))
        else:
            tasks.append(Source(str(file), run, explicit, host=host))
    for process, files in processes.items():
        tasks.append(Source(process, run, any(explicit for _, explicit in files), tuple(str(f) for f, _ in files),
                            host=host))
    return tasks


def _rocprof_process(file: Path) -> str | None:
    """The process a rocprofv3 trace CSV belongs to (all its CSVs are one
    source: kernels link to the HIP calls in the process's other file), or
    None. The name is checked before the module is imported."""
    if not file.name.lower().endswith(_ROCPROF_ENDINGS):
        return None
    return module_for(ROCPROF).process_key(file)


def default_run_name(arguments: list[str | Path], files: list[Path]) -> str:
    """One folder: its name; else the stem its files share; else the folder
    that holds them all (never a glob's own text, such as `**`)."""
    if len(arguments) == 1 and Path(arguments[0]).is_dir():
        return _dir_name(Path(arguments[0]))
    stem = common_stem(files) if files else ""
    if stem:
        return stem
    if files:
        return _dir_name(Path(os.path.commonpath([os.path.abspath(f.parent) for f in files])))
    first = Path(arguments[0]) if arguments else Path(".")
    return _dir_name(first if first.is_dir() else first.parent)


def find_traces(directory: Path, out: Path | None = None) -> list[Path]:
    """Trace-like files under `directory`, recursively, skipping hidden ones
    and the dataset's own folder."""
    out_abs = os.path.abspath(out) if out is not None else None
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _inside(os.path.join(root, d), out_abs))
        for name in sorted(files):
            if not name.startswith(".") and name.lower().endswith(TRACE_SUFFIXES):
                found.append(Path(root) / name)
    return found


def _inside(path: str, directory: str | None) -> bool:
    if directory is None:
        return False
    absolute = os.path.abspath(path)
    return absolute == directory or absolute.startswith(directory + os.sep)


def _dir_name(path: Path) -> str:
    return Path(os.path.abspath(path)).name or "run"


def trace_stem(name: str) -> str:
    """`rank0.pt.trace.json.gz` → `rank0`."""
    lowered = name.lower()
    for suffix in _STEM_SUFFIXES:
        if lowered.endswith(suffix):
            return name[: -len(suffix)]
    return name


def common_stem(files: list[Path]) -> str:
    """The name the files share: `job_rank0`, `job_rank1` → `job`; empty
    where they share only part of a word (`base`, `big` share no `b`)."""
    stems = [trace_stem(f.name) for f in files]
    if len(stems) == 1:
        return stems[0]
    prefix = os.path.commonprefix(stems)
    prefix = re.sub(r"(?i)[-_.\s]*(?:rank)?[-_.\s]*\d*$", "", prefix)
    if not all(_STEM_END.match(stem, len(prefix)) for stem in stems):
        return ""
    return prefix


def rank_ranges(ranks: list[int]) -> str:
    """Sorted ranks as runs: [0, 1, 2, 3, 5, 7, 8] → "0-3, 5, 7-8"."""
    parts: list[str] = []
    start = previous = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if rank is not None:
            start = previous = rank
    return ", ".join(parts)


__all__ = [
    "FileFailure", "FileResult", "IngestReport", "SkippedFile", "Source", "STAGING_DIR",
    "common_stem", "default_run_name", "find_traces", "group_small_sources", "ingest_file", "ingest_group",
    "ingest_task", "ingest_paths", "sources_of", "sources_in_runs",
    "trace_stem",
]
