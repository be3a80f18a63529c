"""Every question's findings, gathered: what the report and the dashboard show.

Each analysis module builds its findings with the types of
`analysis.findings`; this module imports those builders, so the arrows
point one way (findings ← each analysis ← all_findings).
"""

from __future__ import annotations

from typing import Callable

import duckdb

from gpulens.analysis import communication, jobs, launch, power, time_breakdown
from gpulens.analysis.findings import Finding, sort_findings

FindingSource = Callable[[duckdb.DuckDBPyConnection], list[Finding]]


def finding_sources() -> list[FindingSource]:
    """Each question's findings builder, in the order the report reads them."""
    return [launch.launch_findings, time_breakdown.breakdown_findings, communication.communication_findings,
            power.power_findings, jobs.job_findings]


def all_findings(con: duckdb.DuckDBPyConnection) -> list[Finding]:
    """Every finding of the dataset, most severe first."""
    findings: list[Finding] = []
    for source in finding_sources():
        findings.extend(source(con))
    return sort_findings(findings)
