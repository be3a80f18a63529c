"""The report as one self-contained HTML file that opens offline.

Plotly's JavaScript is inlined once, in the head; each chart is a div and
a call to `Plotly.newPlot`. No fonts, styles or scripts are fetched, so
the file works from a laptop on a plane or as a CI artefact. Element ids
are fixed (no random div ids), so the same report gives the same bytes.

Order: the findings first, then the comparison with the baseline (if
any), then one section per analysis with its findings, charts and tables,
then what data the report was made from.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.io as pio
import polars as pl

from gpulens.analysis.names import short_kernel_name
from gpulens.collector.errors import one_line
from gpulens.collector.wording import counted, noun_for
from gpulens.dashboard import theme
from gpulens.dashboard.report.build import Report, Section, TableResult
from gpulens.dashboard.report.figures import HEIGHT_PX, section_figures
from gpulens.dashboard.report.format import format_subject, format_value

# The most rows one HTML table shows; the JSON report has them all.
MAX_HTML_ROWS = 2000
# Columns holding kernel names, shown by their short name (a click opens
# the full one): a templated name is hundreds of characters.
NAME_COLUMNS = ("name",)
NAME_CHARS = 80

_CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #e3e3e3; --bg: #ffffff; --panel: #f7f7f8; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); background: var(--bg); }
header, main, footer { max-width: 1200px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 8px; padding-top: 8px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
.meta, .about, .note { color: var(--muted); }
nav { margin: 12px 0 0; display: flex; flex-wrap: wrap; gap: 6px 14px; }
nav a { color: #1f5fbf; text-decoration: none; }
.counts span { display: inline-block; margin-right: 12px; font-weight: 600; }
.finding { border-left: 5px solid var(--sev); background: var(--panel); padding: 10px 14px; margin: 10px 0; border-radius: 4px; }
.finding .head { display: flex; gap: 10px; align-items: baseline; flex-wrap: wrap; }
.sev { color: #fff; background: var(--sev); border-radius: 3px; padding: 0 6px; font-size: 12px; font-weight: 600;
       text-transform: uppercase; }
.fid { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; color: var(--muted); }
.finding .title { font-weight: 600; }
.finding .subject { font-size: 13px; color: var(--muted); }
.finding p { margin: 6px 0; }
dl.evidence { display: grid; grid-template-columns: max-content 1fr; gap: 0 16px; margin: 6px 0 0; font-size: 13px; }
dl.evidence dt { color: var(--muted); font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
dl.evidence dd { margin: 0; }
table.data { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 4px; width: 100%; }
table.data th, table.data td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
table.data th { background: var(--panel); font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
                font-weight: 600; font-size: 11.5px; position: sticky; top: 0; }
table.data td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.data td.text { white-space: nowrap; }
table.data td.long { overflow-wrap: anywhere; min-width: 24em; max-width: 40em; }
.scroll { overflow-x: auto; }
.chart { margin: 8px 0 16px; }
.empty { background: var(--panel); padding: 10px 14px; border-radius: 4px; color: var(--muted); }
.problem { background: #fdecea; padding: 8px 12px; border-radius: 4px; }
tr.regressed td { background: #fdecea; }
details.more { margin: 4px 0 10px; }
details.more > summary { cursor: pointer; color: var(--muted); }
details.name > summary { cursor: pointer; list-style: none; }
details.name > summary::after { content: " ▸"; color: var(--muted); }
details.name[open] > summary::after { content: " ▾"; }
details.name .full { display: block; margin-top: 2px; color: var(--muted); overflow-wrap: anywhere; max-width: 40em;
                     white-space: normal; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 11.5px; }
footer { color: var(--muted); font-size: 12px; padding: 32px 24px; }
"""


