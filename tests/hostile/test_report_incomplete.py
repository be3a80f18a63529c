"""`gpulens report` over a dataset with a damaged file: the report is
written, says at its top what it left out, and exits 4 with one line."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conftest import write_trace_table

ROWS = 2_000


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """A run of two ranks whose rank-1 kernels file has flipped bytes in its
    data pages and an intact footer (Parquet opens it; reading it fails)."""
    root = tmp_path_factory.mktemp("damaged") / "data"
    for rank in (0, 1):
        write_trace_table(root, "r", "kernels", {
            "run": ["r"] * ROWS, "rank": [rank] * ROWS, "name": [f"gemm_{k % 7}" for k in range(ROWS)],
            "category": ["compute"] * ROWS, "kind": ["kernel"] * ROWS, "stream": [7] * ROWS, "device": [rank] * ROWS,
            "start_ns": [k * 1_000 for k in range(ROWS)], "end_ns": [k * 1_000 + 600 for k in range(ROWS)],
            "dur_ns": [600] * ROWS}, source=f"rank{rank}")
    path = root / "traces" / "run=r" / "kernels" / "rank1.parquet"
    data = bytearray(path.read_bytes())
    footer_start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    for k in range(8, footer_start, 5):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))
    return root


@pytest.fixture(scope="module")
def damaged_report(damaged) -> tuple[int, str, Path]:
    """The exit code, stderr and the Markdown report of `damaged`."""
    import contextlib
    import io

    from gpulens.dashboard import cli

    out = damaged.parent / "r.md"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["report", str(damaged), "-o", str(out)])
    return code, err.getvalue(), out


def _report(capsys, *args: str) -> tuple[int, str, str]:
    from gpulens.dashboard import cli

    code = cli.main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_report_exits_4_when_part_of_its_data_cannot_be_read(damaged_report):
    code, err, out = damaged_report
    last = err.splitlines()[-1]
    assert (code, last.startswith(f"gpulens: error: {out}: report written, but incomplete: "), out.exists()) == (4, True, True)


def test_report_names_the_damaged_file_on_stderr(damaged_report):
    code, err, out = damaged_report
    assert f"(first: {out.parent / 'data' / 'traces' / 'run=r' / 'kernels' / 'rank1.parquet'}: unreadable (" in err


def test_report_says_it_is_incomplete_at_the_top_of_the_document(damaged_report):
    top = damaged_report[2].read_text().split("## ")[0]  # before the first section heading
    assert ("**Incomplete report:**" in top, "rank1.parquet: unreadable" in top) == (True, True)


def test_report_of_a_sound_dataset_exits_0(tmp_path, capsys):
    root = tmp_path / "data"
    write_trace_table(root, "r", "kernels", {
        "run": ["r"], "rank": [0], "name": ["gemm"], "category": ["compute"], "kind": ["kernel"],
        "start_ns": [0], "end_ns": [50], "dur_ns": [50]}, source="rank0")
    code, _, err = _report(capsys, str(root), "-o", str(tmp_path / "r.md"))
    assert (code, "incomplete" in err) == (0, False)


def test_report_help_names_exit_code_4(capsys):
    assert "4 written but incomplete" in " ".join(_report(capsys, "--help")[1].split())
