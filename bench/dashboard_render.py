"""How long the dashboard's pages take to show, in a real browser.

    python bench/dashboard_render.py DATASET                 # every page, three start-ups
    python bench/dashboard_render.py DATASET --pages overview,kernels

Starts `gpulens dashboard DATASET` on a free port, waits until the server
answers (`/_stcore/health`), opens Chromium (Debian's, through Playwright)
and times each page: from asking for its URL to the page having run its
script to the end (no running indicator, no loading placeholder) with its
title shown, every chart drawn, and then the browser idle (Plotly
finishes some drawing in later tasks). Each page is loaded afresh in a
new tab, in menu order.

Three start-ups, each a fresh server process:
  at once    the browser asks for the first page the moment the server
             answers (the start-up warm-up of dashboard/launch.py still
             running): the worst case for a person;
  settled    the browser asks --settle seconds after the server answers
             (someone opening the link it printed);
  no warm-up with GPULENS_WARM_UP=0: nothing is computed before a page
             asks for it (every page cold).
Then, on a settled server, the way a person moves about: one tab, the
overview opened, then each page by its link in the sidebar (Streamlit
reruns the page over its open connection; nothing is loaded again), timed
from the click to the page having run to the end with its title shown.

Peer, in the same browser: a bare Streamlit app (a title and one Plotly
line of 5,000 points, no data behind it), loaded afresh in a new tab like
the pages above. It is the least any Streamlit page with a chart takes
here, and each page's first load is also printed as a ratio to it.

Target (issue 6): a page with a day of 8-GPU telemetry and a 10-million
kernel run shows in under 3 s. The figures include Chromium's own drawing.
Every figure is also written to bench/results/dashboard_render-<date>.json
(bench/results.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402
from gpulens.dashboard.app_pages.common import PAGES  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
TARGET_S = 3.0
# Running, loading, or an element of the previous run not yet replaced.
_BUSY = '[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-stale="true"]'
_IDLE = "() => new Promise(done => requestIdleCallback(() => done(), {timeout: 10000}))"
_CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]'))
    .every(chart => chart.querySelector('.main-svg') !== null)"""


def _settled(page) -> bool:
    return page.locator(_BUSY).count() == 0 and page.evaluate(_CHARTS_DRAWN)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The peer: what any Streamlit page with one Plotly chart costs here.
PEER_APP = """
import math
import plotly.graph_objects as go
import streamlit as st

st.title("Peer")
x = list(range(5000))
st.plotly_chart(go.Figure(go.Scatter(x=x, y=[math.sin(i / 100) for i in x], mode="lines")))
"""


