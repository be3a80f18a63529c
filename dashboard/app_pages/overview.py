"""Overview: every finding in the dataset, most severe first, and what it covers."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.analysis import findings as findings_module
from gpulens.analysis.all_findings import all_findings
from gpulens.analysis import timeline
from gpulens.collector.wording import noun_for
from gpulens.dashboard import charts
from gpulens.dashboard.escape import markdown_code, markdown_text
from gpulens.dashboard.app_pages.common import (
    PAGES, caption_dataset, chart, counts, evidence_markdown, fetch, frame, page_key, require_dataset, table,
)

SEVERITY_ICONS = {"critical": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}
BADGE_COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}

st.title("Overview")
ds = require_dataset()
caption_dataset(ds)

rows = counts(ds)
coverage = frame(ds, timeline.telemetry_coverage)
runs = frame(ds, timeline.trace_runs)

hosts = coverage["host"].n_unique() if coverage.height else 0
gpus = coverage.select("host", "gpu_index").unique().height if coverage.height else 0
cols = st.columns(5)
cols[0].metric("Hosts", hosts)
cols[1].metric("GPUs", gpus)
cols[2].metric("Trace runs", runs.height)
cols[3].metric("Telemetry samples", f"{rows.get('telemetry', 0):,}")
cols[4].metric("Kernels", f"{rows.get('kernels', 0):,}")
if coverage.height:
    first, last = coverage["first_ts"].min(), coverage["last_ts"].max()
    span = last - first
    st.markdown(f"**Telemetry** covers {first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC ({span}).")
if runs.height:
    spans = []
    for row in runs.iter_rows(named=True):
        if row["first_ns"] is not None and row["time_base"] == "epoch":
            start = pl.Series([row["first_ns"]]).cast(pl.Datetime("ns", "UTC"))[0]
            spans.append(f"{markdown_code(row['run'])} from {start:%Y-%m-%d %H:%M:%S} UTC, {(row['last_ns'] - row['first_ns']) / 1e9:.3g} s")
        else:
            spans.append(f"{markdown_code(row['run'])} ({markdown_text(row['time_base'] or 'unknown')} clock)")
    st.markdown("**Traces**: " + "; ".join(spans) + ".")
if not rows.get("telemetry") and not rows.get("kernels"):
    st.info("This dataset has neither telemetry nor kernel traces yet.", icon=":material/info:")

st.header("Findings")


def _load_findings() -> list:
    found = fetch(ds, all_findings)
    return found if isinstance(found, list) else []


found = _load_findings()
if not found:
    st.success("No findings: nothing in this dataset crossed a threshold.", icon=":material/check_circle:")
else:
    by_severity = {s: sum(1 for f in found if f.severity == s) for s in findings_module.SEVERITIES}
    st.markdown(" · ".join(f":{BADGE_COLOURS[s]}-badge[{n} {s}]" for s, n in by_severity.items() if n))


def _show(finding) -> None:
    key = page_key(finding.page)
    with st.container(border=True):
        st.markdown(
            f":{BADGE_COLOURS[finding.severity]}-badge[{SEVERITY_ICONS[finding.severity]} {finding.severity}] "
            f"**{markdown_text(finding.title)}**"
        )
        subject = ", ".join(f"{k} {v}" for k, v in finding.subject.items())
        if subject:
            st.caption(f"{finding.id} · {markdown_text(subject)}")
        with st.expander("What it means and the numbers behind it"):
            st.markdown(markdown_text(finding.detail))
            # A Markdown table: a code block would load and run Streamlit's syntax
            # highlighter, 0.6 s of the overview's first load in a fresh tab.
            st.markdown(evidence_markdown(finding.evidence))
        script, title, icon = PAGES[key]
        st.page_link(script, label=f"Evidence: {title}", icon=icon)


# Findings of one kind and severity (one per rank, say) are shown once, the
# others listed under it, so one cause does not bury the rest.
groups: dict[tuple[str, str], list] = {}
for finding in found:
    groups.setdefault((finding.severity, finding.id), []).append(finding)
for (severity, finding_id), members in groups.items():
    _show(members[0])
    if len(members) > 1:
        more = len(members) - 1
        with st.expander(f"{more} more {finding_id.replace('_', ' ')} {noun_for(more, 'finding')} ({severity})"):
            for finding in members[1:]:
                subject = ", ".join(f"{k} {v}" for k, v in finding.subject.items())
                st.markdown(f"- {markdown_text(finding.title)}" + (f" · _{markdown_text(subject)}_" if subject else ""))

st.header("What the dataset covers")
if coverage.height or runs.height:
    chart(charts.coverage_figure(coverage, runs), key="overview_coverage")
left, right = st.columns(2)
with left:
    st.subheader("GPUs with telemetry")
    if coverage.height:
        table(
            coverage.select("host", "gpu_index", "model", "first_ts", "last_ts", "samples",
                            pl.col("interval_s").round(3)),
            hide_index=True, width="stretch",
        )
    else:
        st.caption("No telemetry.")
with right:
    st.subheader("Trace runs")
    if runs.height:
        table(runs.select("run", "ranks", "hosts", "device_name", "source_format", "time_base", "steps",
                                 "kernels", "collectives", "time_note"), hide_index=True, width="stretch")
    else:
        st.caption("No traces.")
with st.expander("Rows per table"):
    table(pl.DataFrame({"table": list(rows), "rows": list(rows.values())}), hide_index=True)
