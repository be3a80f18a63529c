"""Plotly figures from analysis frames, shared by the dashboard and the report.

Every function takes Polars frames (as the `analysis` functions return
them) and returns a `go.Figure` with a title, axis units and a legend;
nothing here queries, caches or imports Streamlit. Colours come from
`dashboard.theme` only, so a GPU, a collective or a time category has the
same colour on every page and in every report. The frames are already
downsampled in DuckDB (the dashboard's time series to at most 1,500 points
a series). Series of `WEBGL_MIN_POINTS` points or more use WebGL
(`Scattergl`); shorter ones are SVG, which draws them faster: a WebGL
chart costs its own GL context, and where the browser has no GPU (software
GL, as on many servers and VMs) the telemetry page with WebGL for its 8 ×
1,500-point series took 8.5 s to draw instead of 4.1 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
import plotly.io as pio
import polars as pl

from dashboard import theme

# Plotly's "plotly_white", less its defaults for the trace types gpulens
# never draws (the whole one cost about 19 ms a figure and 4 KB of its JSON).
TEMPLATE_TRACE_TYPES = ("scatter", "scattergl", "bar", "heatmap")
TEMPLATE = go.layout.Template(
    layout=pio.templates["plotly_white"].layout,
    data={kind: getattr(pio.templates["plotly_white"].data, kind) for kind in TEMPLATE_TRACE_TYPES},
)
# Plotly's default template while gpulens makes a figure (`new_figure`), so
# that every figure starts with it already validated: handing it to each
# figure's layout validated a copy every time (about 15 ms a figure, 90 ms
# for the telemetry page).
TEMPLATE_NAME = "gpulens"
pio.templates[TEMPLATE_NAME] = TEMPLATE
GB = 1e9
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_SYMBOLS = ("circle", "diamond", "square", "x", "triangle-up", "star")
WEBGL_MIN_POINTS = 2000

# Telemetry metrics a page can draw: column stem -> (title, axis label, scale).
TELEMETRY_METRICS: dict[str, tuple[str, str, float]] = {
    "power_w": ("Board power", "Power (W)", 1.0),
    "gpu_util_pct": ("GPU utilisation", "Utilisation (%)", 1.0),
    "mem_util_pct": ("Memory bandwidth utilisation", "Utilisation (%)", 1.0),
    "sm_active_pct": ("SM activity", "SMs busy (%)", 1.0),
    "sm_clock_mhz": ("SM clock", "Clock (MHz)", 1.0),
    "mem_clock_mhz": ("Memory clock", "Clock (MHz)", 1.0),
    "temp_c": ("GPU temperature", "Temperature (°C)", 1.0),
    "mem_used_bytes": ("Memory used", "Memory used (GiB)", 1 / 2**30),
}


def empty_figure(title: str, message: str) -> go.Figure:
    """A titled figure saying there is nothing to draw."""
    fig = new_figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 14, "color": theme.OTHER_COLOUR})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


def new_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """`go.Figure(...)` starting with gpulens' template. Plotly gives a new
    figure its default template; Streamlit makes its own the default when
    it is imported, so gpulens' is put back first (once per import order,
    a string comparison after that)."""
    if pio.templates.default != TEMPLATE_NAME:
        pio.templates.default = TEMPLATE_NAME
    return go.Figure(*args, **kwargs)


TIME_AXIS = "Time (UTC)"


def _layout(fig: go.Figure, title: str, x: str | None = None, y: str | None = None, height: int = 380,
            legend_title: str | None = None) -> go.Figure:
    # One update: each `update_layout` walks the whole figure again.
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "xanchor": "left"},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
        "legend": {"title": {"text": legend_title} if legend_title else None},
        "hovermode": "closest",
    }
    if x is not None:
        layout["xaxis"] = {"title": {"text": x}}
    if x == TIME_AXIS:
        layout["xaxis"]["type"] = "date"  # numbers are epoch ms (`_x_times`), not a linear axis
    if y is not None:
        layout["yaxis"] = {"title": {"text": y}}
    if sum(1 for trace in fig.data if trace.showlegend is not False and trace.name) > 8:
        # many series: the legend goes under the plot rather than scrolling beside it, at the
        # figure's foot (a date axis's two-line ticks push its title down to where y=-0.22 was)
        layout["legend"].update({"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.005,
                                 "x": 0, "xanchor": "left"})
        layout["height"] = height + 60
        layout["margin"]["b"] = 110
    fig.update_layout(layout)
    return fig


def _scatter(n_points: int) -> type[go.Scatter] | type[go.Scattergl]:
    return go.Scattergl if n_points >= WEBGL_MIN_POINTS else go.Scatter


def gpu_label(host: str, gpu_index: int, hosts: int) -> str:
    return f"GPU {gpu_index}" if hosts <= 1 else f"{host} GPU {gpu_index}"


def _hosts(frame: pl.DataFrame) -> list[str]:
    return sorted(frame["host"].unique().to_list()) if "host" in frame.columns and frame.height else []


def _x_times(column: pl.Series) -> np.ndarray:
    """Times as UTC epoch milliseconds, for an x axis of type "date" (see
    `_layout`). Plotly sends numbers to the browser as binary and plotly.js
    reads them as they are; datetimes go as text that it parses one by one
    (a fifth of the telemetry page's drawing time at a day of 8 GPUs)."""
    return (column.dt.epoch("us").cast(pl.Float64) / 1000).to_numpy()


class _BucketGrid:
    """One GPU's time buckets laid on a regular grid from its first bucket.

    A series then goes as `x0` and `dx` (epoch ms on the date axis) and its
    values as float32 with NaN where a bucket has no sample: no x values to
    send or for plotly.js to read as dates (a tenth of the telemetry page's
    drawing time at a day of 8 GPUs), half the bytes, and a gap in the
    samples stays a gap instead of a straight line across it.
    """

    def __init__(self, bucket_start: pl.Series, bucket_s: float) -> None:
        start_ms = _x_times(bucket_start)
        step_ms = bucket_s * 1000
        self.index = np.rint((start_ms - start_ms[0]) / step_ms).astype(np.int64) if len(start_ms) else start_ms
        self.size = int(self.index.max()) + 1 if len(start_ms) else 0
        self.x = {"x0": float(start_ms[0]) if len(start_ms) else 0.0, "dx": step_ms}

    def place(self, column: pl.Series, scale: float = 1.0) -> np.ndarray:
        values = np.full(self.size, np.nan, np.float32)
        values[self.index] = _np(column, scale)
        return values


def _np(column: pl.Series, scale: float = 1.0) -> np.ndarray:
    values = column.cast(pl.Float64).to_numpy()
    return values * scale if scale != 1.0 else values


# --- the dataset ------------------------------------------------------------------------


def coverage_figure(coverage: pl.DataFrame, runs: pl.DataFrame) -> go.Figure:
    """When each host was sampled and each trace run ran, on one UTC axis:
    whether the traces fall inside the telemetry, so the two can be joined.

    A row per host (its first to last sample, all GPUs) and per run on the
    epoch clock (first kernel start to last kernel end). Spans too short to
    see at the axis' scale are drawn a sliver wide; the hover gives the
    true times.
    """
    title = "What the dataset covers, in time"
    rows: list[tuple[str, str, datetime, datetime, str]] = []  # (kind, row label, start, end, hover)
    if coverage.height:
        hosts = coverage.group_by("host").agg(pl.col("first_ts").min(), pl.col("last_ts").max(),
                                              pl.col("gpu_index").n_unique().alias("gpus")).sort("host")
        for host, first, last, gpus in hosts.select("host", "first_ts", "last_ts", "gpus").iter_rows():
            rows.append(("telemetry", f"{host} ({gpus} GPU{'s' if gpus != 1 else ''})", _naive(first), _naive(last),
                         f"telemetry of {host}, {gpus} GPUs"))
    if runs.height:
        for run, ranks, first_ns, last_ns, time_base in runs.select(
                "run", "ranks", "first_ns", "last_ns", "time_base").iter_rows():
            if first_ns is None or last_ns is None or time_base != "epoch":
                continue  # a trace on its own clock has no place on this axis
            rows.append(("trace run", f"run {run} ({ranks} rank{'s' if ranks != 1 else ''})",
                         _epoch_ns(first_ns), _epoch_ns(last_ns), f"trace run {run}, {ranks} ranks"))
    if not rows:
        return empty_figure(title, "Nothing on the UTC clock: no telemetry, and no traces on the epoch.")
    span = max(end for *_, end, _ in rows) - min(start for _, _, start, _, _ in rows)
    min_width = span / _COVERAGE_MIN_WIDTH_DIVISOR
    # 40 px a row for a few hosts; a fleet's rows share what 20 rows would
    # take, down to a label's height, with bars thinner than their pitch.
    row_px = 40 if len(rows) <= 20 else max(_COVERAGE_MIN_ROW_PX, 800 // len(rows))
    bar_px = min(16, row_px - 4)
    fig = new_figure()
    for kind, colour in (("telemetry", theme.CATEGORY_COLOURS["compute"]), ("trace run", theme.CATEGORY_COLOURS["communication"])):
        x: list[Any] = []
        y: list[Any] = []
        custom: list[Any] = []
        for row_kind, label, start, end, hover in rows:
            if row_kind != kind:
                continue
            x += (start, max(end, start + min_width), None)
            y += (label, label, None)
            detail = (hover, f"{start:%Y-%m-%d %H:%M:%S} to {end:%Y-%m-%d %H:%M:%S} UTC", _span_text(end - start))
            custom += (detail, detail, None)
        if x:
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=kind, connectgaps=False,
                                     line={"color": colour, "width": bar_px}, customdata=custom,
                                     hovertemplate="%{customdata[0]}<br>%{customdata[1]} (%{customdata[2]})<extra></extra>"))
    labels = [label for _, label, *_ in rows]
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(reversed(labels)))
    return _layout(fig, title, TIME_AXIS, "Host or trace run", height=160 + row_px * len(rows), legend_title="data")


