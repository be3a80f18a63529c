"""What every chart shares: gpulens' Plotly template (made Plotly's
default on import and by `new_figure`), the empty and the new figure, one
layout for titles, axes and legends, the switch to WebGL at
`WEBGL_MIN_POINTS` points, times as epoch milliseconds and on a regular
grid of buckets, the labels of GPUs, message sizes and kernel names, and
many GPUs or nodes drawn at once as their spread and the two of lowest and
highest mean. The telemetry metrics, interconnect names and CUDA's launch
queue limit that pages and charts both use are here too.
"""

from __future__ import annotations

import textwrap

from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

from gpulens.dashboard import theme

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


# An empty chart is its title and one message: a strip, not a chart's
# height of blank (the report had 300 px of nothing per placeholder).
EMPTY_FIGURE_HEIGHT = 150
# Characters per line of its message: plotly.js never wraps an annotation,
# so a long one on a half-width chart was cut off at both ends.
EMPTY_MESSAGE_LINE_CHARS = 60


def empty_figure(title: str, message: str) -> go.Figure:
    """A titled strip saying there is nothing to draw, its message wrapped."""
    fig = new_figure()
    lines = textwrap.wrap(message, EMPTY_MESSAGE_LINE_CHARS, break_long_words=False, break_on_hyphens=False)
    fig.add_annotation(text="<br>".join(lines), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 14, "color": theme.OTHER_COLOUR})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=EMPTY_FIGURE_HEIGHT + 20 * max(0, len(lines) - 2))


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


def _naive(value: Any) -> Any:
    return value.replace(tzinfo=None) if hasattr(value, "tzinfo") and value.tzinfo is not None else value


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


def _alpha(hex_colour: str, alpha: float) -> str:
    value = hex_colour.lstrip("#")
    r, g, b = (int(value[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, {alpha})"


def _categories(fig: go.Figure, labels: list[str], fleet: bool) -> None:
    """Keep the GPUs in the order given; a fleet's names only in the hover."""
    fig.update_xaxes(categoryorder="array", categoryarray=labels, showticklabels=not fleet)


LINK_NAMES = {"nvlink": "NVLink", "xgmi": "XGMI", "pcie": "PCIe"}


# A tick per profiler step up to this many steps.
_STEP_TICKS_MAX = 30


def _step_ticks(fig: go.Figure, one_per_step: bool) -> None:
    """Profiler steps on x: a tick at each where asked, else Plotly's own
    spacing (never fractional: steps are whole numbers)."""
    if one_per_step:
        fig.update_xaxes(dtick=1)
    else:
        fig.update_xaxes(tickformat="d")


def patterned_bars(fig: go.Figure, x: list[Any], y: list[Any], colours: list[str], pattern: dict[str, Any],
                   customdata: list[Any] | None = None, **common: Any) -> None:
    """Bars of per-point colours, hatched with `pattern`: one trace per
    colour. plotly.js draws a patterned bar of an array of colours, but logs
    "Invalid color specifier: Array(n)" three times a redraw (90 lines a
    report); of one colour, it logs nothing. `common` (offsetgroup,
    hovertemplate, legendgroup...) goes to every trace; none is in the
    legend (give it a proxy of the pattern in a neutral colour)."""
    if not pattern.get("shape"):
        fig.add_trace(go.Bar(x=x, y=y, marker={"color": colours, "pattern": pattern}, customdata=customdata,
                             showlegend=False, **common))
        return
    for colour in dict.fromkeys(colours):
        rows = [i for i, c in enumerate(colours) if c == colour]
        fig.add_trace(go.Bar(
            x=[x[i] for i in rows], y=[y[i] for i in rows], marker={"color": colour, "pattern": pattern},
            customdata=None if customdata is None else [customdata[i] for i in rows], showlegend=False, **common))


def step_axis(fig: go.Figure, steps: list[int]) -> None:
    """Profiler steps on x. Steps far apart (two runs' steps 10-14 and
    100-104) go side by side as categories, in order, rather than at either
    end of a numeric axis that is nine tenths empty; others on a numeric
    axis, with a tick per step where they span few (`_step_ticks`)."""
    distinct = sorted(set(steps))
    if not distinct:
        return
    span = distinct[-1] - distinct[0] + 1
    if span > 2 * len(distinct):
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=distinct)
    else:
        _step_ticks(fig, one_per_step=span - 1 < _STEP_TICKS_MAX)


def time_unit(max_ns: float | None) -> tuple[float, str]:
    """(nanoseconds per unit, unit) for an axis of durations up to `max_ns`:
    ms from 1 ms to 10 s, µs below, s above, so ticks read `55 s`, not
    `55k ms` (a GPU-bound step's queuing time sums to tens of seconds)."""
    if max_ns is not None and max_ns >= 10e9:
        return 1e9, "s"
    if max_ns is not None and 0 < max_ns < 1e6:
        return 1e3, "µs"
    return 1e6, "ms"


# Pending launches on one stream at which a CUDA launch call blocks until the GPU drains the queue.
CUDA_LAUNCH_QUEUE_LIMIT = 1024


def size_label(size_bytes: int | float | None) -> str:
    if size_bytes is None:
        return "unknown"
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.0f} TiB"
