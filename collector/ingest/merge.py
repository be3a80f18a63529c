"""Merging a trace run's files into one file per table.

Ingest writes one Parquet file per table per source file where it writes
sources one at a time (see `store`), so such a run of 2,000 ranks is
20,000 files, and every analysis opens every file
of each table it reads. A JSON report of such a run (a 200-rank run's
files linked ten times) took 48 s and 1.1 GB; with each table in one file,
4.2 s and 0.4 GB.

`merge_run` (`gpulens compact`) writes, for each table, one
`merged-<token>.parquet` holding the rows of the run's per-source files
(and of its ingest batches, below), and moves those files aside into
`traces/run=R/.merged/<token>/<table>/`,
where the table globs readers use do not reach. Re-ingesting a source of
a merged run undoes its merge first (`unmerge_sources`, called by
`store.write_source`): the merged files go and the files moved aside come
back, renames only, so the source's rows are then replaced as in any run,
and `gpulens compact` merges the run again. A source ingested into a
merged run later stays a per-source file beside the merged ones until the
next merge. Keeping the files aside doubles the disk a merged run's trace
tables take; undoing a merge by rewriting the merged files without one
source would instead rewrite every table of the run once per source when
a whole merged run is ingested again.

One writer at a time per run (`run_lock`, a lock on its folder): a merge
holds it while it reads and places files, an ingest while it swaps a
source's files in, so a merge never moves aside a file newer than the
one it read.

Ingest itself writes merged files too: a command of many small sources
writes them in batches (`store.write_sources`), each batch one
`merged-<token>.parquet` per table and, in place of files moved aside, a
list of its sources and their row counts per table (`sources.json` in the
batch's `.merged/<token>/` folder). A batch whose sources are all written
again at once (the same files ingested again) is replaced whole
(`place_batch`), or dropped where they moved to another run. Otherwise
undoing it (one of its sources ingested again on its own, or in other
groups) writes each of its sources' rows back as per-source files
(`_explode`), after which it is a run like any other.

Crash safety: the merged files are written to staging and fsynced before
any is placed, and a merge's folder gets its `complete` mark only once
every file is placed and moved; a merge without its mark (one cut short)
is undone by the next merge or ingest of that run. Undoing a batch marks
its folder `exploding` first and is finished, by the same rule, by the
next holder of the run's lock: a source's file already written back is
kept, the rest are written from the merged file. A reader that lists a
table's files in the instant a merge places that table (or its undoing
puts it back) sees the run's rows of that table once missing or twice, as
with the collector's merges (collector/compact.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from gpulens.collector import parquet_io
from gpulens.collector.compact import in_row_groups
from gpulens.collector.errors import DatasetError
from gpulens.collector.schema import TRACE_SCHEMAS

MERGED_PREFIX = "merged-"
MERGED_DIR = ".merged"
# An ingest batch's sources, in the order of their rows, and each one's
# row count per table: {"sources": [id, ...], "rows": {table: [n, ...]}}.
BATCH_SOURCES = "sources.json"
_COMPLETE = "complete"
_EXPLODING = "exploding"
# An earlier batch's folder inside the batch that replaces it, until that one is complete.
_REPLACED_PREFIX = "replaced-"
# Runs with fewer per-source files than this are left as they are: their
# files cost the analyses little (about 20 ms of a report per source at
# 2,000 sources), and merging rewrites every row.
MERGE_MIN_SOURCES = 16


@contextlib.contextmanager
def run_lock(run_path: Path) -> Iterator[None]:
    """Hold the run's writer lock: a lock on its folder (made if missing),
    so no lock file is left behind."""
    try:
        run_path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(run_path, os.O_RDONLY)
    except OSError as error:
        raise DatasetError(f"{run_path}: cannot write: {error.strerror or error}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # which releases the lock


def per_source_files(run_path: Path, table: str) -> list[Path]:
    """The table's files in the run written by ingest, one per source."""
    return sorted(path for path in (run_path / table).glob("*.parquet") if not path.name.startswith(MERGED_PREFIX))


