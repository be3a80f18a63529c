"""Running an ingest's tasks: in this process beside forked worker processes.

The pool, the thread that feeds it, the workers' setup (their end with
this process, the state that has them spill a part's events to a file
rather than send them back, so reading a part of a split file is here
too: `_read_part`), the progress bar, and handing freed memory back to
the system between files. Separate from what a task does
(`batch.ingest_task`), which this imports only when it runs, since
`batch` imports this module.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from fractions import Fraction
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING, Callable, Iterator

from collector.errors import one_line
from collector.ingest.formats import FORMAT_MODULES, module_for
from collector.ingest import plan
from collector.ingest.results import FileFailure, FileResult, PartOutcome, SkippedFile
from collector.ingest.store import owner_tag, remove_abandoned_staging, staged_folder
from collector.no_pandas import refuse_pandas
from collector.progress import StderrProgress

if TYPE_CHECKING:
    import multiprocessing.process
    from concurrent.futures import ProcessPoolExecutor

    from collector.ingest.kineto import PartRead
    from collector.ingest.sources import Source

# Set in ingest workers (`_worker_start`): they spill a part's events to a
# file in the ingest's own staging folder.
_IN_WORKER = False
_SPILL_DIR: str | None = None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _run(tasks: list[Source], out: Path, jobs: int | None, progress: bool,
         file_sizes: dict[str, int] | None = None) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """Each task's outcome, as `jobs` processes finish them: this one and
    `jobs - 1` workers (none for inputs under plan.PARALLEL_MIN_CONTENT_BYTES).

    This process parses files too rather than wait on a pool of `jobs`: as
    many files are parsed at once, by one process fewer (a process is ~80
    MB before it reads a byte: on two small files, three processes were
    310 MB and two would be ~230). A thread hands the workers their next
    file as each finishes; this one takes files from the same queue,
    largest first, between which it reports what the workers finished.
    If a worker dies, the files it had are reported failed and this
    process parses those not yet handed out.

    The parts of a split file are tasks like files; this process also puts
    them together (`_assemble`), and while a split file waits on a part it
    takes only parts, leaving whole files to the workers: a file taken then
    delayed the joining, the one step no worker can take (the A100 + V100
    pair: 0.42 -> 0.41 s, and 0.40 with parts a core's share, medians of
    11). It still reads parts itself: with a pool
    of `jobs` workers instead and this process only assembling, the A100 +
    V100 pair took 1.12 s rather than 1.41 s, but at 261-290 MB rather than
    203-212 (HTA: 688), and one 620,000-event rank took 2.4 s either way.
    """
    from collector.ingest.batch import ingest_task  # here: batch imports this module

    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    sizes = plan._task_sizes(tasks, file_sizes) if workers > 1 else {}
    if workers > 1 and sum(sizes.values()) < plan.PARALLEL_MIN_CONTENT_BYTES:
        workers = 1  # too little work to pay for a worker: see plan.PARALLEL_MIN_CONTENT_BYTES
    if workers == 1:
        with _Progress(_files_of(tasks), progress) as bar:
            for task in tasks:
                for outcome in ingest_task(task, str(out)):
                    yield outcome
                    bar.advance(_task_of(outcome))
        return
    # Import the Kineto parser once here: forked workers then share those
    # pages instead of each importing its own copy. It is the one every
    # file's sniffing imports (the first tried), and the format of most
    # runs; the others (15 ms more before the first file, on every run) are
    # imported by the processes whose files need them. And keep the
    # collector from touching (so copying) the shared objects there.
    module_for(FORMAT_MODULES[0])
    _warm_conversions()
    # Imported here: a run small enough for one process never pays for them.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    queue = _TaskQueue(sorted(tasks, key=sizes.__getitem__, reverse=True))
    finished: SimpleQueue = SimpleQueue()  # the workers' outcomes, then None
    # The workers spill parts' events here (`_spill`); it goes at the end,
    # whatever was left in it.
    with staged_folder(out, f"parts-{owner_tag()}-") as spill_dir:
        gc.freeze()
        try:
            context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
            started = set(multiprocessing.active_children())
            pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=context, initializer=_worker_start,
                                       initargs=(os.getpid(), str(spill_dir)))
            stopped = False
            try:
                # This process takes the largest file: it lives to the end anyway,
                # while a worker with no file left exits (see _feed) and gives
                # its memory back. The first submissions start the workers: before
                # any other thread exists (the feeder, the progress bar), so none
                # is running when they fork.
                own = queue.take(1)
                first = [(pool.submit(ingest_task, task, str(out)), task) for task in queue.take(workers - 1)]
                feeder = threading.Thread(target=_feed, args=(pool, first, queue, str(out), finished), daemon=True)
                feeder.start()
                # The split files whose parts are not all read yet: this process
                # joins and writes each (`_assemble`), a step nothing else can
                # run, so it reads only parts while one waits on a part.
                unread_parts = {task.path: task.part.count for task in tasks if task.part is not None}
                with _Progress(_files_of(tasks), progress) as bar:
                    workers_done = False
                    while True:
                        mine, own = own or queue.take(1, parts_only=bool(unread_parts) and not workers_done), []
                        if mine:
                            for outcome in ingest_task(mine[0], str(out)):
                                _count_read(outcome, unread_parts)
                                yield outcome
                                bar.advance(_task_of(outcome))
                        elif workers_done:
                            break
                        # What the workers finished meanwhile; with nothing to read,
                        # the next thing they finish, after which this process may
                        # have work again: the files once its split files are
                        # written, or files put back when the pool broke.
                        while not workers_done and (not mine or not finished.empty()):
                            outcome = finished.get()
                            if outcome is None:
                                workers_done = True
                            else:
                                _count_read(outcome, unread_parts)
                                yield outcome
                                bar.advance(_task_of(outcome))
                            if not mine:
                                break
                feeder.join()
            except BaseException:
                # Stopped early (SIGTERM, Ctrl-C, closed): shutting the pool down
                # would wait for every worker to finish its file, so they are
                # stopped here.
                stopped = True
                _stop([process for process in multiprocessing.active_children() if process not in started])
                raise
            finally:
                queue.close()  # if this ends early, the feeder hands out nothing more
                # Stopped, the pool is left without waiting: its workers are gone,
                # and stopped while it started its manager thread, a waiting
                # shutdown (as leaving a `with` block does) raised "cannot join
                # thread before it is started" in place of the stop.
                pool.shutdown(wait=not stopped, cancel_futures=stopped)
        finally:
            gc.unfreeze()
            remove_abandoned_staging(out)  # the write folders of workers stopped above


def _warm_conversions() -> None:
    """Have pyarrow import, before the fork, what it imports the first time
    it converts a numpy array (numpy.ma, 12 ms) and a Python value
    (dateutil, 3 ms), as every parse does: once, not again in each worker."""
    import numpy as np
    import pyarrow as pa

    pa.array(np.zeros(1))
    pa.scalar(0)


def _stop(workers: list[multiprocessing.process.BaseProcess]) -> None:
    """End the worker processes now (they clean up nothing: see `_worker_start`)."""
    for process in workers:
        if process.is_alive():
            process.terminate()
    for process in workers:
        process.join(5)


def _count_read(outcome: FileResult | FileFailure | SkippedFile | PartOutcome, unread_parts: dict[str, int]) -> None:
    """Count off a part read (or failed) from `unread_parts`, dropping its file
    once all are."""
    if isinstance(outcome, PartOutcome):
        left = unread_parts.pop(outcome.task.path) - 1
        if left:
            unread_parts[outcome.task.path] = left


class _TaskQueue:
    """Tasks in the order to start them, taken by two threads."""

    def __init__(self, tasks: list[Source]) -> None:
        self._tasks = deque(tasks)
        self._lock = threading.Lock()

    def take(self, n: int, parts_only: bool = False) -> list[Source]:
        """The next `n` tasks; with `parts_only`, the next parts of split
        files only (the others stay queued in order)."""
        with self._lock:
            if not parts_only:
                return [self._tasks.popleft() for _ in range(min(n, len(self._tasks)))]
            taken = [task for task in self._tasks if task.part is not None][:n]
            for task in taken:
                self._tasks.remove(task)
            return taken

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
    from collector.ingest.batch import ingest_task  # here: batch imports this module

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


class _Progress(StderrProgress):
    """The ingest's bar on a terminal. It counts files: each part of a file
    read in parts moves it by its share of the file."""

    def __init__(self, total: int, enabled: bool) -> None:
        super().__init__(enabled, total, "ingesting", counted=True)
        self._done = Fraction(0)

    def advance(self, task: Source | None = None) -> None:
        # Counted exactly: six sixths of a file in floats fall short of one.
        self._done += Fraction(1, task.part.count) if task is not None and task.part else 1
        self.update(completed=float(self._done))


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
