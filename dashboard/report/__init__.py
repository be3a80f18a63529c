"""Batch reports: `gpulens report` as HTML, Markdown or JSON.

    from gpulens.dashboard.report import build_report, render_html
    report = build_report(Path("gpulens-data"))
    Path("report.html").write_text(render_html(report))

`build` collects the findings and every analysis's tables (from
`analysis` only), `html` / `markdown` / `jsonout` render them, `compare`
computes deltas against a baseline, `command` is the click command.
"""

from gpulens.dashboard.report.build import Report, build_report
from gpulens.dashboard.report.html import render_html
from gpulens.dashboard.report.jsonout import render_json, report_to_dict
from gpulens.dashboard.report.markdown import render_markdown

__all__ = ["Report", "build_report", "render_html", "render_json", "render_markdown", "report_to_dict"]