# Spans are drawn at least this fraction of the axis wide.
_COVERAGE_MIN_WIDTH_DIVISOR = 300
# A row is never lower than its label (12 px text).
_COVERAGE_MIN_ROW_PX = 14


def _epoch_ns(ns: int) -> datetime:
    """A naive UTC datetime from epoch nanoseconds (to the microsecond)."""
    return datetime(1970, 1, 1) + timedelta(microseconds=ns // 1000)


def _span_text(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


# --- telemetry ------------------------------------------------------------------------


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


def _naive(value: Any) -> Any:
    return value.replace(tzinfo=None) if hasattr(value, "tzinfo") and value.tzinfo is not None else value


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
            hovertemplate=f"{label}<br>%{{x}}<br>mean %{{y:.4g}}<br>min %{{customdata[0]:.4g}} max %{{customdata[1]:.4g}}<extra></extra>",
        ))
    if metric == "power_w" and "power_limit_w" in timeline.columns:
        limit = timeline.group_by("bucket_start").agg(pl.col("power_limit_w").max()).sort("bucket_start")
        if limit["power_limit_w"].null_count() < limit.height:
            fig.add_trace(_scatter(limit.height)(
                x=_x_times(limit["bucket_start"]), y=_np(limit["power_limit_w"]), mode="lines",
                name="power limit", line={"color": theme.LIMIT_LINE_COLOUR, "width": 2, "dash": "dash", "shape": "hv"},
            ))
    if shade_throttling:
        _shade(fig, throttle_periods(timeline, bucket_s))
    _layout(fig, title, TIME_AXIS, unit, height=height, legend_title="GPU")
    if metric.endswith("_pct"):
        fig.update_yaxes(range=[0, 105])
    return fig


