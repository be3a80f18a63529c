"""The report as JSON, for CI pipelines: stable keys, raw numbers, no clock.

Top-level keys (schema: `schema/report.schema.json`):

- `report_version` (1), `gpulens_version`, `title`;
- `source`: what the report was made from (inputs, rows per table, hosts,
  runs, trace files);
- `findings`: most severe first; each with `id`, `severity`, `title`,
  `detail`, `subject`, `evidence`, `page`;
- `metrics`: one number per metric key (see `compare`), null where the
  data has none;
- `tables`: analysis name → list of row objects, every column, in the
  analysis's order (units in the keys; times as epoch ns or ISO 8601 UTC);
- `comparison`: null, or the deltas against `--compare BASELINE`;
- `problems`: analyses that failed (empty when all ran).

Nothing in it depends on when the report was made or where it ran, so two
reports of the same data diff cleanly: keys and rows come in the same
order, and numbers agree except, at times, in the last bits of float sums
(DuckDB adds floats in parallel, in no fixed order).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import orjson

from gpulens.analysis.tables import exact_number
from gpulens.dashboard.report.build import Report

REPORT_VERSION = 1


def report_to_dict(report: Report) -> dict[str, Any]:
    source = report.source
    return {
        "report_version": REPORT_VERSION,
        "gpulens_version": report.gpulens_version,
        "title": report.title,
        "source": {
            "inputs": source.inputs,
            "dataset": source.dataset,
            "rows": source.rows,
            "hosts": [_clean(h) for h in source.hosts],
            "runs": [_clean(r) for r in source.runs],
            "trace_files": [_clean(f) for f in source.trace_files],
        },
        "findings": [_clean(f.to_dict()) for f in report.findings],
        "metrics": {key: _clean(value) for key, value in report.metrics.items()},
        "metrics_by_run": {run: {key: _clean(value) for key, value in values.items()}
                           for run, values in report.metrics_by_run.items()},
        "tables": {name: [_clean(row) for row in frame.to_dicts()] for name, frame in report.tables().items()},
        "comparison": None if report.comparison is None else _clean(report.comparison.to_dict()),
        "problems": list(report.problems),
    }


def render_json(report: Report) -> bytes:
    return orjson.dumps(report_to_dict(report), option=orjson.OPT_INDENT_2) + b"\n"


def _clean(value: Any) -> Any:
    """Plain JSON values: ISO 8601 UTC times, no NaN or infinity, numbers for decimals."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return _clean(exact_number(value))
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return int(value / dt.timedelta(microseconds=1)) * 1000
    return value
