"""Telemetry over time: one metric per GPU (past 16 GPUs, their spread and
the two extreme GPUs), with the enforced power limit and the periods in
which each GPU was held back by power or heat shaded in its colour, and
those periods as a GPU × time strip.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import (
    _DASHES, _GPU_LINES_MAX, TELEMETRY_METRICS, TIME_AXIS, _alpha, _BucketGrid, empty_figure, _extreme_names, gpu_label,
    _hosts, _layout, _naive, new_figure, _np, _scatter, _spread, _x_times,
)
from gpulens.dashboard.escape import plotly_text


def throttle_periods(timeline: pl.DataFrame, bucket_s: float, max_periods: int = 150) -> list[tuple[Any, Any]]:
    """Time ranges in which any GPU of `timeline` was held back (throttled_share > 0).

    Adjacent throttled buckets merge into one period; where that leaves more
    than `max_periods`, the shortest gaps between periods are closed too, so
    the shading stays light on the browser.
    """
    if timeline.is_empty() or "throttled_share" not in timeline.columns:
        return []
    buckets = (
        timeline.filter(pl.col("throttled_share") > 0)
        .select(pl.col("bucket_start").unique().sort())
        .to_series()
        .to_list()
    )
    if not buckets:
        return []
    width = timedelta(seconds=bucket_s)
    periods: list[list[Any]] = []
    for start in buckets:
        if periods and start <= periods[-1][1]:
            periods[-1][1] = start + width
        else:
            periods.append([start, start + width])
    while len(periods) > max_periods:
        gaps = sorted(periods[i + 1][0] - periods[i][1] for i in range(len(periods) - 1))
        threshold = gaps[len(periods) - max_periods - 1]
        merged = [periods[0]]
        for period in periods[1:]:
            if period[0] - merged[-1][1] <= threshold:
                merged[-1][1] = period[1]
            else:
                merged.append(period)
        periods = merged
    return [(_naive(a), _naive(b)) for a, b in periods]


def telemetry_figure(
    timeline: pl.DataFrame,
    metric: str,
    bucket_s: float,
    title: str | None = None,
    band: bool | None = None,
    shade_throttling: bool = True,
    height: int = 330,
) -> go.Figure:
    """One metric of `telemetry_timeline` per GPU over time.

    The mean per bucket is the line; with `band` (default: at most three
    GPUs) the bucket's min-max range is shaded around it. Past 16 GPUs (a
    fleet), the GPUs' spread instead: the lowest to the highest GPU mean of
    each bucket as a band, the median GPU, and the two GPUs of lowest and
    highest mean over the range (128 lines were a tangle with a legend of
    128). Power draws the enforced limit; periods in which a GPU was held
    back by power or heat are shaded.
    """
    name, unit, scale = TELEMETRY_METRICS[metric]
    title = title or f"{name} per GPU"
    if timeline.is_empty() or timeline[f"{metric}_mean"].null_count() == timeline.height:
        return empty_figure(title, f"No {name.lower()} readings in this range.")
    hosts = _hosts(timeline)
    groups = timeline.partition_by(["host", "gpu_index"], maintain_order=True)
    fig = new_figure()
    suffixes: dict[tuple, str] = {}
    if len(groups) > _GPU_LINES_MAX:
        _spread(fig, timeline, f"{metric}_mean", scale, bucket_s, f"{len(groups)} GPUs", "median GPU")
        suffixes = _extreme_names(timeline, ["host", "gpu_index"], f"{metric}_mean")
        groups = [g for g in groups if (g["host"][0], g["gpu_index"][0]) in suffixes]
        band = False
    band = len(groups) <= 3 if band is None else band
    for group in groups:
        host, gpu = group["host"][0], int(group["gpu_index"][0])
        label = gpu_label(host, gpu, len(hosts)) + suffixes.get((host, gpu), "")
        colour = theme.gpu_colour(gpu)
        dash = _DASHES[hosts.index(host) % len(_DASHES)]
        grid = _BucketGrid(group["bucket_start"], bucket_s)
        trace = _scatter(grid.size)
        low, high = grid.place(group[f"{metric}_min"], scale), grid.place(group[f"{metric}_max"], scale)
        if band:
            fig.add_trace(trace(**grid.x, y=high, mode="lines", line={"width": 0},
                                legendgroup=label, showlegend=False, hoverinfo="skip", name=f"{label} max"))
            fig.add_trace(trace(**grid.x, y=low, mode="lines", line={"width": 0},
                                fill="tonexty", fillcolor=_alpha(colour, 0.18), legendgroup=label, showlegend=False,
                                hoverinfo="skip", name=f"{label} min"))
        fig.add_trace(trace(
            **grid.x, y=grid.place(group[f"{metric}_mean"], scale), mode="lines", name=label, legendgroup=label,
            line={"color": colour, "width": 1.5, "dash": dash},
            customdata=np.column_stack([low, high]),
            hovertemplate=f"{plotly_text(label)}<br>%{{x}}<br>mean %{{y:.4g}}<br>min %{{customdata[0]:.4g}} max %{{customdata[1]:.4g}}<extra></extra>",
        ))
    if metric == "power_w" and "power_limit_w" in timeline.columns:
        limit = timeline.group_by("bucket_start").agg(pl.col("power_limit_w").max()).sort("bucket_start")
        if limit["power_limit_w"].null_count() < limit.height:
            fig.add_trace(_scatter(limit.height)(
                x=_x_times(limit["bucket_start"]), y=_np(limit["power_limit_w"]), mode="lines",
                name="power limit", line={"color": theme.LIMIT_LINE_COLOUR, "width": 2, "dash": "dash", "shape": "hv"},
            ))
    if shade_throttling:
        _shade_per_gpu(fig, timeline, bucket_s, len(hosts))
    _layout(fig, title, TIME_AXIS, unit, height=height, legend_title="GPU")
    if metric.endswith("_pct"):
        fig.update_yaxes(range=[0, 105])
    return fig


def _shade_per_gpu(fig: go.Figure, timeline: pl.DataFrame, bucket_s: float, host_count: int) -> None:
    """Shade each GPU's throttled periods in its own colour, named after it
    (one GPU held back must not read as all of them); past 16 GPUs, the
    periods in which any was, named with how many were."""
    if "throttled_share" not in timeline.columns:
        return
    throttled = timeline.filter(pl.col("throttled_share") > 0)
    gpus = throttled.select("host", "gpu_index").unique().sort("host", "gpu_index")
    if gpus.height > _GPU_LINES_MAX:
        _shade(fig, throttle_periods(timeline, bucket_s), f"throttled (power/heat): {gpus.height} GPUs")
        return
    for host, gpu in gpus.iter_rows():
        label = gpu_label(host, gpu, host_count)
        periods = throttle_periods(throttled.filter((pl.col("host") == host) & (pl.col("gpu_index") == gpu)), bucket_s)
        _shade(fig, periods, f"{label} throttled (power/heat)", _alpha(theme.gpu_colour(gpu), 0.15), legendgroup=label)


def _shade(fig: go.Figure, periods: list[tuple[Any, Any]], name: str, colour: str = theme.THROTTLE_SHADE_COLOUR,
           legendgroup: str | None = None) -> None:
    """Shade `periods` full height: one filled trace of rectangles on a hidden
    0-1 axis (a layout shape per period costs plotly seconds at a hundred)."""
    if not periods:
        return
    xs: list[Any] = []
    ys: list[float | None] = []
    for start, end in periods:
        xs += [start, start, end, end, start, None]
        ys += [0, 1, 1, 0, 0, None]
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="lines", fill="toself", fillcolor=colour, line={"width": 0},
        name=name, legendgroup=legendgroup, yaxis="y2", hoverinfo="skip",
    ))
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True})


THROTTLE_STRIP_MIN_ROWS = 5


def throttle_strip_figure(timeline: pl.DataFrame) -> go.Figure:
    """GPU × time: the share of each bucket's samples held back by power or heat."""
    title = "Throttling: share of samples held back by power or heat"
    if timeline.is_empty() or "throttled_share" not in timeline.columns or timeline["throttled_share"].null_count() == timeline.height:
        return empty_figure(title, "No throttle reasons in this range.")
    hosts = _hosts(timeline)
    gpus_present = timeline.select("host", "gpu_index").unique().sort("host", "gpu_index")
    labels = gpus_present.with_columns(
        pl.Series("gpu", [gpu_label(h, g, len(hosts)) for h, g in gpus_present.iter_rows()], dtype=pl.String))
    wide = (timeline.join(labels, on=["host", "gpu_index"])
            .pivot(on="gpu", index="bucket_start", values="throttled_share", aggregate_function="max")
            .sort("bucket_start"))
    gpus = [c for c in wide.columns if c != "bucket_start"]
    z = wide.select(pl.col(gpus).cast(pl.Float64) * 100).to_numpy().T  # GPU x bucket; NaN where not sampled
    fig = new_figure(go.Heatmap(
        x=_x_times(wide["bucket_start"]), y=gpus, z=z, zmin=0, zmax=100,
        colorscale=[[0, "#ffffff"], [1, theme.LIMIT_LINE_COLOUR]],
        # The title beside the bar, not above it: over a GPU or two the bar
        # is short, and a title on top overlapped its ticks.
        colorbar={"title": {"text": "held back (%)", "side": "right"}, "tickvals": [0, 50, 100]},
        hovertemplate="%{y}<br>%{x}<br>%{z:.0f}% of samples held back<extra></extra>",
    ))
    # Rows for at least THROTTLE_STRIP_MIN_ROWS GPUs: with one, the colour
    # bar collapsed to a sliver.
    return _layout(fig, title, TIME_AXIS, "GPU", height=120 + 22 * max(len(gpus), THROTTLE_STRIP_MIN_ROWS))
