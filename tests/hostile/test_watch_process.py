"""`collect --watch-traces` ingests in a child process: its own process
group, a lower priority, a capped address space; a gzip bomb dropped into
the folder costs that file, and the collector goes on sampling."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
from test_ingest_kineto import synthetic_trace  # noqa: E402

pytestmark = pytest.mark.slow  # starts a collector and its watcher


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _watcher_of(pid: int) -> list[int]:
    """The collector's trace watcher: its child running `--no-telemetry`."""
    found = []
    for child in _children(pid):
        try:
            if b"--no-telemetry" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def _wait_for(condition, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    return None


def test_watch_process_ingests_apart_from_the_sampler(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    out = tmp_path / "data"
    collector = subprocess.Popen([sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim",
                                  "--out", str(out), "--interval", "0.1", "--flush-every", "1",
                                  "--watch-traces", str(traces), "--run", "job"],
                                 cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        child = _wait_for(lambda: _watcher_of(collector.pid))
        assert child is not None
        watcher = child[0]
        assert (os.getpgid(watcher) == watcher, os.getpgid(watcher) != os.getpgid(collector.pid)) == (True, True)
        base = os.getpriority(os.PRIO_PROCESS, collector.pid)
        assert _wait_for(lambda: os.getpriority(os.PRIO_PROCESS, watcher) == base + 10)  # once it has started
        limits = Path(f"/proc/{watcher}/limits").read_text()
        address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert address_space.split()[3] != "unlimited"
        (traces / "bomb.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [') + gzip.compress(b" " * (300 << 20), 1)
                                              + gzip.compress(b"]}"))
        (traces / "rank0.json").write_text(json.dumps(synthetic_trace()))
        assert _wait_for(lambda: list(out.glob("traces/run=job/kernels/*.parquet")), 60.0)
    finally:
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=60)
    assert collector.returncode == 0
    assert "bomb.json.gz: decompresses to more than" in err
    assert _wait_for(lambda: not _watcher_of(collector.pid) or collector.poll() is not None)
