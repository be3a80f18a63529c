"""How long the dashboard's pages take to show, in a real browser.

    python bench/dashboard_render.py DATASET                 # every page, three start-ups
    python bench/dashboard_render.py DATASET --pages overview,kernels

Starts `gpulens dashboard DATASET` on a free port, waits until the server
answers (`/_stcore/health`), opens Chromium (Debian's, through Playwright)
and times each page: from asking for its URL to the page having run its
script to the end (no running indicator, no loading placeholder) with its
title shown. Each page is loaded afresh in a new tab, in menu order.

Three start-ups, each a fresh server process:
  at once    the browser asks for the first page the moment the server
             answers (the start-up warm-up of dashboard/launch.py still
             running): the worst case for a person;
  settled    the browser asks --settle seconds after the server answers
             (someone opening the link it printed);
  no warm-up with GPULENS_WARM_UP=0: nothing is computed before a page
             asks for it (every page cold).
Target (issue 6): a page with a day of 8-GPU telemetry and a 10-million
kernel run shows in under 3 s. The figures include Chromium's own drawing.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from dashboard.pages.common import PAGES  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
TARGET_S = 3.0
_BUSY = '[data-testid="stStatusWidget"], [data-testid="stSkeleton"]'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(dataset: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    """The server process, its URL, and seconds until it answered."""
    port = _free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "dashboard.cli", "dashboard", str(dataset), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=REPO_ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200:
                    return process, url, time.monotonic() - started
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() - started > 60:
            raise SystemExit("gpulens dashboard did not start")
        time.sleep(0.05)


def stop_server(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def time_page(browser, url: str, key: str, timeout_s: float = 600) -> float:
    """Seconds from asking for the page to its script having finished."""
    title = PAGES[key][1]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        started = time.monotonic()
        page.goto(f"{url}/{'' if key == 'overview' else key}", wait_until="domcontentloaded")
        page.locator("h1", has_text=title).first.wait_for(timeout=timeout_s * 1000)
        while True:
            if page.locator(_BUSY).count() == 0:
                finished = time.monotonic()
                page.wait_for_timeout(250)  # not between two reruns
                if page.locator(_BUSY).count() == 0:
                    return finished - started
            if time.monotonic() - started > timeout_s:
                raise SystemExit(f"/{key}: still running after {timeout_s:.0f} s")
            page.wait_for_timeout(20)
    finally:
        page.close()


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

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"dataset: {args.dataset}")
    scenarios = {"at once": ({}, 0.0), "settled": ({}, args.settle), "no warm-up": ({"GPULENS_WARM_UP": "0"}, 0.0)}
    worst_first = 0.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for name, (extra_env, settle_s) in scenarios.items():
                process, url, start_s = start_server(args.dataset, {**os.environ, **extra_env})
                try:
                    time.sleep(settle_s)
                    times = {key: time_page(browser, url, key) for key in pages}
                finally:
                    stop_server(process)
                if name != "no warm-up":
                    worst_first = max(worst_first, times[pages[0]])
                shown = "  ".join(f"{key} {seconds:.2f}" for key, seconds in times.items())
                print(f"{name:>10} (server answered in {start_s:.1f} s, browser after {settle_s:g} s): {shown}")
        finally:
            browser.close()
    print(f"first page, slowest with the start-up warm-up: {worst_first:.2f} s   target < {TARGET_S:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
