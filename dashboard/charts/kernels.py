"""Kernels and their launches: kernel launch and queuing time (TKLQT) per
step, the distributions of launch delay and launch-call time, the kernels
with the most GPU time and the most short kernels, one step's kernels per
stream above their launch queues, and each rank's time breakdown.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
import polars as pl

from gpulens.analysis.names import short_kernel_name, unique_short_names
from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import (
    CUDA_LAUNCH_QUEUE_LIMIT, _DASHES, empty_figure, _layout, new_figure, _np, step_axis, time_unit,
)
from gpulens.dashboard.escape import plotly_text


def tklqt_figure(steps: pl.DataFrame) -> go.Figure:
    """Total kernel launch and queuing time per profiler step, one line per rank;
    past 16 ranks, the ranks' min-max band and median with the two ranks of
    lowest and highest mean TKLQT (128 lines were a tangle and a legend of 128).

    Markers only where there are few points (each is an SVG element of its
    own), and a tick per step only where there are few steps."""
    title = "Kernel launch and queuing time (TKLQT) per step"
    frame = steps.filter(pl.col("step").is_not_null()) if steps.height else steps
    if frame.is_empty():
        return empty_figure(title, "No profiler steps with launches.")
    mode = "lines+markers" if frame.height <= _MARKERS_MAX_POINTS else "lines"
    per_unit, unit = time_unit(frame["tklqt_ns"].max())
    fig = new_figure()
    lines = frame
    # A report of several runs: a line per run and rank (their steps are not each other's).
    key = ["run", "rank"] if "run" in frame.columns and frame["run"].n_unique() > 1 else ["rank"]
    ranks = frame.select(key).n_unique()
    if ranks > _TKLQT_RANK_LINES_MAX:
        _tklqt_spread(fig, frame, ranks, per_unit, unit)
        lines = _tklqt_extreme_ranks(frame, key)
    for i, group in enumerate(lines.sort(*key, "step").partition_by(key, maintain_order=True)):
        rank = int(group["rank"][0])
        name = f"{group['run'][0]} rank {rank}" if len(key) == 2 else f"rank {rank}"
        fig.add_trace(go.Scatter(
            x=group["step"].to_list(), y=(group["tklqt_ns"] / per_unit).to_list(), mode=mode, name=name,
            line={"color": theme.gpu_colour(i if len(key) == 2 else rank)}, customdata=list(zip(group["verdict"].to_list(), (group["gpu_idle_share"] * 100).to_list())),
            hovertemplate=f"{plotly_text(name)}, step %{{x}}<br>TKLQT %{{y:.2f}} {unit}<br>%{{customdata[0]}}, GPU idle %{{customdata[1]:.0f}}%<extra></extra>",
        ))
    step_axis(fig, frame["step"].to_list())
    return _layout(fig, title, "Profiler step", f"TKLQT ({unit})", legend_title="rank")


def _tklqt_spread(fig: go.Figure, frame: pl.DataFrame, ranks: int, per_unit: float, unit: str) -> None:
    """The ranks' minimum to maximum per step as a band, and their median."""
    spread = frame.group_by("step").agg(
        low=pl.col("tklqt_ns").min() / per_unit, median=pl.col("tklqt_ns").median() / per_unit,
        high=pl.col("tklqt_ns").max() / per_unit,
    ).sort("step")
    steps = spread["step"].to_list()
    band = {"color": "rgba(127, 127, 127, 0.25)", "width": 0}
    fig.add_trace(go.Scatter(x=steps, y=spread["high"].to_list(), mode="lines", line=band, name=f"all {ranks} ranks: max",
                             showlegend=False, hovertemplate=f"step %{{x}}: max %{{y:.2f}} {unit}<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=spread["low"].to_list(), mode="lines", line=band, fill="tonexty",
                             fillcolor=band["color"], name=f"all {ranks} ranks: min to max",
                             hovertemplate=f"step %{{x}}: min %{{y:.2f}} {unit}<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=spread["median"].to_list(), mode="lines", name="median rank",
                             line={"color": theme.LIMIT_LINE_COLOUR, "width": 2},
                             hovertemplate=f"step %{{x}}: median %{{y:.2f}} {unit}<extra></extra>"))