# GPUs drawn one line each up to this many; past it, their spread (telemetry_figure).
_GPU_LINES_MAX = 16
_SPREAD_BAND = {"color": "rgba(127, 127, 127, 0.25)", "width": 0}


def _spread(fig: go.Figure, frame: pl.DataFrame, value: str, scale: float, bucket_s: float | None, noun: str,
            median: str, number: str = ".4g", what: str = "", unit: str = "") -> None:
    """Many series of `frame` at once: each bucket's lowest to highest
    `value` as a grey band (`noun` names the series, `what` the value in
    the band's name), and their median."""
    spread = frame.group_by("bucket_start").agg(
        low=pl.col(value).min(), median=pl.col(value).median(), high=pl.col(value).max(),
    ).sort("bucket_start")
    if bucket_s:
        grid = _BucketGrid(spread["bucket_start"], bucket_s)
        xs, place, points = grid.x, grid.place, grid.size
    else:
        xs, place, points = {"x": _x_times(spread["bucket_start"])}, _np, spread.height
    trace = _scatter(points)
    fig.add_trace(trace(**xs, y=place(spread["high"], scale), mode="lines", line=_SPREAD_BAND,
                        name=f"all {noun}: highest{what}", showlegend=False,
                        hovertemplate=f"%{{x}}<br>highest{what} %{{y:{number}}}{unit}<extra></extra>"))
    fig.add_trace(trace(**xs, y=place(spread["low"], scale), mode="lines", line=_SPREAD_BAND, fill="tonexty",
                        fillcolor=_SPREAD_BAND["color"], name=f"all {noun}: lowest to highest{what}",
                        hovertemplate=f"%{{x}}<br>lowest{what} %{{y:{number}}}{unit}<extra></extra>"))
    fig.add_trace(trace(**xs, y=place(spread["median"], scale), mode="lines", name=median,
                        line={"color": theme.OTHER_COLOUR, "width": 2},
                        hovertemplate=f"%{{x}}<br>{median} %{{y:{number}}}{unit}<extra></extra>"))


def _extremes(frame: pl.DataFrame, keys: list[str], value: str) -> tuple[tuple, tuple]:
    """The keys of the series (by `keys`) of lowest and of highest mean
    `value`; ties go to the first by `keys`."""
    means = frame.group_by(keys).agg(pl.col(value).mean().alias("mean")).drop_nulls("mean").sort(keys)
    lowest = means.sort("mean", maintain_order=True).row(0)
    highest = means.sort("mean", descending=True, maintain_order=True).row(0)
    return tuple(lowest[:len(keys)]), tuple(highest[:len(keys)])


def _extreme_names(frame: pl.DataFrame, keys: list[str], value: str) -> dict[tuple, str]:
    """`_extremes`, with the words their lines' names end in."""
    lowest, highest = _extremes(frame, keys, value)
    return {lowest: " (lowest mean)", highest: " (highest mean)"}


def _shade(fig: go.Figure, periods: list[tuple[Any, Any]]) -> None:
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
        x=xs, y=ys, mode="lines", fill="toself", fillcolor=theme.THROTTLE_SHADE_COLOUR, line={"width": 0},
        name="throttled (power/heat)", yaxis="y2", hoverinfo="skip",
    ))
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True})


def _alpha(hex_colour: str, alpha: float) -> str:
    value = hex_colour.lstrip("#")
    r, g, b = (int(value[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, {alpha})"


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
        colorscale=[[0, "#ffffff"], [1, theme.LIMIT_LINE_COLOUR]], colorbar={"title": {"text": "held back (%)"}},
        hovertemplate="%{y}<br>%{x}<br>%{z:.0f}% of samples held back<extra></extra>",
    ))
    return _layout(fig, title, TIME_AXIS, "GPU", height=120 + 22 * len(gpus))


# --- power -------------------------------------------------------------------------------


