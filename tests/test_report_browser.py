"""The HTML report in a real browser: it opens offline, draws every chart, logs no errors."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_traces"
CHROMIUM = os.environ.get("GPULENS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (set GPULENS_CHROMIUM)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.parametrize("sample", ["demo-training", "demo-inference"])
def test_report_html_opens_offline_without_console_errors(browser, sample: str, tmp_path: Path) -> None:
    dataset = SAMPLES / sample
    if not dataset.is_dir():
        pytest.skip(f"sample_traces/{sample} is not present")
    from gpulens.dashboard.report.build import build_report
    from gpulens.dashboard.report.html import render_html

    page_path = tmp_path / "report.html"
    page_path.write_text(render_html(build_report(dataset)))
    url = page_path.as_uri()

    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    # Plotly logs what it cannot draw as warnings ("Invalid color specifier: Array(8)").
    warnings: list[str] = []
    page.on("console", lambda message: warnings.append(message.text) if message.type == "warning" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(url, wait_until="load")
    charts = page.locator("div.plotly-graph-div")
    assert charts.count() > 0
    # Every chart drawn: Plotly adds its SVG to each div.
    page.wait_for_function(
        "() => [...document.querySelectorAll('div.plotly-graph-div')].every(d => d.querySelector('svg.main-svg'))",
        timeout=30_000,
    )
    assert errors == []
    assert warnings == []
    assert requests == [url]
    assert page.locator("#findings .finding").count() >= 1
    assert page.locator(".problem").count() == 0
    context.close()