def _tklqt_extreme_ranks(frame: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """The rows of the ranks (of a run, where `key` names it) of lowest and
    highest mean TKLQT (the likeliest to be CPU- and GPU-bound), drawn beside the band."""
    means = frame.group_by(key).agg(pl.col("tklqt_ns").mean()).sort("tklqt_ns", *key)
    return frame.join(pl.concat([means.head(1), means.tail(1)]).select(key).unique(), on=key, how="semi")


# Ranks drawn one line each up to this many; past it, a band, the median and two ranks.
_TKLQT_RANK_LINES_MAX = 16
# Line charts draw markers up to this many points in all.
_MARKERS_MAX_POINTS = 100


def launch_histogram_figure(histogram: pl.DataFrame, metric: str) -> go.Figure:
    """A log-binned distribution of launch delay or launch-call time, one line per run."""
    what = {"launch_delay_ns": "Launch delay (call return to kernel start)",
            "launch_call_ns": "Launch call CPU time"}[metric]
    title = f"{what}: distribution"
    frame = histogram.filter(pl.col("metric") == metric) if histogram.height else histogram
    if frame.is_empty():
        return empty_figure(title, "No kernels linked to their launch calls.")
    fig = new_figure()
    runs = sorted(frame["run"].unique().to_list())
    for i, run in enumerate(runs):
        part = frame.filter(pl.col("run") == run).sort("bin_low_ns")
        x = [max(v, 0.5) / 1e3 for v in part["bin_low_ns"].to_list()] + [part["bin_high_ns"][-1] / 1e3]
        y = (part["share"] * 100).to_list() + [0.0]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": theme.GPU_COLOURS[i % len(theme.GPU_COLOURS)],
                                                              "dash": _DASHES[i % len(_DASHES)]},
                                 fill="tozeroy" if len(runs) == 1 else None, name=run,
                                 hovertemplate="%{x:.3g} µs: %{y:.1f}% of kernels<extra></extra>"))
    fig.update_xaxes(type="log")
    return _layout(fig, title, "Time (µs, log scale)", "Share of kernels (%)", legend_title="run")


def top_kernels_figure(stats: pl.DataFrame, top: int = 15) -> go.Figure:
    """The kernels with the most GPU time (summed over ranks), coloured by category."""
    title = f"Top {top} kernels by GPU time"
    if stats.is_empty():
        return empty_figure(title, "No kernels.")
    frame = (
        stats.group_by("name").agg(pl.col("category").first(), pl.col("total_ns").sum(), pl.col("kernel_count").sum())
        .sort("total_ns", "name", descending=[True, False]).head(top).reverse()
    )
    frame = frame.with_columns(pl.Series("label", unique_short_names(frame["name"].to_list())))
    per_unit, unit = time_unit(frame["total_ns"].max())
    fig = new_figure()
    for category in sorted(frame["category"].drop_nulls().unique().to_list()):
        part = frame.filter(pl.col("category") == category)
        fig.add_trace(go.Bar(
            y=part["label"].to_list(), x=(part["total_ns"] / per_unit).to_list(), orientation="h", name=category,
            marker={"color": theme.CATEGORY_COLOURS.get(category, theme.OTHER_COLOUR)},
            customdata=list(zip(part["name"].to_list(), part["kernel_count"].to_list())),
            hovertemplate=f"%{{customdata[0]}}<br>%{{x:.2f}} {unit} over %{{customdata[1]}} kernels<extra></extra>",
        ))
    fig.update_yaxes(categoryorder="array", categoryarray=frame["label"].to_list())
    return _layout(fig, title, f"GPU time, all ranks ({unit})", "Kernel", height=120 + 26 * frame.height, legend_title="category")