def power_distribution_figure(histogram: pl.DataFrame) -> go.Figure:
    """Per GPU, the share of samples at each power level, with each GPU's limit.

    Past 16 GPUs, the distribution of all their samples together, and the
    two GPUs of lowest and highest mean power."""
    title = "Power distribution per GPU against the enforced limit"
    if histogram.is_empty():
        return empty_figure(title, "No power readings.")
    hosts = _hosts(histogram)
    fig = new_figure()
    groups = histogram.partition_by(["host", "gpu_index"], maintain_order=True)
    suffixes: dict[tuple, str] = {}
    if len(groups) > _GPU_LINES_MAX:
        pooled = histogram.group_by("bin_low_w").agg(pl.col("bin_high_w").first(), pl.col("samples").sum()).sort("bin_low_w")
        x, y = _bins_outline(pooled, pooled["samples"] / pooled["samples"].sum())
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": theme.OTHER_COLOUR, "width": 2},
                                 name=f"all {len(groups)} GPUs",
                                 hovertemplate=f"all {len(groups)} GPUs<br>%{{x:.0f}} W: %{{y:.1f}}% of samples<extra></extra>"))
        means = histogram.group_by("host", "gpu_index").agg(
            mean_w=((pl.col("bin_low_w") + pl.col("bin_high_w")) / 2 * pl.col("samples")).sum() / pl.col("samples").sum())
        suffixes = _extreme_names(means, ["host", "gpu_index"], "mean_w")
        groups = [g for g in groups if (g["host"][0], g["gpu_index"][0]) in suffixes]
    for group in groups:
        host, gpu = group["host"][0], int(group["gpu_index"][0])
        label = gpu_label(host, gpu, len(hosts)) + suffixes.get((host, gpu), "")
        x, y = _bins_outline(group, group["share"])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": theme.gpu_colour(gpu), "width": 1.5,
                                                              "dash": _DASHES[hosts.index(host) % len(_DASHES)]},
                                 name=label, hovertemplate=f"{label}<br>%{{x:.0f}} W: %{{y:.1f}}% of samples<extra></extra>"))
    for limit in sorted({v for v in histogram["limit_w"].to_list() if v is not None}):
        fig.add_vline(x=limit, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"limit {limit:.0f} W",
                                 line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2}))
    return _layout(fig, title, "Power (W)", "Share of samples (%)", legend_title="GPU")


def _bins_outline(bins: pl.DataFrame, share: pl.Series) -> tuple[list[float], list[float]]:
    """A histogram's outline as a step line: x from the first bin's low edge
    to the last one's high edge, y the share in % and 0 at both ends."""
    x = [bins["bin_low_w"][0]] + bins["bin_low_w"].to_list() + [bins["bin_high_w"][-1]]
    return x, [0.0] + (share * 100).to_list() + [0.0]


def power_percentiles_figure(headroom: pl.DataFrame) -> go.Figure:
    """Per GPU: p50, p95, p99 and max power against the enforced limit.

    Past 16 GPUs, a bar each still, but ranked by p99 (highest first) and
    unlabelled (the hover names each): a fleet reads as a profile, its
    hottest GPUs on the left, not as 128 crowded names."""
    title = "Power percentiles per GPU against the enforced limit"
    if headroom.is_empty() or headroom["p50_w"].null_count() == headroom.height:
        return empty_figure(title, "No power readings.")
    hosts = _hosts(headroom)
    fleet = headroom.height > _GPU_LINES_MAX
    frame = (headroom.sort("p99_w", "host", "gpu_index", descending=[True, False, False], nulls_last=True) if fleet
             else headroom.sort("host", "gpu_index"))
    labels = [gpu_label(h, g, len(hosts)) for h, g in zip(frame["host"], frame["gpu_index"])]
    colours = [theme.gpu_colour(g) for g in frame["gpu_index"]]
    marker_px, limit_px = (5, 8) if fleet else (10, 40)
    fig = new_figure()
    fig.add_trace(go.Bar(x=labels, y=frame["p99_w"].to_list(), marker={"color": colours}, name="p99 (bar)",
                         opacity=0.55, hovertemplate="%{x}: p99 %{y:.0f} W<extra></extra>"))
    for stat, symbol in (("p50_w", "circle-open"), ("p95_w", "diamond-open"), ("max_w", "x")):
        fig.add_trace(go.Scatter(x=labels, y=frame[stat].to_list(), mode="markers", name=stat.removesuffix("_w"),
                                 marker={"symbol": symbol, "size": marker_px, "color": theme.OTHER_COLOUR,
                                         "line": {"width": 1 if fleet else 2}},
                                 hovertemplate=f"%{{x}}: {stat.removesuffix('_w')} %{{y:.0f}} W<extra></extra>"))
    fig.add_trace(go.Scatter(x=labels, y=frame["limit_w"].to_list(), mode="markers", name="limit",
                             marker={"symbol": "line-ew", "size": limit_px, "line": {"width": 3, "color": theme.LIMIT_LINE_COLOUR}},
                             hovertemplate="%{x}: limit %{y:.0f} W<extra></extra>"))
    x_title = f"{len(labels)} GPUs, highest p99 first (hover for each)" if fleet else "GPU"
    _categories(fig, labels, fleet)
    return _layout(fig, title, x_title, "Power (W)", legend_title="statistic")


def _categories(fig: go.Figure, labels: list[str], fleet: bool) -> None:
    """Keep the GPUs in the order given; a fleet's names only in the hover."""
    fig.update_xaxes(categoryorder="array", categoryarray=labels, showticklabels=not fleet)


