"""Every malformed input of `corpus.py`, ingested beside a good file: a
refused one gives one line naming it and leaves exactly the good file's
rows; an accepted one (an odd value) keeps both. Many inputs run in this
process through the library (`ingest_paths`); a few through the command.
The figures go to `results.json` beside this file (docs/reliability.md)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpulens.collector.ingest.batch import ingest_paths

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import corpus  # noqa: E402
from hostile_figures import record  # noqa: E402

# About a minute on two busy cores: CI runs it, a quick local run may not.
pytestmark = pytest.mark.slow

_TRIED: dict[str, str] = {}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    cases, good = corpus(tmp_path_factory.mktemp("corpus"))
    yield {case.name: case for case in cases}, good
    if len(_TRIED) == len(cases):  # every case ran: the figures are whole
        record(malformed_inputs_tried=len(_TRIED), malformed_inputs_accepted=sum(v == "accepted" for v in _TRIED.values()),
               malformed_inputs_refused_with_one_line=sum(v == "refused" for v in _TRIED.values()),
               malformed_inputs_peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def _kernel_rows(out: Path) -> int:
    return sum(pq.read_metadata(path).num_rows for path in out.glob("traces/*/kernels/*.parquet"))


def _names() -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return [case.name for case in corpus(Path(folder))[0]]


@pytest.mark.parametrize("name", _names())
def test_hostile_input_costs_at_most_its_own_file(name, inputs, tmp_path):
    cases, good = inputs
    case = cases[name]
    alone = ingest_paths([good["kineto"]], tmp_path / "alone", run="r", jobs=1)
    report = ingest_paths([good["kineto"], case.path], tmp_path / "data", run="r", jobs=1)
    failures = [failure.message for failure in report.failures]
    if case.accepted:
        assert (failures, len(report.results)) == ([], 2)
        assert _kernel_rows(tmp_path / "data") >= 2 * _kernel_rows(tmp_path / "alone") - 1
    else:
        assert len(failures) == 1 and failures[0].startswith(f"{case.path}: ") and "\n" not in failures[0]
        assert "unexpected error" not in failures[0]
        assert (len(report.results), _kernel_rows(tmp_path / "data")) == (1, _kernel_rows(tmp_path / "alone"))
    assert alone.ok
    _TRIED[name] = "accepted" if case.accepted else "refused"


@pytest.mark.parametrize("name", ["kineto_truncated", "nsys_garbage", "kineto_deep_nesting"])
def test_hostile_input_through_the_command(name, inputs, tmp_path):
    cases, good = inputs
    case = cases[name]
    done = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(good["kineto"]), str(case.path),
                           "--out", str(tmp_path / "data"), "--run", "r", "--quiet"],
                          capture_output=True, text=True, timeout=120, cwd=HERE.parents[1])
    errors = [line for line in done.stderr.splitlines() if line.startswith(f"gpulens: error: {case.path}: ")]
    assert (done.returncode != 0, len(errors)) == (not case.accepted, 0 if case.accepted else 1)
