"""Merging a trace run's per-source files into one file per table.

Ingest writes one Parquet file per table per source file (see `store`), so
a run of 2,000 ranks is 20,000 files, and every analysis opens every file
of each table it reads. A JSON report of such a run (a 200-rank run's
files linked ten times) took 48 s and 1.1 GB; with each table in one file,
4.2 s and 0.4 GB.

`merge_run` (`gpulens compact`) writes, for each table, one
`merged-<token>.parquet` holding the rows of the run's per-source files,
and moves those files aside into `traces/run=R/.merged/<token>/<table>/`,
where the table globs readers use do not reach. Re-ingesting a source of
a merged run undoes its merge first (`unmerge_source`, called by
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

Crash safety: the merged files are written to staging and fsynced before
any is placed, and a merge's folder gets its `complete` mark only once
every file is placed and moved; a merge without its mark (one cut short)
is undone by the next merge or ingest of that run. A reader that lists a
table's files in the instant a merge places that table (or its undoing
puts it back) sees the run's rows of that table once missing or twice, as
with the collector's merges (collector/compact.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collector.compact import in_row_groups
from collector.errors import DatasetError
from collector.schema import TRACE_SCHEMAS

MERGED_PREFIX = "merged-"
MERGED_DIR = ".merged"
_COMPLETE = "complete"
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
    """Merge the run's per-source files, table by table, where it has at
    least `min_sources` of them; (trace files before, after). Raises
    DatasetError naming a file that cannot be read or written; the run is
    then as it was."""
    with run_lock(run_path):
        _undo_incomplete(run_path)
        files = {table: per_source_files(run_path, table) for table in TRACE_SCHEMAS}
        files = {table: paths for table, paths in files.items() if paths}
        before = _trace_file_count(run_path)
        sources = {path.stem for paths in files.values() for path in paths}
        if len(sources) < max(2, min_sources):
            return before, before
        token = secrets.token_hex(5)
        try:
            (out / ".staging").mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"merge-{token}-", dir=out / ".staging"))
        except OSError as error:
            raise DatasetError(f"{out}: cannot write: {error.strerror or error}") from None
        try:
            staged = {table: _write_merged(paths, staging / f"{table}.parquet") for table, paths in files.items()}
            _place(run_path, token, files, staged)
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
    import pyarrow.dataset as ds

    from collector.ingest.store import trace_parquet_options

    try:
        schema = pa.unify_schemas([pq.read_schema(path).remove_metadata() for path in files],
                                  promote_options="permissive")
        batches = ds.dataset([str(path) for path in files], schema=schema, format="parquet").to_batches()
        with open(destination, "wb") as handle:
            with pq.ParquetWriter(handle, schema, **trace_parquet_options(schema)) as writer:
                for rows in in_row_groups(pa.Table.from_batches([batch], schema) for batch in batches):
                    writer.write_table(rows, row_group_size=max(1, rows.num_rows))
            handle.flush()
            os.fsync(handle.fileno())
    except (OSError, pa.ArrowException) as error:
        raise DatasetError(f"{files[0].parent}: cannot merge its files ({error})") from None
    return destination


def _place(run_path: Path, token: str, files: dict[str, list[Path]], staged: dict[str, Path]) -> None:
    """Put each merged file in its table's folder and move the files it
    holds aside; all or none."""
    aside = run_path / MERGED_DIR / token
    try:
        for table, merged in staged.items():
            (aside / table).mkdir(parents=True)
            os.replace(merged, run_path / table / f"{MERGED_PREFIX}{token}.parquet")
            for path in files[table]:
                os.replace(path, aside / table / path.name)
        (aside / _COMPLETE).touch()
    except OSError as error:
        _unmerge(run_path, aside)
        raise DatasetError(f"{run_path}: cannot merge its files ({error.strerror or error})") from None


def unmerge_source(run_path: Path, source: str) -> None:
    """Undo every merge of the run that holds `source`'s files (and any
    merge a crash cut short); the caller holds the run's lock."""
    _undo_incomplete(run_path)
    for aside in _merges(run_path):
        if _holds(aside, source):
            _unmerge(run_path, aside)


def holds_source(run_path: Path, source: str) -> bool:
    """Whether a merge of the run holds `source`'s files."""
    return any(_holds(aside, source) for aside in _merges(run_path))


def _holds(aside: Path, source: str) -> bool:
    """Whether one merge's folder holds a file of `source`."""
    return any((aside / table / f"{source}.parquet").exists() for table in TRACE_SCHEMAS)


def _merges(run_path: Path) -> list[Path]:
    """The folders of the run's merges, each holding the files one moved aside."""
    try:
        return sorted((run_path / MERGED_DIR).iterdir())
    except FileNotFoundError:
        return []


def _undo_incomplete(run_path: Path) -> None:
    for aside in _merges(run_path):
        if not (aside / _COMPLETE).exists():
            _unmerge(run_path, aside)


def _unmerge(run_path: Path, aside: Path) -> None:
    """Remove one merge's files and put the files it held back."""
    token = aside.name
    for merged in run_path.glob(f"*/{MERGED_PREFIX}{token}.parquet"):
        merged.unlink(missing_ok=True)
    for table_dir in sorted(path for path in aside.iterdir() if path.is_dir()):
        for path in table_dir.glob("*.parquet"):
            destination = run_path / table_dir.name / path.name
            if destination.exists():  # written after the merge: the newer rows
                path.unlink()
            else:
                os.replace(path, destination)
    shutil.rmtree(aside, ignore_errors=True)
    with contextlib.suppress(OSError):
        (run_path / MERGED_DIR).rmdir()  # only when no other merge is left