def node_power_figure(node_timeline: pl.DataFrame, budget_w: float | None, cap_w: float | None = None) -> go.Figure:
    """Each node's coincident power (sum over its GPUs) over time against the budget.

    With `cap_w`, the bucket's highest coincident power with every GPU
    clipped at the cap is drawn too, where it differs from the uncapped one.
    Past 8 nodes, their peaks instead, the budget's concern: the lowest to
    the highest node peak of each bucket as a band, the median node's, and
    the peaks of the two nodes of lowest and highest mean peak (with the
    cap, the highest's capped peak too).
    """
    title = "Node coincident power against the budget"
    if node_timeline.is_empty():
        return empty_figure(title, "No complete ticks with power from every GPU.")
    fig = new_figure()
    groups = node_timeline.partition_by("host", maintain_order=True)
    if len(groups) > _NODE_LINES_MAX:
        _node_peaks(fig, node_timeline, cap_w)
    else:
        for i, group in enumerate(groups):
            host = group["host"][0]
            x = _x_times(group["bucket_start"])
            trace = _scatter(group.height)
            dash = _DASHES[i % len(_DASHES)]
            fig.add_trace(trace(x=x, y=_np(group["node_w_max"]), mode="lines", line={"width": 0}, showlegend=False,
                                hoverinfo="skip", legendgroup=host))
            fig.add_trace(trace(x=x, y=_np(group["node_w_min"]), mode="lines", line={"width": 0}, fill="tonexty",
                                fillcolor=_alpha(theme.OTHER_COLOUR, 0.2), name=f"{host} min-max", legendgroup=host))
            _capped_peak(fig, group, x, cap_w, f"{host} max with GPUs capped at {cap_w:.0f} W" if cap_w else "")
            fig.add_trace(trace(x=x, y=_np(group["node_w_mean"]), mode="lines", name=f"{host} mean",
                                line={"color": theme.OTHER_COLOUR, "dash": dash}, legendgroup=host))
    if budget_w is not None:
        fig.add_hline(y=budget_w, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"budget {budget_w:,.0f} W",
                                 line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2}))
    return _layout(fig, title, TIME_AXIS, "Node power (W)", legend_title="node")


# Nodes drawn one band and line each up to this many; past it, their peaks' spread (node_power_figure).
_NODE_LINES_MAX = 8


def _capped_peak(fig: go.Figure, group: pl.DataFrame, x: np.ndarray, cap_w: float | None, name: str) -> None:
    """A node's bucket peak with every GPU clipped at `cap_w`, where the cap changes it."""
    capped = _np(group["capped_node_w_max"])
    if cap_w is not None and np.nanmax(np.abs(capped - _np(group["node_w_max"])), initial=0) > 0.5:
        fig.add_trace(_scatter(group.height)(x=x, y=capped, mode="lines", name=name,
                                             line={"color": theme.SEVERITY_COLOURS["warning"], "dash": "dot", "width": 1.5}))


def _node_peaks(fig: go.Figure, node_timeline: pl.DataFrame, cap_w: float | None) -> None:
    """Many nodes: their bucket peaks, lowest to highest, as a band; the
    median node's peak; the peaks of the nodes of lowest and highest mean
    peak (ties to the first by name), the highest's under the cap too."""
    nodes = node_timeline["host"].n_unique()
    _spread(fig, node_timeline, "node_w_max", 1.0, None, f"{nodes} nodes", "median node's peak", number=",.0f",
            what=" peak", unit=" W")
    (lowest,), (highest,) = _extremes(node_timeline, ["host"], "node_w_max")
    # Blue and green: the capped peak is drawn in the warning orange.
    for colour, (host, words) in zip((0, 2), ((highest, "highest"), (lowest, "lowest"))):
        group = node_timeline.filter(pl.col("host") == host).sort("bucket_start")
        x = _x_times(group["bucket_start"])
        if words == "highest":
            _capped_peak(fig, group, x, cap_w, f"{host} peak with GPUs capped at {cap_w:.0f} W" if cap_w else "")
        fig.add_trace(_scatter(group.height)(x=x, y=_np(group["node_w_max"]), mode="lines",
                                             name=f"{host} peak ({words} node)",
                                             line={"color": theme.gpu_colour(colour), "width": 1.5}))


