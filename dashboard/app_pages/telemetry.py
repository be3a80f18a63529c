"""Telemetry: power, utilisation, clocks, temperature and memory per GPU over time."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import streamlit as st

from gpulens.analysis import timeline
from gpulens.collector.wording import counted
from gpulens.dashboard import charts
from gpulens.dashboard.app_pages.common import (
    DEFAULT_GPUS_MAX, NO_TELEMETRY, caption_dataset, caption_hosts_shown, chart, default_hosts, frame, host_scope,
    hosts_of, require_dataset, require_tables, telemetry_bucket_s, telemetry_range,
)

DEFAULT_METRICS = ["power_w", "gpu_util_pct", "sm_clock_mhz", "temp_c", "mem_used_bytes"]

st.title("Telemetry")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("telemetry",), "telemetry", NO_TELEMETRY)

coverage = frame(ds, timeline.telemetry_coverage)
if coverage.is_empty():
    st.stop()
hosts_all = hosts_of(coverage)
first, end_max, interval_s = telemetry_range(coverage)

with st.container(border=True):
    c1, c2, c3 = st.columns([1, 1, 2])
    hosts_first = default_hosts(coverage)
    hosts = c1.multiselect("Hosts", hosts_all, default=hosts_first, key="telemetry_hosts",
                           help=None if len(hosts_first) == len(hosts_all) else
                           f"The page opens on the first hosts up to {DEFAULT_GPUS_MAX} GPUs in all: every GPU is a line "
                           "in each chart, and many lines keep the browser busy. Add hosts here.")
    gpu_choices = coverage.filter(pl.col("host").is_in(hosts))
    labels = {charts.gpu_label(h, g, len(hosts_all)): (h, g) for h, g in gpu_choices.select("host", "gpu_index").iter_rows()}
    picked = c2.multiselect("GPUs", list(labels), default=list(labels), key="telemetry_gpus")
    metrics = c3.multiselect(
        "Metrics", list(charts.TELEMETRY_METRICS), default=DEFAULT_METRICS, key="telemetry_metrics",
        format_func=lambda m: charts.TELEMETRY_METRICS[m][0],
    )
    if end_max - first > timedelta(seconds=1):
        step = timedelta(seconds=max(1, round(interval_s)))
        start, end = st.slider("Time range (UTC)", min_value=first, max_value=end_max, value=(first, end_max),
                               step=step, format="YYYY-MM-DD HH:mm:ss", key="telemetry_range")
    else:
        start, end = first, end_max

if not picked:
    st.info("Pick at least one GPU.", icon=":material/info:")
    st.stop()
span_s = max((end - start).total_seconds(), interval_s)
bucket_s = telemetry_bucket_s(start, end, interval_s)
# As the warm-up asks (common.default_telemetry_window, default_host_scope): one cache key.
series = frame(ds, timeline.telemetry_timeline, bucket_s, start, end, hosts=host_scope(hosts, hosts_all))
keep = pl.DataFrame({"host": [labels[p][0] for p in picked], "gpu_index": [labels[p][1] for p in picked]},
                    schema={"host": pl.String, "gpu_index": pl.Int32})
if series.height:
    series = series.join(keep, on=["host", "gpu_index"], how="semi")
caption_hosts_shown(hosts, hosts_all)
st.caption(
    f"{counted(len(picked), 'GPU')}, {span_s / 60:.1f} min in buckets of {bucket_s:g} s "
    f"(sampled every {interval_s:.3g} s): the line is the bucket's mean, the band its min–max "
    "(with three GPUs or fewer); shading in a GPU's colour marks the buckets in which that GPU was held back by "
    "power or heat (the legend names it)."
)
if series.is_empty():
    st.info("No telemetry in this time range.", icon=":material/info:")
    st.stop()
for metric in metrics:
    chart(charts.telemetry_figure(series, metric, bucket_s), key=f"telemetry_{metric}")
chart(charts.throttle_strip_figure(series), key="telemetry_throttle")
