"""Turning the arguments of an ingest into sources: the files to parse.

Folders are searched, globs expanded, a rocprofv3 process's CSVs made one
source and the run named; `Source` (and `FilePart`, a part of a big file)
is the unit of work the other ingest modules plan, run and report on.
Separate from them since the watcher uses it alone too.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulens.collector.ingest.formats import module_for
from gpulens.collector.ingest.results import FileFailure
from gpulens.collector.ingest.store import sanitise_run

# File names a directory is searched for (the watcher looks for the same).
# Files found this way whose content is no known format are skipped, not
# failed, so a broad net (.txt, .out: NCCL logs under job-log names) is safe.
TRACE_SUFFIXES: tuple[str, ...] = (
    ".json", ".json.gz", ".sqlite", ".sqlite.gz", ".db", ".db.gz", ".csv", ".csv.gz", ".log", ".txt", ".out",
)
ROCPROF = "rocprof"
_ROCPROF_ENDINGS = ("_trace.csv", "_trace.csv.gz")
# Where a shared stem may end in each name: at its end, a separator or a number.
_STEM_END = re.compile(r"$|[-_.\s\d]")
_STEM_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite", ".csv", ".log", ".gz")


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
    # parts of a file, once read, are joined and written by one (`Assembly`).
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
    found, special = _regular_files(found)
    failures += special
    name = sanitise_run(run if run is not None else default_run_name(arguments, [file for file, _ in found]))
    return sources_of(found, name, host), failures


def _regular_files(found: list[tuple[Path, bool]]) -> tuple[list[tuple[Path, bool]], list[FileFailure]]:
    """The regular files of `found`, and a failure for each other kind: a
    FIFO would block the first read forever, a device never end."""
    regular, failures = [], []
    for path, explicit in found:
        try:
            mode = path.stat().st_mode
        except OSError as error:
            failures.append(FileFailure(str(path), error.strerror or str(error)))
            continue
        if stat.S_ISREG(mode):
            regular.append((path, explicit))
        else:
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device or other special file"
            failures.append(FileFailure(str(path), f"not a regular file ({kind}): not read"))
    return regular, failures


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


def slurm_run_name(environ: Mapping[str, str]) -> str | None:
    """`slurm-<job id>` where `environ` is a Slurm job's, else None."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return f"slurm-{job}" if job else None


def nsys_slurm_job(path: Path) -> str | None:
    """The Slurm job id an Nsight Systems SQLite export recorded in its
    target's environment (`TARGET_INFO_SYSTEM_ENV`, name/value rows), or
    None: not such an export, no such row, or unreadable."""
    import sqlite3  # here: an ingest of Kineto traces needs none

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        row = conn.execute("select value from TARGET_INFO_SYSTEM_ENV "
                           "where upper(name) in ('SLURM_JOB_ID', 'SLURM_JOBID') and value <> '' limit 1").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return str(row[0]) if row else None


def default_run_name(arguments: list[str | Path], files: list[Path],
                     environ: Mapping[str, str] = os.environ) -> str:
    """Under Slurm, `slurm-<job id>`: the job the traces' metadata names
    (Nsight Systems exports keep the target's environment), else the one
    `environ` is part of. Else: one folder: its name; else the stem its
    files share; else the folder that holds them all (never a glob's own
    text, such as `**`)."""
    jobs = {job for file in files if file.name.lower().endswith(".sqlite") and (job := nsys_slurm_job(file))}
    if len(jobs) == 1:
        return f"slurm-{jobs.pop()}"
    if name := slurm_run_name(environ):
        return name
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
