"""Running an ingest's tasks: in this process beside forked worker processes.

The pool, the thread that feeds it, the workers' setup (their end with
this process, the state that has them spill a part's events to a file
rather than send them back, so reading a part of a split file is here
too: `_read_part`), the progress bar, and handing freed memory back to
the system between files. Separate from what a task does
(`batch.ingest_task`), which `batch` hands to `_run`: this module knows
nothing of it.
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
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING, Callable, Iterator

from gpulens.collector.cpus import usable_cpus
from gpulens.collector.errors import one_line
from gpulens.collector.ingest import plan
from gpulens.collector.ingest.formats import FORMAT_MODULES, module_for
from gpulens.collector.ingest.memory_bound import bound_bytes, limit_address_space
from gpulens.collector.ingest.results import FileFailure, FileResult, SkippedFile
from gpulens.collector.ingest.store import owner_tag, remove_abandoned_staging, staged_folder
from gpulens.collector.progress import StderrProgress

if TYPE_CHECKING:
    import multiprocessing.process
    from concurrent.futures import ProcessPoolExecutor

    from gpulens.collector.ingest.kineto import PartRead
    from gpulens.collector.ingest.sources import Source

@dataclass
class PartOutcome:
    """What reading one part gave: its events, or None where it could not be
    read on its own (the file is then ingested whole). A worker leaves them
    in a file for this process (`spilled`), not in its reply: see `_spill`."""

    task: Source
    read: PartRead | None
    seconds: float
    spilled: str | None = None

    @property
    def held_here(self) -> bool:
        """Whether its events are in this process's memory (not spilled)."""
        return self.read is not None and self.spilled is None

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


@dataclass
class Assembly:
    """A split file whose parts are all read: a task that joins them and
    writes the file (`batch.ingest_task`). The parts read by workers are in
    spill files, those this process read in its memory: a file with one
    of those is joined here (`held_here`), any other by whichever process
    is free first."""

    parts: list[PartOutcome]

    @property
    def task(self) -> Source:
        return self.parts[0].task

    @property
    def held_here(self) -> bool:
        return any(part.held_here for part in self.parts)



# Set in ingest workers (`_worker_start`): they spill a part's events to a
# file in the ingest's own staging folder.
_IN_WORKER = False
_SPILL_DIR: str | None = None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


# What a task does: a source or an assembly, and the dataset folder → its outcomes.
IngestTask = Callable[["Source | Assembly", str], "list[FileResult | FileFailure | SkippedFile | PartOutcome]"]


def _run(tasks: list[Source], out: Path, jobs: int | None, progress: bool, ingest_task: IngestTask,
         file_sizes: dict[str, int] | None = None) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """Each source's outcome, as `jobs` processes finish them: this one and
    `jobs - 1` workers (none for inputs under plan.PARALLEL_MIN_CONTENT_BYTES).

    This process parses files too rather than wait on a pool of `jobs`: as
    many files are parsed at once, by one process fewer (a process is ~80
    MB before it reads a byte: on two small files, three processes were
    310 MB and two would be ~230). A thread hands the workers their next
    task as each finishes; this one takes tasks from the same queue,
    largest first, between which it reports what the workers finished.
    If a worker dies, the tasks it had are reported failed and this
    process runs those not yet handed out.

    The parts of a split file are tasks like files. Once all are read, the
    joining and writing of the file is a task too (an `Assembly`), put
    first in the queue: this process takes it where it read one of the
    parts (which then need not move), else the first worker free. While a
    file it read a part of waits on others, this process takes only parts
    and the joinings only it can run: a whole file taken then would delay
    the joining, the file's last step.
    When this process joined every split file, it was the ingest's
    bottleneck wherever several were split: eight 620,000-event ranks on a
    16-core host, in four parts each, took 4.6 s (2.6 s on two cores, not
    cut), this process joining the eight one after another.
    """
    split = _SplitFiles(tasks)
    workers = max(1, min(jobs or usable_cpus(), len(tasks)))
    sizes = plan._task_sizes(tasks, file_sizes) if workers > 1 else {}
    if workers > 1 and sum(sizes.values()) < plan.PARALLEL_MIN_CONTENT_BYTES:
        workers = 1  # too little work to pay for a worker: see plan.PARALLEL_MIN_CONTENT_BYTES
    if workers == 1:
        queue = _TaskQueue(tasks)
        with _Progress(_files_of(tasks), progress) as bar:
            while mine := queue.take(1):
                yield from _run_here(mine[0], out, bar, split, queue, ingest_task)
        yield from _unjoined(split, out, ingest_task)
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
    finished: SimpleQueue = SimpleQueue()  # (task, outcome) from the workers, then None
    # The workers spill parts' events here (`_spill`); it goes at the end,
    # whatever was left in it.
    with staged_folder(out, f"parts-{owner_tag()}-") as spill_dir:
        gc.freeze()
        try:
            context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
            started = set(multiprocessing.active_children())
            pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=context, initializer=_worker_start,
                                       initargs=(os.getpid(), str(spill_dir), worker_memory_bytes(workers)))
            stopped = False
            try:
                # This process takes the largest file: it lives to the end anyway,
                # while a worker with no file left exits (see _feed) and gives
                # its memory back. The first submissions start the workers: before
                # any other thread exists (the feeder, the progress bar), so none
                # is running when they fork.
                own = queue.take(1)
                first = [(pool.submit(ingest_task, task, str(out)), task) for task in queue.take(workers - 1)]
                feeder = threading.Thread(target=_feed, args=(pool, first, queue, str(out), finished, split, ingest_task),
                                          daemon=True)
                feeder.start()
                with _Progress(_files_of(tasks), progress) as bar:
                    workers_done = False
                    while True:
                        # Only parts (and the joining of files it holds a part of)
                        # while a split file of which this process holds a part
                        # waits on others: it joins that file, the step the file
                        # waits on last.
                        mine, own = own or queue.take(1, parts_only=split.waiting_here() and not workers_done), []
                        if mine:
                            yield from _run_here(mine[0], out, bar, split, queue, ingest_task)
                        elif workers_done:
                            break
                        # What the workers finished meanwhile; with nothing to run,
                        # the next thing they finish, after which the queue may
                        # hold work again (a split file to join, or tasks put
                        # back when the pool broke).
                        while not workers_done and (not mine or not finished.empty()):
                            got = finished.get()
                            if got is None:
                                workers_done = True
                            else:
                                task, outcome = got
                                bar.advance(task)
                                if not isinstance(outcome, PartOutcome):  # parts: `_feed` counted them in `split`
                                    yield outcome
                                elif split.read_here(outcome.task.path):
                                    # This process joins that file: its events read back
                                    # now, while the other parts are still being read.
                                    outcome.events()
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
            yield from _unjoined(split, out, ingest_task)
        finally:
            gc.unfreeze()
            remove_abandoned_staging(out)  # the write folders of workers stopped above


