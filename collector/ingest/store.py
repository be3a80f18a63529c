"""Where ingested trace tables live, and writing one source file's tables.

Layout (a refinement of DESIGN.md's `traces/run=R/<table>.parquet`):

    OUT/traces/run=<R>/<table>/<source-id>.parquet

Ranks are ingested in parallel, one process per file, and re-ingesting
one file must replace exactly that file's rows. So every source file owns
one Parquet file per table, named by a stable hash of its absolute path:
workers never write the same file, and ingesting the same source again
overwrites its files (idempotent) without reading or rewriting anyone
else's rows. `run` and `rank` are columns in the files too; readers do not
depend on the folder names. `gpulens compact` merges a run of many
sources into one file per table (`merge`); writing a source of a merged
run first undoes that merge (renames), under the run's lock.

The exception is a command of many small sources: a worker writes several
at once (`write_sources`), one `merged-<token>.parquet` per table for all
of them, as a merge would leave them. A 5,000-event rank costs about 40 ms
of CPU written alone, of which 15 ms is its ten Parquet files; written 8
at a time, 24 ms. Re-ingesting one source of such a batch writes the
others' rows back as their own files first (`merge._explode`).

Atomicity: all tables of a source are first written under `OUT/.staging/`
(same filesystem), fsynced, then renamed into place. Any failure before the
renames leaves nothing of that source behind and the previous ingest of it
untouched; a failed rename puts the previous ingest's files back. Staged
files sit in a per-attempt folder, so the node writer's sweep of stray
`*.tmp` files in `.staging/` cannot touch them. The folder's name says
which process owns it, so the next ingest removes those a killed process
left (`remove_abandoned_staging`).

Durability: the staged files are fsynced (all written first, then synced,
so the disk sees them together), so a renamed file is never torn or empty
after a crash. The renames themselves are not synced (no directory fsync):
after a power loss a source may show its previous ingest, or none, and
ingesting it again brings it up to date. Trace tables are derived from
source files that stay on disk, so that is the cheaper trade here than a
sync per table folder; telemetry, which exists nowhere else, is written
elsewhere (`collector/writer.py`) with its own syncs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from gpulens.collector import parquet_io
from gpulens.collector.cpus import usable_cpus
from gpulens.collector.parquet_io import trace_parquet_options
from gpulens.collector.derive import CHANGED_TABLES, DERIVED_TABLES, derive_trace_tables
from gpulens.collector.errors import DatasetError, even_if_interrupted
from gpulens.collector.ingest.merge import (BATCH_SOURCES, drop_batches_within, holds_any, place_batch, run_lock,
                                    unmerge_sources)
from gpulens.collector.schema import TRACE_SCHEMAS

TRACES_DIR = "traces"
STAGING_DIR = ".staging"
_STAGING_PREFIX = "ingest-"
# Most threads writing one source's tables: see _StagedWriter.
_WRITE_THREADS = 3
# Folders under STAGING_DIR are named `<kind>-<pid>.<host>-...` by the
# process that owns them (`owner_tag`), so a later ingest can tell those of a
# killed one (`remove_abandoned_staging`). The host is a hash of its name: a
# dataset on a shared filesystem is written from several machines, whose
# pids say nothing here.
_OWNED = re.compile(r"^(?:ingest|parts)-(\d+)\.([0-9a-f]{8})-")
# What ingests before 0.1.0's owner tags staged (`ingest-<source id>-...`
# folders, `part-*.pickle` spill files). Their owner cannot be told, so they
# go once no ingest could still be writing them: a write stages for seconds.
_UNOWNED = re.compile(r"^(?:ingest-[0-9a-f]{20}-|part-.*\.pickle$)")
_UNOWNED_AGE_S = 24 * 3600


def source_id(path: str | Path) -> str:
    """A stable id of a source file: a hash of its absolute path."""
    absolute = os.path.abspath(os.fspath(path))
    return hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def sanitise_run(name: str) -> str:
    """A run name that is one safe path component."""
    cleaned = re.sub(r"[/\\\x00-\x1f]+", "_", name.strip()).lstrip(".")
    return cleaned or "run"


def run_dir(out: Path, run: str) -> Path:
    return out / TRACES_DIR / f"run={sanitise_run(run)}"


def table_path(out: Path, run: str, table: str, source: str) -> Path:
    return run_dir(out, run) / table / f"{source}.parquet"


def read_runs(out: Path, run: str, columns: list[str]) -> pa.Table:
    """`columns` of the `runs` rows the dataset holds for `run`: one row per
    source and rank. A file that cannot be read is left out (the analyses
    name it)."""
    tables = []
    for path in sorted((run_dir(out, run) / "runs").glob("*.parquet")):
        try:
            tables.append(parquet_io.read_table(path, columns))
        except (OSError, ValueError):
            continue
    if not tables:
        return TRACE_SCHEMAS["runs"].empty_table().select(columns)
    return pa.concat_tables(tables)


def runs_holding(out: Path, sources: set[str], but: str) -> dict[str, list[str]]:
    """The runs other than `but` that hold rows of each of `sources`, by
    source id: where writing them into `but` will take them from (a source
    belongs to one run; see `_remove_from_other_runs`)."""
    found: dict[str, list[str]] = {}
    current = run_dir(out, but)
    for other in sorted((out / TRACES_DIR).glob("run=*")):
        if other == current or not other.is_dir():
            continue
        # Every source ingested has a runs row, so its runs file names it,
        # unless a merge holds it.
        try:
            held = {name.removesuffix(".parquet") for name in os.listdir(other / "runs")} & sources
        except OSError:
            held = set()
        if holds_any(other, sources - held):
            held |= {source for source in sources - held if holds_any(other, {source})}
        for source in sorted(held):
            found.setdefault(source, []).append(other.name.removeprefix("run="))
    return found


def write_source(out: Path, run: str, source: str, tables: dict[str, pa.Table]) -> dict[str, int]:
    """Replace the rows of one source with `tables`; row counts written.

    The derived columns and table (collector.derive) are computed here,
    so every writer of trace tables stores them. Empty tables get no file
    (and lose the one an earlier ingest wrote). Raises DatasetError naming
    the file that could not be written.
    """
    with staged_folder(out, _write_prefix(source)) as staging:
        try:
            with _StagedWriter(staging, _WRITE_THREADS) as writer:
                # What derive leaves alone is written while it runs.
                writer.write({table: data for table, data in tables.items()
                              if table not in CHANGED_TABLES and table not in DERIVED_TABLES})
                tables = derive_trace_tables(tables)
                writer.write({table: data for table, data in tables.items() if table not in writer.staged})
            staged = writer.staged
        except OSError as error:
            raise DatasetError(f"{out}: cannot write: {error.strerror or error}") from None
        # Under the run's lock, so that a merge (`gpulens compact`) never
        # moves aside files newer than those it read.
        with run_lock(run_dir(out, run)):
            unmerge_sources(run_dir(out, run), {source})  # its rows are replaced below
            _swap_in(out, run, source, staged, staging)
            written = {table: tables[table].num_rows for table in staged}
            _remove_stale(out, run, source, written)
        _remove_from_other_runs(out, run, [source])
        return written


def write_sources(out: Path, run: str, sources: list[tuple[str, dict[str, pa.Table]]]) -> list[dict[str, int]]:
    """Replace the rows of several sources of one run, written together as
    one file per table (a batch: see `merge`); row counts written, per source.

    As `write_source` in all else: derived here, all or none, raising
    DatasetError naming what could not be written."""
    if len(sources) == 1:
        return [write_source(out, run, *sources[0])]
    derived = [(source, derive_trace_tables(tables)) for source, tables in sources]
    counts = {table: [tables[table].num_rows if table in tables else 0 for _, tables in derived]
              for table in TRACE_SCHEMAS}
    counts = {table: rows for table, rows in counts.items() if any(rows)}
    ids = [source for source, _ in derived]
    with staged_folder(out, _write_prefix(ids[0])) as staging:
        try:
            # A batch of small sources is written on this thread alone: its
            # ingest has many files, and every core is busy with one (threads
            # only added overhead there: 64 small ranks 0.78 -> 0.80 s).
            with _StagedWriter(staging, threads=1) as writer:
                # Sources of different formats (or gpulens versions) may lack a column.
                writer.write({table: pa.concat_tables([tables[table] for _, tables in derived
                                                       if table in tables and tables[table].num_rows],
                                                      promote_options="permissive")
                              for table in counts})
            staged = writer.staged
            listing = staging / BATCH_SOURCES
            listing.write_text(json.dumps({"sources": ids, "rows": counts}))
            _fsync_file(listing)
        except (OSError, pa.ArrowException) as error:
            raise DatasetError(f"{out}: cannot write: {getattr(error, 'strerror', None) or error}") from None
        token = os.urandom(5).hex()  # secrets.token_hex's bytes; secrets imports hmac, so OpenSSL
        with run_lock(run_dir(out, run)):
            # Their rows are replaced below; a batch of only these sources (the
            # same files ingested again) is replaced whole, not split first.
            unmerge_sources(run_dir(out, run), set(ids), keep_batches_within=True)
            place_batch(run_dir(out, run), token, staged, listing, ids)
        _remove_from_other_runs(out, run, ids)
    return [{table: rows[i] for table, rows in counts.items() if rows[i]} for i in range(len(ids))]


def _write_prefix(source: str) -> str:
    """The start of the name of a staging folder for one write."""
    return f"{_STAGING_PREFIX}{owner_tag()}-{source}-"


@contextlib.contextmanager
def staged_folder(out: Path, prefix: str) -> Iterator[Path]:
    """A new folder under the dataset's staging folder, its name starting
    with `prefix` (which names its owner: see `owner_tag`), removed on
    leaving the block.

    Its name is chosen before it is made, and it is made and removed inside
    one try: SIGTERM's Terminated (or Ctrl-C) is raised wherever Python
    happens to be, and a folder made before the try, or half removed when
    the exception came, stayed behind. (`remove_abandoned_staging` cannot
    take it: its owner is this process, alive until it exits.) Left by an
    exception, a folder still holding a source's earlier file (`previous-*`,
    which `_swap_in` could not put back) is kept: that is the file's only
    copy. Left normally, it goes whole, the earlier files moved aside into
    it with it."""
    folder = out / STAGING_DIR / f"{prefix}{os.urandom(6).hex()}"
    try:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir()
        except OSError as error:
            raise DatasetError(f"{out}: cannot write: {error.strerror or error}") from None
        yield folder
    except BaseException:
        even_if_interrupted(_remove_staged, folder)
        raise
    even_if_interrupted(shutil.rmtree, folder, ignore_errors=True)


def owner_tag(pid: int | None = None) -> str:
    """`<pid>.<host>`: the process (this one by default) that owns a staging folder."""
    return f"{os.getpid() if pid is None else pid}.{_host_tag()}"


@functools.cache
def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def remove_abandoned_staging(out: Path) -> None:
    """Remove the staging folders of processes on this machine that are
    gone (an ingest or its worker killed before it could clean up); never
    those of a live process, nor any from another machine. What an older
    gpulens staged, without an owner, goes once it is a day old.

    A folder holding a `previous-*` file is kept: its process was killed
    while moving a source's files into place, and that is the only copy of
    a table of the source's earlier ingest."""
    try:
        entries = list(os.scandir(out / STAGING_DIR))
    except OSError:
        return
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None:
            if _UNOWNED.match(entry.name) and _older_than(entry, _UNOWNED_AGE_S):
                _remove_staged(Path(entry.path))
            continue
        if match.group(2) != _host_tag() or _alive(int(match.group(1))):
            continue
        _remove_staged(Path(entry.path))


