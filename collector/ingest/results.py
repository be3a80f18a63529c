"""What an ingest gives back: each source's outcome and the report of a call.

The types `ingest_paths` and the watcher return, the outcome of one part
of a split file (`PartOutcome`), and a split file read in full, to be joined
and written (`Assembly`). Kept apart from the code that makes them, so
that every ingest module (`sources`, `pool`, `batch`, `watch`) can name them
without importing the others.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path


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
        if self.rows.get("memory_events"):
            line += f", {self.rows['memory_events']} memory events"
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
