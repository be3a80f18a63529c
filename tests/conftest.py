"""Shared fixtures: paths to the real traces in ../shared (optional)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"


def bench_module(name: str):
    """A script of bench/ as the benches import it: by its bare name."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A TCP port free on the loopback address now (the OS's pick), for a
    server a test starts there."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """`../shared/traces`; tests using it skip where the folder is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return SHARED_TRACES



@pytest.fixture(autouse=True)
def _sigint_handler_restored():
    """A test must not leave its Ctrl-C handler to the next: pyspark's
    SparkContext installs its own (cancel the jobs) and keeps it after stop,
    and the ingest tests count on Python's KeyboardInterrupt."""
    import signal

    yield
    # Python's own: pyspark installs its handler while a module-scoped
    # session starts, before a function-scoped fixture could save another.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def node_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `python` of a virtual environment holding gpulens with its core
    dependencies alone, as `pip install gpulens` puts it on a node
    (bench/node_site.py)."""
    return bench_module("node_site").build_node_venv(tmp_path_factory.mktemp("node-venv"))


def modules_loaded_by(command: list[str], names: tuple[str, ...], python: Path | None = None) -> list[str]:
    """The modules of `names` (each, or a submodule of it) that `gpulens
    COMMAND...` loads, run in a fresh interpreter to its end: `python`'s
    where given (`node_python`: as on a node, where this environment's
    extras, pandas among them, would load modules a node never does), else
    this environment's."""
    import ast
    import subprocess
    import sys

    code = ("import sys; from gpulens.dashboard.cli import main; "
            f"assert main({command!r}) == 0; "
            f"print(sorted(m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in {names!r})))")
    # Not from the repository's root, whose gpulens/ folder holds only the package's top.
    cwd = REPO_ROOT if python is None else python.parent
    done = subprocess.run([str(python or sys.executable), "-c", code], cwd=cwd, capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def write_trace_table(root: Path, run: str, table: str, columns: dict, source: str = "test") -> Path:
    """Write one trace table of `run` into the dataset at `root`, as ingest
    lays it out, then derive the source's columns again (collector.derive),
    as ingest does from all of a source's tables at once."""
    import pyarrow.parquet as pq

    from gpulens.collector.derive import DERIVED_TABLES, derive_trace_tables
    from gpulens.collector.ingest.base import build_table

    run_folder = root / "traces" / f"run={run}"
    path = run_folder / table / f"{source}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(build_table(table, columns), path)
    inputs = {name: pq.read_table(run_folder / name / f"{source}.parquet")
              for name in ("kernels", "api_calls", "annotations")
              if (run_folder / name / f"{source}.parquet").exists()}
    for name, derived in derive_trace_tables(inputs).items():
        if name in ("kernels", "annotations", *DERIVED_TABLES) and derived.num_rows:
            (run_folder / name).mkdir(exist_ok=True)
            pq.write_table(derived, run_folder / name / f"{source}.parquet")
    return path


def write_telemetry(root: Path, host: str, rows: list[dict]) -> None:
    """Write telemetry rows (ts in epoch µs, gpu_index, metrics) for `host`."""
    from gpulens.collector.writer import DatasetWriter

    writer = DatasetWriter(root, host)
    for row in rows:
        writer.add("telemetry", {"gpu_uuid": f"GPU-{row['gpu_index']}", "vendor": "sim", **row})
    writer.flush()


def update_sqlite(path: Path, sql: str) -> None:
    """Run one statement on a SQLite file and commit it (a test's edit of a
    built nsys or rocpd database)."""
    import sqlite3

    connection = sqlite3.connect(path)
    try:
        connection.execute(sql)
        connection.commit()
    finally:
        connection.close()


def write_graph_replay_trace(path: Path, kernels: int = 40) -> Path:
    """A Kineto trace of one CUDA-graph replay as the PyTorch profiler
    records it: a 20 µs cudaGraphLaunch (correlation 9) and its `kernels`
    kernels of 2 µs, 3 µs apart from 25 µs after the call's start, each
    with the call's correlation id."""
    import json

    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 100.0,
               "dur": 20.0, "args": {"correlation": 9, "External id": 4}}]
    events += [{"ph": "X", "cat": "kernel", "name": f"node_{i}", "pid": 0, "tid": 7, "ts": 125.0 + 3 * i, "dur": 2.0,
                "args": {"device": 0, "stream": 7, "correlation": 9, "External id": 4}} for i in range(kernels)]
    trace = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
             "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}}
    path.write_text(json.dumps(trace))
    return path


