"""The report's charts: those the dashboard draws, and the few it does not.

Most charts come from `dashboard.charts` (the dashboard's pure figure
builders), so a page and the report show the same picture. The ones only
the report draws are here, built the same way (a Polars frame in, a
Plotly figure out, colours from `dashboard.theme`). `section_figures`
picks the charts of one report section from its tables and the report's
downsampled series.
"""

from __future__ import annotations

from typing import Any, Callable

import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import charts, theme

HEIGHT_PX = 380


def _layout(fig: go.Figure, title: str, x: str, y: str, **extra: Any) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=HEIGHT_PX,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        xaxis_title=x,
        yaxis_title=y,
        **extra,
    )
    return fig


def launch_figure(steps: pl.DataFrame) -> go.Figure:
    """GPU idle share per profiler step, one line per rank."""
    fig = charts.new_figure()
    runs = steps["run"].n_unique()
    groups = steps.sort("run", "rank", "step").group_by("run", "rank", maintain_order=True)
    for i, ((run, rank), group) in enumerate(groups):
        # several runs: a colour per line, as their ranks 0 would otherwise share one
        fig.add_scatter(x=group["step"].to_list(), y=group["gpu_idle_share"].to_list(), mode="lines+markers",
                        name=charts.rank_label(run, rank, runs), line_color=theme.gpu_colour(i if runs > 1 else rank))
    # "~%" keeps the digits a tick needs: a GPU-bound run idles well under
    # 1 % a step, where ".0%" wrote every tick of the axis as "0%".
    fig.update_layout(yaxis_tickformat="~%")
    charts.step_axis(fig, steps["step"].drop_nulls().to_list())
    return _layout(fig, "GPU idle share per step", "profiler step", "GPU idle share")


def typical_step_figure(kernel_runs: pl.DataFrame, queue: pl.DataFrame | None) -> go.Figure:
    """The kernels page's timeline of one step (kernels per stream, each
    stream's launch queue below), for the step the report chose as typical."""
    fig = charts.kernel_timeline_figure(kernel_runs, queue)
    fig.update_layout(title_text=f"{fig.layout.title.text} (its median step)")
    return fig


def _usable(frame: pl.DataFrame | None, *columns: str) -> bool:
    return frame is not None and not frame.is_empty() and all(c in frame.columns for c in columns)


def _bucket_s(timeline: pl.DataFrame) -> float:
    starts = timeline["bucket_start"].unique().sort()
    if starts.len() < 2:
        return 1.0
    return max(1.0, (starts[1] - starts[0]).total_seconds())


def section_figures(report: Any, section: Any) -> list[tuple[str, Callable[[], go.Figure]]]:
    """(id, builder) pairs for one section's charts, from its tables and the report's series."""
    t = section.table
    series = report.series
    plans: list[tuple[str, Callable[[], go.Figure], bool]] = []
    if section.id == "launch":
        steps = t("step_launch_summary")
        plans.append(("tklqt", lambda: charts.tklqt_figure(steps), _usable(steps, "tklqt_ns", "verdict")))
        plans.append(("idle", lambda: launch_figure(steps), _usable(steps, "gpu_idle_share")))
        for i, run in enumerate(key.removeprefix("step_kernels/") for key in series if key.startswith("step_kernels/")):
            plans.append((f"step-{i}", lambda run=run: typical_step_figure(series[f"step_kernels/{run}"],
                                                                           series.get(f"step_queue/{run}")), True))
    elif section.id == "time":
        plans.append(("breakdown", lambda: charts.time_breakdown_figure(t("time_breakdown")), _usable(t("time_breakdown"), "compute_share")))
        plans.append(("overlap", lambda: charts.overlap_figure(t("comm_overlap")), _usable(t("comm_overlap"), "exposed_ns")))
    elif section.id == "communication":
        plans.append(("stragglers", lambda: charts.straggler_figure(t("stragglers")), _usable(t("stragglers"), "share_last")))
        stats = t("collective_stats")
        plans.append(("busbw", lambda: charts.busbw_figure(stats), _usable(stats, "busbw_bytes_per_s")))
        plans.append(("collective-time", lambda: charts.collective_time_figure(stats), _usable(stats, "total_ns")))
    elif section.id == "power":
        timeline = series.get("telemetry_timeline")
        nodes = series.get("dash_node_power_timeline")
        node_power = t("node_power")
        budget = None
        if _usable(node_power, "budget_w") and node_power.height == 1:
            budget = node_power["budget_w"][0]
        plans.append(("timeline", lambda: charts.telemetry_figure(timeline, "power_w", _bucket_s(timeline)),
                      _usable(timeline, "power_w_mean", "bucket_start")))
        plans.append(("percentiles", lambda: charts.power_percentiles_figure(t("power_headroom")), _usable(t("power_headroom"), "p99_w")))
        plans.append(("node", lambda: charts.node_power_figure(nodes, budget), _usable(nodes, "node_w_mean")))
    elif section.id == "interconnect":
        usage = t("interconnect_usage")
        links = sorted(usage["link"].unique().to_list()) if _usable(usage, "link") else []
        for link in links:
            plans.append((f"usage-{link}", lambda link=link: charts.interconnect_usage_figure(usage, link), True))
    elif section.id == "energy":
        steps = t("step_energy")
        usable = _usable(steps, "energy_j") and steps["energy_j"].drop_nulls().len() > 0
        plans.append(("steps", lambda: charts.step_energy_figure(steps), usable))
        phases = t("phase_energy")
        plans.append(("phases", lambda: charts.phase_energy_figure(phases),
                      _usable(phases, "energy_j", "phase") and phases["energy_j"].drop_nulls().len() > 0))
    return [(name, build) for name, build, usable in plans if usable]
