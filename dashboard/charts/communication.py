"""Collective communication: GPU time and bus bandwidth by op and message
size, communication hidden under compute against exposed, the ranks'
arrival skew per step, and the straggler ranking.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import (
    GB, LINK_NAMES, _STEP_TICKS_MAX, _alpha, empty_figure, _layout, new_figure, size_label, _step_ticks, time_unit,
)


def collective_time_figure(stats: pl.DataFrame) -> go.Figure:
    """GPU time per collective op and message size (all ranks), coloured by op."""
    title = "Collective time by op and message size"
    if stats.is_empty():
        return empty_figure(title, "No collectives.")
    if stats["total_ns"].null_count() == stats.height:  # no kernel behind any of them
        return empty_figure(title, "No collectives with GPU time (NCCL logs record sizes only; a group of one rank runs no kernel).")
    frame = stats.group_by("op", "size_bucket_bytes").agg(pl.col("total_ns").sum(), pl.col("count").sum()).sort("size_bucket_bytes", "op")
    sizes = [size_label(s) for s in frame.select(pl.col("size_bucket_bytes").unique().sort())["size_bucket_bytes"]]
    per_unit, unit = time_unit(frame["total_ns"].max())
    fig = new_figure()
    for op in sorted(frame["op"].unique().to_list()):
        part = frame.filter(pl.col("op") == op)
        fig.add_trace(go.Bar(x=[size_label(s) for s in part["size_bucket_bytes"]], y=(part["total_ns"] / per_unit).to_list(), name=op,
                             marker={"color": theme.collective_colour(op)}, customdata=part["count"].to_list(),
                             hovertemplate=f"{op} %{{x}}: %{{y:.2f}} {unit} over %{{customdata}} calls<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=sizes)
    fig.update_layout(barmode="group")
    return _layout(fig, title, "Message size bucket", f"GPU time, all ranks ({unit})", legend_title="collective")


def busbw_figure(stats: pl.DataFrame) -> go.Figure:
    """Bus bandwidth per op and message size against the nominal peak of the link."""
    title = "Bus bandwidth by message size against the link peak"
    frame = stats.filter(pl.col("busbw_bytes_per_s").is_not_null()) if stats.height else stats
    if frame.is_empty():
        return empty_figure(title, "No timed collectives with a known size.")
    fig = new_figure()
    for op in sorted(frame["op"].unique().to_list()):
        part = frame.filter(pl.col("op") == op).sort("size_bucket_bytes")
        colour = theme.collective_colour(op)
        fig.add_trace(go.Scatter(
            x=part["size_bucket_bytes"].to_list(), y=(part["busbw_bytes_per_s"] / GB).to_list(), mode="lines+markers", name=f"{op}",
            line={"color": colour}, marker={"size": 9},
            customdata=list(zip([size_label(s) for s in part["size_bucket_bytes"]], part["count"].to_list())),
            hovertemplate=f"{op} %{{customdata[0]}}: busbw %{{y:.1f}} GB/s (%{{customdata[1]}} calls)<extra></extra>",
        ))
        if "transfer_busbw_bytes_per_s" in part.columns and part["transfer_busbw_bytes_per_s"].null_count() < part.height:
            fig.add_trace(go.Scatter(
                x=part["size_bucket_bytes"].to_list(), y=(part["transfer_busbw_bytes_per_s"] / GB).to_list(), mode="markers",
                name=f"{op} transfer only", marker={"color": colour, "symbol": "circle-open", "size": 11},
                hovertemplate=f"{op}: transfer busbw %{{y:.1f}} GB/s (waiting for late ranks left out)<extra></extra>",
            ))
    peaks = frame.filter(pl.col("peak_bytes_per_s").is_not_null()).group_by("link_kind").agg(pl.col("peak_bytes_per_s").min())
    for link, peak in peaks.sort("link_kind").iter_rows():
        fig.add_hline(y=peak / GB, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"{LINK_NAMES.get(link, link)} peak {peak / GB:.0f} GB/s",
                                 line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2}))
    fig.update_xaxes(type="log", tickvals=_pow2_ticks(frame["size_bucket_bytes"]),
                     ticktext=[size_label(v) for v in _pow2_ticks(frame["size_bucket_bytes"])])
    return _layout(fig, title, "Message size (log scale)", "Bus bandwidth (GB/s)", legend_title="collective")


def _pow2_ticks(sizes: pl.Series) -> list[int]:
    values = [v for v in sizes.drop_nulls().to_list() if v > 0]
    if not values:
        return []
    low, high = min(values).bit_length() - 1, max(values).bit_length() - 1
    step = max(1, (high - low) // 5 + 1)
    return [1 << k for k in range(low, high + 1, step)]


def overlap_figure(overlap: pl.DataFrame) -> go.Figure:
    """Per rank: communication hidden under compute and exposed communication."""
    title = "Communication overlapped with compute vs exposed, per rank"
    if overlap.is_empty() or overlap["comm_ns"].fill_null(0).sum() == 0:
        return empty_figure(title, "No communication kernels.")
    frame = overlap.sort("run", "rank")
    runs = frame["run"].unique().to_list()
    labels = [f"rank {r}" if len(runs) == 1 else f"{run} r{r}" for run, r in zip(frame["run"], frame["rank"])]
    colour = theme.CATEGORY_COLOURS["communication"]
    per_unit, unit = time_unit(frame["comm_ns"].max())
    fig = new_figure()
    fig.add_trace(go.Bar(x=labels, y=(frame["overlapped_ns"] / per_unit).to_list(), name="overlapped with compute",
                         marker={"color": _alpha(colour, 0.35), "line": {"color": colour, "width": 1}},
                         customdata=(frame["overlap_share"].fill_null(0) * 100).to_list(),
                         hovertemplate=f"%{{x}}: %{{y:.2f}} {unit} hidden (%{{customdata:.0f}}%)<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=(frame["exposed_ns"] / per_unit).to_list(), name="exposed", marker={"color": colour},
                         customdata=(frame["exposed_share"].fill_null(0) * 100).to_list(),
                         hovertemplate=f"%{{x}}: %{{y:.2f}} {unit} exposed (%{{customdata:.1f}}% of the span)<extra></extra>"))
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "Rank", f"Communication time ({unit})", legend_title="communication")


def skew_heatmap_figure(skew: pl.DataFrame) -> go.Figure:
    """Rank × step: mean arrival lateness at collectives (red: later than most).

    At most about `_HEATMAP_MAX_CELLS` cells: with more steps than fit,
    consecutive steps share a column (its mean lateness weighted by
    collectives, the hover naming its steps). A tick per step only up to
    `_STEP_TICKS_MAX` columns and a label per rank only up to
    `_RANK_LABELS_MAX` ranks: Plotly measures every tick label's text, and
    1,000 steps at one tick each kept Chromium busy for 90 s."""
    title = "Arrival skew: mean lateness at collectives, rank × step"
    frame = skew.filter(pl.col("step").is_not_null()) if skew.height else skew
    if frame.is_empty():
        return empty_figure(title, "No collectives seen by more than one rank within profiler steps.")
    ranks = frame["rank"].n_unique()
    first_step, last_step = int(frame["step"].min()), int(frame["step"].max())
    columns = max(_HEATMAP_MIN_COLUMNS, min(_HEATMAP_MAX_COLUMNS, _HEATMAP_MAX_CELLS // ranks))
    width = -(-(last_step - first_step + 1) // columns)  # steps per column
    cells = (
        frame.with_columns(column=first_step + (pl.col("step") - first_step) // width * width)
        .group_by("rank", "column")
        .agg(lateness_us=(pl.col("mean_lateness_ns") * pl.col("collectives")).sum() / pl.col("collectives").sum() / 1e3)
    )
    wide = cells.pivot(on="column", index="rank", values="lateness_us").sort("rank")
    column_names = sorted((c for c in wide.columns if c != "rank"), key=int)
    x = [int(c) for c in column_names]
    z = wide.select(column_names).rows()
    limit = max((abs(v) for row in z for v in row if v is not None), default=1.0) or 1.0
    labelled = ranks <= _RANK_LABELS_MAX
    heatmap: dict[str, Any] = {
        "x": x, "y": [f"rank {r}" for r in wide["rank"]] if labelled else wide["rank"].to_list(), "z": z,
        "zmin": -limit, "zmax": limit,
        "colorscale": [[0, theme.SEVERITY_COLOURS["info"]], [0.5, "#ffffff"], [1, theme.SEVERITY_COLOURS["critical"]]],
        "colorbar": {"title": {"text": "lateness (µs)"}},
    }
    rank_text = "%{y}" if labelled else "rank %{y}"
    if width == 1:
        heatmap["hovertemplate"] = f"{rank_text}, step %{{x}}: %{{z:.1f}} µs after the median rank<extra></extra>"
    else:
        heatmap["customdata"] = [[min(step + width - 1, last_step) for step in x]] * len(z)
        heatmap["hovertemplate"] = (f"{rank_text}, steps %{{x}}–%{{customdata}}: %{{z:.1f}} µs after the median rank"
                                    "<extra></extra>")
    fig = new_figure(go.Heatmap(**heatmap))
    _step_ticks(fig, one_per_step=len(x) <= _STEP_TICKS_MAX and width == 1)
    fig.update_yaxes(autorange="reversed")
    if not labelled:
        fig.update_yaxes(tickformat="d")
    x_title = "Profiler step" if width == 1 else f"Profiler step ({width} steps a column)"
    return _layout(fig, title, x_title, "Rank", height=140 + min(28 * ranks, _HEATMAP_MAX_PLOT_PX))


# The arrival-skew heat map: cells in all (about; at least the minimum of
# columns each rank), its plot's height at most, and ranks named one by one.
_HEATMAP_MAX_CELLS = 5_000
_HEATMAP_MAX_COLUMNS = 500
_HEATMAP_MIN_COLUMNS = 10
_HEATMAP_MAX_PLOT_PX = 760
_RANK_LABELS_MAX = 32


def straggler_figure(stragglers: pl.DataFrame) -> go.Figure:
    """Per rank: how often it arrived last, against the share chance would give."""
    title = "Straggler ranking: share of collectives arriving last"
    if stragglers.is_empty():
        return empty_figure(title, "No collectives seen by more than one rank.")
    frame = stragglers.sort("straggler_order")
    labels = [f"rank {r}" for r in frame["rank"]]
    fig = new_figure()
    fig.add_trace(go.Bar(x=labels, y=(frame["share_last"].fill_null(0) * 100).to_list(), name="arrived last",
                         marker={"color": [theme.gpu_colour(r) for r in frame["rank"]]},
                         customdata=list(zip(frame["score"].to_list(), (frame["mean_lateness_ns"].fill_null(0) / 1e3).to_list())),
                         hovertemplate="%{x}: last at %{y:.0f}% (score %{customdata[0]:.2f}, mean lateness %{customdata[1]:.1f} µs)<extra></extra>"))
    fig.add_trace(go.Scatter(x=labels, y=(frame["expected_share_last"].fill_null(0) * 100).to_list(), mode="markers", name="by chance",
                             marker={"symbol": "line-ew", "size": 30, "line": {"width": 3, "color": theme.OTHER_COLOUR}}))
    fig.update_xaxes(categoryorder="array", categoryarray=labels)
    return _layout(fig, title, "Rank (most likely straggler first)", "Collectives arriving last (%)")
