"""Live: the last minutes of every GPU of a running collector's dataset,
refreshed on its own (a fragment with `run_every`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import streamlit as st

from gpulens.analysis import timeline
from gpulens.dashboard import charts
from gpulens.dashboard import data
from gpulens.dashboard.escape import markdown_text
from gpulens.dashboard.app_pages.common import (
    NO_TELEMETRY, caption_dataset, caption_hosts_shown, chart, dataset, default_hosts, frame, host_scope, hosts_of,
    naive,
)

LIVE_METRICS = ("power_w", "gpu_util_pct", "sm_clock_mhz", "temp_c")
# Data this old says the collector flushes seldom (a hint is shown)...
FLUSH_HINT_AFTER_S = 15
# ...and this old, that it has stopped (no hint).
STOPPED_AFTER_S = 600

st.title("Live")
caption_dataset(dataset())
c1, c2 = st.columns(2)
minutes = c1.select_slider("Window", options=[1, 2, 5, 10, 15, 30, 60], value=5, key="live_minutes",
                           format_func=lambda m: f"last {m} min")
refresh_s = c2.select_slider("Refresh every", options=[1, 2, 5, 10, 30], value=5, key="live_refresh",
                             format_func=lambda s: f"{s} s")


@st.fragment(run_every=timedelta(seconds=refresh_s))
def live_view() -> None:
    current = dataset()  # fingerprinted afresh: a new flush is new data
    problem = data.problem(current)
    if problem is not None:  # a collector may not have flushed yet: keep looking
        st.info(f"{problem} Waiting for data; this view refreshes every {refresh_s} s.", icon=":material/hourglass_empty:")
        return
    coverage = frame(current, timeline.telemetry_coverage)
    if coverage.is_empty():
        st.info(f"No telemetry yet. {NO_TELEMETRY} This view refreshes every {refresh_s} s.", icon=":material/info:")
        return
    hosts_all = hosts_of(coverage)
    hosts = hosts_all
    if len(hosts_all) > 1:
        hosts = st.multiselect("Hosts", hosts_all, default=default_hosts(coverage), key="live_hosts")
        caption_hosts_shown(hosts, hosts_all)
        coverage = coverage.filter(pl.col("host").is_in(hosts))
        if coverage.is_empty():
            st.info("Pick at least one host.", icon=":material/info:")
            return
    last = naive(coverage["last_ts"].max())
    start = last - timedelta(minutes=minutes)
    interval_s = float(coverage["interval_s"].median() or 1.0)
    bucket_s = timeline.bucket_seconds(minutes * 60, interval_s, max_points=600)
    series = frame(current, timeline.telemetry_timeline, bucket_s=bucket_s, start=start, end=last + timedelta(seconds=bucket_s),
                   hosts=host_scope(hosts, hosts_all))
    age_s = (datetime.now(timezone.utc).replace(tzinfo=None) - last).total_seconds()
    latest = series.sort("bucket_start").group_by("host", "gpu_index").last().sort("host", "gpu_index") if series.height else series
    st.caption(f"Last sample {last:%Y-%m-%d %H:%M:%S} UTC ({_age(age_s)} ago), buckets of {bucket_s:g} s; "
               f"refreshed {datetime.now(timezone.utc):%H:%M:%S} UTC.")
    if FLUSH_HINT_AFTER_S < age_s < STOPPED_AFTER_S:
        # Samples reach the files at each flush: the view can be no fresher than that.
        st.caption(f"The collector writes its samples at each flush, every `--flush-every` seconds (60 by default). "
                   f"For a view at most a few seconds behind, run it with `--flush-every {refresh_s}`.")
    if latest.height:
        cols = st.columns(min(latest.height, 8))
        for i, row in enumerate(latest.iter_rows(named=True)):
            power = row["power_w_mean"]
            cols[i % len(cols)].metric(
                markdown_text(charts.gpu_label(row["host"], row["gpu_index"], len(hosts_all))),
                "–" if power is None else f"{power:.0f} W",
                help="Mean power in the last bucket",
            )
    for metric in LIVE_METRICS:
        chart(charts.telemetry_figure(series, metric, bucket_s, title=f"{charts.TELEMETRY_METRICS[metric][0]}, last {minutes} min",
                                      height=280), key=f"live_{metric}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


live_view()