DATA_LOADER_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DATA_LOADER_WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def write_data_loader_trace(path: Path, rank: int, fetch_us: float, loader: str = DATA_LOADER_SINGLE,
                            steps: int = 4) -> Path:
    """A training loop as the PyTorch profiler records it: each 10 ms
    ProfilerStep#k opens with a fetch of `fetch_us` µs (`next()` on the
    DataLoader), then launches one 5 ms kernel 20 µs after the fetch."""
    import json

    events = []
    for k in range(1, steps + 1):
        start = 1_000.0 + (k - 1) * 10_000
        launch_at = start + fetch_us
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": start,
             "dur": 10_000.0},
            {"ph": "X", "cat": "user_annotation", "name": loader, "pid": 1, "tid": 1, "ts": start, "dur": fetch_us},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch_at,
             "dur": 10.0, "args": {"correlation": k, "External id": k}},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7,
             "ts": launch_at + 20.0, "dur": 5_000.0, "args": {"device": 0, "stream": 7, "correlation": k}},
        ]
    trace = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
             "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"}}
    path.write_text(json.dumps(trace))
    return path


def write_sync_loop_trace(path: Path, rank: int, queued_behind: bool = False, steps: int = 4) -> Path:
    """A training loop that reads its loss with `.item()` each step, as the
    PyTorch profiler records it. Each 10 ms ProfilerStep#k (from S) launches
    a 5 ms kernel at S+50 µs (it runs S+70 to S+5070); then
    aten::_local_scalar_dense waits in cudaStreamSynchronize from S+210 to
    S+5080, so the GPU runs dry under the wait and idles until the next
    step's kernel at S+10070. With `queued_behind`, a second kernel launched
    at S+60 runs S+5070 to S+9990: the wait ends with work still queued."""
    import json

    events = []
    for k in range(1, steps + 1):
        start = 1_000.0 + (k - 1) * 10_000
        kernels = [(50.0, 70.0, 5_000.0)] + ([(60.0, 5_070.0, 4_920.0)] if queued_behind else [])
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 10_000.0})
        for i, (launch_at, kernel_at, dur) in enumerate(kernels):
            correlation = 10 * k + i
            events += [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": start + launch_at, "dur": 8.0, "args": {"correlation": correlation, "External id": correlation}},
                {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7,
                 "ts": start + kernel_at, "dur": dur, "args": {"device": 0, "stream": 7, "correlation": correlation}},
            ]
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "pid": 1, "tid": 1, "ts": start + 200.0,
             "dur": 4_890.0, "args": {"External id": 10 * k + 5}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": start + 210.0,
             "dur": 4_870.0, "args": {"correlation": 10 * k + 5, "External id": 10 * k + 5}},
        ]
    trace = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
             "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"}}
    path.write_text(json.dumps(trace))
    return path


def signal_self(signum: int) -> None:
    """Send `signum` to this process and run Python code until its handler
    has run: what the handler raises is raised here."""
    os.kill(os.getpid(), signum)
    for _ in range(1000):  # the handler runs at one of these steps
        pass


class SignalledInDel:
    """`SignalledInDel(signum)`, made and dropped at once, sends `signum` from
    its __del__: there Python only reports what the handler raises, as it
    does in a weakref callback or in DuckDB's own Python callbacks."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal_self(self.signum)
