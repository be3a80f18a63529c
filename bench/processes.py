"""Processes the benches and the tests start (servers, a Spark cluster) or
measure: stopping one, and listing another's children."""

from __future__ import annotations

import os
import subprocess


def stop(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """Ask `process` to end (SIGTERM), and kill it where it has not within
    `timeout_s`; nothing where it has ended already."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` now, from each of its threads'
    list in /proc (a process gone meanwhile is left out)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return found
