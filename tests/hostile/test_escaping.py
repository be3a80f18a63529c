"""Markup, links, scripts and terminal escapes in names show as text: in the
HTML report (in headless Chromium: no dialog, no request leaving the
machine, no live link), in the Markdown report and in `query --format table`."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import write_telemetry, write_trace_table  # noqa: E402

CHROMIUM = os.environ.get("GPULENS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

TRACKER = "http://127.0.0.1:9"
KERNELS = [
    f'<a href="{TRACKER}/link">gemm</a>',
    f"<img src={TRACKER}/i.png onerror=alert(1)>",
    f"![t]({TRACKER}/track.png)",
    "<script>alert(2)</script>",
    "\x1b[31mred\x07\x00 split\nrow",
]
RUN = "<svg onload=alert(3)>"
HOST = "<img src=x onerror=alert(4)>"


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("payloads") / "data"
    rows = 200
    write_trace_table(root, "r", "kernels", {
        "run": [RUN] * rows, "rank": [0] * rows, "name": [KERNELS[k % len(KERNELS)] for k in range(rows)],
        "category": ["compute"] * rows, "kind": ["kernel"] * rows, "stream": [7] * rows, "device": [0] * rows,
        "start_ns": [k * 1_000 for k in range(rows)], "end_ns": [k * 1_000 + 600 for k in range(rows)],
        "dur_ns": [600] * rows}, source="rank0")
    write_telemetry(root, HOST, [{"ts": 1_767_225_600_000_000 + k * 1_000_000, "gpu_index": 0, "power_w": 300.0 + k}
                                 for k in range(5)])
    return root


def _report(dataset: Path, output: Path) -> int:
    from gpulens.dashboard import cli

    with contextlib.redirect_stderr(io.StringIO()):
        return cli.main(["report", str(dataset), "-o", str(output)])


def test_escaping_markdown_report_shows_payloads_as_text(hostile_dataset, tmp_path):
    out = tmp_path / "r.md"
    _report(hostile_dataset, out)
    text = out.read_text()
    assert [marker for marker in ("<script", "<img", "<svg", "<a href", "![", "](http", "\x1b", "\x07", "\x00")
            if marker in text] == []
    assert "&lt;svg onload=alert\\(3\\)&gt;" in text or "`<svg onload=alert(3)>`" in text


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (set GPULENS_CHROMIUM)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.slow
def test_escaping_html_report_runs_no_script_and_fetches_nothing(hostile_dataset, browser, tmp_path):
    out = tmp_path / "r.html"
    _report(hostile_dataset, out)
    url = out.as_uri()
    page = browser.new_context().new_page()  # online: a fetch would be tried, and seen
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(url, wait_until="load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('div.plotly-graph-div')].every(d => d.querySelector('svg.main-svg'))",
        timeout=30_000)
    page.mouse.move(400, 400)
    page.wait_for_timeout(300)
    live_links = page.locator(f'a[href^="{TRACKER}"]').count()
    shown = page.content()
    assert (dialogs, [r for r in requests if not r.startswith(("file:", "data:", "blob:"))], live_links) == ([], [], 0)
    assert "&lt;svg onload=alert(3)&gt;" in shown


def test_escaping_query_table_shows_terminal_escapes_visibly(hostile_dataset, capsys):
    from gpulens.dashboard import cli

    code = cli.main(["query", str(hostile_dataset), "select distinct name from kernels where name like '%red%'"])
    out = capsys.readouterr().out
    assert (code, out.splitlines()[2]) == (0, "\\x1b[31mred\\x07\\x00 split\\nrow")
