"""Two runs compared: the kernels whose time per rank and step changed
most, and each collective's bus bandwidth per message size in both runs.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from gpulens.analysis.names import unique_short_names
from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import GB, empty_figure, _layout, new_figure, patterned_bars, size_label


def kernel_delta_figure(compare: pl.DataFrame, run_a: str, run_b: str, top: int = 15) -> go.Figure:
    """The kernels whose time per rank and step changed most from run A to run B."""
    title = f"Kernel time per rank-step: {run_b} minus {run_a}"
    if compare.is_empty():
        return empty_figure(title, "No kernels in either run.")
    frame = compare.head(top).reverse()
    frame = frame.with_columns(pl.Series("label", unique_short_names(frame["name"].to_list())))
    fig = new_figure()
    for category in sorted(frame["category"].drop_nulls().unique().to_list()):
        part = frame.filter(pl.col("category") == category)
        fig.add_trace(go.Bar(
            y=part["label"].to_list(), x=(part["delta_per_step_ns"] / 1e3).to_list(), orientation="h", name=category,
            marker={"color": theme.CATEGORY_COLOURS.get(category, theme.OTHER_COLOUR)},
            customdata=list(zip(part["name"].to_list(), (part["per_step_ns_a"].fill_null(0) / 1e3).to_list(),
                                (part["per_step_ns_b"].fill_null(0) / 1e3).to_list())),
            hovertemplate="%{customdata[0]}<br>A %{customdata[1]:.1f} µs → B %{customdata[2]:.1f} µs per rank-step<extra></extra>",
        ))
    fig.update_yaxes(categoryorder="array", categoryarray=frame["label"].to_list())
    fig.add_vline(x=0, line={"color": theme.OTHER_COLOUR, "width": 1})
    return _layout(fig, title, "Change in time per rank and step (µs; positive: slower in B)", "Kernel",
                   height=140 + 26 * frame.height, legend_title="category")


def collective_delta_figure(compare: pl.DataFrame, run_a: str, run_b: str) -> go.Figure:
    """Bus bandwidth per op and message size in two runs."""
    title = f"Bus bandwidth: {run_a} vs {run_b}"
    frame = compare.filter(pl.col("busbw_bytes_per_s_a").is_not_null() | pl.col("busbw_bytes_per_s_b").is_not_null()) if compare.height else compare
    if frame.is_empty():
        return empty_figure(title, "No timed collectives in either run.")
    frame = frame.sort("op", "size_bucket_bytes")
    labels = [f"{op} {size_label(s)}" for op, s in zip(frame["op"], frame["size_bucket_bytes"])]
    colours = [theme.collective_colour(op) for op in frame["op"]]
    fig = new_figure()
    for column, run, pattern in (("busbw_bytes_per_s_a", f"A: {run_a}", "/"), ("busbw_bytes_per_s_b", f"B: {run_b}", "")):
        patterned_bars(fig, labels, (frame[column] / GB).to_list(), colours, {"shape": pattern, "fgcolor": "#ffffff"},
                       name=run, legendgroup=run, offsetgroup=run, hovertemplate=f"%{{x}}: %{{y:.1f}} GB/s<extra>{run}</extra>")
        # the legend shows the run's pattern in a neutral colour (the bars are coloured by collective)
        fig.add_trace(go.Bar(x=[labels[0]], y=[None], name=run, legendgroup=run, offsetgroup=run, hoverinfo="skip",
                             marker={"color": theme.OTHER_COLOUR, "pattern": {"shape": pattern, "fgcolor": "#ffffff"}}))
    fig.update_layout(barmode="group")
    return _layout(fig, title, "Collective and message size", "Bus bandwidth (GB/s)", legend_title="run")
