"""Kernels and launches: CPU- or GPU-bound, TKLQT per step, launch distributions,
short and top kernels, and a timeline of one step's kernels per stream."""

from __future__ import annotations

from collections import Counter

import polars as pl
import streamlit as st

from gpulens.analysis import launch, time_breakdown, timeline
from gpulens.analysis.findings import format_duration_ns
from gpulens.dashboard import charts, data
from gpulens.dashboard.escape import markdown_text
from gpulens.dashboard.app_pages.common import (
    NO_TRACES, TIMELINE_STEP_INDEX, caption_dataset, chart, fetch, fmt_share, frame, require_dataset, require_tables,
    run_picker, table, timeline_choices, with_kernels,
)

VERDICT_WORDS = {"cpu_bound": "CPU-bound", "gpu_bound": "GPU-bound", "balanced": "balanced", "unknown": "undecided"}
SEVERITY_BADGES = {"critical": "red", "warning": "orange", "info": "blue"}

st.title("Kernels and launches")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("kernels",), "kernel traces", NO_TRACES)

runs = frame(ds, timeline.trace_runs)
run = run_picker(with_kernels(runs), key="kernels_run")
if run is None:
    st.stop()


def _of_run(result: pl.DataFrame) -> pl.DataFrame:
    return result.filter(pl.col("run") == run) if result.height and "run" in result.columns else result


# --- the verdict ---------------------------------------------------------------------------
st.header("CPU-bound or GPU-bound?")
ranks = _of_run(frame(ds, launch.launch_rank_summary))
if ranks.height:
    verdicts = Counter(ranks["verdict"].to_list())
    verdict, n = verdicts.most_common(1)[0]
    m = st.columns(4)
    m[0].metric("Verdict", VERDICT_WORDS.get(verdict, verdict),
                help="The verdict of most ranks, each rank's being the one that holds for most of its step time. "
                     "CPU-bound: the GPU idles while launches return quickly; GPU-bound: kernels queue behind "
                     "each other; undecided: idle time that launch timing does not explain.")
    m[1].metric("Ranks with that verdict", f"{n} of {ranks.height}")
    m[2].metric("GPU idle in the steps", fmt_share(ranks["gpu_idle_ns"].sum() / ranks["step_ns"].sum()))
    m[3].metric("Typical launch delay", format_duration_ns(ranks["step_launch_delay_p50_ns"].median(), missing="–"),
                help="Median over the ranks of each step's median launch delay (call return to kernel start)")
    with st.expander("Per rank"):
        table(ranks.select(
            "rank", "verdict", pl.col("verdict_share").round(2), "step_count", "kernel_count",
            pl.col("tklqt_share").round(2), (pl.col("gpu_idle_share") * 100).round(1).alias("gpu_idle_pct"),
            (pl.col("step_launch_delay_p50_ns") / 1e3).round(1).alias("launch_delay_p50_us"),
            "short_kernel_count", "launch_delay_outlier_count",
        ).sort("rank"), hide_index=True, width="stretch")
else:
    st.info("No kernels linked to their launch calls: the trace records no runtime API calls.", icon=":material/info:")
run_findings = [f for f in fetch(ds, launch.launch_findings) or [] if f.subject.get("run", run) == run]
if run_findings:
    with st.expander(f"Launch findings for this run ({len(run_findings)})", expanded=len(run_findings) <= 2):
        for finding in run_findings:
            st.markdown(f":{SEVERITY_BADGES[finding.severity]}-badge[{finding.severity}] {markdown_text(finding.title)}")

breakdown = _of_run(frame(ds, time_breakdown.time_breakdown))
chart(charts.time_breakdown_figure(breakdown), key="kernels_breakdown")
copies = _of_run(frame(ds, time_breakdown.memcpy_stats))
if copies.height:
    with st.expander(f"Memory copies and sets ({copies['copy_count'].sum():,})"):
        st.caption("Per rank, direction and the memory at each end. Pageable host memory is staged by the driver "
                   "through a pinned buffer, and the launching CPU thread waits for the copy.")
        table(copies.select(
            "rank", "kind", "direction", "src_memory", "dst_memory", "pageable", "copy_count",
            (pl.col("bytes") / 2**20).round(2).alias("MiB"), (pl.col("total_ns") / 1e3).round(1).alias("total_us"),
            (pl.col("bytes_per_s") / 1e9).round(2).alias("GB_per_s"), (pl.col("time_share") * 100).round(2).alias("time_pct"),
        ), hide_index=True, width="stretch")


