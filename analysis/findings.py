"""Findings: short verdicts built from the analysis tables.

A finding is one claim about one subject (a rank of a run, a GPU of a
host, a process group, ...), with its severity and the numbers behind it.
Each question's module builds its own findings from its tables
(`analysis.launch.launch_findings`, ...); `all_findings` gathers them,
most severe first. The report and the dashboard show the same list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import duckdb

SEVERITIES = ("critical", "warning", "info")
_RANK = {name: i for i, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One verdict.

    id: what kind of finding (`straggler_rank`, `power_capped_gpu`, ...),
        stable for CI pipelines;
    severity: critical | warning | info;
    title: one sentence, with the number that matters;
    detail: what it means and what to try;
    subject: what it is about, e.g. {"run": "r1", "rank": 3} or
        {"host": "node-a", "gpu_index": 7};
    evidence: the numbers behind it (units in the keys);
    page: the dashboard page that shows the evidence.
    """

    id: str
    severity: str
    title: str
    detail: str
    subject: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    page: str = "overview"

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_duration_ns(ns: float | None, missing: str = "an unknown time") -> str:
    """A duration for people, in the largest unit that keeps it at 1 or
    more, to three significant digits: 1.23 s, 38.2 ms, 388 µs, 12 ns,
    1,234 s. The one formatter of findings, reports and the dashboard, so
    a number reads the same everywhere; `missing` stands for None and NaN."""
    if ns is None or ns != ns:
        return missing
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            value = ns / scale
            digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
            return f"{value:,.{digits}f} {unit}"
    return f"{ns:,.0f} ns"


FindingSource = Callable[[duckdb.DuckDBPyConnection], list[Finding]]


def finding_sources() -> list[FindingSource]:
    """Each question's findings builder, imported here so the list is explicit."""
    from gpulens.analysis import communication, jobs, launch, power, time_breakdown

    return [launch.launch_findings, time_breakdown.breakdown_findings, communication.communication_findings, power.power_findings,
            jobs.job_findings]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first; then by id and subject, so the order is stable."""
    return sorted(findings, key=lambda f: (_RANK[f.severity], f.id, sorted((k, str(v)) for k, v in f.subject.items())))


def all_findings(con: duckdb.DuckDBPyConnection) -> list[Finding]:
    findings: list[Finding] = []
    for source in finding_sources():
        findings.extend(source(con))
    return sort_findings(findings)
