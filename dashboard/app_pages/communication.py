"""Communication: time and bus bandwidth by collective and message size against
the link peak, overlap with compute, arrival skew with the straggler ranking,
slow calls and all_to_all balance."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.analysis import communication, time_breakdown, timeline
from gpulens.analysis.communication import MIB
from gpulens.analysis.findings import format_duration_ns
from gpulens.dashboard import charts
from gpulens.dashboard.app_pages.common import (
    NO_TRACES, caption_dataset, chart, fmt_share, frame, require_dataset, require_tables, run_picker, table,
)

st.title("Communication")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("collectives", "kernels"), "kernel traces", NO_TRACES)

runs = frame(ds, timeline.trace_runs)
with_collectives = runs.filter(pl.col("collectives") > 0) if runs.height else runs
if with_collectives.is_empty():
    st.info("The traces hold no collectives (NCCL/RCCL calls).", icon=":material/info:")
    st.stop()
# First the run whose collectives ran on the GPU (an NCCL log alone has
# sizes but no GPU time: every chart of it would be a placeholder).
on_gpu = with_collectives["kernels"].fill_null(0) > 0
run = run_picker(with_collectives, key="communication_run", index=int(on_gpu.arg_max()) if on_gpu.any() else 0)


def _of_run(result: pl.DataFrame) -> pl.DataFrame:
    return result.filter(pl.col("run") == run) if result.height and "run" in result.columns else result


stats = _of_run(frame(ds, communication.collective_stats))
overlap = _of_run(frame(ds, time_breakdown.comm_overlap))
ranking = _of_run(frame(ds, communication.stragglers))

m = st.columns(4)
m[0].metric("Collective calls (all ranks)", f"{int(stats['count'].sum()):,}" if stats.height else "0")
m[1].metric("Collective GPU time (all ranks)", format_duration_ns(stats["total_ns"].sum()) if stats.height else "–")
if overlap.height and overlap["comm_ns"].sum():
    m[2].metric("Communication hidden under compute", fmt_share(overlap["overlapped_ns"].sum() / overlap["comm_ns"].sum()))
if ranking.height:
    top = ranking.sort("straggler_order").row(0, named=True)
    m[3].metric("Most likely straggler", f"rank {top['rank']}",
                help=f"Arrived last at {fmt_share(top['share_last'])} of decisive collectives (chance: {fmt_share(top['expected_share_last'])})")

st.header("Time and bandwidth")
left, right = st.columns(2)
with left:
    chart(charts.collective_time_figure(stats), key="communication_time")
with right:
    chart(charts.busbw_figure(stats), key="communication_busbw")
if stats.height:
    table(
        stats.select(
            "process_group", "op", "size_bucket_bytes", "group_size", "count",
            (pl.col("mean_ns") / 1e3).round(1).alias("mean_us"),
            (pl.col("busbw_bytes_per_s") / 1e9).round(1).alias("busbw_gb_s"),
            (pl.col("transfer_busbw_bytes_per_s") / 1e9).round(1).alias("transfer_busbw_gb_s"),
            "link_kind", (pl.col("peak_bytes_per_s") / 1e9).round(0).alias("peak_gb_s"),
            (pl.col("busbw_share_of_peak") * 100).round(1).alias("busbw_pct_of_peak"),
        ),
        hide_index=True, width="stretch",
    )

st.header("Overlap with compute")
chart(charts.overlap_figure(overlap), key="communication_overlap")

st.header("Arrival skew and stragglers")
skew = _of_run(frame(ds, timeline.skew_by_step))
chart(charts.skew_heatmap_figure(skew), key="communication_skew")
chart(charts.straggler_figure(ranking), key="communication_stragglers")
if ranking.height:
    table(
        ranking.sort("straggler_order").select(
            "straggler_order", "rank", pl.col("score").round(2), "decisive_instances", "last_count",
            (pl.col("share_last") * 100).round(1).alias("last_pct"),
            (pl.col("expected_share_last") * 100).round(1).alias("chance_pct"),
            (pl.col("mean_lateness_ns") / 1e3).round(1).alias("mean_lateness_us"),
            (pl.col("wait_caused_ns") / 1e6).round(2).alias("wait_caused_ms"),
        ),
        hide_index=True, width="stretch",
    )

outliers = _of_run(frame(ds, communication.collective_outliers))
with st.expander(f"Slow collective calls ({outliers.height})"):
    if outliers.height:
        table(outliers.select("process_group", "op", "seq", "bytes", (pl.col("transfer_ns") / 1e3).round(1).alias("transfer_us"),
                                     (pl.col("median_ns") / 1e3).round(1).alias("median_us"), pl.col("ratio_to_median").round(2)),
                     hide_index=True, width="stretch")
    else:
        st.caption("No call took much longer than the same collective usually does.")

balance = _of_run(frame(ds, communication.all_to_all_balance))
with st.expander(f"all_to_all balance ({balance['process_group'].n_unique() if balance.height else 0} process groups)"):
    if balance.height:
        st.caption("Data each rank received in all_to_all against the mean rank of the same calls: the rank that "
                   "receives the most sets every rank's time (uneven mixture-of-experts routing).")
        table(
            balance.sort("process_group", "rank").select(
                "process_group", "rank", "instances", (pl.col("received_bytes") / MIB).round(1).alias("received_mib"),
                pl.col("received_vs_mean").round(2), pl.col("max_received_vs_mean").round(2),
                (pl.col("most_received_share") * 100).round(1).alias("received_most_pct"),
                pl.col("peer_imbalance").round(2), (pl.col("mean_dur_ns") / 1e3).round(1).alias("mean_dur_us"),
            ),
            hide_index=True, width="stretch",
        )
    else:
        st.caption("No all_to_all calls with their element counts in this run.")