def render_html(report: Report) -> str:
    """The whole report as one HTML document (a str). A chart that fails is
    added to `report.problems`, as the analyses that failed are."""
    chart_problems: list[str] = []
    figures = {section.id: _charts(report, section, chart_problems) for section in report.sections}
    report.problems.extend(chart_problems)
    has_charts = any(figures.values())
    body = [
        _header(report),
        "<main>",
        _findings(report, report.problems),
        _comparison(report) if report.comparison is not None else _metrics(report),
        *(_section(section, figures[section.id]) for section in report.sections),
        _data(report),
        "</main>",
        f"<footer>Made by gpulens {_e(report.gpulens_version)}. Every number here is also in "
        "<code>gpulens report --format json</code> and can be queried with <code>gpulens query</code>.</footer>",
    ]
    script = ""
    if has_charts:
        from plotly.offline import get_plotlyjs

        script = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(report.title)}</title>\n<style>{_CSS}</style>\n{script}\n</head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body>\n</html>\n"
    )


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _header(report: Report) -> str:
    source = report.source
    what = []
    if source.hosts:
        gpus = sum(h["gpus"] for h in source.hosts)
        what.append(f"{counted(gpus, 'GPU')} on {counted(len(source.hosts), 'host')}")
    if source.runs:
        what.append(", ".join(f"run {r['run']} ({counted(r['ranks'], 'rank')})" for r in source.runs))
    links = [("findings", "Findings")]
    if report.comparison is not None:
        links.append(("comparison", "Comparison"))
    elif any(v is not None for v in report.metrics.values()):
        links.append(("metrics", "Metrics"))
    links += [(s.id, s.title) for s in report.sections] + [("data", "Data")]
    nav = "".join(f'<a href="#{_e(i)}">{_e(t)}</a>' for i, t in links)
    return (
        f"<header><h1>{_e(report.title)}</h1>"
        f'<p class="meta">{_e("; ".join(what) or "no data")}. From {_e(", ".join(source.inputs))}.</p>'
        f"<nav>{nav}</nav></header>"
    )


def _finding_card(finding: Any) -> str:
    data = finding if isinstance(finding, dict) else finding.to_dict()
    colour = theme.SEVERITY_COLOURS.get(data["severity"], theme.OTHER_COLOUR)
    evidence = "".join(
        f"<dt>{_e(key)}</dt><dd>{_e(format_value(key, value))}</dd>" for key, value in (data.get("evidence") or {}).items()
    )
    return (
        f'<div class="finding" style="--sev: {colour}">'
        f'<div class="head"><span class="sev">{_e(data["severity"])}</span>'
        f'<span class="title">{_e(data["title"])}</span><span class="fid">{_e(data["id"])}</span></div>'
        f'<div class="subject">{_e(format_subject(data.get("subject") or {}))}</div>'
        f'<p>{_e(data["detail"])}</p>'
        + (f'<details><summary>evidence</summary><dl class="evidence">{evidence}</dl></details>' if evidence else "")
        + "</div>"
    )


def _finding_cards(findings: list[Any], shown_per_kind: int = 2) -> str:
    """Cards in order; beyond `shown_per_kind` findings of one id and severity, the rest fold away."""
    out: list[str] = []
    i = 0
    while i < len(findings):
        data = findings[i] if isinstance(findings[i], dict) else findings[i].to_dict()
        j = i
        while j < len(findings):
            other = findings[j] if isinstance(findings[j], dict) else findings[j].to_dict()
            if (other["id"], other["severity"]) != (data["id"], data["severity"]):
                break
            j += 1
        group = findings[i:j]
        out.extend(_finding_card(f) for f in group[:shown_per_kind])
        if len(group) > shown_per_kind:
            rest = "".join(_finding_card(f) for f in group[shown_per_kind:])
            more = len(group) - shown_per_kind
            out.append(f'<details class="more"><summary>{more} more <code>{_e(data["id"])}</code> '
                       f"{noun_for(more, 'finding')} ({_e(data['severity'])})</summary>{rest}</details>")
        i = j
    return "".join(out)


def _findings(report: Report, problems: list[str]) -> str:
    counts = {severity: 0 for severity in theme.SEVERITY_COLOURS}
    for finding in report.findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    summary = "".join(
        f'<span style="color: {theme.SEVERITY_COLOURS[s]}">{n} {s}</span>' for s, n in counts.items()
    )
    cards = _finding_cards(report.findings) or '<p class="empty">No findings: nothing stood out.</p>'
    failed = "".join(f'<p class="problem">This part failed: {_e(p)}</p>' for p in problems)
    if problems:
        failed = (f'<p class="problem"><strong>Incomplete report:</strong> {counted(len(problems), "part")} '
                  "failed; the findings and tables below leave out what they could not read.</p>" + failed)
    return f'<section id="findings"><h2>Findings</h2><p class="counts">{summary}</p>{failed}{cards}</section>'


