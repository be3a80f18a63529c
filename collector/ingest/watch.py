"""Ingest trace files as a profiler finishes writing them.

Point a `TraceWatcher` at the folder `torch.profiler.tensorboard_trace_handler`
(or nsys, rocprofv3, an NCCL log redirect) writes into, and call `poll()`
from a loop (the daemon does, on its slow cadence). A file is ingested
once it is complete:

- its size and modification time are the same as at the previous poll, and
- it parses. A profiler that writes in pieces can leave a file unchanged
  for a moment while it is still half a JSON document, so a file that
  fails is retried silently at the next polls, and reported as failed only
  once it has stayed unchanged and unparseable for `give_up_after_s`.

The unit is a source, as for `gpulens ingest` (`sources.sources_of`): a
file, or all the CSVs of one rocprofv3 process (its kernels link to the
HIP calls in its other file, so they are parsed together; a process whose
second file appears later is ingested again with it). A source is ready
when every one of its files is.

Each version of a source (its files' sizes and mtimes) is handled once:
ingested, skipped (not a trace) or reported as failed. A source that
changes afterwards is looked at again; ingesting it again replaces its
rows (see `store`). A growing one (an NCCL log appended to by a job that
pauses now and then) is re-read whole each time, so it is re-ingested at
most every `reingest_after_s`, and never more often than ten times its
last ingest took: the watcher spends at most a tenth of its time on one
growing file, and its final version is still ingested. A source the
dataset already holds, ingested after its last change (its `runs` row's
`ingested_at`), is not ingested again when the watcher restarts.

Files in subfolders belong to the same run (rocprofv3 writes a folder per
host and process; ranks may sit in `rankN/` folders); watch one folder
per run.

Sources ready together for the first time (a job's ranks, each writing
its trace at the end of a profiling cycle) are written in groups when
there are 16 or more small ones, as `gpulens ingest` writes them
(`batch.ingest_group`): 64 ranks of 5,000 events cost the collector
1.8-1.9 s of CPU rather than 3.1-3.9 s, and 40 files rather than 640. A
source that grows later (an NCCL log) is written on its own from its
second ingest on.

Files named as `tensorboard_trace_handler` names its output
(`*.pt.trace.json[.gz]`) are meant as traces: one that is no known format
is reported, not skipped as other files in the folder are.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.batch import ingest_task, sources_in_runs
from gpulens.collector.ingest.plan import group_small_sources
from gpulens.collector.ingest.results import FileFailure, FileResult, IngestReport, SkippedFile
from gpulens.collector.ingest.sources import Source, find_traces, slurm_run_name, sources_of
from gpulens.collector.ingest.store import read_runs, sanitise_run

# Size in bytes and mtime in ns of each of a source's files, by path.
Signature = tuple[tuple[str, int, int], ...]
_HANDLER_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
# A changed source is ingested again at most this often, and at most every
# ten times its last ingest took (see the module docstring).
REINGEST_AFTER_S = 30.0
_REINGEST_COST_FACTOR = 10.0


def _ingested_sources(out: Path, run: str) -> dict[str, int]:
    """When each source of `run` in the dataset was ingested (its runs rows)."""
    table = read_runs(out, run, ["source_path", "ingested_at"])
    ingested: dict[str, int] = {}
    for source, at in zip(table.column("source_path").to_pylist(), pc.cast(table.column("ingested_at"), "int64").to_pylist()):
        if source is not None and at is not None:
            ingested[source] = max(ingested.get(source, 0), at * 1000)  # µs -> ns
    return ingested


@dataclass
class _Failing:
    signature: Signature
    since_s: float
    # What the last attempt said (`path: problem`), told if the watcher stops first.
    message: str = ""


@dataclass
class _Ingested:
    at_s: float
    took_s: float


class TraceWatcher:
    def __init__(self, directory: Path, out: Path, run: str | None = None, *, give_up_after_s: float = 60.0,
                 reingest_after_s: float = REINGEST_AFTER_S, clock: Callable[[], float] = time.monotonic,
                 host: str | None = None) -> None:
        self.directory = Path(directory)
        self.out = Path(out)
        # The host of traces that name none: the node's collector watching its
        # own jobs' folder knows it; a watcher alone (a login node) does not.
        self.host = host
        # A handler folder is one run: its files are the ranks.
        # Under Slurm, the job's (`slurm-<job id>`).
        self.run = sanitise_run(run if run is not None
                                else slurm_run_name(os.environ) or Path(os.path.abspath(self.directory)).name)
        self.give_up_after_s = give_up_after_s
        self.reingest_after_s = reingest_after_s
        self._clock = clock
        # By source (`Source.path`).
        self._previous: dict[str, Signature] = {}
        self._handled: dict[str, Signature] = {}
        self._failing: dict[str, _Failing] = {}
        self._ingested: dict[str, _Ingested] = {}
        # source path -> when the dataset last ingested it (ns since the epoch)
        self._ingested_ns = _ingested_sources(self.out, self.run)

    def poll(self) -> IngestReport | None:
        """Ingest the sources that became complete; None when nothing happened."""
        started = time.perf_counter()
        sources = self._scan()
        for key, (_, signature) in sources.items():
            if key not in self._handled and _last_change_ns(signature) <= self._ingested_ns.get(os.path.realpath(key), -1):
                self._handled[key] = signature  # in the dataset since its last change
        ready = [source for key, (source, signature) in sources.items()
                 if all(size > 0 for _, size, _ in signature) and self._previous.get(key) == signature
                 and self._handled.get(key) != signature and self._due(key)]
        self._previous = {key: signature for key, (_, signature) in sources.items()}
        report = IngestReport()
        # Ingested for the first time: in groups where there are many (see the docstring).
        first = [source for source in ready if source.path not in self._ingested]
        for task in [*group_small_sources(first, jobs=1), *(s for s in ready if s.path in self._ingested)]:
            began_s = self._clock()
            outcomes = ingest_task(task, str(self.out))
            took_s = (self._clock() - began_s) / len(outcomes)
            for source, outcome in zip(task.members, outcomes):
                self._handle(source, sources[source.path][1], outcome, took_s, report)
        if not (report.results or report.failures or report.skipped):
            return None
        if report.results:
            # The shared-rank check also sees the run's earlier sources.
            report.earlier = sources_in_runs(self.out, report.runs)
        report.seconds = time.perf_counter() - started
        return report

    def pending(self) -> list[str]:
        """What was seen but not ingested, one line each, for when the
        watcher stops: sources that failed and were still being retried,
        and sources still changing at the last poll (or not yet looked at
        twice), which a profiler may not have finished writing."""
        lines = [f"{failing.message} (not ingested: it was still being retried when the watcher stopped)"
                 for failing in self._failing.values() if failing.message]
        lines += [f"{key}: not ingested: still being written, or new, when the watcher stopped"
                  for key, signature in self._previous.items()
                  if key not in self._failing and self._handled.get(key) != signature]
        return lines

    def _scan(self) -> dict[str, tuple[Source, Signature]]:
        if not self.directory.is_dir():
            return {}
        files: dict[str, tuple[int, int]] = {}
        for path in find_traces(self.directory, self.out):
            try:
                status = path.stat()
            except OSError:
                continue  # removed between listing and stat
            files[str(path)] = (status.st_size, status.st_mtime_ns)
        found = [(Path(path), path.lower().endswith(_HANDLER_SUFFIXES)) for path in files]
        return {source.path: (source, tuple((part, *files[part]) for part in sorted(source.files)))
                for source in sources_of(found, self.run, self.host)}

    def _due(self, key: str) -> bool:
        """Whether a source ingested before may be ingested again yet."""
        last = self._ingested.get(key)
        if last is None:
            return True
        wait_s = max(self.reingest_after_s, _REINGEST_COST_FACTOR * last.took_s)
        return self._clock() - last.at_s >= wait_s

    def _handle(self, source: Source, signature: Signature, outcome: FileResult | FileFailure | SkippedFile,
                took_s: float, report: IngestReport) -> None:
        """Record what ingesting a source gave."""
        if isinstance(outcome, FileFailure) and not self._give_up(source.path, signature):
            self._failing[source.path].message = outcome.message
            return  # maybe still being written: try again at the next poll
        self._failing.pop(source.path, None)
        self._handled[source.path] = signature
        if isinstance(outcome, FileResult):
            self._ingested[source.path] = _Ingested(self._clock(), took_s)
            report.results.append(outcome)
        elif isinstance(outcome, SkippedFile):
            report.skipped.append(outcome)
        else:
            report.failures.append(outcome)

    def _give_up(self, key: str, signature: Signature) -> bool:
        now = self._clock()
        failing = self._failing.get(key)
        if failing is None or failing.signature != signature:
            failing = self._failing[key] = _Failing(signature, now)
        return now - failing.since_s >= self.give_up_after_s


def _last_change_ns(signature: Signature) -> int:
    return max(mtime_ns for _, _, mtime_ns in signature)