def short_kernels_figure(short: pl.DataFrame, top: int = 15) -> go.Figure:
    """The kernel names with the most short kernels (GPU time below the launch call's), over the ranks."""
    title = f"Short kernels: top {top} names by count"
    if short.is_empty():
        return empty_figure(title, "No kernel ran shorter than its launch call.")
    frame = (
        short.group_by("name").agg(pl.col("kernel_count").sum(), pl.col("gpu_ns").sum(), pl.col("launch_call_total_ns").sum())
        .sort("kernel_count", "name", descending=[True, False]).head(top).reverse()
    )
    frame = frame.with_columns(pl.Series("label", unique_short_names(frame["name"].to_list())))
    fig = new_figure(go.Bar(
        y=frame["label"].to_list(), x=frame["kernel_count"].to_list(), orientation="h", name="short kernels",
        marker={"color": theme.OTHER_COLOUR},
        customdata=list(zip(frame["name"].to_list(), (frame["gpu_ns"] / frame["kernel_count"] / 1e3).to_list(),
                            (frame["launch_call_total_ns"] / frame["kernel_count"] / 1e3).to_list())),
        hovertemplate="%{customdata[0]}<br>%{x} kernels: %{customdata[1]:.1f} µs on the GPU, "
                      "%{customdata[2]:.1f} µs to launch<extra></extra>",
    ))
    fig.update_yaxes(categoryorder="array", categoryarray=frame["label"].to_list())
    fig.update_layout(showlegend=False)
    return _layout(fig, title, "Short kernels, all ranks", "Kernel", height=120 + 26 * frame.height)


