"""An ingest stopped by a signal leaves no worker process running and no
staging file behind; what a killed one left, the next ingest removes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpulens.collector.errors import Terminated, terminated_on_sigterm
from gpulens.collector.ingest import ingest_paths, store
from gpulens.collector.ingest.store import STAGING_DIR
from gpulens.collector.sim_trace import write_training_traces
from conftest import SignalledInDel, signal_self
from tests.test_ingest import kineto_json, rows_in, write

REPO_ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc")


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def _running(pids: list[int]) -> list[int]:
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.append(pid)
    return running


@pytest.fixture(scope="module")
def big_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four 80 MB ranks: about 0.8 s of ingest with --jobs 2 (two cores),
    half of it in a worker."""
    folder = tmp_path_factory.mktemp("job")
    write_training_traces(folder, ranks=4, steps=50, kernels_per_step=1000)
    return folder


def _ingest_until_its_workers_run(job: Path, out: Path) -> tuple[subprocess.Popen, list[int]]:
    ingest = subprocess.Popen([sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(job), "--out", str(out), "--jobs", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    deadline = time.monotonic() + 5
    while not (workers := _children(ingest.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # into their files (each takes ~0.3 s)
    return ingest, workers


def _stop_leftovers(pids: list[int]) -> None:
    for pid in _running(pids):  # only where the behaviour under test failed
        os.kill(pid, signal.SIGKILL)


@linux_only
def test_sigterm_stops_the_workers_removes_staging_and_says_so(big_job: Path, tmp_path: Path) -> None:
    ingest, workers = _ingest_until_its_workers_run(big_job, tmp_path / "out")
    try:
        ingest.send_signal(signal.SIGTERM)
        _, stderr = ingest.communicate(timeout=10)
        assert (ingest.returncode, stderr, _running(workers), list((tmp_path / "out" / STAGING_DIR).iterdir())) == (
            143, "gpulens: terminated\n", [], [])
    finally:
        _stop_leftovers(workers)
    assert workers  # the ingest was stopped while it had workers


@linux_only
def test_workers_end_with_a_killed_ingest(big_job: Path, tmp_path: Path) -> None:
    ingest, workers = _ingest_until_its_workers_run(big_job, tmp_path / "out")
    try:
        ingest.kill()
        ingest.communicate(timeout=10)
        deadline = time.monotonic() + 3
        while _running(workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (workers != [], _running(workers)) == (True, [])
    finally:
        _stop_leftovers(workers)


@linux_only
def test_ingest_forks_its_workers_from_a_process_with_no_other_thread(tmp_path: Path) -> None:
    # A fork copies other threads' locks but not the threads; numpy (OpenBLAS)
    # and pyarrow (jemalloc) would each start an idle one on import.
    job = tmp_path / "job"
    write_training_traces(job, ranks=2, steps=8, kernels_per_step=400)  # 10 MB: past PARALLEL_MIN_CONTENT_BYTES
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "def _threads_at_fork():\n"
        "    with open(os.environ['THREADS_AT_FORK'], 'a') as log:\n"
        "        log.write(f\"{len(os.listdir('/proc/self/task'))}\\n\")\n"
        "os.register_at_fork(before=_threads_at_fork)\n")
    log = tmp_path / "threads"
    env = {name: value for name, value in os.environ.items() if name not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    env.update(PYTHONPATH=os.pathsep.join([str(hook), str(REPO_ROOT)]), THREADS_AT_FORK=str(log))
    done = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(job), "--out", str(tmp_path / "out"), "--jobs", "2"],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["1"]


def _ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _staged_by(out: Path, pid: int, host: str | None = None) -> Path:
    tag = store.owner_tag(pid) if host is None else f"{pid}.{host}"
    folder = out / STAGING_DIR / f"ingest-{tag}-0123456789abcdef0123-x1y2z3"
    folder.mkdir(parents=True)
    (folder / "kernels.parquet").write_bytes(b"PAR1")
    return folder


def test_ingest_removes_only_what_a_killed_ingest_on_this_machine_staged(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _staged_by(out, _ended_pid())
    live = _staged_by(out, os.getppid())
    # A pid says nothing of another machine's processes (a dataset on a shared filesystem).
    elsewhere = _staged_by(out, _ended_pid(), host="0badc0de")
    ingest_paths([write(tmp_path / "rank0.json", kineto_json())], out, jobs=1)
    assert sorted((out / STAGING_DIR).iterdir()) == sorted([live, elsewhere])


def test_ingest_removes_what_an_older_gpulens_staged_once_it_is_a_day_old(tmp_path: Path) -> None:
    # Before owner tags: `ingest-<source id>-*` folders and `part-*.pickle` spill files.
    staging = tmp_path / "out" / STAGING_DIR
    old_folder, new_folder = staging / "ingest-0123456789abcdef0123-a1b2c3", staging / "ingest-0123456789abcdef0123-d4e5f6"
    for folder in (old_folder, new_folder):
        folder.mkdir(parents=True)
        (folder / "kernels.parquet").write_bytes(b"PAR1")
    old_part, new_part = staging / "part-k2j4.pickle", staging / "part-m9n8.pickle"
    old_part.write_bytes(b"x")
    new_part.write_bytes(b"x")
    two_days_ago = time.time() - 2 * 24 * 3600
    for path in (old_folder, old_part):
        os.utime(path, (two_days_ago, two_days_ago))
    ingest_paths([write(tmp_path / "rank0.json", kineto_json())], tmp_path / "out", jobs=1)
    assert sorted(staging.iterdir()) == sorted([new_folder, new_part])


def test_a_write_stopped_while_staging_leaves_no_staging_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector.ingest import kineto

    parsed = kineto.parse(write(tmp_path / "rank0.json", kineto_json()), "r")

    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_fsync_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.write_source(tmp_path / "out", "r", "source", parsed.tables)
    assert list((tmp_path / "out" / STAGING_DIR).iterdir()) == []


def _written_once(tmp_path: Path):
    """A source written once into a dataset: (the dataset, the source's
    parsed trace, its files' bytes)."""
    from gpulens.collector.ingest import kineto

    out = tmp_path / "out"
    parsed = kineto.parse(write(tmp_path / "rank0.json", kineto_json()), "r")
    store.write_source(out, "r", "source", parsed.tables)
    return out, parsed, {path: path.read_bytes() for path in sorted((out / "traces").rglob("*.parquet"))}


def test_a_table_that_cannot_be_written_keeps_the_earlier_ingest_and_no_staging(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The tables are written on several threads: one failing must still
    # leave the source's earlier files in place, and nothing staged.
    from gpulens.collector.errors import DatasetError

    out, parsed, before = _written_once(tmp_path)
    write_parquet = store.parquet_io.write_table

    def disk_full_on_kernels(table, path, **options) -> None:
        if Path(path).name == "kernels.parquet":
            raise OSError(28, "No space left on device")
        write_parquet(table, path, **options)

    monkeypatch.setattr(store.parquet_io, "write_table", disk_full_on_kernels)
    with pytest.raises(DatasetError, match=f"^{re.escape(str(out))}: cannot write: No space left on device$"):
        store.write_source(out, "r", "source", parsed.tables)
    assert {path: path.read_bytes() for path in sorted((out / "traces").rglob("*.parquet"))} == before
    assert list((out / STAGING_DIR).iterdir()) == []


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="tables are written on threads only with two cores or more")
def test_an_interrupt_while_waiting_for_the_writes_lets_those_running_finish_and_drops_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGTERM's Terminated (or Ctrl-C) can come while this thread waits for
    # the writer threads; the staging folder is removed right after, so a
    # write still running would put its file back into it. Writes not begun
    # are dropped, and must not be waited for (they never run).
    from gpulens.collector.ingest import kineto

    parsed = kineto.parse(write(tmp_path / "rank0.json", kineto_json()), "r")
    tables = dict(parsed.tables)  # kernels, cpu_ops, runs: two threads take two, one waits
    running = threading.Semaphore(0)
    write_staged = store._write_staged

    def slow_write(table, path: Path) -> Path:
        running.release()
        time.sleep(0.3)
        return write_staged(table, path)

    interrupts = iter([KeyboardInterrupt, TimeoutError])  # then: still waiting 3 s later

    def interrupt(signum: int, frame: object) -> None:
        raise next(interrupts)

    monkeypatch.setattr(store, "_write_staged", slow_write)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            with store._StagedWriter(tmp_path / "staging", threads=2) as writer:
                (tmp_path / "staging").mkdir()
                writer.write(tables)
                running.acquire(timeout=5)
                running.acquire(timeout=5)  # two writes running, one waiting for a thread
                signal.setitimer(signal.ITIMER_REAL, 0.05, 3.0)  # while leaving the block waits
        largest_two = sorted(tables, key=lambda name: tables[name].nbytes, reverse=True)[:2]
        assert sorted(path.name for path in (tmp_path / "staging").iterdir()) == sorted(f"{name}.parquet" for name in largest_two)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_staging_folder_interrupted_as_it_is_made_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_folder = Path.mkdir

    def made_then_interrupted(self: Path, *args: object, **kwargs: object) -> None:
        make_folder(self, *args, **kwargs)
        if self.name.startswith("ingest-"):
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with store.staged_folder(tmp_path / "out", "ingest-"):
            pass
    assert list((tmp_path / "out" / STAGING_DIR).iterdir()) == []


def test_an_interrupt_between_two_moves_into_place_puts_the_earlier_files_back(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out, parsed, before = _written_once(tmp_path)
    replace = os.replace
    moves = []

    def interrupted_at_the_third_move(source, destination) -> None:
        moves.append(destination)
        if len(moves) == 3:  # the first table aside and in place, then Ctrl-C
            raise KeyboardInterrupt
        replace(source, destination)

    monkeypatch.setattr(store.os, "replace", interrupted_at_the_third_move)
    with pytest.raises(KeyboardInterrupt):
        store.write_source(out, "r", "source", parsed.tables)
    monkeypatch.undo()
    assert {path: path.read_bytes() for path in sorted((out / "traces").rglob("*.parquet"))} == before
    assert list((out / STAGING_DIR).iterdir()) == []


@linux_only
def test_a_stop_while_the_pool_starts_is_the_stop_that_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C (or SIGTERM's Terminated) can come while the process pool starts
    # the thread that manages it; the pool's waiting shutdown then failed to
    # join that thread ("cannot join thread before it is started").
    job = tmp_path / "job"
    write_training_traces(job, ranks=2, steps=8, kernels_per_step=400)  # 10 MB: past PARALLEL_MIN_CONTENT_BYTES
    start_thread = threading.Thread.start

    def interrupted_before_the_managers_start(thread: threading.Thread) -> None:
        if type(thread).__name__ == "_ExecutorManagerThread":  # concurrent.futures.process's
            raise KeyboardInterrupt
        start_thread(thread)

    def still_stopping(signum: int, frame: object) -> None:
        raise TimeoutError("the ingest was still stopping 20 s later")

    # Children this process had before (a Spark test's JVM gateway lives on).
    earlier = set(_children(os.getpid()))
    monkeypatch.setattr(threading.Thread, "start", interrupted_before_the_managers_start)
    previous = signal.signal(signal.SIGALRM, still_stopping)
    try:
        signal.setitimer(signal.ITIMER_REAL, 20)
        with pytest.raises(KeyboardInterrupt):
            ingest_paths([job], tmp_path / "out", jobs=2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    monkeypatch.undo()
    left = [pid for pid in _children(os.getpid()) if pid not in earlier]
    assert (_running(left), list((tmp_path / "out" / STAGING_DIR).iterdir())) == ([], [])


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stop_whose_exception_python_swallowed_still_stops_the_ingest_at_its_next_file(
        signum: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The handlers raise wherever the main thread is; inside a __del__ or a
    # weakref callback Python only reports the exception, and the ingest
    # went on to the end (1 SIGTERM in 12 at one moment of a 2-rank ingest).
    files = [write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank)) for rank in range(3)]
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))

    with terminated_on_sigterm():
        SignalledInDel(signum)
        with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt):
            ingest_paths(files, tmp_path / "out", jobs=1)
    ranks = [row["rank"] for row in rows_in(tmp_path / "out", "runs")]  # the file it was on when it looked
    assert (ranks, list((tmp_path / "out" / STAGING_DIR).iterdir()), capsys.readouterr().err) == ([0], [], "")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # as they were


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stop_calls_on_stop_before_its_exception(signum: int) -> None:
    # `gpulens query` interrupts its DuckDB query there: where the exception
    # is swallowed in one of DuckDB's Python callbacks, the query still ends.
    calls: list[str] = []
    with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt):
        with terminated_on_sigterm(on_stop=lambda: calls.append("interrupted")):
            signal_self(signum)
    assert calls == ["interrupted"]


def test_a_worker_whose_parent_ended_kills_itself_where_the_kernel_cannot() -> None:
    # Off Linux there is no PR_SET_PDEATHSIG: a thread watches the parent and,
    # once it is gone, does what the kernel would: a SIGKILL.
    code = ("import sys, time; sys.platform = 'darwin'\n"
            "from gpulens.collector.ingest import pool\n"
            "pool._end_with_parent(parent=-1)  # not this process' parent: it has 'ended'\n"
            "time.sleep(10)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert (child.returncode, child.stderr) == (-signal.SIGKILL, "")
