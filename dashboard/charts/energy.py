"""Telemetry joined to traces: the energy each rank's GPU drew in each
profiler step, and in each phase (computing, communicating, copying, idle).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl

from gpulens.dashboard import theme
from gpulens.dashboard.charts.base import empty_figure, _layout, new_figure, step_axis


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
    step_axis(fig, steps["step"].drop_nulls().to_list())
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
