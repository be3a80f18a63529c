"""`collect --watch-traces` ingests in a process of its own, so that trace
ingest never delays sampling.

A trace parsed in the collector's own process (a thread) competes with the
sampler for the interpreter and for memory: a 1 MB gzip bomb dropped into
the watched folder stopped sampling for 6.8 s. So the collector starts
`gpulens collect --no-telemetry --watch-traces DIR` as a child:

- in a process group of its own (a Ctrl-C meant for the collector's group
  reaches it through the collector, which stops it),
- at a lower priority (`nice` WATCH_NICE), so the sampler gets the CPU first,
- with its address space capped (`RLIMIT_AS`, `watch_memory_bytes`), so a
  trace that needs more fails alone and the collector keeps its memory,
- ended by the kernel if the collector dies, even by SIGKILL.

The child knows it is one by `WATCH_PARENT_VARIABLE`, which holds the
collector's pid; run by hand, `collect --no-telemetry` sets none of this.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from gpulens.collector.ingest.memory_bound import bound_bytes, limit_address_space

WATCH_NICE = 10
WATCH_PARENT_VARIABLE = "GPULENS_WATCH_PARENT_PID"
WATCH_MEMORY_VARIABLE = "GPULENS_WATCH_MEMORY_BYTES"
WATCH_MIN_MEMORY_BYTES = 2 << 30
STOP_WAIT_S = 30.0


def watch_memory_bytes() -> int | None:
    """The watcher's address-space bound: GPULENS_WATCH_MEMORY_BYTES, else a
    quarter of the machine's memory, at least WATCH_MIN_MEMORY_BYTES."""
    return bound_bytes(WATCH_MEMORY_VARIABLE, Fraction(1, 4), WATCH_MIN_MEMORY_BYTES)


def start(directory: Path, out: Path, run: str | None, host: str | None) -> subprocess.Popen:
    """The watcher process for `collect --watch-traces DIR` (see above)."""
    command = [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--no-telemetry",
               "--watch-traces", str(directory), "--out", str(out)]
    if run is not None:
        command += ["--run", run]
    if host is not None:
        command += ["--host", host]
    return subprocess.Popen(command, process_group=0, env={**os.environ, WATCH_PARENT_VARIABLE: str(os.getpid())})


def stop(process: subprocess.Popen) -> None:
    """Stop the watcher as SIGTERM stops `collect --no-telemetry`: it ends
    its current file and reports what is pending."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def settle_as_child() -> None:
    """In the watcher started by `start`: lower its priority, cap its memory
    and end it with the collector. Nothing where it was started otherwise."""
    parent = os.environ.get(WATCH_PARENT_VARIABLE, "")
    if not parent.isdigit():
        return
    from gpulens.collector.ingest.pool import _end_with_parent

    os.nice(WATCH_NICE)
    limit_address_space(watch_memory_bytes())
    _end_with_parent(int(parent))
