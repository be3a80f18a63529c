"""The suite's figures (docs/reliability.md cites them): each test that
measures one merges it into `results.json` beside this file."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"


def record(**figures: object) -> None:
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    kept.update(figures)
    RESULTS.write_text(json.dumps(dict(sorted(kept.items())), indent=2) + "\n")