class _SplitFiles:
    """The parts read so far of each split file, counted by this process's
    thread and the feeder's; once a file's are all in, its `Assembly` goes
    first in the queue."""

    def __init__(self, tasks: list[Source]) -> None:
        self._counts = {task.path: task.part.count for task in tasks if task.part is not None}
        self._read: dict[str, list[PartOutcome]] = {}
        self._here: set[str] = set()  # the files with a part read by this process
        self._lock = threading.Lock()

    def add(self, outcome: PartOutcome, queue: _TaskQueue) -> None:
        with self._lock:
            if outcome.held_here:
                self._here.add(outcome.task.path)
            parts = self._read.setdefault(outcome.task.path, [])
            parts.append(outcome)
            if len(parts) < self._counts[outcome.task.path]:
                return
            del self._read[outcome.task.path]
        queue.put_first(Assembly(parts))

    def read_here(self, path: str) -> bool:
        """Whether this process read a part of `path` (so it joins the file)."""
        with self._lock:
            return path in self._here

    def waiting_here(self) -> bool:
        """Whether a split file not yet read in full has a part read by this
        process (its events in memory here)."""
        with self._lock:
            return any(part.held_here for parts in self._read.values() for part in parts)

    def unjoined(self) -> list[Source]:
        """The files some of whose parts never came back (none, unless
        the code that reports every task has a bug)."""
        with self._lock:
            return [replace(parts[0].task, part=None) for parts in self._read.values()]


def _run_here(task: Source | Assembly, out: Path, bar: _Progress, split: _SplitFiles,
              queue: _TaskQueue, ingest_task: IngestTask) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """Run `task` in this process: its sources' outcomes; a part read is
    counted in `split` instead (which queues its file's joining once all
    its parts are in)."""

    for outcome in ingest_task(task, str(out)):
        bar.advance(task)
        if isinstance(outcome, PartOutcome):
            split.add(outcome, queue)
        else:
            yield outcome


def _unjoined(split: _SplitFiles, out: Path, ingest_task: IngestTask) -> Iterator[FileResult | FileFailure | SkippedFile]:
    """Ingest whole, in this process, the split files never joined."""
    for task in split.unjoined():
        yield from ingest_task(task, str(out))  # type: ignore[misc]  # a whole file gives no PartOutcome


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


class _TaskQueue:
    """Tasks in the order to start them, taken by two threads."""

    def __init__(self, tasks: list[Source]) -> None:
        self._tasks: deque[Source | Assembly] = deque(tasks)
        self._lock = threading.Lock()

    def take(self, n: int, parts_only: bool = False, for_worker: bool = False) -> list[Source | Assembly]:
        """The next `n` tasks; the others stay queued in order. With
        `parts_only`, only parts of split files and the joinings this
        process must run (of files it holds a part of); with `for_worker`,
        only tasks a worker can run (not those joinings)."""
        with self._lock:
            if not (parts_only or for_worker):
                return [self._tasks.popleft() for _ in range(min(n, len(self._tasks)))]
            taken = [task for task in self._tasks
                     if (not parts_only or _part_or_joining_here(task))
                     and not (for_worker and isinstance(task, Assembly) and task.held_here)][:n]
            for task in taken:
                self._tasks.remove(task)
            return taken

    def put_first(self, task: Source | Assembly) -> None:
        """Queue `task` before all others: a split file ready to join, or a
        task handed back when the pool broke."""
        with self._lock:
            self._tasks.appendleft(task)

    def close(self) -> None:
        with self._lock:
            self._tasks.clear()