def _remove_staged(path: Path) -> None:
    if path.is_file():
        path.unlink(missing_ok=True)
    elif not any(path.glob("previous-*")):
        shutil.rmtree(path, ignore_errors=True)


def _older_than(entry: os.DirEntry, age_s: float) -> bool:
    try:
        return time.time() - entry.stat(follow_symlinks=False).st_mtime > age_s
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, another user's
        return True
    return True


def _swap_in(out: Path, run: str, source: str, staged: dict[str, Path], staging: Path) -> None:
    """Move the staged tables into place, all or none.

    The source's current files are moved aside first; if any move fails,
    the new files are taken out again and the old ones put back, so the
    source never mixes one ingest's kernels with another's runs row.
    """
    moved_aside: list[tuple[Path, Path]] = []  # (aside, destination)
    placed: list[Path] = []
    destination = out
    try:
        for table, temporary in staged.items():
            destination = table_path(out, run, table, source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.exists():
                aside = staging / f"previous-{table}.parquet"
                os.replace(destination, aside)
                moved_aside.append((aside, destination))
            os.replace(temporary, destination)
            placed.append(destination)
    except BaseException as error:  # a failed move, or a signal's exception between two
        for path in placed:
            path.unlink(missing_ok=True)
        for aside, original in moved_aside:
            try:
                os.replace(aside, original)
            except OSError:
                pass  # the old file stays in the staging folder, which is then kept
        if isinstance(error, OSError):
            raise DatasetError(f"{destination}: cannot write: {error.strerror or error}") from None
        raise


class _StagedWriter:
    """Writes tables to `<staging>/<table>.parquet`, each file synced, on up
    to `threads` threads (largest first within each `write`), and waits
    for them all on leaving its block, where the first error is raised.

    pyarrow encodes and compresses without holding the GIL, so a big
    rank's files are written on the cores its ingest leaves idle, and
    while derive runs (the V100 trace's ten files alone: 44 -> 27 ms).
    Empty tables get no file. `staged`: the files, by table.
    """

    def __init__(self, staging: Path, threads: int) -> None:
        self.staging = staging
        self.staged: dict[str, Path] = {}
        threads = min(threads, usable_cpus())
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None
        self._pending: list[Future] = []

    def write(self, tables: dict[str, pa.Table]) -> None:
        order = list(tables)
        if self._pool is not None:
            # Largest first, where threads share the writes out. By buffer
            # sizes: `nbytes` walks every chunk's slices (0.4 ms a table of
            # eight concatenated ranks, 17 ms of 64 small ranks' ingest).
            order.sort(key=lambda name: tables[name].get_total_buffer_size(), reverse=True)
        for table in order:
            data = tables[table]
            if not data.num_rows:
                continue
            path = self.staged[table] = self.staging / f"{table}.parquet"
            if self._pool is None:
                _write_staged(data, path)
            else:
                self._pending.append(self._pool.submit(_write_staged, data, path))

    def __enter__(self) -> _StagedWriter:
        return self

    def __exit__(self, *raised: object) -> None:
        if self._pool is None:
            return
        # Every write ends before the caller removes the staging folder;
        # stopped by an error (or Ctrl-C), those not begun are dropped.
        try:
            self._pool.shutdown(wait=True, cancel_futures=raised[0] is not None)
        except BaseException:
            # A signal's exception (SIGTERM's Terminated, Ctrl-C) raised
            # while this waited: the writes already running still end
            # first, or they would put files back into a folder being
            # removed. Waited for by their futures: a thread whose join was
            # interrupted counts as ended (Python 3.11, bpo-45274). Not the
            # cancelled ones: wait() never counts a future cancelled before
            # it ran as done, and would wait for it forever.
            self._pool.shutdown(wait=False, cancel_futures=True)
            wait_for([future for future in self._pending if not future.cancelled()])
            raise
        if raised[0] is None:
            for future in self._pending:
                future.result()  # the first write's error, if any


def _write_staged(table: pa.Table, path: Path) -> Path:
    parquet_io.write_table(table, path, **trace_parquet_options(table.schema))
    _fsync_file(path)
    return path


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _remove_stale(out: Path, run: str, source: str, written: dict[str, int]) -> None:
    """Drop this source's files in its run that the new ingest did not
    replace: tables now empty."""
    for table in TRACE_SCHEMAS:
        if table not in written:
            table_path(out, run, table, source).unlink(missing_ok=True)


def _remove_from_other_runs(out: Path, run: str, sources: list[str]) -> None:
    """Drop the sources' rows stored under another run name (ingested
    before with another --run), undoing a merge there that holds them."""
    current = run_dir(out, run)
    wanted = set(sources)
    for other in (out / TRACES_DIR).glob("run=*"):
        if other == current or not other.is_dir():
            continue
        # Asked of every run at every write: os.path on text, not pathlib
        # (8.8 against 2.4 µs a file asked for; a dataset of 100 runs asks 16,000
        # a group of 16 sources).
        folder = os.fspath(other)
        if not holds_any(other, wanted) and not any(
                os.path.exists(f"{folder}/{table}/{source}.parquet") for table in TRACE_SCHEMAS for source in sources):
            continue
        with run_lock(other):
            unmerge_sources(other, wanted, keep_batches_within=True)
            drop_batches_within(other, wanted)
            for table in TRACE_SCHEMAS:
                for source in sources:
                    (other / table / f"{source}.parquet").unlink(missing_ok=True)
