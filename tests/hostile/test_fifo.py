"""`gpulens ingest DIR` with a FIFO among the traces: one line names it, the
other files are ingested, nothing waits for a writer that never comes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
from test_ingest_kineto import synthetic_trace  # noqa: E402


def test_ingest_names_a_fifo_and_ingests_the_rest(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank0.json").write_text(json.dumps(synthetic_trace()))
    os.mkfifo(traces / "rank1.json")
    done = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(traces), "--out",
                           str(tmp_path / "data"), "--quiet"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    fifo_lines = [line for line in done.stderr.splitlines() if "rank1.json" in line]
    assert fifo_lines == [f"gpulens: error: {traces / 'rank1.json'}: not a regular file (a FIFO): not read"]
    assert len(list((tmp_path / "data" / "traces").glob("*/kernels/*.parquet"))) == 1