def _stall_expander(per_step: pl.DataFrame, idle_column: str, title: str, idle_words: str, caption: str,
                    columns: list[str | pl.Expr]) -> None:
    """Per step: what the loop waited on, with the GPU's idle share of step time in the title (opened past 10 %)."""
    if not per_step.height:
        return
    known = per_step.filter(pl.col(idle_column).is_not_null())
    idle = known[idle_column].sum() / known["step_ns"].sum() if known.height else None
    label = f"{title} per step" if idle is None else f"{title}: the GPU idle {fmt_share(idle)} of step time {idle_words}"
    with st.expander(label, expanded=idle is not None and idle >= 0.1):
        st.caption(caption)
        table(per_step.select("rank", "step", *columns).sort("rank", "step"), hide_index=True, width="stretch")


_stall_expander(
    _of_run(frame(ds, launch.data_loading)), "load_gpu_idle_ns", "Data loading", "while batches loaded",
    "Each step's fetches from a DataLoader (next() on its iterator, in the training loop's thread) and the GPU "
    "idle time within them, per rank; None where it cannot be known (the rank's last step, a fetch before its "
    "first kernel).",
    ["load_count", (pl.col("load_ns") / 1e6).round(3).alias("load_ms"),
     (pl.col("load_gpu_idle_ns") / 1e6).round(3).alias("gpu_idle_ms"),
     (pl.col("load_share") * 100).round(1).alias("load_pct_of_step"),
     (pl.col("load_gpu_idle_share") * 100).round(1).alias("gpu_idle_pct_of_step")],
)
_stall_expander(
    _of_run(frame(ds, launch.host_syncs)), "sync_gpu_idle_ns", "Synchronising calls", "after they drained it",
    "Calls that made the CPU wait for the GPU (cudaStreamSynchronize behind .item() or a copy to the host, "
    "synchronize, blocking copies), per rank and step, with the operators behind them and the GPU idle time "
    "after each that drained the queue; None where it cannot be known.",
    ["sync_count", (pl.col("sync_ns") / 1e6).round(3).alias("sync_ms"),
     (pl.col("sync_gpu_idle_ns") / 1e6).round(3).alias("gpu_idle_ms"),
     (pl.col("sync_gpu_idle_share") * 100).round(1).alias("gpu_idle_pct_of_step"),
     pl.col("sync_calls").list.join(", "), pl.col("sync_ops").list.join(", ")],
)

# --- launches ------------------------------------------------------------------------------
st.header("Launches")
steps = _of_run(frame(ds, launch.step_launch_summary))
chart(charts.tklqt_figure(steps), key="kernels_tklqt")
histogram = _of_run(frame(ds, timeline.launch_histogram))
graphs = _of_run(frame(ds, launch.graph_launches)).filter(pl.col("replays") > 0)
if graphs.height:
    kernels, replays = graphs["graph_kernels"].sum(), graphs["replays"].sum()
    share = kernels / graphs["launched_kernels"].sum()
    st.caption(f"{kernels:,} GPU activities ({share:.0%} of those launched) ran from {replays:,} CUDA or HIP graph "
               "replays: one call launched each replay's kernels, so they are left out of the launch delays, "
               "launch-call times and short kernels below (`graph_launches` has them per rank).")
left, right = st.columns(2)
with left:
    chart(charts.launch_histogram_figure(histogram, "launch_delay_ns"), key="kernels_delay")
with right:
    chart(charts.launch_histogram_figure(histogram, "launch_call_ns"), key="kernels_call")

st.subheader("Short kernels")
st.caption("Kernels that run for less time on the GPU than their launch call takes on the CPU: "
           "candidates for fusion or CUDA graphs.")
short = _of_run(frame(ds, launch.short_kernels))
chart(charts.short_kernels_figure(short), key="kernels_short")
if short.height:
    table(short.select(
        "rank", "name", "kernel_count", (pl.col("gpu_mean_ns") / 1e3).round(2).alias("gpu_mean_us"),
        (pl.col("launch_call_total_ns") / pl.col("kernel_count") / 1e3).round(2).alias("launch_call_mean_us"),
        (pl.col("kernel_share") * 100).round(2).alias("kernel_pct"),
    ).sort("kernel_count", descending=True).head(500), hide_index=True, width="stretch")

outliers = _of_run(frame(ds, launch.launch_outliers))
with st.expander(f"Launch outliers ({outliers.height} kernel names)"):
    if outliers.height:
        table(outliers.select("rank", "outlier_kind", "name", "kernel_count",
                                     (pl.col("mean_ns") / 1e3).round(1).alias("mean_us"),
                                     (pl.col("max_ns") / 1e3).round(1).alias("max_us")).head(500),
                     hide_index=True, width="stretch")
    else:
        st.caption("No launch call or launch delay far beyond the usual.")
