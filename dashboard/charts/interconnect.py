"""Interconnect throughput (NVLink, XGMI, PCIe): each GPU's mean and p95
against the link's nominal peak, and its throughput over time.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import (
    GB, _GPU_LINES_MAX, LINK_NAMES, TIME_AXIS, _BucketGrid, _categories, empty_figure, _extreme_names, gpu_label,
    _hosts, _layout, new_figure, _np, patterned_bars, _scatter, _spread, _x_times,
)
from gpulens.dashboard.escape import plotly_text


def interconnect_usage_figure(usage: pl.DataFrame, link: str) -> go.Figure:
    """Per GPU: mean and p95 throughput of one interconnect against its nominal peak."""
    name = LINK_NAMES.get(link, link)
    title = f"{name} throughput per GPU against the nominal peak"
    frame = usage.filter(pl.col("link") == link).sort("host", "gpu_index", "direction") if usage.height else usage
    if frame.is_empty():
        return empty_figure(title, f"No {name} readings.")
    hosts = _hosts(frame)
    gpus = frame.select("host", "gpu_index").unique()
    fleet = gpus.height > _GPU_LINES_MAX
    if fleet:  # as power_percentiles_figure: ranked, busiest GPU (both directions' means) first
        busiest = (frame.group_by("host", "gpu_index").agg(pl.col("achieved_bytes_per_s").sum().alias("total"))
                   .sort("total", "host", "gpu_index", descending=[True, False, False], nulls_last=True))
    else:
        busiest = gpus.sort("host", "gpu_index")
    order = [gpu_label(h, g, len(hosts)) for h, g in zip(busiest["host"], busiest["gpu_index"])]
    fig = new_figure()
    patterns = {"tx": "", "rx": "/", "both": "."}
    for direction in sorted(frame["direction"].unique().to_list()):
        part = frame.filter(pl.col("direction") == direction)
        labels = [gpu_label(h, g, len(hosts)) for h, g in zip(part["host"], part["gpu_index"])]
        pattern = {"shape": patterns.get(direction, ""), "fgcolor": "#ffffff"}
        patterned_bars(
            fig, labels, (part["achieved_bytes_per_s"] / GB).to_list(), [theme.gpu_colour(g) for g in part["gpu_index"]],
            pattern, customdata=(part["utilisation"] * 100).to_list(), name=f"{direction} mean", offsetgroup=direction,
            legendgroup=direction,
            hovertemplate=f"%{{x}} {direction}: %{{y:.1f}} GB/s (%{{customdata:.1f}}% of peak)<extra></extra>",
        )
        # The legend shows the direction's pattern in a neutral colour (the bars are coloured per GPU).
        fig.add_trace(go.Bar(
            x=[labels[0]], y=[None], name=f"{direction} mean", legendgroup=direction, offsetgroup=direction,
            hoverinfo="skip", marker={"color": theme.OTHER_COLOUR, "pattern": pattern},
        ))
        fig.add_trace(go.Scatter(
            x=labels, y=(part["p95_bytes_per_s"] / GB).to_list(), mode="markers", name=f"{direction} p95",
            marker={"symbol": "diamond-open", "size": 5 if fleet else 9, "color": theme.OTHER_COLOUR}, offsetgroup=direction,
            hovertemplate=f"%{{x}} {direction} p95: %{{y:.1f}} GB/s<extra></extra>",
        ))
    peaks = frame.group_by("host", "gpu_index").agg(pl.col("peak_bytes_per_s").max()).sort("host", "gpu_index")
    if peaks["peak_bytes_per_s"].null_count() < peaks.height:
        fig.add_trace(go.Scatter(
            x=[gpu_label(h, g, len(hosts)) for h, g in zip(peaks["host"], peaks["gpu_index"])],
            y=(peaks["peak_bytes_per_s"] / GB).to_list(), mode="markers", name="nominal peak (per direction)",
            marker={"symbol": "line-ew", "size": 8 if fleet else 40, "line": {"width": 3, "color": theme.LIMIT_LINE_COLOUR}},
            hovertemplate="%{x}: peak %{y:.0f} GB/s<extra></extra>",
        ))
    fig.update_layout(barmode="group", scattermode="group")
    _categories(fig, order, fleet)
    x_title = f"{len(order)} GPUs, busiest first (hover for each)" if fleet else "GPU"
    return _layout(fig, title, x_title, "Throughput (GB/s)", legend_title="direction")


def interconnect_timeline_figure(timeline: pl.DataFrame, link: str, bucket_s: float | None = None) -> go.Figure:
    """One interconnect's throughput per GPU over time, with the nominal peak.

    Given the buckets' width, each series goes as a start and a step with
    gaps where a bucket has no sample, as in `telemetry_figure`. Past 16
    GPUs, as there: the spread of every GPU and direction, the median, and
    the series of lowest and highest mean."""
    name = LINK_NAMES.get(link, link)
    title = f"{name} throughput over time"
    frame = timeline.filter(pl.col("link") == link).sort("host", "gpu_index", "direction", "bucket_start") if timeline.height else timeline
    if frame.is_empty():
        return empty_figure(title, f"No {name} readings.")
    hosts = _hosts(frame)
    fig = new_figure()
    groups = frame.partition_by(["host", "gpu_index", "direction"], maintain_order=True)
    suffixes: dict[tuple, str] = {}
    gpus = frame.select("host", "gpu_index").n_unique()
    if gpus > _GPU_LINES_MAX:  # as telemetry_figure: the spread of every GPU and direction
        _spread(fig, frame, "achieved_bytes_per_s", 1 / GB, bucket_s, f"{gpus} GPUs, both directions", "median",
                number=".1f")
        keys = ["host", "gpu_index", "direction"]
        suffixes = _extreme_names(frame, keys, "achieved_bytes_per_s")
        groups = [g for g in groups if (g["host"][0], g["gpu_index"][0], g["direction"][0]) in suffixes]
    for group in groups:
        host, gpu, direction = group["host"][0], int(group["gpu_index"][0]), group["direction"][0]
        label = f"{gpu_label(host, gpu, len(hosts))} {direction}" + suffixes.get((host, gpu, direction), "")
        if bucket_s:
            grid = _BucketGrid(group["bucket_start"], bucket_s)
            xy = {**grid.x, "y": grid.place(group["achieved_bytes_per_s"], 1 / GB)}
        else:
            xy = {"x": _x_times(group["bucket_start"]), "y": _np(group["achieved_bytes_per_s"], 1 / GB)}
        fig.add_trace(_scatter(len(xy["y"]))(
            **xy, mode="lines", name=label,
            line={"color": theme.gpu_colour(gpu), "dash": "solid" if direction != "rx" else "dot", "width": 1.5},
            hovertemplate=f"{plotly_text(label)}<br>%{{x}}<br>%{{y:.1f}} GB/s<extra></extra>",
        ))
    peak = frame["peak_bytes_per_s"].max()
    if peak is not None:
        fig.add_hline(y=peak / GB, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"nominal peak {peak / GB:.0f} GB/s",
                                 line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2}))
    return _layout(fig, title, TIME_AXIS, "Throughput, mean per bucket (GB/s)", legend_title="GPU, direction")