def kernel_timeline_figure(kernel_runs: pl.DataFrame, queue: pl.DataFrame | None = None) -> go.Figure:
    """One rank's kernels in one step, a row per stream, coloured by category;
    with `queue` (`timeline.step_queue_length` of the same window), each
    stream's launch queue below them, on the same time axis (zooming one
    zooms both), so a queue that drains lines up with the kernels it waited on.

    `kernel_runs` is `timeline.step_kernel_runs`: every kernel of the step,
    those less than a pixel apart merged into runs, so the chart draws all
    of the step's GPU time in at most a few thousand shapes. Each run is a
    rectangle in a filled outline, one trace (one SVG path) per category,
    drawn at least about a pixel wide as trace viewers do; as bars, or as
    line segments (each gap-separated segment its own path), thousands of
    them took the browser seconds. The hover comes from one invisible line
    through the runs' midpoints: a kernel's name and true times, or a run's
    kernel count, busy time and longest kernel. Coordinates go as numpy
    arrays, which Plotly ships as binary without checking each value.
    """
    if kernel_runs.is_empty():
        return empty_figure("Kernels per stream", "No kernels in this step.")
    run, rank, step = kernel_runs["run"][0], int(kernel_runs["rank"][0]), kernel_runs["step"][0]
    title = f"Kernels per stream: {run}, rank {rank}, step {step}"
    streams = sorted(kernel_runs["stream"].drop_nulls().unique().to_list())
    # Row 0 at the top: the first stream.
    rows = pl.DataFrame({"stream": streams, "row": list(range(len(streams) - 1, -1, -1))},
                        schema={"stream": kernel_runs.schema["stream"], "row": pl.Float64})
    frame = kernel_runs.join(rows, on="stream", how="inner").with_columns(
        (pl.col("offset_ns") / 1e6).alias("start_ms"), (pl.col("end_offset_ns") / 1e6).alias("end_ms"))
    window_ms = [kernel_runs["window_offset_ns"][0] / 1e6, kernel_runs["window_end_offset_ns"][0] / 1e6]
    min_width_ms = (window_ms[1] - window_ms[0]) / _TIMELINE_MIN_WIDTH_DIVISOR
    kernel_height = 160 + 60 * len(streams)
    with_queue = queue is not None and not queue.is_empty()
    if with_queue:
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06, figure=new_figure(),
                            row_heights=[kernel_height - 100, _QUEUE_PANEL_HEIGHT])
    else:
        fig = new_figure()
    on_top = {"row": 1, "col": 1} if with_queue else {}
    # The busiest category first, so the rarer ones are drawn over it.
    order = frame.group_by("category").agg(pl.col("busy_ns").sum()).sort("busy_ns", "category", descending=[True, False])
    for category in order["category"].drop_nulls().to_list():
        part = frame.filter(pl.col("category") == category)
        start = part["start_ms"].to_numpy()
        end = np.maximum(part["end_ms"].to_numpy(), start + min_width_ms)
        low = part["row"].to_numpy() - _TIMELINE_HALF_ROW
        high = low + 2 * _TIMELINE_HALF_ROW
        gap = np.full(len(start), np.nan)
        # float32 is ample to draw with (the hover keeps float64) and half the bytes.
        fig.add_trace(go.Scatter(
            x=np.column_stack([start, end, end, start, gap]).ravel().astype(np.float32),
            y=np.column_stack([low, low, high, high, gap]).ravel().astype(np.float32),
            mode="none", fill="toself", name=category, hoverinfo="skip",
            fillcolor=theme.CATEGORY_COLOURS.get(category, theme.OTHER_COLOUR),
        ), **on_top)
    hover = frame.sort("row", "start_ms", descending=[True, False])
    fig.add_trace(go.Scatter(
        x=((hover["start_ms"] + hover["end_ms"]) / 2).to_numpy(), y=hover["row"].to_numpy(),
        mode="lines", line={"color": "rgba(0, 0, 0, 0)", "width": 1}, showlegend=False, name="kernels",
        text=[_kernel_run_text(*row) for row in hover.select(
            "name", "category", "stream", "kernel_count", "busy_ns", "longest_ns", "offset_ns", "end_offset_ns").iter_rows()],
        # One colour for all: a colour per point costs Plotly a check per value.
        hoverlabel={"bgcolor": "white", "font": {"color": "#222222"}},
        hovertemplate="%{text}<extra></extra>",
    ), **on_top)
    fig.update_xaxes(range=window_ms)
    fig.update_yaxes(tickmode="array", tickvals=rows["row"].to_list(), ticktext=[f"stream {s}" for s in streams],
                     range=[-0.5, len(streams) - 0.5], zeroline=False, showgrid=False, **on_top)
    if not with_queue:
        return _layout(fig, title, "Time since step start (ms)", "Stream", height=kernel_height, legend_title="category")
    _queue_lines(fig, queue)
    fig.update_xaxes(title_text="Time since step start (ms)", row=2, col=1)
    fig.update_yaxes(title_text="Stream", row=1, col=1)
    return _layout(fig, title, height=kernel_height + _QUEUE_PANEL_HEIGHT, legend_title="category; launch queue")


