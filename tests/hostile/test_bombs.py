"""Gzip bombs and memory: a trace may decompress to at most 100 times its
size (at least 256 MiB; `--max-trace-bytes` replaces the limit), and an
ingest worker's address space is capped, so one file costs itself, not the
machine. The peak memory of refusing a bomb goes to results.json."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from hostile_figures import record  # noqa: E402
from test_ingest_kineto import synthetic_trace  # noqa: E402

# Each builds and ingests hundreds of MB: CI runs them, a quick local run may not.
pytestmark = pytest.mark.slow

SPACES_MEMBER = gzip.compress(b" " * (16 << 20), 9)  # 16 MiB of whitespace in ~16 KB


def _bomb(path: Path, members: int) -> Path:
    """A Kineto-looking gzip file of `members` x 16 MiB of whitespace
    (gzip members joined: a valid gzip file)."""
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + SPACES_MEMBER * members + gzip.compress(b"]}"))
    return path


def _ingest(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """Exit code, stderr and the peak memory (MiB) of `gpulens ingest ARGS`."""
    code = ("import resource, subprocess, sys; "
            "done = subprocess.run([sys.executable, '-m', 'gpulens.dashboard.cli', 'ingest', *sys.argv[1:]], "
            "capture_output=True, text=True); "
            "print(done.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); "
            "print(done.stderr, end='')")
    import os

    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT, env={**os.environ, **(env or {})})
    returncode, peak_mib, stderr = done.stdout.split("\n", 2)
    return int(returncode), stderr, int(peak_mib)


def test_bomb_is_refused_with_one_line_and_bounded_memory(tmp_path):
    bomb = _bomb(tmp_path / "bomb.json.gz", 20)  # 320 MiB from ~330 KB
    code, err, peak_mib = _ingest(str(bomb), "--out", str(tmp_path / "data"), "--quiet")
    assert (code, err.splitlines()[0]) == (1, f"gpulens: error: {bomb}: decompresses to more than 268,435,456 bytes "
                                               "(over 100 times its size, or --max-trace-bytes): a gzip bomb? raise the "
                                               "limit with --max-trace-bytes")
    assert peak_mib < 600
    record(bomb_compressed_bytes=bomb.stat().st_size, bomb_decompressed_bytes=20 * (16 << 20), bomb_peak_rss_mib=peak_mib)


def test_bomb_limit_is_replaced_by_max_trace_bytes(tmp_path):
    trace = tmp_path / "rank0.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(synthetic_trace()).encode()))
    code, err, _ = _ingest(str(trace), "--out", str(tmp_path / "data"), "--quiet", "--max-trace-bytes", "1000")
    assert (code, "decompresses to more than 1,000 bytes" in err) == (1, True)


def test_bomb_beyond_the_worker_memory_bound_costs_its_file(tmp_path):
    bomb = _bomb(tmp_path / "bomb.json.gz", 40)  # 640 MiB
    code = ("import sys; from gpulens.collector.ingest.memory_bound import limit_address_space; limit_address_space(600 << 20); "
            "from gpulens.collector.ingest.batch import _parse; "
            "print(_parse(sys.argv[1], 'r', True, (), sys.argv[2]).message)")
    import os

    done = subprocess.run([sys.executable, "-c", code, str(bomb), str(tmp_path / "data")], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT, env={**os.environ, "GPULENS_MAX_TRACE_BYTES": str(2 << 30)})
    assert done.stdout == (f"{bomb}: out of memory: reading it needs more than this ingest process may use "
                           "(GPULENS_INGEST_WORKER_MEMORY_BYTES)\n")