def _metrics(report: Report) -> str:
    from gpulens.analysis.metrics import METRICS

    known = [m for m in METRICS if report.metrics.get(m.key) is not None]
    if not known:
        return ""
    runs = list(report.metrics_by_run)
    head = "".join(f"<th>{_e(run)}</th>" for run in runs) + ("<th>all runs</th>" if runs else "<th>value</th>")
    rows = "".join(
        f"<tr><td>{_e(m.name)}</td>"
        + "".join(f'<td class="num">{_e(format_value(m.key, report.metrics_by_run[run].get(m.key)))}</td>' for run in runs)
        + f'<td class="num">{_e(format_value(m.key, report.metrics[m.key]))}</td>'
        f"<td>{_e(m.label)}; {_e(m.better)} is better</td></tr>"
        for m in known
    )
    per_run = (" Each trace run has a column of its own; <em>all runs</em> blends them, as <code>--compare</code> "
               "compares it.") if runs else ""
    return (
        '<section id="metrics"><h2>Metrics</h2><p class="about">One number per metric, for comparing runs '
        f"(<code>gpulens report --compare BASELINE --fail-on METRIC:PCT</code>).{per_run}</p>"
        f'<div class="scroll"><table class="data"><tr><th>metric</th>{head}<th>what</th></tr>{rows}</table></div></section>'
    )


def _comparison(report: Report) -> str:
    comparison = report.comparison
    rows = []
    for delta in comparison.metrics:
        key = delta.metric.key
        pct = "–" if delta.delta_pct is None else f"{delta.delta_pct:+.1f} %"
        limit = "–" if delta.threshold_pct is None else f"{delta.threshold_pct:g} %"
        verdict = "regressed" if delta.regressed else ("" if delta.comparable else "not comparable")
        rows.append(
            f'<tr class="{"regressed" if delta.regressed else ""}"><td>{_e(delta.metric.name)}</td>'
            f"<td>{_e(delta.metric.better)} is better</td>"
            f'<td class="num">{_e(format_value(key, delta.baseline))}</td><td class="num">{_e(format_value(key, delta.current))}</td>'
            f'<td class="num">{_e(pct)}</td><td class="num">{_e(limit)}</td><td>{_e(verdict)}</td></tr>'
        )
    table = (
        '<div class="scroll"><table class="data"><tr><th>metric</th><th></th><th>baseline</th><th>this report</th>'
        "<th>change</th><th>fail past</th><th></th></tr>" + "".join(rows) + "</table></div>"
    )
    new = _finding_cards(comparison.new_findings) or '<p class="note">None.</p>'
    resolved = _finding_cards(comparison.resolved_findings) or '<p class="note">None.</p>'
    return (
        f'<section id="comparison"><h2>Comparison</h2><p class="about">Against the baseline: {_e(comparison.baseline)}.</p>'
        f"{table}<h3>New findings</h3>{new}<h3>Findings no longer seen</h3>{resolved}</section>"
    )


def _section(section: Section, figures: list[tuple[str, Any]]) -> str:
    parts = [f'<section id="{_e(section.id)}"><h2>{_e(section.title)}</h2><p class="about">{_e(section.spec.about)}</p>']
    if section.findings:
        items = "".join(
            f'<li><span style="color: {theme.SEVERITY_COLOURS[f.severity]}">{_e(f.severity)}</span>: {_e(f.title)}</li>'
            for f in section.findings
        )
        parts.append(f"<ul>{items}</ul>")
    if section.empty_reason:
        parts.append(f'<p class="empty">{_e(section.empty_reason)}</p></section>')
        return "".join(parts)
    if section.error:
        parts.append(f'<p class="problem">Part of this section failed: {_e(section.error)}</p>')
    for name, markup in figures:
        parts.append(markup)
    for table in section.tables:
        parts.append(_table(table))
    parts.append("</section>")
    return "".join(parts)


def _charts(report: Report, section: Section, problems: list[str]) -> list[tuple[str, str]]:
    """(id, markup) of the section's charts; a chart that fails becomes a note."""
    if section.empty_reason:
        return []
    out = []
    for name, build in section_figures(report, section):
        div_id = f"chart-{section.id}-{name}"
        try:
            out.append((name, _chart(div_id, build())))
        except Exception as error:  # one broken chart must not lose the report
            problem = f"chart {div_id}: {type(error).__name__}: {one_line(error)}"
            problems.append(problem)
            out.append((name, f'<p class="problem">This chart failed: {_e(problem)}</p>'))
    return out


