"""Compare a report with a baseline: metric deltas, new and resolved findings.

The metrics are one number per dataset each, so two runs of the same job
compare directly. `--fail-on METRIC:PCT` makes `gpulens report` exit 3
(RegressionFound) where METRIC changed for the worse by more than PCT %
of the baseline value:

The metrics and how each is computed: `analysis/metrics.py`.

A change is relative: (current - baseline) / |baseline|. A baseline of 0
makes any change for the worse a regression. A metric that either side
cannot compute (no traces, no telemetry) is reported as not comparable;
naming it in `--fail-on` is then an error (exit 1), since a check that
cannot run must not pass silently.

The baseline is a dataset, trace files (ingested into a temporary
dataset), or a JSON report written earlier by `gpulens report --format
json` (CI keeps that as an artefact).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson

from gpulens.analysis.findings import Finding
from gpulens.analysis.metrics import METRICS, MetricDelta, compute_metrics, finite, metric
from gpulens.collector.errors import DatasetError, GpulensError, UsageError, one_line


class RegressionFound(GpulensError):
    """A metric named in --fail-on regressed past its threshold (the report is written)."""

    exit_code = 3


class NotComparable(GpulensError):
    """A metric named in --fail-on cannot be computed for one side."""


def parse_fail_on(values: tuple[str, ...] | list[str]) -> dict[str, float]:
    """`["step_time:5", "busbw:10%"]` → `{"step_time": 5.0, "busbw": 10.0}`."""
    thresholds: dict[str, float] = {}
    for value in values:
        match = re.fullmatch(r"\s*([A-Za-z_\-]+)\s*:\s*([0-9]*\.?[0-9]+)\s*%?\s*", value)
        if match is None:
            raise UsageError(f"--fail-on {value!r}: expected METRIC:PCT, e.g. step_time:5")
        thresholds[metric(match.group(1)).name] = float(match.group(2))
    return thresholds


# --- the baseline ---------------------------------------------------------------------------


@dataclass
class Baseline:
    description: str
    metrics: dict[str, float | None]
    findings: list[dict[str, Any]]


def load_baseline(path: Path, label: str | None = None) -> Baseline:
    """A baseline from a JSON report, a dataset, or trace files (ingested into a scratch dataset)."""
    path = Path(path)
    if is_json_report(path):
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as error:
            raise DatasetError(f"{path}: not a valid JSON report ({error})") from None
        metrics = data.get("metrics")
        if not isinstance(metrics, dict) or not isinstance(data.get("findings"), list):
            raise DatasetError(f"{path}: a JSON report without `metrics` and `findings`: written by an older gpulens?")
        problem = _report_problem(metrics, data["findings"])
        if problem is not None:
            raise DatasetError(f"{path}: {problem}")
        return Baseline(label or f"JSON report {path}", {m.key: finite(metrics.get(m.key)) for m in METRICS}, data["findings"])
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.all_findings import all_findings
    from gpulens.analysis.registry import results_kept
    from gpulens.dashboard.report.inputs import resolve_inputs

    with tempfile.TemporaryDirectory(prefix="gpulens-baseline-") as scratch:
        dataset, temporary = resolve_inputs([str(path)], Path(scratch) / "dataset", keep=None)
        try:
            con = open_dataset(dataset, footer_cache=True)
            with results_kept(con):  # the findings and the metrics share analyses: each runs once
                findings = [f.to_dict() for f in all_findings(con)]
                metrics = compute_metrics(con)
        except duckdb.Error as error:
            raise DatasetError(f"{path}: cannot read the baseline dataset: {one_line(error)}") from None
        con.close()
    description = label or (f"traces {path} (ingested)" if temporary else f"dataset {path}")
    return Baseline(description, metrics, findings)


_FINDING_TEXT = ("id", "severity", "title", "detail")


def _report_problem(metrics: dict[str, Any], findings: list[Any]) -> str | None:
    """What in a JSON report's metrics and findings the comparison cannot
    use (a baseline edited by hand), or None. Only what it reads is checked."""
    for m in METRICS:
        value = metrics.get(m.key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"metrics.{m.key} is not a number"
    for i, finding in enumerate(findings):
        if not isinstance(finding, dict):
            return f"findings[{i}] is not an object"
        for key in _FINDING_TEXT:
            if not isinstance(finding.get(key), str):
                return f"findings[{i}].{key} is not a string"
        for key in ("subject", "evidence"):
            if finding.get(key) is not None and not isinstance(finding[key], dict):
                return f"findings[{i}].{key} is not an object"
    return None


def is_json_report(path: Path) -> bool:
    """A file that starts like a gpulens JSON report (with its `report_version` key)."""
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        head = handle.read(256)
    return re.match(rb'\s*\{\s*"report_version"\s*:', head) is not None


# --- the comparison ----------------------------------------------------------------------------


@dataclass
class Comparison:
    baseline: str
    metrics: list[MetricDelta]
    new_findings: list[dict[str, Any]] = field(default_factory=list)
    resolved_findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricDelta]:
        return [m for m in self.metrics if m.regressed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "metrics": [m.to_dict() for m in self.metrics],
            "regressions": [m.metric.name for m in self.regressions],
            "new_findings": self.new_findings,
            "resolved_findings": self.resolved_findings,
        }

    def failure_message(self) -> str:
        parts = [
            f"{m.metric.name} {'rose' if (m.delta or 0) > 0 else 'fell'} "
            + (f"{abs(m.delta_pct):.1f} %" if m.delta_pct is not None else "from 0")
            + f" (limit {m.threshold_pct:g} %)"
            for m in self.regressions
        ]
        return f"regression against {self.baseline}: " + "; ".join(parts)


def compare(report: Any, baseline: Baseline, fail_on: dict[str, float]) -> Comparison:
    """Deltas of `report`'s metrics against `baseline`; findings new and gone.

    Raises NotComparable where a metric named in `fail_on` is missing on a side.
    """
    deltas = [MetricDelta(m, baseline.metrics.get(m.key), report.metrics.get(m.key), fail_on.get(m.name)) for m in METRICS]
    for delta in deltas:
        if delta.threshold_pct is not None and not delta.comparable:
            side = "the baseline" if delta.baseline is None else "this report"
            raise NotComparable(f"--fail-on {delta.metric.name}: {side} has no data for it ({baseline.description})")
    current = [f.to_dict() if isinstance(f, Finding) else f for f in report.findings]
    before = {_finding_key(f) for f in baseline.findings}
    now = {_finding_key(f) for f in current}
    return Comparison(
        baseline=baseline.description,
        metrics=deltas,
        new_findings=[f for f in current if _finding_key(f) not in before],
        resolved_findings=[f for f in baseline.findings if _finding_key(f) not in now],
    )


def _finding_key(finding: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    subject = finding.get("subject") or {}
    return str(finding.get("id")), tuple(sorted((str(k), str(v)) for k, v in subject.items()))
