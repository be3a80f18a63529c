"""What the dataset covers: when each host was sampled and each trace run
ran, on one UTC axis, so that whether the traces fall inside the telemetry
(and can be joined to it) shows at a glance.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import TIME_AXIS, empty_figure, _layout, _naive, new_figure


def coverage_figure(coverage: pl.DataFrame, runs: pl.DataFrame) -> go.Figure:
    """When each host was sampled and each trace run ran, on one UTC axis:
    whether the traces fall inside the telemetry, so the two can be joined.

    A row per host (its first to last sample, all GPUs) and per run on the
    epoch clock (first kernel start to last kernel end). Spans too short to
    see at the axis' scale are drawn a sliver wide, their true length
    written beside them; the hover gives the true times.
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
    # A span drawn wider than it is says its true length beside it: a 0.15 s
    # trace on a 3-minute axis is otherwise a sliver that reads as nothing.
    short = [(label, start + min_width, _span_text(end - start)) for _, label, start, end, _ in rows
             if end - start < min_width]
    if short:
        fig.add_trace(go.Scatter(
            x=[x for _, x, _ in short], y=[label for label, _, _ in short], mode="text",
            text=[f"  {span} (drawn wider)" for *_, span in short], textposition="middle right",
            textfont={"color": theme.OTHER_COLOUR}, showlegend=False, hoverinfo="skip", name="true spans",
        ))
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