queue = _of_run(frame(ds, launch.queue_length))
with st.expander(f"Launch queue per stream, whole trace ({queue.height} streams)"):
    st.caption("Per stream over the complete profiler steps, the GPU activities launched and not yet started, "
               "summarised as Holistic Trace Analysis does (over the queue's changes), its mean over time, and the "
               f"time the queue held CUDA's {charts.CUDA_LAUNCH_QUEUE_LIMIT:,} pending launches, when the next launch "
               "call blocks the CPU. Kernels replayed from CUDA graphs are not counted.")
    if queue.height:
        table(queue.select(
            "rank", "stream", "change_count", pl.col("mean_queue_length").round(2), pl.col("std_queue_length").round(2),
            "min_queue_length", "p25_queue_length", "p50_queue_length", "p75_queue_length", "max_queue_length",
            pl.col("time_mean_queue_length").round(2), (pl.col("full_queue_ns") / 1e6).round(3).alias("full_queue_ms"),
        ), hide_index=True, width="stretch")
flip = frame(ds, launch.launch_flip)
if flip.height:
    st.subheader("Batch size where the verdict flips")
    table(flip, hide_index=True, width="stretch")

# --- kernels ---------------------------------------------------------------------------------
st.header("Kernels")
stats = _of_run(frame(ds, time_breakdown.kernel_stats))
chart(charts.top_kernels_figure(stats), key="kernels_top")

st.subheader("Timeline of one step")
rank_list, step_numbers = timeline_choices(steps)
if rank_list and step_numbers:
    c1, c2, c3 = st.columns([1, 1, 3])
    rank = c1.selectbox("Rank", rank_list, key="kernels_rank")
    step = c2.selectbox("Step", step_numbers, index=min(TIMELINE_STEP_INDEX, len(step_numbers) - 1), key="kernels_step")
    # Built when clicked (a callable), not at each run of the page.
    st.download_button(
        f"Download step {step} as a Perfetto trace", icon=":material/download:", on_click="ignore",
        data=lambda: data.perfetto_trace(ds, run, (int(step), int(step))), file_name=f"{run}-step{step}.json.gz",
        mime="application/gzip", key="kernels_perfetto",
        help="Every rank of this run over this step (kernels, CPU threads, collectives and the GPUs' telemetry on "
             "one timeline) for ui.perfetto.dev or chrome://tracing: `gpulens export perfetto --steps`.")
    step_ns = steps.filter((pl.col("rank") == rank) & (pl.col("step") == step))["step_ns"].max() or 0
    step_ms = round(step_ns / 1e6, 3)
    window_ms = c3.slider("Window (ms after the step's start)", 0.0, max(step_ms, 0.001), (0.0, max(step_ms, 0.001)),
                          step=0.001, format="%.3f", key=f"kernels_window_{rank}_{step}",
                          help="Narrow the window to see the kernels that the whole step's view merges: "
                               "kernels less than a pixel apart are drawn as one run.")
    whole_step = window_ms[0] <= 0 and window_ms[1] >= step_ms
    # The whole step's arguments are the server's warm-up's (`common.default_timeline_step`): the same cache entry.
    window_ns = () if whole_step else (int(window_ms[0] * 1e6), int(window_ms[1] * 1e6))
    kernel_runs = frame(ds, timeline.step_kernel_runs, run, int(rank), int(step), *window_ns)
    if kernel_runs.height:
        merged = kernel_runs.filter(pl.col("kernel_count") > 1)
        st.caption(f"{kernel_runs['kernels_in_window'][0]:,} kernels in {kernel_runs.height:,} shapes"
                   + (f": {merged['kernel_count'].sum():,} of them less than "
                      f"{format_duration_ns(kernel_runs['pixel_ns'][0])} apart drawn as {merged.height:,} runs "
                      "(hover one for its kernels; narrow the window to separate them)." if merged.height else "."))
    queue = frame(ds, timeline.step_queue_length, run, int(rank), int(step), *window_ns)
    chart(charts.kernel_timeline_figure(kernel_runs, queue), key="kernels_timeline")
    if queue.height:
        st.caption("Below the kernels, each stream's launch queue: the kernels, copies and sets whose launch call "
                   "has started and that have not yet started on the GPU (kernels a CUDA graph launched not counted). Near 0 the GPU "
                   "waits for the CPU to "
                   "launch (CPU-bound); deep, the CPU runs ahead (GPU-bound); at "
                   f"{charts.CUDA_LAUNCH_QUEUE_LIMIT:,} CUDA blocks the next launch call until the GPU catches up.")
else:
    st.caption(f"Run {markdown_text(run)} has no profiler steps: no step to draw.")
