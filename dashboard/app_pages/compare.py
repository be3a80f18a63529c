"""Compare: two runs side by side, per kernel and per collective."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.analysis import metrics, timeline
from gpulens.collector.wording import counted
from gpulens.dashboard import charts
from gpulens.dashboard.app_pages.common import (
    NO_TRACES, caption_dataset, chart, fetch, frame, require_dataset, require_tables, table, with_kernels,
)
from gpulens.dashboard.report.format import format_value

st.title("Compare runs")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("kernels",), "kernel traces", NO_TRACES)

runs = frame(ds, timeline.trace_runs)
names = runs["run"].to_list() if runs.height else []
if len(names) < 2:
    st.info(f"The dataset holds {counted(len(names), 'run')}; comparing needs two. Ingest another run "
            "(`gpulens ingest TRACES --out DATASET --run NAME`).", icon=":material/info:")
    st.stop()

# Open on the first two runs with kernels (an NCCL log alone has none to compare).
first = with_kernels(runs)["run"].to_list()[:2]
first += [name for name in names if name not in first][:2 - len(first)]
c1, c2 = st.columns(2)
run_a = c1.selectbox("Run A (before)", names, index=names.index(first[0]), key="compare_a")
run_b = c2.selectbox("Run B (after)", names, index=names.index(first[1]), key="compare_b")
if run_a == run_b:
    st.info("Pick two different runs.", icon=":material/info:")
    st.stop()

side = runs.filter(pl.col("run").is_in([run_a, run_b])).select(
    "run", "ranks", "steps", "kernels", "collectives", "device_name", "hosts",
    ((pl.col("last_ns") - pl.col("first_ns")) / 1e6).round(2).alias("span_ms"),
)
table(side, hide_index=True, width="stretch")

# The numbers `gpulens report --compare` checks, for the two runs alone.
per_run = fetch(ds, metrics.compute_run_metrics, (run_a, run_b)) or {}
shown = [m for m in metrics.METRICS if any(per_run.get(run, {}).get(m.key) is not None for run in (run_a, run_b))]
if shown:
    st.header("Headline metrics")
    st.caption("Each run's own, as `gpulens report` gives them per run; the change is B against A, and "
               "whether it is better follows each metric's direction.")
    rows = []
    for m in shown:
        # the change as `--compare` measures it, B against A as the baseline
        delta = metrics.MetricDelta(m, per_run[run_a].get(m.key), per_run[run_b].get(m.key), None)
        pct = delta.delta_pct
        verdict = "–" if not pct else ("worse" if (delta.worse_pct or 0.0) > 0 else "better")
        rows.append({"metric": m.name, "A": format_value(m.key, delta.baseline), "B": format_value(m.key, delta.current),
                     "change": "–" if pct is None else f"{pct / 100:+.1%}", "verdict": verdict, "what": m.label})
    table(pl.DataFrame(rows), hide_index=True, width="stretch")

st.header("Per kernel")
kernels = frame(ds, timeline.compare_kernels, run_a, run_b)
chart(charts.kernel_delta_figure(kernels, run_a, run_b), key="compare_kernels")
if kernels.height:
    a_total, b_total = kernels["per_step_ns_a"].sum(), kernels["per_step_ns_b"].sum()
    m = st.columns(3)
    m[0].metric("Kernel time per rank-step, A", f"{a_total / 1e6:.3f} ms")
    m[1].metric("Kernel time per rank-step, B", f"{b_total / 1e6:.3f} ms",
                delta=f"{(b_total - a_total) / 1e6:+.3f} ms", delta_color="inverse")
    m[2].metric("Kernel names in one run only", kernels.filter(pl.col("per_step_ns_a").is_null() | pl.col("per_step_ns_b").is_null()).height)
    table(
        kernels.select(
            "name", "category",
            (pl.col("per_step_ns_a") / 1e3).round(2).alias("A_us_per_rank_step"),
            (pl.col("per_step_ns_b") / 1e3).round(2).alias("B_us_per_rank_step"),
            (pl.col("delta_per_step_ns") / 1e3).round(2).alias("delta_us"),
            pl.col("ratio").round(3), "kernel_count_a", "kernel_count_b",
        ),
        hide_index=True, width="stretch",
    )

st.header("Per collective")
collectives = frame(ds, timeline.compare_collectives, run_a, run_b)
chart(charts.collective_delta_figure(collectives, run_a, run_b), key="compare_collectives")
if collectives.height:
    table(
        collectives.select(
            "op", "size_bucket_bytes", "count_a", "count_b",
            (pl.col("mean_ns_a") / 1e3).round(1).alias("A_mean_us"), (pl.col("mean_ns_b") / 1e3).round(1).alias("B_mean_us"),
            (pl.col("busbw_bytes_per_s_a") / 1e9).round(1).alias("A_busbw_gb_s"),
            (pl.col("busbw_bytes_per_s_b") / 1e9).round(1).alias("B_busbw_gb_s"), pl.col("busbw_ratio").round(3),
        ),
        hide_index=True, width="stretch",
    )