def start_server(dataset: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    """The server process, its URL, and seconds until it answered."""
    port = _free_port()
    return _started([sys.executable, "-m", "gpulens.dashboard.cli", "dashboard", str(dataset), "--port", str(port)], port, env)


def start_peer(folder: Path) -> tuple[subprocess.Popen, str, float]:
    """A bare Streamlit app with one chart, served the way gpulens serves its own."""
    app = folder / "peer.py"
    app.write_text(PEER_APP)
    port = _free_port()
    return _started([sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
                     "--server.address", "127.0.0.1", "--server.headless", "true",
                     "--browser.gatherUsageStats", "false"], port, dict(os.environ))


def _started(command: list[str], port: int, env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                               cwd=REPO_ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200:
                    return process, url, time.monotonic() - started
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() - started > 60:
            raise SystemExit(f"{' '.join(command[2:4])} did not start")
        time.sleep(0.05)


def stop_server(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def time_page(browser, url: str, key: str, title: str | None = None, timeout_s: float = 600) -> float:
    """Seconds from asking for the page, in a new tab, to its script having finished."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        started = time.monotonic()
        page.goto(f"{url}/{'' if key == 'overview' else key}", wait_until="domcontentloaded")
        return _until_shown(page, title or PAGES[key][1], started, timeout_s)
    finally:
        page.close()


def time_navigation(browser, url: str, keys: list[str], timeout_s: float = 600) -> dict[str, float]:
    """Seconds from clicking each page's sidebar link, in one tab, to the page
    having run to the end (the overview first, opened by its URL)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url, wait_until="domcontentloaded")
        _until_shown(page, PAGES["overview"][1], time.monotonic(), timeout_s)
        times: dict[str, float] = {}
        for key in keys:
            if key == "overview":
                continue
            link = page.locator(f'[data-testid="stSidebarNav"] a[href$="/{key}"]').first
            started = time.monotonic()
            link.click()
            times[key] = _until_shown(page, PAGES[key][1], started, timeout_s)
        return times
    finally:
        page.close()


def _until_shown(page, title: str, started: float, timeout_s: float) -> float:
    """Seconds from `started` until the page with `title` has run to the end,
    nothing of the previous page is left, and every chart has been drawn."""
    page.locator("h1", has_text=title).first.wait_for(timeout=timeout_s * 1000)
    while True:
        if _settled(page):
            # Plotly finishes some drawing in later tasks (margins, then a redraw):
            # shown is when the browser next has nothing to do.
            page.evaluate(_IDLE)
            finished = time.monotonic()
            page.wait_for_timeout(250)  # not between two reruns
            if _settled(page):
                return finished - started
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"{title}: still running after {timeout_s:.0f} s")
        page.wait_for_timeout(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--pages", default=",".join(PAGES), help="comma-separated page keys, in order")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between the server answering and the browser asking")
    args = parser.parse_args()
    pages = [p.strip() for p in args.pages.split(",") if p.strip()]
    unknown = [p for p in pages if p not in PAGES]
    if unknown:
        parser.error(f"unknown page(s): {', '.join(unknown)}; known: {', '.join(PAGES)}")
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    record = results.start("dashboard_render", {"dataset": str(args.dataset), "pages": pages, "settle": args.settle})

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"dataset: {args.dataset}")
    scenarios = {"at once": ({}, 0.0), "settled": ({}, args.settle), "no warm-up": ({"GPULENS_WARM_UP": "0"}, 0.0)}
    worst_first = 0.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        folder = Path(tempfile.mkdtemp(prefix="gpulens-peer-"))
        try:
            process, url, _ = start_peer(folder)
            try:
                time.sleep(args.settle)
                peers = [time_page(browser, url, "overview", title="Peer") for _ in range(3)]
            finally:
                stop_server(process)
            peer_s = sorted(peers)[1]
            print(f"      peer (bare Streamlit app, one Plotly chart of 5,000 points, new tab): "
                  f"{'  '.join(f'{s:.2f}' for s in peers)} s; median {peer_s:.2f} s")
            record.add({"start_up": "peer", "page": "peer", "seconds": round(peer_s, 3)})
            for name, (extra_env, settle_s) in scenarios.items():
                process, url, start_s = start_server(args.dataset, {**os.environ, **extra_env})
                try:
                    time.sleep(settle_s)
                    times = {key: time_page(browser, url, key) for key in pages}
                finally:
                    stop_server(process)
                if name != "no warm-up":
                    worst_first = max(worst_first, times[pages[0]])
                shown = "  ".join(f"{key} {seconds:.2f} ({seconds / peer_s:.1f}x)" for key, seconds in times.items())
                for key, seconds in times.items():
                    record.add({"start_up": name, "page": key, "seconds": round(seconds, 3)})
                print(f"{name:>10} (server answered in {start_s:.1f} s, browser after {settle_s:g} s): {shown}")
            process, url, start_s = start_server(args.dataset, dict(os.environ))
            try:
                time.sleep(args.settle)
                moves = time_navigation(browser, url, pages)
            finally:
                stop_server(process)
            shown = "  ".join(f"{key} {seconds:.2f}" for key, seconds in moves.items())
            for key, seconds in moves.items():
                record.add({"start_up": "by link", "page": key, "seconds": round(seconds, 3)})
            print(f"  by sidebar link, one tab, settled server: {shown}")
        finally:
            browser.close()
            shutil.rmtree(folder, ignore_errors=True)
    print(f"first page, slowest with the start-up warm-up: {worst_first:.2f} s ({worst_first / peer_s:.1f}x the peer)   "
          f"target < {TARGET_S:g} s")
    if moves:
        slowest = max(moves, key=moves.__getitem__)
        print(f"slowest page by sidebar link: {slowest} {moves[slowest]:.2f} s   target < {TARGET_S:g} s")
    print(f"recorded in {record.write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