def _part_or_joining_here(task: Source | Assembly) -> bool:
    """Whether `task` reads a part of a split file, or joins one of which
    this process holds a part (which only it takes)."""
    return task.held_here if isinstance(task, Assembly) else task.part is not None


def _feed(pool: ProcessPoolExecutor, running: list[tuple[Future, Source | Assembly]], queue: _TaskQueue, out: str,
          finished: SimpleQueue, split: _SplitFiles, ingest_task: IngestTask) -> None:
    """Keep each worker busy with the queue's next task; put every outcome
    on `finished` with its task, then None (always: the caller waits for
    it). A worker whose part completes a split file takes its joining
    next (it comes first in the queue), unless this process holds one of
    the file's parts: then this process joins it, which saves moving that
    part's events to the worker."""

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
                    if isinstance(outcome, PartOutcome):
                        split.add(outcome, queue)
                    finished.put((task, outcome))
                for follow in queue.take(1, for_worker=True):
                    try:
                        tasks[pool.submit(ingest_task, follow, out)] = follow
                    except Exception:  # the pool broke (a worker died) or is shutting down
                        queue.put_first(follow)  # for this process, which still parses
    finally:
        # No task is left to hand out: let the workers exit now rather than
        # hold their memory until this process finishes its last one.
        pool.shutdown(wait=False)
        finished.put(None)


def _failed(task: Source | Assembly, problem: str) -> list[FileFailure | PartOutcome]:
    # A part's failure is its file's only once the whole file fails too (`_assembled`).
    if isinstance(task, Assembly):
        return [FileFailure(task.task.path, problem)]
    if task.part is not None:
        return [PartOutcome(task, None, 0.0)]
    return [FileFailure(member.path, problem) for member in task.members]


# The address space each ingest worker may use: GPULENS_INGEST_WORKER_MEMORY_BYTES,
# else three quarters of the machine's memory shared among the workers, and
# at least WORKER_MIN_MEMORY_BYTES. A file that needs more fails alone
# ("out of memory"); the other files, and the machine, go on.
WORKER_MEMORY_VARIABLE = "GPULENS_INGEST_WORKER_MEMORY_BYTES"
WORKER_MIN_MEMORY_BYTES = 2 << 30


def worker_memory_bytes(workers: int) -> int | None:
    """The bound of each of `workers` workers (None: the machine's size is unknown)."""
    return bound_bytes(WORKER_MEMORY_VARIABLE, Fraction(3, 4 * max(1, workers)), WORKER_MIN_MEMORY_BYTES)


def _worker_start(parent: int, spill_dir: str, memory_bytes: int | None = None) -> None:
    """Set up a worker process, which only ingests, for the process `parent`;
    its address space capped at `memory_bytes` (`worker_memory_bytes`).

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
    limit_address_space(memory_bytes)
    prepare_ingest_process()


def _end_with_parent(parent: int) -> None:
    """Have the kernel kill this process when `parent` ends (Linux); elsewhere
    a thread that looks every second and does what the kernel would: a
    SIGKILL to this process (a thread cannot end its process otherwise, and
    a worker has nothing to flush: its parent removes what it left)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it ended before the call
                    _kill_self()
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        _kill_self()

    threading.Thread(target=watch, name="gpulens-parent-watch", daemon=True).start()


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def prepare_ingest_process() -> None:
    """Settings for a process that only ingests; only in processes gpulens
    owns (its ingest workers, the `gpulens ingest` command), since they
    would change a caller's process for everyone else in it.

    - The objects of the imports are frozen (gc.freeze): about a tenth
      less CPU in all on the A100 + V100 pair (perf samples of the
      process, 5,474 -> 4,874, medians of four on a busy 2-core VM).
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

    pa.set_memory_pool(pa.system_memory_pool())
    # Everything imported so far lives as long as the process: out of the
    # cyclic collector's reach, its full collections no longer walk it
    # (6 % of ingest's CPU on the A100 + V100 pair, 2 % after), and a
    # worker forked later does not copy those pages by marking them.
    gc.freeze()


def _files_of(tasks: list[Source]) -> int:
    """How many files (sources) the tasks are: the parts of one file count
    once, a group's sources each."""
    return len({member.path for task in tasks for member in task.members})


class _Progress(StderrProgress):
    """The ingest's bar on a terminal. It counts files: a file read in n
    parts moves it by 1/(n + 1) a part read, and as much once joined."""

    def __init__(self, total: int, enabled: bool) -> None:
        super().__init__(enabled, total, "ingesting", counted=True)
        self._done = Fraction(0)

    def advance(self, task: Source | Assembly) -> None:
        """Count one outcome of `task` (a group's give one a source)."""
        part = task.task.part if isinstance(task, Assembly) else task.part
        # Counted exactly: six sixths of a file in floats fall short of one.
        self._done += Fraction(1, part.count + 1) if part is not None else 1
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
    from gpulens.collector.ingest import kineto

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
