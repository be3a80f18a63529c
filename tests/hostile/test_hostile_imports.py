"""Every malformed telemetry file of `import_corpus.py`, through `gpulens
import` into a dataset that already holds one good import: a refused file
gives one line naming it (and its line, where the case says), exit 1, and
leaves every file of the dataset byte for byte as it was; an accepted one
exits 0 with exactly its counting warning and adds its rows. Names with
markup come out escaped in `gpulens report`'s HTML. The figures go to
`results.json` beside this file (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

from gpulens.dashboard import cli

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hostile_figures import record  # noqa: E402
from import_corpus import DATA, IMG, LINK, SCRIPT, import_corpus  # noqa: E402

_TRIED: dict[str, str] = {}


def _names() -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        return [case.name for case in import_corpus(Path(folder))]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    found = {case.name: case for case in import_corpus(tmp_path_factory.mktemp("imports"))}
    yield found
    if len(_TRIED) == len(found):  # every case ran: the figures are whole
        record(import_inputs_tried=len(_TRIED), import_inputs_accepted=sum(v == "accepted" for v in _TRIED.values()),
               import_inputs_refused_with_one_line=sum(v == "refused" for v in _TRIED.values()))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """A dataset holding one good import, copied for each case."""
    root = tmp_path_factory.mktemp("seeded") / "data"
    assert _import(str(DATA / "nvidia-smi-2gpu.csv"), root)[0] == 0
    return root


def _import(source: str, out: Path, *args: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["import", source, "--out", str(out), *args])
    return code, err.getvalue().splitlines()


def _checksums(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _rows(root: Path) -> int:
    return duckdb.connect().execute(f"select count(*) from read_parquet('{root}/telemetry/**/*.parquet')").fetchone()[0]


@pytest.mark.parametrize("name", _names())
def test_hostile_import_refused_with_one_line_or_counted(name, cases, seeded, tmp_path):
    case = cases[name]
    out = tmp_path / "data"
    shutil.copytree(seeded, out)
    before, rows_before = _checksums(out), _rows(out)
    code, lines = _import(str(case.path), out, *case.args)
    if case.refused:
        where = f"{case.path}:{case.line}: " if case.line else f"{case.path}: "
        assert (code, len(lines), lines[0].startswith(f"gpulens: error: {where}")) == (1, 1, True), lines
        assert _checksums(out) == before
    else:
        warnings = [line for line in lines if line.startswith("gpulens: warning: ")]
        expected = [f"gpulens: warning: {case.path}: {case.warning}"] if case.warning else []
        assert (code, warnings, lines[-1].startswith("gpulens: imported "), len(lines)) == (
            0, expected, True, len(expected) + 1)
        assert _rows(out) - rows_before == case.rows
    _TRIED[name] = "refused" if case.refused else "accepted"


def test_hostile_import_markup_in_names_is_escaped_in_the_html_report(cases, tmp_path):
    out = tmp_path / "data"
    for name in ("nvidia_smi_markup_in_names", "scrape_markup_in_labels", "json_rocm_markup_in_names"):
        assert _import(str(cases[name].path), out, *cases[name].args)[0] == 0
    report = tmp_path / "r.html"
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["report", str(out), "-o", str(report)]) == 0
    html = report.read_text()
    # The Markdown link is harmless text in HTML; as a link it would not be.
    assert ([payload for payload in (SCRIPT, IMG, 'href="javascript:', "href='javascript:") if payload in html],
            "&lt;img src=x onerror=alert(2)&gt;" in html, LINK in html) == ([], True, True)


# --- a live Prometheus that answers badly --------------------------------------------------

_SERIES = '{"metric": {"gpu": "0", "Hostname": "n"}, "values": [[1714564800, %s]]}'
PROMETHEUS_ANSWERS = {
    "a_list": (b"[1, 2]", "the answer is not a Prometheus API object"),
    "deep_nesting": (b"[" * 100_000 + b"]" * 100_000, "the answer is JSON nested too deep"),
    "not_json": (b"<html>502 Bad Gateway</html>", "cannot query it"),
    "data_a_list": (b'{"status": "success", "data": []}', "not a range answer (list)"),
    "result_not_series": (b'{"status": "success", "data": {"resultType": "matrix", "result": [1]}}',
                          "a range answer whose result is not a list of series"),
    "value_not_a_number": (('{"status": "success", "data": {"resultType": "matrix", "result": [%s]}}'
                            % (_SERIES % '"abc"')).encode(), "'abc' in the answer is not a number"),
}


@pytest.fixture(scope="module")
def hostile_prometheus():
    """A loopback server answering every query with the body named by the
    path's first part (`http://127.0.0.1:PORT/a_list/api/v1/query_range`)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server name)
            body = PROMETHEUS_ANSWERS[self.path.split("/")[1]][0]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("answer", list(PROMETHEUS_ANSWERS))
def test_hostile_prometheus_answer_is_one_line_and_writes_nothing(answer, hostile_prometheus, seeded, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(seeded, out)
    before = _checksums(out)
    url = f"{hostile_prometheus}/{answer}"
    code, lines = _import(url, out, "--since", "2024-05-01T12:00:00Z", "--until", "2024-05-01T12:01:00Z")
    assert (code, len(lines), lines[0].startswith(f"gpulens: error: {url}: "),
            PROMETHEUS_ANSWERS[answer][1] in lines[0]) == (1, 1, True, True), lines
    assert _checksums(out) == before