def cap_curve_figure(curve: pl.DataFrame, chosen_cap_w: float | None = None) -> go.Figure:
    """Extra nodes the budget carries at p99, and the share of ticks capped, per cap."""
    title = "Power-cap what-if: extra nodes at p99 and ticks held back"
    if curve.is_empty():
        return empty_figure(title, "No power readings.")
    frame = curve.sort("power_cap_w")
    fig = new_figure()
    fig.add_trace(go.Scatter(x=frame["power_cap_w"].to_list(), y=frame["capped_extra_nodes_at_p99"].to_list(),
                             mode="lines+markers", name="extra nodes at p99", line={"color": theme.SEVERITY_COLOURS["info"]},
                             hovertemplate="cap %{x:.0f} W: %{y:.2f} extra nodes<extra></extra>"))
    fig.add_trace(go.Scatter(x=frame["power_cap_w"].to_list(), y=(frame["any_above_cap_share"] * 100).to_list(),
                             mode="lines+markers", name="ticks with a GPU at the cap (%)", yaxis="y2",
                             line={"color": theme.SEVERITY_COLOURS["warning"], "dash": "dot"},
                             hovertemplate="cap %{x:.0f} W: %{y:.1f}% of ticks<extra></extra>"))
    if chosen_cap_w is not None:
        fig.add_vline(x=chosen_cap_w, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash"})
    fig.update_layout(yaxis2={"title": {"text": "Ticks with a GPU at the cap (%)"}, "overlaying": "y", "side": "right",
                              "range": [0, 105], "tickmode": "linear", "tick0": 0, "dtick": 20, "showgrid": False},
                      legend={"orientation": "h", "y": -0.25})
    return _layout(fig, title, "Per-GPU power cap (W)", "Extra nodes the budget carries")


# --- interconnect ----------------------------------------------------------------------------

LINK_NAMES = {"nvlink": "NVLink", "xgmi": "XGMI", "pcie": "PCIe"}


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
        fig.add_trace(go.Bar(
            x=labels, y=(part["achieved_bytes_per_s"] / GB).to_list(), name=f"{direction} mean",
            marker={"color": [theme.gpu_colour(g) for g in part["gpu_index"]], "pattern": {"shape": patterns.get(direction, "")}},
            offsetgroup=direction, customdata=(part["utilisation"] * 100).to_list(),
            hovertemplate=f"%{{x}} {direction}: %{{y:.1f}} GB/s (%{{customdata:.1f}}% of peak)<extra></extra>",
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
            hovertemplate=f"{label}<br>%{{x}}<br>%{{y:.1f}} GB/s<extra></extra>",
        ))
    peak = frame["peak_bytes_per_s"].max()
    if peak is not None:
        fig.add_hline(y=peak / GB, line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"nominal peak {peak / GB:.0f} GB/s",
                                 line={"color": theme.LIMIT_LINE_COLOUR, "dash": "dash", "width": 2}))
    return _layout(fig, title, TIME_AXIS, "Throughput, mean per bucket (GB/s)", legend_title="GPU, direction")


# --- kernels and launches --------------------------------------------------------------------


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
    fig = new_figure()
    lines = frame
    # A report of several runs: a line per run and rank (their steps are not each other's).
    key = ["run", "rank"] if "run" in frame.columns and frame["run"].n_unique() > 1 else ["rank"]
    ranks = frame.select(key).n_unique()
    if ranks > _TKLQT_RANK_LINES_MAX:
        _tklqt_spread(fig, frame, ranks)
        lines = _tklqt_extreme_ranks(frame, key)
    for i, group in enumerate(lines.sort(*key, "step").partition_by(key, maintain_order=True)):
        rank = int(group["rank"][0])
        name = f"{group['run'][0]} rank {rank}" if len(key) == 2 else f"rank {rank}"
        fig.add_trace(go.Scatter(
            x=group["step"].to_list(), y=(group["tklqt_ns"] / 1e6).to_list(), mode=mode, name=name,
            line={"color": theme.gpu_colour(i if len(key) == 2 else rank)}, customdata=list(zip(group["verdict"].to_list(), (group["gpu_idle_share"] * 100).to_list())),
            hovertemplate=f"{name}, step %{{x}}<br>TKLQT %{{y:.2f}} ms<br>%{{customdata[0]}}, GPU idle %{{customdata[1]:.0f}}%<extra></extra>",
        ))
    # A tick per step where the steps drawn span few (two runs' steps 10-14 and 100-104 span 95).
    _step_ticks(fig, one_per_step=frame["step"].max() - frame["step"].min() < _STEP_TICKS_MAX)
    return _layout(fig, title, "Profiler step", "TKLQT (ms)", legend_title="rank")


def _tklqt_spread(fig: go.Figure, frame: pl.DataFrame, ranks: int) -> None:
    """The ranks' minimum to maximum per step as a band, and their median."""
    spread = frame.group_by("step").agg(
        low=pl.col("tklqt_ns").min() / 1e6, median=pl.col("tklqt_ns").median() / 1e6, high=pl.col("tklqt_ns").max() / 1e6,
    ).sort("step")
    steps = spread["step"].to_list()
    band = {"color": "rgba(127, 127, 127, 0.25)", "width": 0}
    fig.add_trace(go.Scatter(x=steps, y=spread["high"].to_list(), mode="lines", line=band, name=f"all {ranks} ranks: max",
                             showlegend=False, hovertemplate="step %{x}: max %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=spread["low"].to_list(), mode="lines", line=band, fill="tonexty",
                             fillcolor=band["color"], name=f"all {ranks} ranks: min to max",
                             hovertemplate="step %{x}: min %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=spread["median"].to_list(), mode="lines", name="median rank",
                             line={"color": theme.LIMIT_LINE_COLOUR, "width": 2},
                             hovertemplate="step %{x}: median %{y:.2f} ms<extra></extra>"))