def _queue_lines(fig: go.Figure, queue: pl.DataFrame) -> None:
    """Each stream's launch queue as a step line, in the figure's second row.

    Each pixel of `queue` is drawn as a waveform viewer draws a signal
    zoomed out: a vertical stroke from its shallowest to its deepest queue,
    then the level it leaves, so neither a brief peak nor a moment of an
    empty queue disappears. The legend gives each stream's mean, deepest
    and empty share over the window, exactly.
    """
    window_end_ms = queue["window_end_offset_ns"][0] / 1e6
    for i, stream in enumerate(sorted(queue["stream"].drop_nulls().unique().to_list())):
        part = queue.filter(pl.col("stream") == stream).sort("offset_ns")
        start, end = _np(part["offset_ns"], 1e-6), _np(part["end_offset_ns"], 1e-6)
        x = np.append(np.column_stack([start, start, end]).ravel(), window_end_ms)
        y = np.append(np.column_stack([_np(part["queue_min"]), _np(part["queue_max"]), _np(part["queue_last"])]).ravel(),
                      part["queue_last"][-1])
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines", line={"shape": "hv", "width": 1.5, "color": theme.GPU_COLOURS[i % len(theme.GPU_COLOURS)]},
            name=(f"stream {stream}: mean {part['mean_queue_length'][0]:,.1f}, max {part['max_queue_length'][0]:,}, "
                  f"empty {part['empty_share'][0]:.0%}"),
            hovertemplate=f"stream {stream}<br>%{{x:.3f}} ms: %{{y:,}} queued<extra></extra>",
        ), row=2, col=1)
    if queue["max_queue_length"].max() >= CUDA_LAUNCH_QUEUE_LIMIT // 2:
        fig.add_hline(y=CUDA_LAUNCH_QUEUE_LIMIT, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 1},
                      annotation={"text": f"{CUDA_LAUNCH_QUEUE_LIMIT:,}: CUDA blocks the next launch"},
                      annotation_position="top left", row=2, col=1)
    fig.update_yaxes(title_text="Queued launches", rangemode="tozero", row=2, col=1)


# The launch queue's panel under the kernel timeline, in pixels.
_QUEUE_PANEL_HEIGHT = 260


def _kernel_run_text(name: str, category: str, stream: int, kernel_count: int, busy_ns: int, longest_ns: int,
                     offset_ns: int, end_offset_ns: int) -> str:
    """A timeline hover: one kernel's name and times, or a merged run's summary."""
    where = f"{plotly_text(category)}, stream {stream}<br>start {offset_ns / 1e6:.3f} ms"
    if kernel_count == 1:
        return f"{plotly_text(short_kernel_name(name, 90))}<br>{where}, {busy_ns / 1e3:.1f} µs"
    span_ns = max(end_offset_ns - offset_ns, 1)
    return (f"{kernel_count:,} kernels: {busy_ns / 1e3:.1f} µs busy of {span_ns / 1e3:.1f} µs "
            f"({busy_ns / span_ns:.0%})<br>longest {plotly_text(short_kernel_name(name, 80))} ({longest_ns / 1e3:.1f} µs)<br>{where}")


# Half a stream's row: the rectangles' height, with a gap between rows.
_TIMELINE_HALF_ROW = 0.35
# The narrowest rectangle drawn: this fraction of the window's span.
_TIMELINE_MIN_WIDTH_DIVISOR = 1500


def time_breakdown_figure(breakdown: pl.DataFrame) -> go.Figure:
    """Per rank: the share of its span computing, communicating (exposed), copying, idle by cause."""
    title = "GPU time breakdown per rank"
    if breakdown.is_empty():
        return empty_figure(title, "No kernels in complete profiler steps.")
    # Parts of the span (ns / span_ns): the idle split is given as shares of idle time.
    parts = [("compute_ns", "compute", "compute"), ("communication_ns", "communication (exposed)", "communication"),
             ("memory_ns", "memory", "memory"), ("idle_host_wait_ns", "idle: waiting on the host", "idle_host_wait"),
             ("idle_kernel_wait_ns", "idle: between kernels", "idle_kernel_wait"),
             ("idle_other_ns", "idle: other", "idle_other")]
    frame = breakdown.sort("run", "rank")
    runs = frame["run"].unique().to_list()
    labels = [f"rank {r}" if len(runs) == 1 else f"{run} r{r}" for run, r in zip(frame["run"], frame["rank"])]
    fig = new_figure()
    for column, name, colour in parts:
        if column in frame.columns:
            share = frame[column].fill_null(0) / frame["span_ns"] * 100
            fig.add_trace(go.Bar(x=labels, y=share.to_list(), name=name,
                                 marker={"color": theme.CATEGORY_COLOURS[colour]},
                                 hovertemplate=f"%{{x}}: {name} %{{y:.1f}}%<extra></extra>"))
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "Rank", "Share of the rank's span (%)", legend_title="category")
