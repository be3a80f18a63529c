"""The collector daemon end to end: files, cadence, failures, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from gpulens.analysis.dataset import open_dataset
from gpulens.collector.backend import DeviceInfo, DeviceSample, GpuLost
from gpulens.collector.daemon import CollectOptions, Collector
from gpulens.collector.errors import DatasetError, UsageError
from gpulens.collector.sim import SimBackend

REPO_ROOT = Path(__file__).resolve().parents[1]


class ScriptedBackend:
    """Two GPUs; GPU 1 is lost on the ticks listed, GPU 0 may be slow."""

    name = "scripted"

    def __init__(self, lost_ticks: set[int] = frozenset(), slow_sample_s: float = 0.0) -> None:
        self.lost_ticks = lost_ticks
        self.slow_sample_s = slow_sample_s
        self.calls: list[tuple[int, bool]] = []
        self._tick = -1

    def discover(self):
        return [DeviceInfo(gpu_index=i, gpu_uuid=f"GPU-{i}", vendor="nvidia", model="NVIDIA H100 80GB HBM3") for i in (0, 1)]

    def sample(self, gpu_index, ts_ns, slow):
        if gpu_index == 0:
            self._tick += 1
            time.sleep(self.slow_sample_s)
        self.calls.append((gpu_index, slow))
        if gpu_index == 1 and self._tick in self.lost_ticks:
            raise GpuLost(1, "GPU is lost")
        return DeviceSample(values={"power_w": 100.0 + gpu_index})

    def poll_events(self):
        return []

    def close(self):
        pass


def _collect(tmp_path: Path, backend, **options) -> Collector:
    defaults = dict(out=tmp_path, interval_s=0.02, flush_every_s=60, slow_every_s=0.1, duration_s=0.5, host="node-a")
    defaults.update(options)
    collector = Collector(backend, CollectOptions(**defaults))
    collector.run()
    return collector


def test_collect_writes_partitioned_tables_duckdb_can_read(tmp_path):
    _collect(tmp_path, SimBackend(gpus=4), interval_s=0.05)
    con = open_dataset(tmp_path)
    gpus, hosts, rows = con.execute("select count(distinct gpu_index), min(host), count(*) from telemetry").fetchone()
    assert (gpus, hosts) == (4, "node-a") and rows >= 4
    assert list((tmp_path / "telemetry").glob("host=node-a/date=*/part-*.parquet"))
    assert con.execute("select count(*) from devices").fetchone()[0] == 4
    kinds = {k for (k,) in con.execute("select kind from events").fetchall()}
    assert {"collector_start", "collector_stop"} <= kinds


def test_all_gpus_of_a_tick_share_one_timestamp_on_the_interval_grid(tmp_path):
    _collect(tmp_path, SimBackend(gpus=3), interval_s=0.05)
    con = open_dataset(tmp_path)
    per_ts = con.execute("select count(*) from telemetry group by ts").fetchall()
    assert {n for (n,) in per_ts} == {3}
    off_grid = con.execute("select count(*) from telemetry where epoch_us(ts) % 50000 <> 0").fetchone()[0]
    assert off_grid == 0


def test_lost_gpu_becomes_an_event_and_the_others_keep_sampling(tmp_path):
    backend = ScriptedBackend(lost_ticks={2, 3, 4, 5, 6, 7, 8, 9, 10})
    _collect(tmp_path, backend, duration_s=0.6)
    con = open_dataset(tmp_path)
    events = con.execute("select kind, gpu_index from events where kind like 'gpu_%' order by ts").fetchall()
    assert events[0] == ("gpu_lost", 1)
    per_gpu = dict(con.execute("select gpu_index, count(*) from telemetry group by 1").fetchall())
    assert per_gpu[0] > per_gpu[1]


def test_lost_gpu_is_retried_with_back_off_not_every_tick(tmp_path):
    backend = ScriptedBackend(lost_ticks=set(range(2, 1000)))
    _collect(tmp_path, backend, duration_s=0.5)
    gpu1_calls = sum(1 for gpu, _ in backend.calls if gpu == 1)
    assert gpu1_calls == 3  # ticks 0, 1, the loss at tick 2; the first retry is 1 s later


def test_recovered_gpu_is_an_event(tmp_path):
    backend = ScriptedBackend(lost_ticks={1})
    _collect(tmp_path, backend, interval_s=0.1, duration_s=1.6)
    con = open_dataset(tmp_path)
    kinds = [k for (k,) in con.execute("select kind from events where gpu_index = 1 order by ts").fetchall()]
    assert kinds == ["gpu_lost", "gpu_recovered"]


def test_overrun_ticks_are_skipped_and_counted_not_replayed(tmp_path):
    backend = ScriptedBackend(slow_sample_s=0.07)  # each tick takes 3.5 intervals
    collector = _collect(tmp_path, backend, interval_s=0.02, duration_s=0.5)
    con = open_dataset(tmp_path)
    skipped = con.execute("select sum(value) from events where kind = 'ticks_skipped'").fetchone()[0]
    assert skipped == collector.summary.ticks_skipped >= 3
    assert collector.summary.ticks <= 0.5 / 0.07 + 1


def test_slow_cadence_is_a_fraction_of_ticks(tmp_path):
    backend = ScriptedBackend()
    _collect(tmp_path, backend, interval_s=0.02, slow_every_s=0.1, duration_s=0.5)
    slow_flags = [slow for gpu, slow in backend.calls if gpu == 0]
    assert 2 <= sum(slow_flags) <= len(slow_flags) // 3


def test_power_cap_start_is_an_event(tmp_path):
    _collect(tmp_path, SimBackend(gpus=2, capped_gpu=1, step_s=0.4), interval_s=0.05, duration_s=1.0)
    con = open_dataset(tmp_path)
    rows = con.execute("select gpu_index, detail from events where kind = 'throttle_start'").fetchall()
    assert rows and all(row == (1, "sw_power_cap") for row in rows)


def test_bad_interval_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--interval"):
        Collector(SimBackend(), CollectOptions(out=tmp_path, interval_s=0))


def test_an_interval_shorter_than_the_drivers_refresh_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"^--interval must be at least 0\.01 s, got 1e-09: "):
        CollectOptions(out=tmp_path, interval_s=1e-9).validate()


def test_the_shortest_interval_is_accepted(tmp_path):
    CollectOptions(out=tmp_path, interval_s=0.01, slow_every_s=10.0).validate()


@pytest.mark.parametrize("option, field", [("--flush-every", "flush_every_s"), ("--slow-every", "slow_every_s"),
                                           ("--duration", "duration_s")])
@pytest.mark.parametrize("seconds", [float("nan"), float("inf")])
def test_seconds_that_are_not_finite_are_a_usage_error_naming_the_option(tmp_path, option, field, seconds):
    with pytest.raises(UsageError, match=f"^{option} must be "):
        CollectOptions(out=tmp_path, **{field: seconds}).validate()


def test_collect_for_an_infinite_duration_is_one_error_line_and_exit_2(tmp_path, capsys):
    from gpulens.dashboard import cli

    code = cli.main(["collect", "--backend", "sim", "--out", str(tmp_path / "data"), "--duration", "inf"])
    assert (code, capsys.readouterr().err) == (2, "gpulens: error: --duration must be a finite number of seconds, 0 or more, got inf\n")
    assert not (tmp_path / "data").exists()


def test_collect_watching_traces_only_refuses_a_duration_of_nan(tmp_path, capsys):
    from gpulens.dashboard import cli

    code = cli.main(["collect", "--no-telemetry", "--watch-traces", str(tmp_path / "traces"),
                     "--out", str(tmp_path / "data"), "--duration", "nan"])
    assert (code, capsys.readouterr().err) == (2, "gpulens: error: --duration must be a finite number of seconds, 0 or more, got nan\n")


# --- the real command, as a process ------------------------------------------

def _start(out: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", "4",
               "--out", str(out), "--host", "node-a", *extra]
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _telemetry_files(out: Path) -> list[Path]:
    return sorted((out / "telemetry").glob("**/*.parquet"))


@pytest.mark.slow
def test_sigterm_flushes_buffered_rows_and_exits_zero(tmp_path):
    process = _start(tmp_path, "--interval", "0.05", "--flush-every", "3600")
    _wait_for(lambda: list((tmp_path / "events").glob("**/*.parquet")))  # started
    time.sleep(0.5)
    assert _telemetry_files(tmp_path) == []  # nothing flushed yet
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    con = open_dataset(tmp_path)
    assert con.execute("select count(*) from telemetry").fetchone()[0] >= 4
    assert con.execute("select count(*) from events where kind = 'collector_stop'").fetchone()[0] == 1


@pytest.mark.slow
def test_kill_9_leaves_only_readable_files(tmp_path):
    process = _start(tmp_path, "--interval", "0.02", "--flush-every", "0.1")
    _wait_for(lambda: len(_telemetry_files(tmp_path)) >= 3)
    process.kill()
    process.wait(timeout=30)
    files = sorted(tmp_path.glob("**/*.parquet"))
    assert files
    for path in files:
        pq.read_table(path)  # raises on a torn file
    assert duckdb.connect().execute(f"select count(*) from read_parquet('{tmp_path}/telemetry/**/*.parquet')").fetchone()[0] > 0


@pytest.mark.slow
def test_unwritable_out_is_one_error_line_and_nonzero_exit(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    process = _start(blocker / "data", "--duration", "1")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpulens: error: ") and str(blocker / "data") in lines[0]


@pytest.mark.slow
def test_auto_backend_without_a_gpu_suggests_sim(tmp_path):
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--out", str(tmp_path), "--duration", "1"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LD_LIBRARY_PATH": ""})
    if result.returncode == 0:
        pytest.skip("this machine has a GPU backend")
    assert result.returncode != 0
    assert "--backend sim" in result.stderr.strip().splitlines()[-1]


class AmdThrottledBackend(ScriptedBackend):
    def sample(self, gpu_index, ts_ns, slow):
        sample = super().sample(gpu_index, ts_ns, slow)
        sample.values["throttle_reasons"] = ["power"] if gpu_index == 0 else []
        return sample


def test_amd_power_throttle_is_an_event(tmp_path):
    _collect(tmp_path, AmdThrottledBackend(), duration_s=0.2)
    con = open_dataset(tmp_path)
    assert con.execute("select gpu_index, detail from events where kind = 'throttle_start'").fetchall() == [(0, "power")]


def test_a_lease_that_cannot_be_renewed_is_the_same_write_fault_said_once(tmp_path, monkeypatch, caplog):
    # The disk turns read-only between a flush and the lease's renewal: the
    # failing renewal and the flushes failing after it are one fault.
    from gpulens.collector.lease import CollectorLease

    failures = iter([True, True, True])
    renew = CollectorLease.renew

    def read_only_for_three_flushes(lease):
        if next(failures, False):
            raise DatasetError(f"{lease.path}: cannot write the collector lease (Read-only file system)")
        renew(lease)

    monkeypatch.setattr(CollectorLease, "renew", read_only_for_three_flushes)
    _collect(tmp_path, SimBackend(gpus=1), interval_s=0.02, flush_every_s=0.1, duration_s=1.0)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "Read-only file system" in errors[0], errors
    kinds = [k for (k,) in open_dataset(tmp_path).execute("select kind from events order by ts").fetchall()]
    assert kinds.count("write_failed") == 1 and kinds.index("write_failed") < kinds.index("write_recovered")


def test_the_collect_command_loads_neither_pyarrow_parquet_nor_compute(tmp_path: Path, node_python: Path) -> None:
    # A daemon on every node: pyarrow.parquet brings the S3, GCS and Azure
    # filesystems and OpenSSL, pyarrow.compute ~290 wrapped functions, about
    # 10 MB of its RSS for as long as it runs (collector.parquet_io).
    from tests.conftest import modules_loaded_by

    command = ["collect", "--backend", "sim", "--sim-gpus", "2", "--interval", "0.05", "--duration", "0.3",
               "--flush-every", "0.1", "--out", str(tmp_path / "out")]
    names = ("pyarrow.parquet", "pyarrow.fs", "pyarrow._fs", "pyarrow.compute")
    assert modules_loaded_by(command, names, node_python) == []
    assert list((tmp_path / "out" / "telemetry").rglob("*.parquet"))