def _chart(div_id: str, figure: Any) -> str:
    from gpulens.dashboard.escape import escape_figure

    markup = pio.to_html(
        escape_figure(figure), full_html=False, include_plotlyjs=False, div_id=div_id, default_height=f"{HEIGHT_PX}px",
        config={"displaylogo": False, "responsive": True},
    )
    return f'<div class="chart">{markup}</div>'


def _table(table: TableResult) -> str:
    frame = table.frame
    spec = table.spec
    note = f" ({_e(spec.note)})" if spec.note else ""
    if not table.shown:
        return ""
    head = f'<h3 id="table-{_e(spec.name)}">{_e(spec.title)}</h3><p class="note"><code>{_e(spec.name)}</code>{note}, {counted(frame.height, "row")}</p>'
    if frame.is_empty():
        return head + '<p class="empty">No rows.</p>'
    columns = [c for c in spec.columns if c in frame.columns] or frame.columns
    shown = frame.select(columns).head(MAX_HTML_ROWS)
    first = _rows_html(shown.head(spec.html_rows), columns)
    rest = ""
    if shown.height > spec.html_rows:
        rest = (
            f"<details><summary>{counted(shown.height - spec.html_rows, 'more row')}</summary>"
            f'<div class="scroll"><table class="data">{_header_row(columns)}{_rows_html(shown.slice(spec.html_rows), columns)}'
            "</table></div></details>"
        )
    cut = f'<p class="note">The first {MAX_HTML_ROWS} rows; the JSON report has all {frame.height}.</p>' if frame.height > MAX_HTML_ROWS else ""
    return head + f'<div class="scroll"><table class="data">{_header_row(columns)}{first}</table></div>{rest}{cut}'


def _header_row(columns: list[str]) -> str:
    return "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"


def _rows_html(frame: pl.DataFrame, columns: list[str]) -> str:
    numeric = {c for c in columns if frame.schema[c].is_numeric()}
    out = []
    for row in frame.iter_rows(named=True):
        cells = "".join(
            _name_cell(row[c]) if c in NAME_COLUMNS and isinstance(row[c], str) else _cell(format_value(c, row[c]), c in numeric)
            for c in columns
        )
        out.append(f"<tr>{cells}</tr>")
    return "".join(out)


def _name_cell(name: str) -> str:
    """A kernel name: as it is where it fits, else its short name, which
    opens to the full one (the JSON report has it too)."""
    short = short_kernel_name(name, NAME_CHARS)
    if short == name:
        return _cell(name, False)
    return (f'<td class="text"><details class="name"><summary>{_e(short)}</summary>'
            f'<span class="full">{_e(name)}</span></details></td>')


def _cell(text: str, numeric: bool) -> str:
    kind = "num" if numeric else ("long" if len(text) > 40 else "text")
    return f'<td class="{kind}">{_e(text)}</td>'


def _data(report: Report) -> str:
    source = report.source
    parts = ['<section id="data"><h2>Data</h2>']
    where = f"the dataset <code>{_e(source.dataset)}</code>" if source.dataset else "a temporary dataset ingested from the inputs"
    parts.append(f'<p class="about">Made from {where}; inputs: {_e(", ".join(source.inputs))}.</p>')
    rows = "".join(f'<tr><td>{_e(t)}</td><td class="num">{n:,}</td></tr>' for t, n in source.rows.items() if n)
    parts.append(f'<h3>Rows per table</h3><div class="scroll"><table class="data"><tr><th>table</th><th>rows</th></tr>{rows}</table></div>')
    if source.hosts:
        parts.append("<h3>Telemetry</h3>" + _records_table(source.hosts, ["host", "models", "gpus", "samples", "first_ts_us", "last_ts_us"]))
    if source.runs:
        parts.append("<h3>Trace runs</h3>" + _records_table(source.runs, ["run", "ranks", "world_size", "formats", "hosts", "devices"]))
    if source.trace_files:
        parts.append("<h3>Trace files</h3>" + _records_table(source.trace_files, ["run", "rank", "source_format", "source_path"]))
    parts.append("</section>")
    return "".join(parts)


def _records_table(records: list[dict[str, Any]], columns: list[str]) -> str:
    head = _header_row(columns)
    body = "".join(
        "<tr>" + "".join(
            _cell(format_value(c, r.get(c)), isinstance(r.get(c), (int, float)) and not c.endswith("_ts_us")) for c in columns
        ) + "</tr>"
        for r in records
    )
    return f'<div class="scroll"><table class="data">{head}{body}</table></div>'