def _tklqt_extreme_ranks(frame: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """The rows of the ranks (of a run, where `key` names it) of lowest and
    highest mean TKLQT (the likeliest to be CPU- and GPU-bound), drawn beside the band."""
    means = frame.group_by(key).agg(pl.col("tklqt_ns").mean()).sort("tklqt_ns", *key)
    return frame.join(pl.concat([means.head(1), means.tail(1)]).select(key).unique(), on=key, how="semi")


# Ranks drawn one line each up to this many; past it, a band, the median and two ranks.
_TKLQT_RANK_LINES_MAX = 16
# Line charts draw markers up to this many points in all.
_MARKERS_MAX_POINTS = 100
# A tick per profiler step up to this many steps.
_STEP_TICKS_MAX = 30


def _step_ticks(fig: go.Figure, one_per_step: bool) -> None:
    """Profiler steps on x: a tick at each where asked, else Plotly's own
    spacing (never fractional: steps are whole numbers)."""
    if one_per_step:
        fig.update_xaxes(dtick=1)
    else:
        fig.update_xaxes(tickformat="d")


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
    frame = frame.with_columns(pl.Series("label", _short_unique(frame["name"].to_list())))
    fig = new_figure()
    for category in sorted(frame["category"].drop_nulls().unique().to_list()):
        part = frame.filter(pl.col("category") == category)
        fig.add_trace(go.Bar(
            y=part["label"].to_list(), x=(part["total_ns"] / 1e6).to_list(), orientation="h", name=category,
            marker={"color": theme.CATEGORY_COLOURS.get(category, theme.OTHER_COLOUR)},
            customdata=list(zip(part["name"].to_list(), part["kernel_count"].to_list())),
            hovertemplate="%{customdata[0]}<br>%{x:.2f} ms over %{customdata[1]} kernels<extra></extra>",
        ))
    fig.update_yaxes(categoryorder="array", categoryarray=frame["label"].to_list())
    return _layout(fig, title, "GPU time, all ranks (ms)", "Kernel", height=120 + 26 * frame.height, legend_title="category")


def short_kernels_figure(short: pl.DataFrame, top: int = 15) -> go.Figure:
    """The kernel names with the most short kernels (GPU time below the launch call's), over the ranks."""
    title = f"Short kernels: top {top} names by count"
    if short.is_empty():
        return empty_figure(title, "No kernel ran shorter than its launch call.")
    frame = (
        short.group_by("name").agg(pl.col("kernel_count").sum(), pl.col("gpu_ns").sum(), pl.col("launch_call_total_ns").sum())
        .sort("kernel_count", "name", descending=[True, False]).head(top).reverse()
    )
    frame = frame.with_columns(pl.Series("label", _short_unique(frame["name"].to_list())))
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


def _short_unique(names: list[str], limit: int = 60) -> list[str]:
    """Short labels, made unique (two kernels whose names start alike would share a bar)."""
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        label = _short(name, limit)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return labels


def _short(name: str, limit: int = 60) -> str:
    """A kernel name for an axis: no parameter list, template arguments or
    `void `, cut at `limit` characters (the full name is in the hover)."""
    base = name.strip()
    if len(base) <= limit:
        return base
    if base.endswith(")"):
        depth = 0
        for i in range(len(base) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(base[i], 0)
            if depth == 0:
                base = base[:i] if i > 0 else base
                break
    if len(base) > limit:
        kept, depth = [], 0
        for char in base:
            depth += {"<": 1, ">": -1}.get(char, 0) if char in "<>" else 0
            if depth == 0 and char != ">":
                kept.append(char)
        base = "".join(kept)
    base = base.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    return base if len(base) <= limit else base[: limit - 1] + "…"


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
    where = f"{category}, stream {stream}<br>start {offset_ns / 1e6:.3f} ms"
    if kernel_count == 1:
        return f"{_short(name, 90)}<br>{where}, {busy_ns / 1e3:.1f} µs"
    span_ns = max(end_offset_ns - offset_ns, 1)
    return (f"{kernel_count:,} kernels: {busy_ns / 1e3:.1f} µs busy of {span_ns / 1e3:.1f} µs "
            f"({busy_ns / span_ns:.0%})<br>longest {_short(name, 80)} ({longest_ns / 1e3:.1f} µs)<br>{where}")


# Pending launches on one stream at which a CUDA launch call blocks until the GPU drains the queue.
CUDA_LAUNCH_QUEUE_LIMIT = 1024


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


# --- telemetry joined to traces ------------------------------------------------------------


def rank_label(run: str, rank: int, runs: int) -> str:
    """`rank 3`, or `train rank 3` where several runs share a chart."""
    return f"rank {rank}" if runs <= 1 else f"{run} rank {rank}"


def step_energy_figure(steps: pl.DataFrame) -> go.Figure:
    """Energy of each profiler step, one line per rank's GPU; a step the
    telemetry does not cover is a gap in its line."""
    title = "Energy per step"
    if steps.is_empty() or steps["energy_j"].drop_nulls().is_empty():
        return empty_figure(title, "No profiler step is covered by power telemetry.")
    fig = new_figure()
    runs = steps["run"].n_unique()
    groups = steps.sort("run", "rank", "step").group_by("run", "rank", maintain_order=True)
    for i, ((run, rank), group) in enumerate(groups):
        gpu = group["gpu_index"][0]
        colour = i if runs > 1 else gpu if gpu is not None else rank  # two runs on GPU 0 would share a colour
        fig.add_scatter(x=group["step"].to_list(), y=group["energy_j"].to_list(), mode="lines+markers",
                        name=rank_label(run, rank, runs) + f" (GPU {gpu})", line_color=theme.gpu_colour(colour))
    return _layout(fig, title, "profiler step", "energy (J)")


def phase_energy_figure(phases: pl.DataFrame) -> go.Figure:
    """Per rank: the energy its GPU drew in each phase (computing,
    communicating with nothing computing, copying alone, idle), stacked."""
    title = "Energy by phase per rank"
    phases = phases.filter(pl.col("energy_j").is_not_null()) if phases.height else phases
    if phases.is_empty():
        return empty_figure(title, "No kernel time is covered by power telemetry.")
    frame = phases.sort("run", "rank")
    runs = frame["run"].n_unique()
    ranks = frame.select("run", "rank").unique(maintain_order=True)
    labels = [rank_label(run, rank, runs) for run, rank in ranks.iter_rows()]
    fig = new_figure()
    for phase in ("compute", "communication", "memory", "idle"):
        rows = ranks.join(frame.filter(pl.col("phase") == phase), on=["run", "rank"], how="left", maintain_order="left")
        if rows["energy_j"].drop_nulls().is_empty():
            continue
        fig.add_trace(go.Bar(x=labels, y=rows["energy_j"].to_list(), name=phase,
                             marker={"color": theme.CATEGORY_COLOURS[phase]},
                             customdata=np.column_stack([(rows["time_share"].fill_null(0) * 100).to_numpy(),
                                                         rows["mean_power_w"].fill_null(float("nan")).to_numpy()]),
                             hovertemplate=f"%{{x}}: {phase} %{{y:,.1f}} J over %{{customdata[0]:.1f}}% of the time, "
                                           "%{customdata[1]:,.0f} W mean<extra></extra>"))
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "Rank", "energy (J)", legend_title="phase")


# --- communication ---------------------------------------------------------------------------


def size_label(size_bytes: int | float | None) -> str:
    if size_bytes is None:
        return "unknown"
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.0f} TiB"


