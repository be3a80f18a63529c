"""Results files of the benchmarks: each bench records what it measured, on
what machine and at which commit, so that the docs' tables are made from
what was measured (`bench/make_docs.py`) rather than pasted by hand.

    record = results.start("ingest_vs_hta", {"events": 400_000})
    record.add({"input": "...", "wall_s": 0.38})
    path = record.write()     # bench/results/ingest_vs_hta-2026-11-29T07-30-12Z.json

A file holds {"bench", "date" (ISO 8601, UTC, when the bench started),
"commit" (the checkout's git sha, "+dirty" where it has uncommitted
changes), "machine" ({"cpus", "model", "memory_bytes", "load_average"}: the
load average of 1, 5 and 15 minutes when the bench started), "params",
"rows"}. The latest file of a bench is the one whose name sorts last
(names carry the start time).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"


def machine() -> dict[str, Any]:
    """This machine as a bench's figures depend on it, with its load now."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpus": os.cpu_count(),
        "model": model,
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
    }


def commit() -> str:
    """The checkout's commit, '+dirty' where tracked files differ from it;
    'unknown' outside a git checkout."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


@dataclass
class Record:
    bench: str
    params: dict[str, Any]
    date: str
    commit: str
    machine: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def as_dict(self) -> dict[str, Any]:
        return {"bench": self.bench, "date": self.date, "commit": self.commit, "machine": self.machine,
                "params": self.params, "rows": self.rows}

    def write(self, folder: Path = RESULTS_DIR) -> Path:
        """Write the file (again, after more rows); returns its path."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.bench}-{self.date.replace(':', '-')}.json"
        staged = path.with_suffix(".json.tmp")
        staged.write_text(json.dumps(self.as_dict(), indent=1) + "\n", encoding="utf-8")
        staged.replace(path)
        return path


def start(bench: str, params: dict[str, Any]) -> Record:
    """A record whose date, commit and machine (load included) are taken now,
    as the bench starts."""
    date = datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Record(bench, dict(params), date, commit(), machine())


def latest(bench: str, folder: Path = RESULTS_DIR) -> dict[str, Any] | None:
    """The latest results file of `bench`, or None where it has none."""
    paths = sorted(folder.glob(f"{bench}-*.json"))
    return json.loads(paths[-1].read_text(encoding="utf-8")) if paths else None
