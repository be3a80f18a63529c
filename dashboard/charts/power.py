"""Power against limits and budgets: each GPU's power distribution and
percentiles against its enforced limit, each node's coincident power
against the budget (with a per-GPU cap, where it changes the peak), and the
power-cap what-if curve.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import (
    _DASHES, _GPU_LINES_MAX, TIME_AXIS, _alpha, _categories, empty_figure, _extreme_names, _extremes, gpu_label, _hosts,
    _layout, new_figure, _np, _scatter, _spread, _x_times,
)
from gpulens.dashboard.escape import plotly_text


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
                                 name=label, hovertemplate=f"{plotly_text(label)}<br>%{{x:.0f}} W: %{{y:.1f}}% of samples<extra></extra>"))
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