def collective_time_figure(stats: pl.DataFrame) -> go.Figure:
    """GPU time per collective op and message size (all ranks), coloured by op."""
    title = "Collective time by op and message size"
    if stats.is_empty():
        return empty_figure(title, "No collectives.")
    if stats["total_ns"].null_count() == stats.height:  # no kernel behind any of them
        return empty_figure(title, "No collectives with GPU time (NCCL logs record sizes only; a group of one rank runs no kernel).")
    frame = stats.group_by("op", "size_bucket_bytes").agg(pl.col("total_ns").sum(), pl.col("count").sum()).sort("size_bucket_bytes", "op")
    sizes = [size_label(s) for s in frame.select(pl.col("size_bucket_bytes").unique().sort())["size_bucket_bytes"]]
    fig = new_figure()
    for op in sorted(frame["op"].unique().to_list()):
        part = frame.filter(pl.col("op") == op)
        fig.add_trace(go.Bar(x=[size_label(s) for s in part["size_bucket_bytes"]], y=(part["total_ns"] / 1e6).to_list(), name=op,
                             marker={"color": theme.collective_colour(op)}, customdata=part["count"].to_list(),
                             hovertemplate=f"{op} %{{x}}: %{{y:.2f}} ms over %{{customdata}} calls<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=sizes)
    fig.update_layout(barmode="group")
    return _layout(fig, title, "Message size bucket", "GPU time, all ranks (ms)", legend_title="collective")


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
    fig = new_figure()
    fig.add_trace(go.Bar(x=labels, y=(frame["overlapped_ns"] / 1e6).to_list(), name="overlapped with compute",
                         marker={"color": _alpha(colour, 0.35), "line": {"color": colour, "width": 1}},
                         customdata=(frame["overlap_share"].fill_null(0) * 100).to_list(),
                         hovertemplate="%{x}: %{y:.2f} ms hidden (%{customdata:.0f}%)<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=(frame["exposed_ns"] / 1e6).to_list(), name="exposed", marker={"color": colour},
                         customdata=(frame["exposed_share"].fill_null(0) * 100).to_list(),
                         hovertemplate="%{x}: %{y:.2f} ms exposed (%{customdata:.1f}% of the span)<extra></extra>"))
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "Rank", "Communication time (ms)", legend_title="communication")


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


# --- compare -------------------------------------------------------------------------------------


def kernel_delta_figure(compare: pl.DataFrame, run_a: str, run_b: str, top: int = 15) -> go.Figure:
    """The kernels whose time per rank and step changed most from run A to run B."""
    title = f"Kernel time per rank-step: {run_b} minus {run_a}"
    if compare.is_empty():
        return empty_figure(title, "No kernels in either run.")
    frame = compare.head(top).reverse()
    frame = frame.with_columns(pl.Series("label", _short_unique(frame["name"].to_list())))
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
        fig.add_trace(go.Bar(x=labels, y=(frame[column] / GB).to_list(), name=run, showlegend=False, legendgroup=run,
                             offsetgroup=run,
                             marker={"color": colours, "pattern": {"shape": pattern, "fgcolor": "#ffffff"}},
                             hovertemplate=f"%{{x}}: %{{y:.1f}} GB/s<extra>{run}</extra>"))
        # the legend shows the run's pattern in a neutral colour (the bars are coloured by collective)
        fig.add_trace(go.Bar(x=[labels[0]], y=[None], name=run, legendgroup=run, offsetgroup=run, hoverinfo="skip",
                             marker={"color": theme.OTHER_COLOUR, "pattern": {"shape": pattern, "fgcolor": "#ffffff"}}))
    fig.update_layout(barmode="group")
    return _layout(fig, title, "Collective and message size", "Bus bandwidth (GB/s)", legend_title="run")
