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

Each (path, size, mtime) is handled once: ingested, skipped (not a trace)
or reported as failed. A file that changes afterwards is looked at again;
ingesting it again replaces its rows (see `store`). A file the dataset
already holds, ingested after its last change (its `runs` row's
`ingested_at`), is not ingested again when the watcher restarts.

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

from collector.ingest.batch import FileFailure, FileResult, IngestReport, SkippedFile, find_traces, ingest_file
from collector.ingest.store import read_runs, sanitise_run

Signature = tuple[int, int]  # size in bytes, mtime in ns
_HANDLER_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


def _ingested_sources(out: Path, run: str) -> dict[str, int]:
    """When each source of `run` in the dataset was ingested (its runs rows)."""
    table = read_runs(out, run, ["source_path", "ingested_at"])
    ingested: dict[str, int] = {}
    for source, at in zip(table.column("source_path").to_pylist(), table.column("ingested_at").cast("int64").to_pylist()):
        if source is not None and at is not None:
            ingested[source] = max(ingested.get(source, 0), at * 1000)  # µs -> ns
    return ingested


@dataclass
class _Failing:
    signature: Signature
    since_s: float


class TraceWatcher:
    def __init__(self, directory: Path, out: Path, run: str | None = None, *, give_up_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.out = Path(out)
        # A handler folder is one run: its files are the ranks.
        self.run = sanitise_run(run if run is not None else Path(os.path.abspath(self.directory)).name)
        self.give_up_after_s = give_up_after_s
        self._clock = clock
        self._previous: dict[str, Signature] = {}
        self._handled: dict[str, Signature] = {}
        self._failing: dict[str, _Failing] = {}
        # source path -> when the dataset last ingested it (ns since the epoch)
        self._ingested_ns = _ingested_sources(self.out, self.run)

    def poll(self) -> IngestReport | None:
        """Ingest the files that became complete; None when nothing happened."""
        started = time.perf_counter()
        current = self._scan()
        for path, signature in current.items():
            if path not in self._handled and signature[1] <= self._ingested_ns.get(os.path.realpath(path), -1):
                self._handled[path] = signature  # in the dataset since its last change
        ready = [path for path, signature in current.items()
                 if signature[0] > 0 and self._previous.get(path) == signature and self._handled.get(path) != signature]
        self._previous = current
        report = IngestReport()
        for path in ready:
            self._ingest(path, current[path], report)
        if not (report.results or report.failures or report.skipped):
            return None
        report.seconds = time.perf_counter() - started
        return report

    def _scan(self) -> dict[str, Signature]:
        signatures: dict[str, Signature] = {}
        if not self.directory.is_dir():
            return signatures
        for path in find_traces(self.directory, self.out):
            try:
                status = path.stat()
            except OSError:
                continue  # removed between listing and stat
            signatures[str(path)] = (status.st_size, status.st_mtime_ns)
        return signatures

    def _ingest(self, path: str, signature: Signature, report: IngestReport) -> None:
        explicit = path.lower().endswith(_HANDLER_SUFFIXES)
        outcome = ingest_file(path, self.run, str(self.out), explicit=explicit)
        if isinstance(outcome, FileFailure) and not self._give_up(path, signature):
            return  # maybe still being written: try again at the next poll
        self._failing.pop(path, None)
        self._handled[path] = signature
        if isinstance(outcome, FileResult):
            report.results.append(outcome)
        elif isinstance(outcome, SkippedFile):
            report.skipped.append(outcome)
        else:
            report.failures.append(outcome)

    def _give_up(self, path: str, signature: Signature) -> bool:
        now = self._clock()
        failing = self._failing.get(path)
        if failing is None or failing.signature != signature:
            failing = self._failing[path] = _Failing(signature, now)
        return now - failing.since_s >= self.give_up_after_s
