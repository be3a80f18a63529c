"""Downsampled and summarised views for charts (the dashboard and the report).

Each function runs one SQL file of `analysis/sql/` (also a view of the same
name) with its parameters and returns a Polars frame; none ships more than
a few thousand rows per series, whatever the size of the dataset:

- `telemetry_timeline`: per GPU and time bucket, min/mean/max of power,
  utilisation, clocks, temperature and memory, and the share throttled.
- `node_power_timeline`: each node's coincident power per time bucket, with
  the what-if cap applied.
- `power_cap_curve`: the power-cap what-if over a range of caps at once.
- `telemetry_coverage`, `trace_runs`: what the dataset covers.
- `power_histogram`, `launch_histogram`: distributions as histograms.
- `step_kernel_runs`: one rank's kernels in one profiler step, merged at
  drawing resolution, for a timeline.
- `step_queue_length`: the launch queue of each stream of that rank in
  that step (launched, not yet started, as HTA counts), per pixel.
- `skew_by_step`: arrival lateness per rank and step.
- `compare_kernels`, `compare_collectives`: two runs side by side.

`bucket_seconds(span_s, interval_s)` picks a bucket width that keeps a
series under `max_points` points.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import duckdb
import polars as pl

from gpulens.analysis.power import hosts_param
from gpulens.analysis.registry import run_analysis

# Bucket widths a chart's axis reads well at, in seconds.
_NICE_BUCKETS_S = (
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400,
)
MAX_POINTS = 1500
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def bucket_seconds(span_s: float, interval_s: float | None = None, max_points: int = MAX_POINTS) -> float:
    """The smallest nice bucket width, no finer than the sampling interval,
    that cuts `span_s` seconds into at most `max_points` buckets."""
    floor_s = max(interval_s or 0.0, span_s / max(max_points, 1), 1e-3)
    for width in _NICE_BUCKETS_S:
        if width >= floor_s * 0.999:
            return float(width)
    return float(math.ceil(floor_s / 86400) * 86400)


def _epoch_us(value: datetime | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:  # naive datetimes are UTC here, never local time
            value = value.replace(tzinfo=timezone.utc)
        return (value - _EPOCH) // timedelta(microseconds=1)
    return int(value)


def telemetry_timeline(
    con: duckdb.DuckDBPyConnection,
    bucket_s: float = 60,
    start: datetime | int | None = None,
    end: datetime | int | None = None,
    hosts: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Per host, GPU and bucket of `bucket_s` seconds: min/mean/max of each metric.

    `start` and `end` (datetimes or epoch µs) keep samples with
    start <= ts < end; `hosts` keeps those hosts' GPUs (None: every host).
    """
    return run_analysis(
        con,
        "telemetry_timeline",
        timeline_bucket_s=float(bucket_s),
        timeline_start_us=_epoch_us(start),
        timeline_end_us=_epoch_us(end),
        telemetry_hosts=hosts_param(hosts),
    )


