"""The trace watcher: files that appear in pieces are ingested once complete, once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from gpulens.collector.ingest.watch import TraceWatcher


def kineto_text(rank: int = 0) -> str:
    events = [{"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": 10.0 + i, "dur": 0.5,
               "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(3)]
    return json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events,
                       "baseTimeNanoseconds": 1_700_000_000_000_000_000}, indent=1)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def append(path: Path, text: str, mtime_ns: int) -> None:
    with open(path, "a") as handle:
        handle.write(text)
    # Explicit, distinct mtimes: the test must not depend on the clock's resolution.
    os.utime(path, ns=(mtime_ns, mtime_ns))


def kernel_rows(out: Path) -> int:
    return sum(pq.read_table(p).num_rows for p in (out / "traces").glob("run=*/kernels/*.parquet"))


def test_watch_file_written_in_pieces_ingested_once_complete(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    watcher = TraceWatcher(folder, out, give_up_after_s=60.0, clock=FakeClock())
    trace = folder / "host_1.123.pt.trace.json"
    text = kineto_text()
    half = len(text) // 2
    append(trace, text[:half], 1_000)
    polls = [watcher.poll()]  # first seen: not known to be stable yet
    polls.append(watcher.poll())  # stable, but half a document: retried quietly
    append(trace, text[half:], 2_000)
    polls.append(watcher.poll())  # changed since the last poll
    done = watcher.poll()  # stable and complete
    assert (polls, [Path(r.path).name for r in done.results], done.failures) == (
        [None, None, None], [trace.name], [])


def test_watch_never_ingests_the_same_file_twice(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "rank0.json").write_text(kineto_text())
    watcher = TraceWatcher(folder, out, clock=FakeClock())
    reports = [watcher.poll() for _ in range(4)]
    assert ([r is not None for r in reports], kernel_rows(out)) == ([False, True, False, False], 3)


def test_watch_run_named_after_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "llama-70b"
    folder.mkdir()
    (folder / "rank0.json").write_text(kineto_text())
    watcher = TraceWatcher(folder, tmp_path / "out", clock=FakeClock())
    watcher.poll()
    assert watcher.poll().runs == ["llama-70b"]


def test_watch_reports_unparseable_file_after_it_stays_broken(tmp_path: Path) -> None:
    folder, clock = tmp_path / "handler", FakeClock()
    folder.mkdir()
    broken = folder / "rank0.json"
    append(broken, kineto_text()[:100], 1_000)
    watcher = TraceWatcher(folder, tmp_path / "out", give_up_after_s=30.0, clock=clock)
    watcher.poll()
    quiet = watcher.poll()  # first failure: maybe still being written
    clock.now_s = 31.0
    report = watcher.poll()
    assert (quiet, [f.path for f in report.failures], watcher.poll()) == (None, [str(broken)], None)


def test_watch_stopped_while_retrying_a_broken_file_says_so(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    broken = folder / "host_1.123.pt.trace.json"
    append(broken, '{"traceEvents": [{"ph": "X"', 1_000)
    watcher = TraceWatcher(folder, out, give_up_after_s=60.0, clock=FakeClock())
    watcher.poll()
    watcher.poll()  # stable and unparseable: retried until 60 s have passed
    assert watcher.pending() == [f"{broken}: invalid JSON: Input data was truncated (not ingested: it was still "
                                 "being retried when the watcher stopped)"]


def test_watch_stopped_before_a_new_file_was_stable_says_so(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "rank0.json").write_text(kineto_text())
    watcher = TraceWatcher(folder, out, clock=FakeClock())
    watcher.poll()  # seen once: not known to be complete yet
    assert watcher.pending() == [f"{folder / 'rank0.json'}: not ingested: still being written, or new, when the "
                                 "watcher stopped"]


def test_watch_stopped_after_ingesting_everything_has_nothing_pending(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "rank0.json").write_text(kineto_text())
    watcher = TraceWatcher(folder, out, clock=FakeClock())
    watcher.poll()
    assert watcher.poll().results and watcher.pending() == []


def test_watch_ignores_files_that_are_not_traces(tmp_path: Path) -> None:
    folder = tmp_path / "handler"
    folder.mkdir()
    (folder / "notes.md").write_text("hello")
    (folder / "metrics.csv").write_text("a,b\n1,2\n")
    (folder / "job.out").write_text("epoch 1 loss 2.3\n")
    watcher = TraceWatcher(folder, tmp_path / "out", clock=FakeClock())
    watcher.poll()
    report = watcher.poll()
    assert (sorted(Path(s.path).name for s in report.skipped), report.results, report.failures, watcher.poll()) == (
        ["job.out", "metrics.csv"], [], [], None)


def test_watch_reports_a_profiler_named_file_that_is_no_trace(tmp_path: Path) -> None:
    folder, clock = tmp_path / "handler", FakeClock()
    folder.mkdir()
    bad = folder / "host_1.123.pt.trace.json"
    append(bad, "this is not json\n", 1_000)
    watcher = TraceWatcher(folder, tmp_path / "out", give_up_after_s=30.0, clock=clock)
    watcher.poll()
    watcher.poll()
    clock.now_s = 31.0
    report = watcher.poll()
    assert [(f.path, f.problem.startswith("unknown trace format")) for f in report.failures] == [(str(bad), True)]


def test_watch_restarted_does_not_ingest_again_what_the_dataset_holds(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    trace = folder / "host_1.123.pt.trace.json"
    append(trace, kineto_text(), 1_000)  # written long before it was ingested
    first = TraceWatcher(folder, out, clock=FakeClock())
    first.poll()
    assert len(first.poll().results) == 1
    restarted = TraceWatcher(folder, out, clock=FakeClock())
    assert (restarted.poll(), restarted.poll()) == (None, None)


def test_watch_restarted_ingests_a_file_changed_since(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    trace = folder / "host_1.123.pt.trace.json"
    append(trace, kineto_text(), 1_000)
    first = TraceWatcher(folder, out, clock=FakeClock())
    first.poll()
    first.poll()
    later_ns = (os.stat(next(out.glob("traces/run=*/runs/*.parquet"))).st_mtime_ns + 10**9)
    os.utime(trace, ns=(later_ns, later_ns))
    restarted = TraceWatcher(folder, out, clock=FakeClock())
    restarted.poll()
    assert [Path(r.path).name for r in restarted.poll().results] == [trace.name]


def test_watch_ingests_a_rocprof_process_as_one_source(tmp_path: Path) -> None:
    from tests.test_ingest_rocprof import HIP_API_TRACE, KERNEL_TRACE

    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "4242_kernel_trace.csv").write_text(KERNEL_TRACE)
    (folder / "4242_hip_api_trace.csv").write_text(HIP_API_TRACE)
    watcher = TraceWatcher(folder, out, clock=FakeClock())
    watcher.poll()
    report = watcher.poll()
    kernels = pq.read_table(next(out.glob("traces/run=*/kernels/*.parquet")), columns=["correlation_id", "launch_call_name"])
    assert ([r.path for r in report.results], sorted(kernels.to_pylist(), key=lambda k: k["correlation_id"])) == (
        [str(folder.resolve() / "4242_*")],
        [{"correlation_id": 101, "launch_call_name": "hipMemsetAsync"},
         {"correlation_id": 103, "launch_call_name": "hipExtLaunchKernel"},
         {"correlation_id": 105, "launch_call_name": "hipLaunchKernel"}])


def test_watch_restarted_does_not_ingest_again_a_rocprof_process_the_dataset_holds(tmp_path: Path) -> None:
    from tests.test_ingest_rocprof import HIP_API_TRACE, KERNEL_TRACE

    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    append(folder / "4242_kernel_trace.csv", KERNEL_TRACE, 1_000)
    append(folder / "4242_hip_api_trace.csv", HIP_API_TRACE, 1_000)
    first = TraceWatcher(folder, out, clock=FakeClock())
    first.poll()
    assert len(first.poll().results) == 1
    restarted = TraceWatcher(folder, out, clock=FakeClock())
    assert (restarted.poll(), restarted.poll()) == (None, None)


def test_watch_ingests_a_growing_file_again_only_after_reingest_after_s(tmp_path: Path) -> None:
    folder, out, clock = tmp_path / "handler", tmp_path / "out", FakeClock()
    folder.mkdir()
    log = folder / "rank0.json"
    append(log, kineto_text(), 1_000)
    watcher = TraceWatcher(folder, out, reingest_after_s=30.0, clock=clock)
    watcher.poll()
    first = watcher.poll()
    log.write_text(kineto_text(rank=0).replace("gemm_2", "gemm_2b"))
    os.utime(log, ns=(2_000, 2_000))  # grown and paused again
    clock.now_s = 10.0
    watcher.poll()
    too_soon = watcher.poll()
    clock.now_s = 31.0
    again = watcher.poll()
    assert (len(first.results), too_soon, [Path(r.path).name for r in again.results], watcher.poll()) == (
        1, None, ["rank0.json"], None)


def test_watch_reports_ranks_that_two_files_share(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "job1.json").write_text(kineto_text(rank=0))
    watcher = TraceWatcher(folder, out, run="job", clock=FakeClock())
    watcher.poll()
    first = watcher.poll()
    (folder / "job2.json").write_text(kineto_text(rank=0))
    watcher.poll()
    second = watcher.poll()
    assert (first.shared_ranks, [(s.rank, [Path(p).name for p in s.paths]) for s in second.shared_ranks]) == (
        [], [(0, ["job1.json", "job2.json"])])


def test_watch_missing_folder_is_quiet(tmp_path: Path) -> None:
    assert TraceWatcher(tmp_path / "not-yet", tmp_path / "out").poll() is None


def test_collect_logs_each_trace_its_watcher_ingests(tmp_path: Path, caplog) -> None:
    import logging
    import time

    from gpulens.collector.cli import _WatcherThread

    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    trace = folder / "rank1.json"
    trace.write_text(kineto_text(rank=1))
    thread = _WatcherThread(TraceWatcher(folder, out, run="job"), period_s=0.02)
    with caplog.at_level(logging.INFO, logger="gpulens.watch"):
        thread.start()
        deadline = time.monotonic() + 10
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.02)
        thread.stop.set()
        thread.join(timeout=10)
    assert [r.getMessage() for r in caplog.records] == [f"ingested {trace}: kineto, run job, rank 1, 3 kernels"]


def test_collect_without_telemetry_only_ingests_traces(tmp_path: Path) -> None:
    from gpulens.collector.cli import _watch_only

    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    (folder / "host_1.123.pt.trace.json").write_text(kineto_text())
    _watch_only(folder, out, "job", duration_s=1.0, period_s=0.02)
    assert (kernel_rows(out), sorted(p.name for p in out.iterdir() if not p.name.startswith("."))) == (3, ["traces"])


def test_collect_run_name_without_a_trace_folder_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from gpulens.dashboard import cli

    code = cli.main(["collect", "--backend", "sim", "--run", "job", "--out", str(tmp_path / "out")])
    assert (code, capsys.readouterr().err) == (
        2, "gpulens: error: --run names the traces of --watch-traces; give --watch-traces DIR too\n")


def test_watch_writes_many_traces_ready_at_once_in_groups_and_a_later_one_alone(tmp_path: Path) -> None:
    folder, out = tmp_path / "handler", tmp_path / "out"
    folder.mkdir()
    for rank in range(16):  # a job's ranks, each writing its trace at the end of a profiling cycle
        (folder / f"host_{rank}.123.pt.trace.json").write_text(kineto_text(rank))
    watcher = TraceWatcher(folder, out, clock=FakeClock())
    watcher.poll()
    report = watcher.poll()
    (folder / "host_16.456.pt.trace.json").write_text(kineto_text(16))
    watcher.poll()
    later = watcher.poll()
    kernels = sorted(path.name[:7] for path in (out / "traces" / "run=handler" / "kernels").glob("*.parquet"))
    assert (len(report.results), report.failures, len(later.results)) == (16, [], 1)
    assert (kernels.count("merged-"), len(kernels), kernel_rows(out)) == (4, 5, 17 * 3)