def merge_run(out: Path, run_path: Path, min_sources: int = MERGE_MIN_SOURCES) -> tuple[int, int]:
    """Merge the run's per-source files and ingest batches, table by table,
    where they hold at least `min_sources` sources in more than one file a
    table; (trace files before, after). Raises DatasetError naming a file
    that cannot be read or written; the run is then as it was.

    A batch merged again is kept whole inside the new merge's folder (its
    files and its own folder, as `replaced-<token>`), so undoing the merge
    gives the batch back."""
    with run_lock(run_path):
        _undo_incomplete(run_path)
        batches = [aside for aside in _merges(run_path) if _batch_sources(aside) is not None]
        files = {table: per_source_files(run_path, table) for table in TRACE_SCHEMAS}
        for table, paths in files.items():
            paths += _merged_files_of(run_path, table, batches)
        files = {table: paths for table, paths in files.items() if paths}
        before = _trace_file_count(run_path)
        sources = {path.stem for paths in files.values() for path in paths if not path.name.startswith(MERGED_PREFIX)}
        sources.update(source for aside in batches for source in _batch_sources(aside)["sources"])
        if len(sources) < max(2, min_sources) or max(map(len, files.values()), default=0) < 2:
            return before, before
        token = os.urandom(5).hex()  # not secrets.token_hex: see store's sha256
        try:
            (out / ".staging").mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"merge-{token}-", dir=out / ".staging"))
        except OSError as error:
            raise DatasetError(f"{out}: cannot write: {error.strerror or error}") from None
        try:
            staged = {table: _write_merged(paths, staging / f"{table}.parquet") for table, paths in files.items()}
            _put_in_place(run_path, run_path / MERGED_DIR / token, staged, files, batches,
                          "cannot merge its files ({})")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return before, _trace_file_count(run_path)


def _trace_file_count(run_path: Path) -> int:
    return sum(len(list((run_path / table).glob("*.parquet"))) for table in TRACE_SCHEMAS)


def _write_merged(files: list[Path], destination: Path) -> Path:
    """Write the files' rows, in file order, as one file of row groups of
    about MERGE_ROW_GROUP_ROWS rows; a column older files lack is NULL.

    Read by Arrow's dataset scanner, which reads files ahead on its own
    threads: 2,000 files a table merged in 29 s, against 52 s read one
    after the other, as the telemetry merge reads (collector/compact.py)."""
    import pyarrow.dataset as ds  # here: ingest never merges, and the import takes 10 ms

    from gpulens.collector.parquet_io import trace_parquet_options

    try:
        schema = pa.unify_schemas([parquet_io.read_schema(path).remove_metadata() for path in files],
                                  promote_options="permissive")
        batches = ds.dataset([str(path) for path in files], schema=schema, format="parquet").to_batches()
        with open(destination, "wb") as handle:
            parquet_io.write_tables(in_row_groups(pa.Table.from_batches([batch], schema) for batch in batches),
                                    handle, schema, **trace_parquet_options(schema))
            handle.flush()
            os.fsync(handle.fileno())
    except (OSError, pa.ArrowException) as error:
        raise DatasetError(f"{files[0].parent}: cannot merge its files ({error})") from None
    return destination


def _merged_file(run_path: Path, table: str, token: str) -> Path:
    """The table's file of the merge (or ingest batch) `token`."""
    return run_path / table / f"{MERGED_PREFIX}{token}.parquet"


def _merged_files_of(run_path: Path, table: str, merges: list[Path]) -> list[Path]:
    """The table's files of the merges whose folders are `merges` (a merge
    has none for a table its sources left empty)."""
    return [path for path in (_merged_file(run_path, table, aside.name) for aside in merges) if path.exists()]


def _remove_merged_files(run_path: Path, token: str) -> None:
    for merged in run_path.glob(f"*/{MERGED_PREFIX}{token}.parquet"):
        merged.unlink(missing_ok=True)


