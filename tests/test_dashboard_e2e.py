"""End to end: `gpulens dashboard` served for real and driven in Chromium.

Starts the command on a small sample dataset, opens every page in Debian's
`chromium` through Playwright, waits for its charts, checks that no error
box or exception shows, and saves a screenshot of each page in the test's
output folder. Skips (with the reason) where /usr/bin/chromium or the
playwright package is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# url path -> the chart titles (a prefix of each) the page must draw.
PAGES: dict[str, list[str]] = {
    "": ["Findings"],
    "telemetry": ["Board power per GPU", "Throttling"],
    "power": ["Power percentiles per GPU", "Node coincident power", "Power-cap what-if"],
    "interconnect": ["NVLink throughput per GPU", "NVLink throughput over time"],
    "kernels": ["GPU time breakdown per rank", "Kernel launch and queuing time", "Top 15 kernels", "Kernels per stream"],
    "communication": ["Collective time by op", "Bus bandwidth by message size", "Arrival skew"],
    "compare": ["Kernel time per rank-step", "Bus bandwidth:"],
    "live": ["Board power, last 5 min"],
}


@pytest.fixture(scope="module")
def sample_dataset(tmp_path_factory) -> Path:
    from gpulens.dashboard.data import build_sample_dataset

    return build_sample_dataset(tmp_path_factory.mktemp("dashboard_e2e") / "data", ranks=4, straggler_rank=2, steps=5, kernels_per_step=60,
                                telemetry_s=180, dense_s=1.0, dense_interval_s=0.05, balanced_run="balanced")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _gpulens_dashboard_command(dataset: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "gpulens.dashboard.cli", "dashboard", str(dataset), "--port", str(port)]


@contextlib.contextmanager
def _serving(command: list[str], port: int, log: Path, env: dict[str, str] | None = None):
    """Run a dashboard server command listening on `port`; its URL once it answers, killed after."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=Path(__file__).resolve().parents[1], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{' '.join(command[2:5])} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def server(sample_dataset, tmp_path_factory):
    log = tmp_path_factory.mktemp("dashboard_server") / "server.log"
    port = free_port()
    with _serving(_gpulens_dashboard_command(sample_dataset, port), port, log) as url:
        yield url


def test_dashboard_binds_localhost_only(server):
    assert server.startswith("http://127.0.0.1:")
    port = int(server.rsplit(":", 1)[1])
    addresses = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(1)
            assert sock.connect_ex((address, port)) != 0, f"the dashboard answers on {address}"


def test_every_page_draws_its_charts_without_errors(browser, server, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # What the pages log, and every address they fetch: an offline machine
    # reaches only the dashboard's own server (no font CDN for an icon).
    console: list[str] = []
    elsewhere: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("request", lambda request: None if request.url.startswith((server, "data:", "blob:"))
            else elsewhere.append(request.url))
    try:
        page.goto(server, wait_until="domcontentloaded")
        page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=30_000)
        for path, titles in PAGES.items():
            if path:  # through the menu, as a person would (no reload)
                page.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
            for title in titles:
                page.get_by_text(title, exact=False).first.wait_for(timeout=30_000)
            _wait_until_rendered(page)
            assert page.locator('[data-testid="stException"]').count() == 0, f"/{path}: an exception shows"
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0, f"/{path}: an error box shows"
            if path:
                assert page.locator(".js-plotly-plot").count() >= len(titles), f"/{path}: charts missing"
            assert page.locator('[data-testid="stAppDeployButton"]').count() == 0, f"/{path}: a Deploy button shows"
            _screenshot(page, tmp_path / f"{path or 'overview'}.png")
    finally:
        page.close()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{p or 'overview'}.png" for p in PAGES)
    assert [line for line in console if "Invalid color" in line or "plotly" in line.lower()] == []
    assert elsewhere == []


def _wait_until_rendered(page, timeout_s: float = 30) -> None:
    """Until the script has finished (no running indicator) and no element is still loading."""
    deadline = time.monotonic() + timeout_s
    busy = '[data-testid="stStatusWidget"], [data-testid="stSkeleton"]'
    while time.monotonic() < deadline:
        if page.locator(busy).count() == 0:
            page.wait_for_timeout(300)
            if page.locator(busy).count() == 0:
                return
        page.wait_for_timeout(200)


def _screenshot(page, path: Path) -> None:
    """The whole page: Streamlit scrolls inside its main block, so the viewport grows to fit it."""
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 50, 12_000)})
    _wait_until_rendered(page, timeout_s=5)
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": 1400, "height": 1000})


def test_a_first_visit_to_a_pages_own_address_under_streamlit_run_gets_the_apps_menu(browser, sample_dataset, tmp_path):
    # Streamlit runs a page file alone, and lists every file of dashboard/app_pages/ (common.py too) in the
    # sidebar, when a server's first visitor opens a page's address, until something calls st.navigation.
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.port", str(port),
               "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "GPULENS_DATASET": str(sample_dataset), "GPULENS_WARM_UP": "0"}
    with _serving(command, port, tmp_path / "server.log", env) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/kernels", wait_until="domcontentloaded")
            page.get_by_text("Kernels per stream", exact=False).first.wait_for(timeout=60_000)
            _wait_until_rendered(page)
            menu = page.locator('[data-testid="stSidebarNav"] a')
            # Each link's text is its icon's name, then its title.
            assert [link.inner_text().split("\n")[-1].strip() for link in menu.all()] == [
                "Overview", "Telemetry", "Power headroom", "Interconnect", "Kernels and launches", "Communication",
                "Compare", "Live"]
            assert page.get_by_role("button", name="Reload data").count() == 1  # app.py's sidebar
        finally:
            page.close()
