"""Colours that keep their meaning on every page and in every report.

One colour per GPU index, one per collective type, one per time category;
pages and the report take colours from here only.
"""

from __future__ import annotations

# Plotly's qualitative "Dark24" start, re-ordered so neighbouring GPUs differ.
GPU_COLOURS: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173",
)

COLLECTIVE_COLOURS: dict[str, str] = {
    "all_reduce": "#1f77b4",
    "all_gather": "#2ca02c",
    "reduce_scatter": "#ff7f0e",
    "all_to_all": "#9467bd",
    "broadcast": "#8c564b",
    "reduce": "#e377c2",
    "send": "#17becf",
    "recv": "#bcbd22",
    "send_recv": "#17becf",
    "barrier": "#7f7f7f",
}
OTHER_COLOUR = "#7f7f7f"

CATEGORY_COLOURS: dict[str, str] = {
    "compute": "#2ca02c",
    "communication": "#1f77b4",
    "memory": "#ff7f0e",
    "idle": "#d3d3d3",
    "idle_host_wait": "#bdbdbd",
    "idle_kernel_wait": "#969696",
    "idle_other": "#e0e0e0",
}

SEVERITY_COLOURS: dict[str, str] = {"critical": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}

# Not a GPU colour: the limit line must never look like a GPU's series.
LIMIT_LINE_COLOUR = "#222222"
THROTTLE_SHADE_COLOUR = "rgba(214, 39, 40, 0.12)"


def gpu_colour(gpu_index: int) -> str:
    return GPU_COLOURS[int(gpu_index) % len(GPU_COLOURS)]


def collective_colour(op: str) -> str:
    return COLLECTIVE_COLOURS.get(op, OTHER_COLOUR)
