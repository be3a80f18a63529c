"""Interconnect: NVLink/XGMI/PCIe throughput against the nominal peak."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.analysis import power, timeline
from gpulens.dashboard import charts
from gpulens.dashboard.app_pages.common import (
    NO_TELEMETRY, caption_dataset, chart, frame, naive, require_dataset, require_tables, table,
)

LINK_ORDER = ("nvlink", "xgmi", "pcie")

st.title("Interconnect")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("telemetry",), "telemetry", NO_TELEMETRY)

usage = frame(ds, power.interconnect_usage)
if usage.is_empty():
    st.info("The telemetry has no NVLink, XGMI or PCIe throughput readings.", icon=":material/info:")
    st.stop()

links = [link for link in LINK_ORDER if link in set(usage["link"].to_list())]
links += sorted(set(usage["link"].to_list()) - set(links))
coverage = frame(ds, timeline.telemetry_coverage)
first_ts, last_ts = naive(coverage["first_ts"].min()), naive(coverage["last_ts"].max())
interval_s = float(coverage["interval_s"].median() or 1.0)
bucket_s = timeline.bucket_seconds(max((last_ts - first_ts).total_seconds(), interval_s), interval_s, max_points=800)
series = frame(ds, power.interconnect_timeline, bucket_s=bucket_s)

summary = usage.group_by("link").agg(
    (pl.col("achieved_bytes_per_s").sum() / 1e9).alias("achieved_gb_s"),
    (pl.col("peak_bytes_per_s").sum() / 1e9).alias("peak_gb_s"),
)
cols = st.columns(max(len(links), 1))
for col, link in zip(cols, links):
    row = summary.filter(pl.col("link") == link).row(0, named=True)
    share = row["achieved_gb_s"] / row["peak_gb_s"] if row["peak_gb_s"] else None
    col.metric(f"{charts.LINK_NAMES.get(link, link)}: mean use of the peak",
               "–" if share is None else f"{share:.1%}",
               help="Mean achieved throughput over all GPUs and directions / the sum of their nominal peaks")

tabs = st.tabs([charts.LINK_NAMES.get(link, link) for link in links])
for tab, link in zip(tabs, links):
    with tab:
        chart(charts.interconnect_usage_figure(usage, link), key=f"interconnect_usage_{link}")
        chart(charts.interconnect_timeline_figure(series, link, bucket_s), key=f"interconnect_timeline_{link}")
        st.caption(f"Mean throughput per bucket of {bucket_s:g} s; the dashed black line is the nominal peak per direction.")

st.subheader("Untapped bandwidth per GPU")
table(
    usage.select(
        "host", "gpu_index", "link", "direction",
        (pl.col("achieved_bytes_per_s") / 1e9).round(2).alias("mean_gb_s"),
        (pl.col("p95_bytes_per_s") / 1e9).round(2).alias("p95_gb_s"),
        (pl.col("peak_bytes_per_s") / 1e9).round(1).alias("peak_gb_s"),
        (pl.col("utilisation") * 100).round(2).alias("mean_use_pct"),
        (pl.col("untapped_bytes_per_s") / 1e9).round(1).alias("untapped_gb_s"),
    ),
    hide_index=True, width="stretch",
)
