"""The dashboard's thin data layer: which dataset, one connection, cached results.

Pages never open files or write SQL: they call `analysis` functions through
`cached(dataset, func, ...)`, which runs them on one long-lived DuckDB
connection per dataset (reopened only when a table gets its first file)
and keeps the result keyed on the dataset's path, a fingerprint of its
files (relative names, sizes, mtimes), the function and its arguments. A
collector that flushes a file changes the fingerprint, so the next run
computes afresh; nothing else does. `warm_up` fills the cache in the
background so that moving between pages is quick on big datasets.

The dataset is `GPULENS_DATASET` (set by `gpulens dashboard DATASET`), else
the built-in sample (`default_dataset`): `sample_traces/demo-training`
(written by `gpulens demo`), else one built once into the user's cache
folder. `build_sample_dataset` makes a small one for tests.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

from gpulens.dashboard.escape import markdown_code

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_DATASET = REPO_ROOT / "sample_traces" / "demo-training"
DATASET_ENV = "GPULENS_DATASET"
# Trace times of write_training_traces: base 2026-01-01T00:00Z + 1 h.
SAMPLE_TRACE_START_NS = 1_767_225_600_000_000_000 + 3_600_000_000_000
SAMPLE_HOST = "sim-node-00"


# --- which dataset ---------------------------------------------------------------


def default_dataset() -> Path:
    """The built-in sample dataset, built on first use if `gpulens demo` has not.

    `<repo>/sample_traces/demo-training` where it exists; else a copy in the
    cache folder, made by `collector.demo.make_demo` where that is
    importable, else from the simulated node and simulated traces here.
    """
    if _has_parquet(DEMO_DATASET):
        return DEMO_DATASET
    cache = _cache_dir() / "demo-training"
    if _has_parquet(cache):
        return cache
    with _file_lock(_cache_dir() / ".demo-build.lock"):
        if not _has_parquet(cache):
            staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=_cache_dir()))
            try:
                _build_demo(staging)
                if cache.exists():
                    shutil.rmtree(cache)
                os.replace(staging, cache)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return cache


def _build_demo(out: Path) -> None:
    try:
        from gpulens.collector.demo import make_demo
    except ImportError:
        build_sample_dataset(out)
        return
    make_demo(out, seed=0, force=True)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(base) / "gpulens"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir()) / f"gpulens-{os.getuid()}"
        folder.mkdir(parents=True, exist_ok=True)
    return folder


class _file_lock:
    """An exclusive lock on a file, so two processes do not build at once."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        import fcntl

        self._handle = open(self.path, "a")
        fcntl.flock(self._handle, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def _has_parquet(folder: Path) -> bool:
    return folder.is_dir() and next(folder.rglob("*.parquet"), None) is not None


# --- the built-in sample -----------------------------------------------------------


def build_sample_dataset(
    out: Path,
    seed: int = 0,
    steps: int = 10,
    kernels_per_step: int = 200,
    ranks: int = 8,
    straggler_rank: int | None = 5,
    telemetry_s: float = 600.0,
    interval_s: float = 1.0,
    dense_s: float = 2.0,
    dense_interval_s: float = 0.01,
    jobs: int | None = 1,
    balanced_run: str | None = None,
) -> Path:
    """A training node's dataset: sim telemetry around an 8-rank sim trace.

    Telemetry of `ranks` simulated H100s on host `sim-node-00` every
    `interval_s` for `telemetry_s` seconds, densely (`dense_interval_s`)
    for `dense_s` seconds around the traces so that step energy can be
    joined, and the traces of a `steps`-step job with a straggler, ingested
    as run `training`; with `balanced_run`, the same job without the
    straggler as a second run of that name (to compare). Deterministic for
    a seed.
    """
    from gpulens.collector import hardware
    from gpulens.collector.errors import TraceError
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.sim import SimBackend
    from gpulens.collector.sim_trace import write_training_traces
    from gpulens.collector.writer import DatasetWriter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    backend = SimBackend(gpus=ranks, profile="training", seed=seed)
    writer = DatasetWriter(out, SAMPLE_HOST)
    start_ns = SAMPLE_TRACE_START_NS - int(telemetry_s / 2 * 1e9)
    dense_from = SAMPLE_TRACE_START_NS - int(dense_s / 2 * 1e9)
    ticks = sorted(
        {start_ns + int(k * interval_s * 1e9) for k in range(int(telemetry_s / interval_s))}
        | {dense_from + int(k * dense_interval_s * 1e9) for k in range(int(dense_s / dense_interval_s))}
    )
    spec_peaks = {}
    for device in backend.discover():
        spec = hardware.lookup_gpu(device.model)
        spec_peaks[device.gpu_index] = {
            "link_peak_bytes_per_s": spec.link_peak_bytes_per_s if spec else None,
            "pcie_peak_bytes_per_s": hardware.pcie_peak_bytes_per_s(device.pcie_gen, device.pcie_width),
        }
        writer.add("devices", {**asdict(device), **spec_peaks[device.gpu_index], "ts": start_ns // 1000})
    writer.add("events", {"ts": start_ns // 1000, "kind": "collector_start", "detail": f"backend=sim gpus={ranks}"})
    limiting: dict[int, bool] = {}
    devices = backend.discover()
    for ts_ns in ticks:
        for device in devices:
            sample = backend.sample(device.gpu_index, ts_ns, slow=False)
            row = sample.values
            capped = "sw_power_cap" in (row.get("throttle_reasons") or [])
            if capped != limiting.get(device.gpu_index, False):
                writer.add("events", {
                    "ts": ts_ns // 1000, "gpu_index": device.gpu_index, "gpu_uuid": device.gpu_uuid,
                    "kind": "throttle_start" if capped else "throttle_stop", "detail": "sw_power_cap",
                })
                limiting[device.gpu_index] = capped
            row.update(ts=ts_ns // 1000, gpu_index=device.gpu_index, gpu_uuid=device.gpu_uuid, vendor=device.vendor)
            writer.add("telemetry", row)
    writer.add("events", {"ts": ticks[-1] // 1000, "kind": "collector_stop", "detail": f"ticks={len(ticks)}"})
    writer.flush()
    raw = Path(tempfile.mkdtemp(prefix="gpulens-sample-traces-"))
    runs = {"training": straggler_rank, **({balanced_run: None} if balanced_run else {})}
    try:
        for run, straggler in runs.items():
            paths = write_training_traces(raw / run, ranks=ranks, steps=steps, seed=seed, straggler_rank=straggler,
                                          kernels_per_step=kernels_per_step)
            report = ingest_paths(paths, out, run=run, jobs=jobs)
            if report.failures:
                raise TraceError(report.failures[0].path, report.failures[0].problem)
    finally:
        shutil.rmtree(raw, ignore_errors=True)
    return out


# --- fingerprint, connection, cache -------------------------------------------------


def scan(root: Path) -> tuple[str, tuple[str, ...]]:
    """The dataset's fingerprint (a digest of its Parquet files' relative
    names, sizes and mtimes) and the tables that have files."""
    digest = hashlib.blake2b(digest_size=12)
    tables: set[str] = set()
    if root.is_dir():
        entries = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.endswith(".parquet"):
                    path = os.path.join(dirpath, name)
                    try:
                        stat = os.stat(path)
                    except FileNotFoundError:
                        continue
                    relative = os.path.relpath(path, root)
                    entries.append(f"{relative}|{stat.st_size}|{stat.st_mtime_ns}")
                    parts = Path(relative).parts
                    tables.add(parts[2] if parts[0] == "traces" and len(parts) > 3 else parts[0])
        for entry in sorted(entries):
            digest.update(entry.encode())
    return digest.hexdigest(), tuple(sorted(tables))


def fingerprint(root: Path) -> str:
    return scan(root)[0]


@dataclass(frozen=True)
class Dataset:
    """A dataset as the dashboard sees it: its path, the state of its files
    (fingerprint) and which tables have files."""

    path: str
    fingerprint: str
    tables: tuple[str, ...] = ()


# DuckDB settings for a long-lived dashboard connection: keep Parquet footers
# and local file blocks in memory, so a view over a day of per-minute files
# is not re-read at every bind.
CONNECTION_SETTINGS = ("set parquet_metadata_cache = true", "set cache_local_files = true")


class Connection:
    """One DuckDB connection with the dataset's views, used under a lock."""

    def __init__(self, path: str) -> None:
        from gpulens.analysis.dataset import open_dataset

        con = duckdb.connect()
        for setting in CONNECTION_SETTINGS:
            try:
                con.execute(setting)
            except duckdb.Error:  # an older DuckDB without the setting
                pass
        self.con = open_dataset(path, connection=con, analyses_on_demand=True)
        self.lock = threading.Lock()

    def run(self, func: Callable[..., Any], *args: Any, fingerprint: str = "", **kwargs: Any) -> Any:
        """`func(con, ...)`; analyses it runs twice on one state of the
        dataset's files (a table and a finding built on it) run once."""
        from gpulens.analysis.registry import remember_results

        with self.lock:
            remember_results(self.con, fingerprint)
            return func(self.con, *args, **kwargs)

    def __del__(self) -> None:
        try:
            from gpulens.analysis.registry import forget_results

            forget_results(self.con)
        except Exception:  # at interpreter exit the import machinery is gone
            pass


_CONNECTIONS: dict[tuple[str, str], Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()
_MAX_CONNECTIONS = 4


def connection(dataset: Dataset) -> Connection:
    """The connection for the dataset's set of tables. The views read their
    tables through globs, so files a collector adds are seen without
    reopening (which binds every analysis view again, seconds on a day of
    files); a table whose first file appears needs a new connection (its
    view was an empty stand-in), and the older one is dropped."""
    key = (dataset.path, dataset.tables)
    with _CONNECTIONS_LOCK:
        found = _CONNECTIONS.get(key)
        if found is None:
            for stale in [k for k in _CONNECTIONS if k[0] == dataset.path]:
                del _CONNECTIONS[stale]
            while len(_CONNECTIONS) >= _MAX_CONNECTIONS:
                del _CONNECTIONS[next(iter(_CONNECTIONS))]
            found = _CONNECTIONS[key] = Connection(dataset.path)
        return found


def current(path: Path) -> Dataset:
    """The dataset at `path` as it is now (its fingerprint taken afresh)."""
    digest, tables = scan(Path(path).expanduser())
    return Dataset(str(Path(path).expanduser().resolve()), digest, tables)


EMPTY_FINGERPRINT = hashlib.blake2b(digest_size=12).hexdigest()


def problem(dataset: Dataset) -> str | None:
    """Why the dataset cannot be shown (one line of Markdown, its path in a
    code span), or None."""
    root = Path(dataset.path)
    if not root.exists():
        return f"{markdown_code(root)}: no such dataset directory."
    if not root.is_dir():
        return f"{markdown_code(root)}: not a directory (a dataset is a folder of Parquet tables)."
    if dataset.fingerprint == EMPTY_FINGERPRINT:
        return (f"{markdown_code(root)}: the dataset holds no Parquet files yet. Collect telemetry into it "
                "(`gpulens collect --out DIR`) or ingest traces (`gpulens ingest TRACES --out DIR`).")
    return None


def call(dataset: Dataset, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`func(con, *args, **kwargs)` on the dataset's connection, uncached."""
    return connection(dataset).run(func, *args, fingerprint=dataset.fingerprint, **kwargs)


def perfetto_trace(dataset: Dataset, run: str, steps: tuple[int, int] | None) -> bytes:
    """`gpulens export perfetto` of every rank of `run` over profiler
    `steps` (None: the whole run), without findings: the gzipped file's
    bytes, for the kernels page's download button."""
    from gpulens.analysis.perfetto import export_perfetto

    with tempfile.TemporaryDirectory(prefix="gpulens-perfetto-") as folder:
        path = Path(folder) / "trace.json.gz"
        call(dataset, export_perfetto, run, path, steps=steps)
        return path.read_bytes()


class ResultCache:
    """Results by key, least recently used out; one computation per key at a
    time (a second asker waits for the first and reads its result). Safe
    from any thread, so a background warm-up can fill it."""

    def __init__(self, max_entries: int = 512) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Any, Any] = OrderedDict()
        self._inflight: dict[Any, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key]
                waiting = self._inflight.get(key)
                if waiting is None:
                    self._inflight[key] = threading.Event()
                    break
            waiting.wait()  # then read its result, or compute it here if it failed
        try:
            value = compute()
            with self._lock:
                self._entries[key] = value
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key).set()

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._entries

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


RESULTS = ResultCache()
_activity = {"busy": 0, "last": 0.0}
_activity_lock = threading.Lock()


def cache_key(dataset: Dataset, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (dataset.path, dataset.fingerprint, _function_name(func), args, tuple(sorted(kwargs.items())))


def cached(dataset: Dataset, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`func(con, *args, **kwargs)`, cached on (path, fingerprint, function, arguments).

    `func` must be a module-level function of `analysis` (the dashboard's
    only source of figures). The key holds the dataset's fingerprint, so a
    file added or replaced gives fresh results and nothing else does.
    Callers must not modify what they get.
    """
    with busy():
        return _cached(dataset, func, args, kwargs)


def _cached(dataset: Dataset, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`cached` without marking the dashboard busy: the warm-up's own queries."""
    key = cache_key(dataset, func, args, kwargs)
    return RESULTS.get(key, lambda: call(dataset, func, *args, **kwargs))


@contextlib.contextmanager
def busy() -> Iterator[None]:
    """Mark the dashboard busy while a query runs (`cached`) or a page's
    script does (app.py: its figures and their serialisation too, not only
    its queries): the warm-up waits until nothing is, then `idle_s` more,
    while the browser draws what it was sent."""
    with _activity_lock:
        _activity["busy"] += 1
    try:
        yield
    finally:
        with _activity_lock:
            _activity["busy"] -= 1
            _activity["last"] = time.monotonic()


_warmed: set[tuple[str, tuple[str, ...]]] = set()
_warm_up_threads: list[threading.Thread] = []
_stopping = threading.Event()
# (function, its arguments or a callable returning them (None: skip), its
# keywords or a callable returning them)
WarmUpCall = tuple[Callable[..., Any], "tuple[Any, ...] | Callable[[], tuple[Any, ...] | None]",
                   "dict[str, Any] | Callable[[], dict[str, Any]]"]


def reload(dataset: Dataset) -> None:
    """Forget every cached result, and that `dataset` was warmed, so the next
    `warm_up` of it computes every page's first view again ("Reload data")."""
    RESULTS.clear()
    with _activity_lock:
        _warmed.discard((dataset.path, dataset.tables))


def warm_up(dataset: Dataset, calls: list[WarmUpCall], idle_s: float = 1.5) -> threading.Thread | None:
    """Compute `calls` into the cache in a background thread, once per
    dataset and set of tables, each only while no page is asking for
    anything (a page's own queries go first). Failures are left for the
    page that needs the result to report. Returns the thread, or None
    where this dataset was warmed already."""
    key = (dataset.path, dataset.tables)
    with _activity_lock:
        if key in _warmed:
            return None
        _warmed.add(key)

    def run() -> None:
        for func, args, kwargs in calls:
            while not _stopping.is_set():
                with _activity_lock:
                    idle = _activity["busy"] == 0 and time.monotonic() - _activity["last"] >= idle_s
                if idle:
                    break
                time.sleep(0.1)
            if _stopping.is_set():
                return
            try:
                if callable(args):  # arguments that depend on results warmed before
                    args = args()
                    if args is None:
                        continue
                if callable(kwargs):
                    kwargs = kwargs()
                # Not `cached`: its busy mark would make the next call wait idle_s
                # too, pacing the warm-up at one result per idle_s (40 s for 25).
                _cached(dataset, func, args, kwargs)
            except Exception:  # noqa: BLE001 - the page that needs it shows the error
                continue

    thread = threading.Thread(target=run, name="gpulens-warm-up", daemon=True)
    _warm_up_threads.append(thread)
    thread.start()
    return thread


@atexit.register
def _stop_warm_up() -> None:
    """At exit: stop warming up, interrupt a query in progress, let the thread end."""
    _stopping.set()
    with _CONNECTIONS_LOCK:
        connections = list(_CONNECTIONS.values())
    for conn in connections:
        try:
            conn.con.interrupt()
        except duckdb.Error:
            pass
    for thread in _warm_up_threads:
        thread.join(timeout=2)


def _function_name(func: Callable[..., Any]) -> str:
    name = f"{func.__module__}.{func.__qualname__}"
    if not func.__module__.startswith("gpulens.analysis.") or _resolve(name) is not func:
        raise ValueError(f"{name}: the dashboard calls module-level analysis functions only")
    return name


def _resolve(name: str) -> Callable[..., Any]:
    module_name, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)
