"""`gpulens collect`'s one-line status (collector.status_line)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from gpulens.collector.status_line import StatusLine, status_text

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_status_text_names_samples_gpus_last_flush_and_skipped_ticks() -> None:
    assert status_text(12_345, 8, 12.4, 1) == (
        "gpulens collect: 12,345 samples · 8 GPUs · last flush 12 s ago · 1 tick skipped")


def test_status_text_before_the_first_flush_says_so() -> None:
    assert status_text(8, 1, None, 0) == "gpulens collect: 8 samples · 1 GPU · not flushed yet · 0 ticks skipped"


def test_status_line_redraws_in_place_at_most_once_a_second() -> None:
    out, now = io.StringIO(), [100.0]
    line = StatusLine(out, clock_s=lambda: now[0])
    line.show("a")
    now[0] = 100.5
    line.show("b")  # too soon: not drawn
    now[0] = 101.0
    line.show("c")
    line.close()
    assert out.getvalue() == "\ra\x1b[K\rc\x1b[K\n"


def test_status_line_never_drawn_writes_nothing_at_close() -> None:
    out = io.StringIO()
    StatusLine(out).close()
    assert out.getvalue() == ""


def test_collect_not_on_a_terminal_writes_no_status_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", "2",
         "--interval", "0.1", "--duration", "0.5", "--out", str(tmp_path / "data")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "samples ·" not in done.stderr


def test_collect_on_a_terminal_draws_the_status_line(tmp_path: Path) -> None:
    import os
    import pty

    primary, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpulens.dashboard.cli", "collect", "--backend", "sim", "--sim-gpus", "2",
         "--interval", "0.1", "--duration", "0.5", "--flush-every", "0.2", "--out", str(tmp_path / "data")],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    written = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        written += chunk
    assert process.wait(timeout=120) == 0
    os.close(primary)
    text = written.decode()
    assert "\rgpulens collect: 2 samples · 2 GPUs · " in text
    assert text.count("\x1b[K") >= 1 and "ticks skipped" in text
