"""The report as GitHub-flavoured Markdown: findings and the key tables.

Short enough to paste into an issue or a pull request: the findings
(title, subject, detail; past two of a kind, the others by subject), the
comparison with the baseline if any, and the tables marked `key` in
`sections`, each cut to `MAX_MD_ROWS` rows.
"""

from __future__ import annotations

from typing import Any

from gpulens.collector.errors import one_line
from gpulens.collector.wording import counted
from gpulens.dashboard.escape import markdown_code, markdown_text
from gpulens.dashboard.report.build import Report
from gpulens.dashboard.report.format import format_subject, format_subjects, format_value

MAX_MD_ROWS = 20
# Findings of one id and severity shown in full; the rest are listed by subject.
SHOWN_PER_KIND = 2
_ICONS = {"critical": "🔴", "warning": "🟠", "info": "🔵"}


def render_markdown(report: Report) -> str:
    lines = [f"# {markdown_text(report.title)}", "", _made_from(report), ""]
    if report.problems:  # first: the findings below leave out what failed
        lines += [f"**Incomplete report:** {counted(len(report.problems), 'part')} failed; the findings and tables "
                  "below leave out what they could not read.", ""]
        lines += [f"- {_cell(p)}" for p in report.problems] + [""]
    lines += _findings(report)
    if report.comparison is not None:
        lines += _comparison(report)
    else:
        lines += _metrics(report)
    for section in report.sections:
        tables = [t for t in section.tables if t.spec.key and t.shown]
        if section.empty_reason or not tables:
            continue
        lines += [f"## {section.title}", ""]
        for table in tables:
            lines += _table(table.spec.title, table.spec.name, table.frame, list(table.spec.columns))
    lines.append(f"<sub>gpulens {report.gpulens_version} · `gpulens report --format json` has every table in full.</sub>")
    return "\n".join(lines) + "\n"


def _made_from(report: Report) -> str:
    source = report.source
    parts = []
    if source.hosts:
        parts.append(f"{counted(sum(h['gpus'] for h in source.hosts), 'GPU')} on {', '.join(markdown_text(h['host']) for h in source.hosts)}")
    for run in source.runs:
        parts.append(f"run {markdown_code(run['run'])} ({counted(run['ranks'], 'rank')})")
    inputs = ", ".join(markdown_code(i) for i in source.inputs)
    return f"Made from {inputs}: " + ("; ".join(parts) or "no data") + "."


def _findings(report: Report) -> list[str]:
    """Every finding, except that past `SHOWN_PER_KIND` of one id and
    severity (one per rank of a 128-rank job, say) the rest are one line
    naming their subjects, as the html report folds them away."""
    lines = ["## Findings", ""]
    if not report.findings:
        return lines + ["No findings: nothing stood out.", ""]
    explained: set[str] = set()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for finding in report.findings:
        data = finding.to_dict()
        groups.setdefault((data["severity"], data["id"]), []).append(data)
    for (severity, finding_id), members in groups.items():
        for data in members[:SHOWN_PER_KIND]:
            lines += _finding_lines(data, explained)
        rest = members[SHOWN_PER_KIND:]
        if rest:
            subjects = format_subjects([data.get("subject") or {} for data in rest])
            lines.append(f"- {_ICONS.get(severity, '')} {len(rest)} more `{finding_id}` ({severity})"
                         + (f": _{_cell(subjects)}_" if subjects else ""))
    return lines + [""]


def _finding_lines(data: dict[str, Any], explained: set[str] | None = None) -> list[str]:
    """One list item; the detail only the first time an id appears (`explained`)."""
    icon = _ICONS.get(data["severity"], "")
    subject = format_subject(data.get("subject") or {})
    lines = [f"- {icon} **{data['severity']}** `{data['id']}`: {_cell(data['title'])}" + (f" _({_cell(subject)})_" if subject else "")]
    if explained is None or data["id"] not in explained:
        lines.append(f"  {_cell(data['detail'])}")
    if explained is not None:
        explained.add(data["id"])
    return lines


def _metrics(report: Report) -> list[str]:
    from gpulens.analysis.metrics import METRICS

    known = [m for m in METRICS if report.metrics.get(m.key) is not None]
    if not known:
        return []
    runs = list(report.metrics_by_run)
    if not runs:
        lines = ["## Metrics", "", "| metric | value | better |", "|---|---:|---|"]
        for metric in known:
            lines.append(f"| {metric.name} | {format_value(metric.key, report.metrics[metric.key])} | {metric.better} |")
        return lines + [""]
    # Several runs: a column each, and the blend `--compare` compares.
    lines = ["## Metrics", "", "| metric | " + " | ".join(_cell(run) for run in runs) + " | all runs | better |",
             "|---|" + "---:|" * (len(runs) + 1) + "---|"]
    for metric in known:
        values = [format_value(metric.key, report.metrics_by_run[run].get(metric.key)) for run in runs]
        lines.append(f"| {metric.name} | " + " | ".join(values)
                     + f" | {format_value(metric.key, report.metrics[metric.key])} | {metric.better} |")
    return lines + [""]


def _comparison(report: Report) -> list[str]:
    comparison = report.comparison
    lines = ["## Comparison", "", f"Against {_cell(comparison.baseline)}.", "",
             "| metric | better | baseline | this report | change | fail past | |", "|---|---|---:|---:|---:|---:|---|"]
    for delta in comparison.metrics:
        key = delta.metric.key
        pct = "–" if delta.delta_pct is None else f"{delta.delta_pct:+.1f} %"
        limit = "–" if delta.threshold_pct is None else f"{delta.threshold_pct:g} %"
        verdict = "**regressed**" if delta.regressed else ("" if delta.comparable else "not comparable")
        lines.append(f"| {delta.metric.name} | {delta.metric.better} | {format_value(key, delta.baseline)} | "
                     f"{format_value(key, delta.current)} | {pct} | {limit} | {verdict} |")
    lines.append("")
    if comparison.new_findings:
        lines += ["New findings:", ""]
        for finding in comparison.new_findings:
            lines += _finding_lines(finding)
        lines.append("")
    if comparison.resolved_findings:
        lines += ["Findings no longer seen:", ""]
        for finding in comparison.resolved_findings:
            lines += _finding_lines(finding)
        lines.append("")
    return lines


def _table(title: str, name: str, frame: Any, columns: list[str]) -> list[str]:
    lines = [f"### {title}", ""]
    if frame.is_empty():
        return lines + [f"`{name}`: no rows.", ""]
    columns = [c for c in columns if c in frame.columns] or list(frame.columns)
    numeric = {c for c in columns if frame.schema[c].is_numeric()}
    lines.append("| " + " | ".join(map(_cell, columns)) + " |")
    lines.append("|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|")
    for row in frame.head(MAX_MD_ROWS).iter_rows(named=True):
        lines.append("| " + " | ".join(_cell(format_value(c, row[c])) for c in columns) + " |")
    if frame.height > MAX_MD_ROWS:
        lines.append(f"\n_{counted(frame.height - MAX_MD_ROWS, 'more row')} of `{name}` in the JSON and HTML reports._")
    return lines + [""]


def _cell(text: Any) -> str:
    """Text safe inside a table cell or a list item: one line, shown as
    text (dashboard.escape: no link, image or tag; pipes escaped)."""
    return markdown_text(one_line(text))