def _put_in_place(run_path: Path, aside: Path, staged: dict[str, Path], replaced: dict[str, list[Path]],
                  batches: list[Path], failure: str, listing: Path | None = None) -> None:
    """Make a merge (or ingest batch) whose folder is `aside`: move into that
    folder `listing` (a batch's BATCH_SOURCES), the files it replaces
    (table → files) and the folders of the batches among them (as
    `replaced-<token>`), put each staged file in its table's folder, and
    mark it complete; all or none. `failure` is the message, `{}` the
    error, of the DatasetError raised where it cannot."""
    try:
        aside.mkdir(parents=True)
        if listing is not None:
            os.replace(listing, aside / BATCH_SOURCES)
        for table, paths in replaced.items():
            for path in paths:
                (aside / table).mkdir(exist_ok=True)
                os.replace(path, aside / table / path.name)
        for batch in batches:
            os.replace(batch, aside / f"{_REPLACED_PREFIX}{batch.name}")
        for table, path in staged.items():
            (run_path / table).mkdir(exist_ok=True)
            os.replace(path, _merged_file(run_path, table, aside.name))
        (aside / _COMPLETE).touch()
    except BaseException as error:
        # A failed move, or a signal's exception (SIGTERM's Terminated,
        # Ctrl-C) between two: without its mark, what the merge replaced
        # goes back now, not at the next command's `_undo_incomplete`, so
        # that a reader meanwhile sees no source twice or not at all.
        _unmerge(run_path, aside)
        if isinstance(error, OSError):
            raise DatasetError(f"{run_path}: " + failure.format(error.strerror or error)) from None
        raise


def place_batch(run_path: Path, token: str, staged: dict[str, Path], listing: Path, sources: list[str]) -> None:
    """Put an ingest batch's files in place (`staged`: table → its file,
    `listing`: its BATCH_SOURCES file) and move what it replaces aside:
    the sources' own files, and whole earlier batches of only these
    sources (an ingest of the same files again); all or none. The caller
    holds the run's lock and has undone every other merge that held any of
    `sources` (`unmerge_sources(..., keep_batches_within=...)`)."""
    aside = run_path / MERGED_DIR / token
    batches = [old for old in _merges(run_path) if _batch_within(old, set(sources))]
    previous = {table: [path for path in (run_path / table / f"{source}.parquet" for source in sources)
                        if path.exists()] + _merged_files_of(run_path, table, batches)
                for table in TRACE_SCHEMAS}
    _put_in_place(run_path, aside, staged, previous, batches, "cannot write: {}", listing)
    for folder in (path for path in aside.iterdir() if path.is_dir()):
        shutil.rmtree(folder, ignore_errors=True)  # what the batch replaced


def unmerge_sources(run_path: Path, sources: set[str], keep_batches_within: bool = False) -> None:
    """Undo every merge of the run that holds a file of `sources` (and any
    merge a crash cut short); the caller holds the run's lock. With
    `keep_batches_within`, ingest batches of only `sources` are left for
    `place_batch` to replace whole."""
    _undo_incomplete(run_path)
    while True:  # again after each round: undoing a merge may give back batches that hold them
        holders = [aside for aside in _merges(run_path)
                   if _holds(aside, sources) and not (keep_batches_within and _batch_within(aside, sources))]
        if not holders:
            return
        for aside in holders:
            _unmerge(run_path, aside)


def drop_batches_within(run_path: Path, sources: set[str]) -> None:
    """Remove the run's ingest batches of only `sources` (whose rows now
    live in another run); the caller holds the run's lock."""
    for aside in _merges(run_path):
        if (aside / _COMPLETE).exists() and _batch_within(aside, sources):
            _remove_merged_files(run_path, aside.name)
            _remove_merge_folder(run_path, aside)


def _batch_within(aside: Path, sources: set[str]) -> bool:
    """Whether `aside` is an ingest batch of only `sources`."""
    listed = _batch_sources(aside)
    return listed is not None and sources.issuperset(listed["sources"])


def holds_any(run_path: Path, sources: set[str]) -> bool:
    """Whether a merge of the run holds a file of `sources`."""
    return any(_holds(aside, sources) for aside in _merges(run_path))


def _holds(aside: Path, sources: set[str]) -> bool:
    """Whether one merge holds rows of `sources`."""
    listed = _batch_sources(aside)
    if listed is not None:
        return not sources.isdisjoint(listed["sources"])
    # Every write asks this of every merge of every run: os.path on text, not
    # pathlib (16 sources against a merge: 1.4 ms, 2.6 ms with pathlib).
    folder = os.fspath(aside)
    return (any(os.path.exists(f"{folder}/{table}/{source}.parquet") for table in TRACE_SCHEMAS for source in sources)
            or any(_holds(batch, sources) for batch in aside.glob(f"{_REPLACED_PREFIX}*")))


