"""`gpulens report -o`: where the report goes, what it never replaces, and bad baselines."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SignalledInDel, signal_self
from test_report import INFERENCE, TRAINING, _one_line_error, gpulens

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    """One rank's Kineto trace, copied where a test may lose it."""
    if not TRAINING.is_dir():
        pytest.skip("sample_traces/demo-training is not present")
    source = sorted((TRAINING / "raw" / "kineto").glob("rank-0.*"))[0]
    return Path(shutil.copy(source, tmp_path / "victim.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def inference_json() -> dict:
    """The JSON report of the inference sample, to edit into baselines."""
    from gpulens.dashboard.report.build import build_report
    from gpulens.dashboard.report.jsonout import render_json

    return json.loads(render_json(build_report(INFERENCE)))


# --- an output that is an input ---------------------------------------------------------


def test_report_refuses_to_write_over_its_input_trace(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = trace.read_bytes()
    code, _, err = gpulens("report", str(trace), "-o", str(trace), "--format", "json", capsys=capsys)
    assert code == 2
    assert _one_line_error(err) == f"gpulens: error: {trace}: is an input of this report; choose another -o"
    assert trace.read_bytes() == before


def test_report_refuses_a_link_to_its_input_trace(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = trace.read_bytes()
    link = trace.parent / "report.json"
    link.symlink_to(trace.name)
    code, _, err = gpulens("report", str(trace), "-o", str(link), capsys=capsys)
    assert code == 2
    assert _one_line_error(err) == f"gpulens: error: {link}: is an input of this report; choose another -o"
    assert trace.read_bytes() == before


def test_report_refuses_to_write_over_a_trace_in_its_input_folder(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = trace.read_bytes()
    code, _, err = gpulens("report", str(trace.parent), "-o", str(trace), "--format", "json", capsys=capsys)
    assert code == 2
    assert _one_line_error(err) == (f"gpulens: error: {trace}: is in {trace.parent}, an input of this report; "
                                    "choose another -o")
    assert trace.read_bytes() == before


def test_report_refuses_to_write_over_its_baseline(inference_json: dict, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(inference_json))
    before = baseline.read_bytes()
    code, _, err = gpulens("report", str(INFERENCE), "--compare", str(baseline), "-o", str(baseline), capsys=capsys)
    assert code == 2
    assert _one_line_error(err) == f"gpulens: error: {baseline}: is an input of this report; choose another -o"
    assert baseline.read_bytes() == before


def test_report_refuses_to_write_into_its_input_datasets_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "data"
    shutil.copytree(INFERENCE, dataset)
    output = dataset / "telemetry" / "report.json"
    code, _, err = gpulens("report", str(dataset), "-o", str(output), capsys=capsys)
    assert code == 2
    assert _one_line_error(err) == f"gpulens: error: {output}: is in {dataset}, an input of this report; choose another -o"
    assert not output.exists()


# --- what -o is ---------------------------------------------------------------------------


def test_report_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "reports" / "latest.md"
    target.parent.mkdir()
    target.write_text("old report\n")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    code, _, err = gpulens("report", str(INFERENCE), "-o", str(link), capsys=capsys)
    assert code == 0, err
    assert os.readlink(link) == str(target)
    assert target.read_text().startswith("# gpulens report: sim-infer-00\n")


def test_report_into_a_fifo_writes_into_it_and_leaves_the_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    # A reader already there, so opening the FIFO to write does not wait; the
    # small report fits in the pipe's buffer until it is read.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        code, _, err = gpulens("report", str(INFERENCE), "--format", "md", "-o", str(fifo), capsys=capsys)
        received = os.read(reader, 1 << 16)
    except BlockingIOError:
        received = b""
    finally:
        os.close(reader)
    assert code == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received.startswith(b"# gpulens report: sim-infer-00\n")


def test_report_keeps_the_permission_bits_of_the_file_it_replaces(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "private.md"
    output.write_text("old report\n")
    output.chmod(0o600)
    code, _, err = gpulens("report", str(INFERENCE), "-o", str(output), capsys=capsys)
    assert code == 0, err
    assert stat.S_IMODE(os.stat(output).st_mode) == 0o600
    assert output.read_text().startswith("# gpulens report: sim-infer-00\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_report_to_a_full_stdout_fails_with_one_line() -> None:
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "report", str(INFERENCE), "--format", "md",
                                 "-o", "-"], stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    assert (result.returncode, result.stderr) == (
        1, "gpulens: error: cannot write the report to standard output (No space left on device)\n")


# --- a baseline that is not a report ---------------------------------------------------------


def test_report_compare_names_a_baseline_metric_that_is_not_a_number(inference_json: dict, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(inference_json | {"metrics": inference_json["metrics"] | {"step_time_ns": "abc"}}))
    code, _, err = gpulens("report", str(INFERENCE), "--compare", str(baseline), "-o", str(tmp_path / "r.md"),
                           capsys=capsys)
    assert code == 1
    assert _one_line_error(err) == f"gpulens: error: {baseline}: metrics.step_time_ns is not a number"
    assert not (tmp_path / "r.md").exists()


def test_report_compare_names_a_baseline_finding_that_is_not_an_object(inference_json: dict, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(inference_json | {"findings": [1, 2]}))
    code, _, err = gpulens("report", str(INFERENCE), "--compare", str(baseline), "-o", str(tmp_path / "r.md"),
                           capsys=capsys)
    assert code == 1
    assert _one_line_error(err) == f"gpulens: error: {baseline}: findings[0] is not an object"


def test_report_compare_with_json_that_is_no_report_says_it_is_neither(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "notreport.json"
    baseline.write_text('{"step_time_ns": 1200000}\n')
    code, _, err = gpulens("report", str(INFERENCE), "--compare", str(baseline), "-o", str(tmp_path / "r.md"),
                           capsys=capsys)
    assert code == 1
    assert _one_line_error(err) == (
        f"gpulens: error: {baseline}: neither a gpulens JSON report nor a trace gpulens can read (expected a JSON "
        "report from `gpulens report --format json`, Kineto JSON, Nsight Systems SQLite, a rocprofv3 database, "
        "CSV or JSON, or an NCCL log)")


# --- stopped by SIGTERM -----------------------------------------------------------------


def _sigterm_while_building(monkeypatch: pytest.MonkeyPatch, swallowed: bool) -> None:
    """Have SIGTERM reach the report as it is built: where its exception
    surfaces, or inside a __del__, where Python only reports it (as DuckDB
    swallows it in a callback of its own)."""
    import signal

    from gpulens.dashboard.report import build

    build_report = build.build_report

    def build_then_signalled(*args, **kwargs):
        built = build_report(*args, **kwargs)
        if swallowed:
            SignalledInDel(signal.SIGTERM)
        else:
            signal_self(signal.SIGTERM)
        return built

    monkeypatch.setattr(build, "build_report", build_then_signalled)


@pytest.mark.parametrize("swallowed", [False, True], ids=["raised", "swallowed"])
def test_a_report_stopped_by_sigterm_writes_nothing_and_leaves_no_scratch_folder(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        swallowed: bool) -> None:
    import signal

    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch_root))
    _sigterm_while_building(monkeypatch, swallowed)
    # Where the report left SIGTERM as it found it, the signal must not end pytest.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        code, _, err = gpulens("report", str(trace), "-o", str(tmp_path / "report.json"), capsys=capsys)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, err, (tmp_path / "report.json").exists(), list(scratch_root.iterdir())) == (
        143, "gpulens: terminated\n", False, [])
