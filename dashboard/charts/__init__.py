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

from gpulens.dashboard.charts.base import (
    CUDA_LAUNCH_QUEUE_LIMIT, GB, LINK_NAMES, TELEMETRY_METRICS, TEMPLATE, TEMPLATE_NAME, TEMPLATE_TRACE_TYPES,
    TIME_AXIS, WEBGL_MIN_POINTS, empty_figure, gpu_label, new_figure, size_label, step_axis,
)
from gpulens.dashboard.charts.dataset import coverage_figure
from gpulens.dashboard.charts.telemetry import telemetry_figure, throttle_periods, throttle_strip_figure
from gpulens.dashboard.charts.power import (
    cap_curve_figure, node_power_figure, power_distribution_figure, power_percentiles_figure,
)
from gpulens.dashboard.charts.interconnect import interconnect_timeline_figure, interconnect_usage_figure
from gpulens.dashboard.charts.kernels import (
    kernel_timeline_figure, launch_histogram_figure, short_kernels_figure, time_breakdown_figure, tklqt_figure,
    top_kernels_figure,
)
from gpulens.dashboard.charts.energy import phase_energy_figure, rank_label, step_energy_figure
from gpulens.dashboard.charts.communication import (
    busbw_figure, collective_time_figure, overlap_figure, skew_heatmap_figure, straggler_figure,
)
from gpulens.dashboard.charts.compare import collective_delta_figure, kernel_delta_figure

__all__ = [
    "CUDA_LAUNCH_QUEUE_LIMIT", "GB", "LINK_NAMES", "TELEMETRY_METRICS", "TEMPLATE", "TEMPLATE_NAME",
    "TEMPLATE_TRACE_TYPES", "TIME_AXIS", "WEBGL_MIN_POINTS", "empty_figure", "gpu_label", "new_figure", "size_label", "step_axis",
    "coverage_figure", "telemetry_figure", "throttle_periods", "throttle_strip_figure", "cap_curve_figure",
    "node_power_figure", "power_distribution_figure", "power_percentiles_figure", "interconnect_timeline_figure",
    "interconnect_usage_figure", "kernel_timeline_figure", "launch_histogram_figure", "short_kernels_figure",
    "time_breakdown_figure", "tklqt_figure", "top_kernels_figure", "phase_energy_figure", "rank_label",
    "step_energy_figure", "busbw_figure", "collective_time_figure", "overlap_figure", "skew_heatmap_figure",
    "straggler_figure", "collective_delta_figure", "kernel_delta_figure",
]