def _batch_sources(aside: Path) -> dict | None:
    """An ingest batch's BATCH_SOURCES; None for a merge by `gpulens compact`.

    Every write to a dataset asks this of each batch of each run (is one of
    my sources there?), so a listing read once is kept, by file identity:
    it is written once and never changed."""
    path = aside / BATCH_SOURCES
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DatasetError(f"{path}: cannot read the batch's list of sources ({error.strerror})") from None
    return _read_listing(str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1 << 16)
def _read_listing(path: str, inode: int, mtime_ns: int, size: int) -> dict:
    try:
        return json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as error:
        raise DatasetError(f"{path}: cannot read the batch's list of sources ({error})") from None


def _merges(run_path: Path) -> list[Path]:
    """The folders of the run's merges, each holding the files one moved aside."""
    try:
        return sorted((run_path / MERGED_DIR).iterdir())
    except FileNotFoundError:
        return []


def _undo_incomplete(run_path: Path) -> None:
    for aside in _merges(run_path):
        if (aside / _EXPLODING).exists():
            _explode(run_path, aside)
        elif not (aside / _COMPLETE).exists():
            _unmerge(run_path, aside)


def _unmerge(run_path: Path, aside: Path) -> None:
    """Remove one merge's files and put the files it held back."""
    if (aside / _COMPLETE).exists() and (aside / BATCH_SOURCES).exists():
        _explode(run_path, aside)
        return
    _remove_merged_files(run_path, aside.name)
    for old in sorted(aside.glob(f"{_REPLACED_PREFIX}*")):  # an earlier batch this one was to replace
        os.replace(old, run_path / MERGED_DIR / old.name.removeprefix(_REPLACED_PREFIX))
    for table_dir in sorted(path for path in aside.iterdir() if path.is_dir()):
        for path in table_dir.glob("*.parquet"):
            destination = run_path / table_dir.name / path.name
            if destination.exists():  # written after the merge: the newer rows
                path.unlink()
            else:
                os.replace(path, destination)
    _remove_merge_folder(run_path, aside)


def _explode(run_path: Path, aside: Path) -> None:
    """Undo an ingest batch: write each source's rows back from the merged
    files as its own files, then remove the merged files.

    Marked `exploding` first, so that a crash midway is finished by the
    next holder of the run's lock (`_undo_incomplete`): a table whose
    merged file is gone is done, and a source whose file exists already
    is written back."""
    listed = _batch_sources(aside)
    assert listed is not None
    sources: list[str] = listed["sources"]
    (aside / _EXPLODING).touch()
    staging_root = run_path.parent.parent / ".staging"  # the dataset's
    try:
        staging_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"explode-{aside.name}-", dir=staging_root))
    except OSError as error:
        raise DatasetError(f"{run_path.parent.parent}: cannot write: {error.strerror or error}") from None
    try:
        for table, counts in listed["rows"].items():
            merged = _merged_file(run_path, table, aside.name)
            if merged.exists():
                _write_back(merged, sources, counts, staging)
                merged.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_merge_folder(run_path, aside)


def _write_back(merged: Path, sources: list[str], counts: list[int], staging: Path) -> None:
    """Each source's rows of one table's merged file, as its own file
    beside it (where it has rows and no file yet)."""
    from gpulens.collector.parquet_io import trace_parquet_options

    ends = list(itertools.accumulate(counts))
    wanted = [(source, end - count, count) for source, end, count in zip(sources, ends, counts)
              if count and not (merged.parent / f"{source}.parquet").exists()]
    if not wanted:
        return
    try:
        data = parquet_io.read_table(merged)
        if data.num_rows != ends[-1]:
            raise DatasetError(f"{merged}: holds {data.num_rows} rows where its batch lists {ends[-1]}")
        options = trace_parquet_options(data.schema)
        staged = []
        for source, start, count in wanted:
            path = staging / f"{merged.parent.name}-{source}.parquet"
            parquet_io.write_table(data.slice(start, count), path, **options)
            staged.append((path, merged.parent / f"{source}.parquet"))
        for path, _ in staged:
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        for path, destination in staged:
            os.replace(path, destination)
    except (OSError, pa.ArrowException) as error:
        raise DatasetError(f"{merged}: cannot split its batch back into its sources ({error})") from None


def _remove_merge_folder(run_path: Path, aside: Path) -> None:
    shutil.rmtree(aside, ignore_errors=True)
    with contextlib.suppress(OSError):
        (run_path / MERGED_DIR).rmdir()  # only when no other merge is left
