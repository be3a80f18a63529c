"""What `gpulens report` was given: a dataset, or trace files to ingest first.

A directory holding `traces/`, `telemetry/`, `devices/` or `events/` is a
dataset. Anything else (trace files, folders of them, globs) is ingested
as one run: into `keep` when given (`--dataset DIR`, kept afterwards), else
into a scratch folder the caller removes.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from pathlib import Path

from gpulens.collector.errors import TraceError, UsageError
from gpulens.collector.wording import counted

DATASET_MARKERS = ("traces", "telemetry", "devices", "events")


def is_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_dir() for marker in DATASET_MARKERS)


def resolve_inputs(inputs: list[str], scratch: Path, keep: Path | None, run: str | None = None,
                   progress: bool = False) -> tuple[Path, bool]:
    """The dataset to report on, and whether it is a temporary one.

    Raises TraceError naming the first input that is missing, corrupt or
    holds no traces; UsageError for a dataset mixed with other inputs.
    """
    if not inputs:
        raise UsageError("give a dataset folder or trace files to report on")
    datasets = [p for p in inputs if is_dataset(Path(p))]
    if datasets:
        if len(inputs) > 1:
            raise UsageError(f"{datasets[0]}: a dataset is reported on its own; give one dataset or only trace files")
        if keep is not None:
            raise UsageError(f"--dataset is where trace files are ingested; {datasets[0]} is a dataset already")
        return Path(datasets[0]), False
    for name in inputs:
        path = Path(name)
        if not path.exists() and not glob.has_magic(name):
            raise TraceError(name, "no such file or directory")
        if path.is_file() and path.stat().st_size == 0:
            raise TraceError(name, "empty file")
    from gpulens.collector.ingest import ingest_paths

    target = keep if keep is not None else scratch
    report = ingest_paths(inputs, target, run=run, progress=progress)
    if report.failures:
        first = report.failures[0]
        more = len(report.failures) - 1
        raise TraceError(first.path, first.problem + (f" ({counted(more, 'more file')} failed too)" if more else ""))
    if not report.results:
        raise TraceError(", ".join(inputs), "no trace files found (Kineto JSON, nsys SQLite, rocprofv3 CSV, NCCL logs)")
    # The warnings `gpulens ingest` prints (a file's unreadable lines, ranks
    # two files claim); its line per file would only be noise here.
    for level, line in report.notices():
        if level == logging.WARNING:
            print(f"gpulens: warning: {line}", file=sys.stderr)
    return target, keep is None


def refuse_output_among_inputs(output: Path, inputs: list[str], baseline: Path | None) -> None:
    """Raise UsageError where writing `output` would replace what the report
    reads: an input file or the baseline (through links too), a trace in an
    input folder, or anything in an input dataset's tables. Checked before
    any work, which a refusal at the end would waste."""
    target = os.path.realpath(output)
    named = [*inputs, *([str(baseline)] if baseline is not None else [])]
    for name in named:
        # A glob the shell left alone is expanded as ingest will expand it.
        matches = glob.glob(name, recursive=True) if glob.has_magic(name) and not os.path.exists(name) else [name]
        for match in map(Path, matches):
            folder = _folder_holding(match, target)
            if folder is not None:
                raise UsageError(f"{output}: is in {folder}, an input of this report; choose another -o")
            if match.is_file() and _same_file(match, output):
                raise UsageError(f"{output}: is an input of this report; choose another -o")


def _folder_holding(path: Path, target: str) -> Path | None:
    """`path` where it is a folder the report reads `target` from, else None."""
    if not path.is_dir():
        return None
    if is_dataset(path):
        tables = [os.path.realpath(path / marker) for marker in DATASET_MARKERS]
        return path if any(_inside(target, table) for table in tables) else None
    from gpulens.collector.ingest.batch import TRACE_SUFFIXES

    # A trace folder: the files ingest picks out of it (find_traces).
    folder = os.path.realpath(path)
    if not _inside(target, folder) or not os.path.exists(target):
        return None
    hidden = any(part.startswith(".") for part in Path(os.path.relpath(target, folder)).parts)
    return path if not hidden and target.lower().endswith(TRACE_SUFFIXES) else None


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def _same_file(a: Path, b: Path) -> bool:
    """One file, through links (symbolic or hard) too; False where either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