def node_power_timeline(
    con: duckdb.DuckDBPyConnection,
    bucket_s: float = 60,
    power_cap_w: float | None = None,
    start: datetime | int | None = None,
    end: datetime | int | None = None,
    hosts: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Per host and bucket: coincident power min/mean/max, and capped at
    `power_cap_w`; `hosts` keeps those hosts (None: every host)."""
    params: dict[str, Any] = {
        "timeline_bucket_s": float(bucket_s),
        "timeline_start_us": _epoch_us(start),
        "timeline_end_us": _epoch_us(end),
        "telemetry_hosts": hosts_param(hosts),
    }
    if power_cap_w is not None:
        params["power_cap_w"] = float(power_cap_w)
    return run_analysis(con, "dash_node_power_timeline", **params)


def power_cap_curve(
    con: duckdb.DuckDBPyConnection,
    min_cap_w: float,
    max_cap_w: float,
    points: int = 8,
    node_budget_w: float | None = None,
    hosts: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Per node and cap (`points` caps from `min_cap_w` to `max_cap_w`): the
    share of ticks a GPU hits the cap, capped coincident p99, extra nodes;
    `hosts` keeps those nodes (None: every node)."""
    params: dict[str, Any] = {"dash_cap_min_w": float(min_cap_w), "dash_cap_max_w": float(max_cap_w),
                              "dash_cap_points": int(points), "telemetry_hosts": hosts_param(hosts)}
    if node_budget_w is not None:
        params["node_budget_w"] = float(node_budget_w)
    return run_analysis(con, "dash_power_cap_curve", **params)


def telemetry_coverage(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per GPU: model, first and last sample, samples, sampling interval."""
    return run_analysis(con, "dash_telemetry_coverage")


def trace_runs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per run: ranks, hosts, device, format, time base, span, kernels, steps, collectives."""
    return run_analysis(con, "dash_runs")


def power_histogram(con: duckdb.DuckDBPyConnection, bin_w: float = 10,
                    hosts: Iterable[str] | None = None) -> pl.DataFrame:
    """Per GPU: sampled power in bins of `bin_w` watts, with the GPU's limit;
    `hosts` keeps those hosts' GPUs (None: every host)."""
    return run_analysis(con, "dash_power_histogram", dash_power_bin_w=float(bin_w), telemetry_hosts=hosts_param(hosts))


def launch_histogram(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per run: log-binned launch delay and launch-call time (ten bins a decade)."""
    return run_analysis(con, "dash_launch_histogram")


def step_kernel_runs(
    con: duckdb.DuckDBPyConnection,
    run: str,
    rank: int,
    step: int,
    window_start_ns: int | None = None,
    window_end_ns: int | None = None,
    pixels: int = 1500,
) -> pl.DataFrame:
    """Every kernel of `rank` in profiler step `step`, as runs per stream and
    category: kernels less than one pixel apart (the window's span /
    `pixels`) are merged. The window is the whole step, or
    `window_start_ns`..`window_end_ns` after its start."""
    return run_analysis(con, "dash_step_kernel_runs", **_step_params(run, rank, step, window_start_ns, window_end_ns, pixels))


def step_queue_length(
    con: duckdb.DuckDBPyConnection,
    run: str,
    rank: int,
    step: int,
    window_start_ns: int | None = None,
    window_end_ns: int | None = None,
    pixels: int = 1500,
) -> pl.DataFrame:
    """How many GPU activities of each stream of `rank` were launched and
    not yet started on the GPU (as HTA counts: see `queued_launches`), over
    profiler step `step` (or the window
    `window_start_ns`..`window_end_ns` after its start, as in
    `step_kernel_runs`): the changes gathered per pixel, with each stream's
    mean and deepest queue and the share of the window it was empty."""
    return run_analysis(con, "dash_step_queue_length", **_step_params(run, rank, step, window_start_ns, window_end_ns, pixels))


def _step_params(run: str, rank: int, step: int, window_start_ns: int | None, window_end_ns: int | None,
                 pixels: int) -> dict[str, Any]:
    """The parameters of the step views (`dash_step_window` and the views that draw it)."""
    return {
        "dash_run": run, "dash_rank": int(rank), "dash_step": int(step),
        "dash_window_start_ns": None if window_start_ns is None else int(window_start_ns),
        "dash_window_end_ns": None if window_end_ns is None else int(window_end_ns), "dash_pixels": int(pixels),
    }


def skew_by_step(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per run, rank and step: collectives, mean lateness, time waited, last arrivals."""
    return run_analysis(con, "dash_skew_steps")


def compare_kernels(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> pl.DataFrame:
    """Kernel names of two runs side by side, most changed time per rank-step first.

    Columns: name, category, then count, total, mean and per-step time of
    each run (suffixes `_a`, `_b`), and `delta_per_step_ns` (b - a) with
    `ratio` (b / a). A kernel that ran in one run only has NULLs for the
    other.
    """
    return _compare(run_analysis(con, "dash_kernel_compare"), run_a, run_b, ["name"],
                    ["category"], ["kernel_count", "total_ns", "mean_ns", "per_step_ns", "per_step_count"], "per_step_ns")


def compare_collectives(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> pl.DataFrame:
    """Collectives (op, message-size bucket) of two runs side by side.

    Columns: op, size_bucket_bytes, then count, bytes, mean time and busbw of
    each run (`_a`, `_b`), `delta_mean_ns` and `busbw_ratio` (b / a).
    """
    frame = _compare(run_analysis(con, "dash_collective_compare"), run_a, run_b, ["op", "size_bucket_bytes"],
                     [], ["count", "bytes", "total_ns", "mean_ns", "busbw_bytes_per_s", "peak_bytes_per_s"], "mean_ns")
    return frame.with_columns(
        (pl.col("busbw_bytes_per_s_b") / pl.col("busbw_bytes_per_s_a")).alias("busbw_ratio")
    )


def _compare(frame: pl.DataFrame, run_a: str, run_b: str, keys: list[str], attrs: list[str],
             figures: list[str], delta_of: str) -> pl.DataFrame:
    columns = keys + attrs + figures
    a = frame.filter(pl.col("run") == run_a).select(columns)
    b = frame.filter(pl.col("run") == run_b).select(columns)
    joined = a.join(b, on=keys, how="full", coalesce=True, suffix="_b")
    joined = joined.rename({name: f"{name}_a" for name in figures})
    for attr in attrs:
        joined = joined.with_columns(pl.coalesce(attr, f"{attr}_b").alias(attr)).drop(f"{attr}_b")
    delta = f"delta_{delta_of}"
    joined = joined.with_columns(
        (pl.col(f"{delta_of}_b").fill_null(0) - pl.col(f"{delta_of}_a").fill_null(0)).alias(delta),
        (pl.col(f"{delta_of}_b") / pl.col(f"{delta_of}_a")).alias("ratio"),
    )
    return joined.sort(pl.col(delta).abs(), descending=True, nulls_last=True)
