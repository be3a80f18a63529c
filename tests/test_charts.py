"""How the dashboard's heavier charts are drawn: few SVG elements, exact shapes."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import plotly.io as pio
import polars as pl
import pytest

from gpulens.dashboard import charts, theme


def kernel_runs(rows: list[tuple], window_ns: tuple[int, int] | None = None) -> pl.DataFrame:
    """(stream, category, name, offset_ns, end_offset_ns[, kernel_count, busy_ns, longest_ns]) runs of
    one step, as `timeline.step_kernel_runs` gives them; one kernel each unless told."""
    full = [(*row, *(1, row[4] - row[3], row[4] - row[3])[len(row) - 5:]) for row in rows]
    window = window_ns or (0, max(row[4] for row in rows))
    return pl.DataFrame(
        [("train", 0, 3, *row, *window) for row in full],
        schema=["run", "rank", "step", "stream", "category", "name", "offset_ns", "end_offset_ns", "kernel_count",
                "busy_ns", "longest_ns", "window_offset_ns", "window_end_offset_ns"], orient="row")


def test_kernel_timeline_draws_one_filled_trace_per_category_and_one_for_the_hover() -> None:
    fig = charts.kernel_timeline_figure(kernel_runs([
        (7, "compute", "gemm", 0, 4_000_000), (7, "compute", "relu", 5_000_000, 6_000_000),
        (13, "communication", "ncclDevKernel_AllReduce", 1_000_000, 4_000_000)]))
    # The busiest category first (5 ms of compute), so the other is drawn over it.
    assert [(trace.name, trace.mode, trace.fill, trace.showlegend) for trace in fig.data] == [
        ("compute", "none", "toself", None), ("communication", "none", "toself", None), ("kernels", "lines", None, False)]


def test_kernel_timeline_run_is_a_rectangle_on_its_stream_row() -> None:
    fig = charts.kernel_timeline_figure(kernel_runs([
        (7, "compute", "gemm", 1_000_000, 5_000_000), (13, "communication", "nccl", 0, 6_000_000)]))
    compute = next(trace for trace in fig.data if trace.name == "compute")
    # Stream 7 is the first row, drawn at the top (y = 1 of rows 0..1); NaN ends the outline.
    assert list(compute.x[:4]) == [1.0, 5.0, 5.0, 1.0] and math.isnan(compute.x[4])
    # Drawn in float32 (compared as such: NumPy 1 promotes a float32 to float64 against a float).
    assert compute.y[:4].tolist() == np.float32([0.65, 0.65, 1.35, 1.35]).tolist() and math.isnan(compute.y[4])
    assert list(fig.layout.yaxis.ticktext) == ["stream 7", "stream 13"] and list(fig.layout.yaxis.tickvals) == [1, 0]


def test_kernel_timeline_hover_names_a_lone_kernel_with_its_true_times() -> None:
    fig = charts.kernel_timeline_figure(kernel_runs([
        (7, "compute", "gemm", 2_000_000, 3_500_000), (7, "compute", "relu", 0, 1_000_000),
        (13, "communication", "nccl", 0, 4_000_000)]))
    hover = fig.data[-1]
    # Top row first, each in time order: relu, gemm on stream 7, then nccl on stream 13.
    assert list(hover.text) == [
        "relu<br>compute, stream 7<br>start 0.000 ms, 1000.0 µs",
        "gemm<br>compute, stream 7<br>start 2.000 ms, 1500.0 µs",
        "nccl<br>communication, stream 13<br>start 0.000 ms, 4000.0 µs"]
    assert list(hover.x) == [0.5, 2.75, 2.0] and list(hover.y) == [1.0, 1.0, 0.0]


def test_kernel_timeline_hover_sums_up_a_merged_run() -> None:
    fig = charts.kernel_timeline_figure(kernel_runs([
        (7, "compute", "void at::native::vectorized_elementwise_kernel<4, Add>(int, Add)", 1_000_000, 1_040_000,
         25, 30_000, 4_000)]))
    assert list(fig.data[-1].text) == [
        "25 kernels: 30.0 µs busy of 40.0 µs (75%)<br>longest void at::native::vectorized_elementwise_kernel&lt;4, Add&gt;"
        "(int, Add) (4.0 µs)"
        "<br>compute, stream 7<br>start 1.000 ms"]


def test_kernel_timeline_widens_a_tiny_kernel_to_a_visible_sliver() -> None:
    # 1 ns in a 150 ms step: drawn 0.1 ms wide (1/1500 of the span).
    fig = charts.kernel_timeline_figure(kernel_runs([
        (7, "compute", "long", 0, 150_000_000), (7, "memory", "tiny", 75_000_000, 75_000_001)]))
    memory = next(trace for trace in fig.data if trace.name == "memory")
    assert memory.x[:2].tolist() == np.float32([75.0, 75.1]).tolist()


def test_kernel_timeline_spans_the_window_it_was_given() -> None:
    fig = charts.kernel_timeline_figure(kernel_runs([(7, "compute", "gemm", 2_000_000, 3_000_000)],
                                                    window_ns=(1_500_000, 4_000_000)))
    assert list(fig.layout.xaxis.range) == [1.5, 4.0]


def queue_rows(rows: list[tuple], summary: dict[int, tuple], window_ns: tuple[int, int]) -> pl.DataFrame:
    """(stream, offset_ns, end_offset_ns, queue_min, queue_max, queue_last) pixels of one step's launch
    queue, as `timeline.step_queue_length` gives them; `summary` is each stream's (mean, max, empty share)."""
    return pl.DataFrame(
        [("train", 0, 3, *row, *summary[row[0]], *window_ns) for row in rows],
        schema=["run", "rank", "step", "stream", "offset_ns", "end_offset_ns", "queue_min", "queue_max", "queue_last",
                "mean_queue_length", "max_queue_length", "empty_share", "window_offset_ns", "window_end_offset_ns"],
        orient="row")


def test_kernel_timeline_draws_each_streams_queue_below_the_kernels_on_the_same_time_axis() -> None:
    runs = kernel_runs([(7, "compute", "gemm", 0, 4_000_000)], window_ns=(0, 10_000_000))
    queue = queue_rows([(7, 0, 0, 2, 2, 2), (7, 1_000_000, 1_500_000, 0, 5, 1)], {7: (1.2, 5, 0.25)}, (0, 10_000_000))
    fig = charts.kernel_timeline_figure(runs, queue)
    line = fig.data[-1]
    assert line.name == "stream 7: mean 1.2, max 5, empty 25%" and line.line.shape == "hv"
    # Each pixel: its shallowest, then its deepest queue at its first change, the level it leaves at its last;
    # the last level held to the window's end.
    assert line.x.tolist() == [0, 0, 0, 1.0, 1.0, 1.5, 10.0] and line.y.tolist() == [2, 2, 2, 0, 5, 1, 1]
    assert (line.xaxis, line.yaxis) == ("x2", "y2") and fig.layout.xaxis2.matches is None
    assert fig.layout.xaxis.matches == "x2" and list(fig.layout.xaxis.range) == [0.0, 10.0]
    assert fig.layout.yaxis2.title.text == "Queued launches" and not fig.layout.shapes


def test_kernel_timeline_marks_cudas_launch_queue_limit_when_a_queue_comes_near_it() -> None:
    runs = kernel_runs([(7, "compute", "gemm", 0, 4_000_000)])
    queue = queue_rows([(7, 0, 0, 600, 600, 600)], {7: (600.0, 600, 0.0)}, (0, 4_000_000))
    fig = charts.kernel_timeline_figure(runs, queue)
    assert [shape.y0 for shape in fig.layout.shapes] == [1024]


def test_kernel_timeline_without_a_queue_is_one_panel() -> None:
    runs = kernel_runs([(7, "compute", "gemm", 0, 4_000_000)])
    empty = queue_rows([], {}, (0, 4_000_000))
    assert "xaxis2" not in charts.kernel_timeline_figure(runs, empty).layout.to_plotly_json()


def test_tklqt_draws_markers_for_few_steps() -> None:
    steps = pl.DataFrame({"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2], "tklqt_ns": [1e6, 2e6, 1e6, 3e6],
                          "verdict": ["gpu_bound"] * 4, "gpu_idle_share": [0.1] * 4})
    fig = charts.tklqt_figure(steps)
    assert {trace.mode for trace in fig.data} == {"lines+markers"} and fig.layout.xaxis.dtick == 1


def test_tklqt_draws_lines_only_for_many_steps() -> None:
    # 8 ranks x 40 steps: 320 markers would each be an SVG element.
    steps = pl.DataFrame({"rank": [r for r in range(8) for _ in range(40)], "step": list(range(40)) * 8,
                          "tklqt_ns": [1e6] * 320, "verdict": ["gpu_bound"] * 320, "gpu_idle_share": [0.1] * 320})
    fig = charts.tklqt_figure(steps)
    assert {trace.mode for trace in fig.data} == {"lines"} and fig.layout.xaxis.dtick is None


def test_tklqt_of_many_ranks_draws_their_band_median_and_two_extreme_ranks() -> None:
    # 40 ranks x 3 steps; rank r's TKLQT is r ms at every step, but rank 7 is 100 ms at step 2.
    rows = [(r, s, (100.0 if (r, s) == (7, 2) else float(r)) * 1e6) for r in range(40) for s in range(3)]
    steps = pl.DataFrame(rows, schema=["rank", "step", "tklqt_ns"], orient="row").with_columns(
        verdict=pl.lit("gpu_bound"), gpu_idle_share=pl.lit(0.1))
    fig = charts.tklqt_figure(steps)
    assert [trace.name for trace in fig.data] == [
        "all 40 ranks: max", "all 40 ranks: min to max", "median rank", "rank 0", "rank 39"]
    high, low, median = fig.data[0], fig.data[1], fig.data[2]
    assert list(high.y) == [39.0, 39.0, 100.0] and list(low.y) == [0.0, 0.0, 0.0] and low.fill == "tonexty"
    # 0..39, then with 7 raised to 100: 0..6, 8..39, 100, whose middle two are 20 and 21.
    assert list(median.y) == [19.5, 19.5, 20.5]


def test_tklqt_of_two_runs_draws_a_line_per_run_and_rank_in_colours_of_their_own() -> None:
    # The real H100 sample: steps 10-11 of one run, 100-101 of another, both rank 0.
    steps = pl.DataFrame({"run": ["train", "train", "small", "small"], "rank": [0] * 4, "step": [10, 11, 100, 101],
                          "tklqt_ns": [5e9, 6e9, 1e6, 2e6], "verdict": ["gpu_bound"] * 2 + ["cpu_bound"] * 2,
                          "gpu_idle_share": [0.02] * 2 + [0.8] * 2})
    fig = charts.tklqt_figure(steps)
    assert [(trace.name, list(trace.x)) for trace in fig.data] == [("small rank 0", [100, 101]), ("train rank 0", [10, 11])]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert fig.layout.xaxis.dtick is None  # steps 10 to 101: a tick each would be 92 labels


def test_tklqt_of_a_gpu_bound_run_reads_in_seconds() -> None:
    # The real H100 sample's GPU-bound steps queue 13-55 s of launches each.
    steps = pl.DataFrame({"rank": [0, 0], "step": [10, 11], "tklqt_ns": [13.25e9, 55.5e9],
                          "verdict": ["gpu_bound"] * 2, "gpu_idle_share": [0.02] * 2})
    fig = charts.tklqt_figure(steps)
    assert (list(fig.data[0].y), fig.layout.yaxis.title.text) == ([13.25, 55.5], "TKLQT (s)")


def test_tklqt_of_a_cpu_bound_run_reads_in_microseconds() -> None:
    steps = pl.DataFrame({"rank": [0, 0], "step": [1, 2], "tklqt_ns": [96_200.0, 131_000.0],
                          "verdict": ["cpu_bound"] * 2, "gpu_idle_share": [0.7] * 2})
    fig = charts.tklqt_figure(steps)
    assert (list(fig.data[0].y), fig.layout.yaxis.title.text) == ([96.2, 131.0], "TKLQT (µs)")


def test_tklqt_of_16_ranks_still_draws_each_rank() -> None:
    steps = pl.DataFrame({"rank": list(range(16)), "step": [1] * 16, "tklqt_ns": [1e6] * 16,
                          "verdict": ["gpu_bound"] * 16, "gpu_idle_share": [0.1] * 16})
    assert [trace.name for trace in charts.tklqt_figure(steps).data] == [f"rank {r}" for r in range(16)]


def test_coverage_draws_each_host_and_epoch_run_on_one_utc_axis() -> None:
    coverage = pl.DataFrame({
        "host": ["node-a", "node-a"], "gpu_index": [0, 1],
        "first_ts": [datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)] * 2,
        "last_ts": [datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc), datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)]})
    runs = pl.DataFrame({"run": ["train", "old"], "ranks": [8, 1], "time_base": ["epoch", "trace"],
                         "first_ns": [1_767_229_200_000_000_000, 5], "last_ns": [1_767_232_800_000_000_000, 9]})
    fig = charts.coverage_figure(coverage, runs)
    telemetry, traces = fig.data
    assert (telemetry.name, list(telemetry.y), list(telemetry.x)) == (
        "telemetry", ["node-a (2 GPUs)", "node-a (2 GPUs)", None],
        [datetime(2026, 1, 1, 0, 0), datetime(2026, 1, 1, 3, 0), None])
    # The run on its own clock has no place on the axis; the epoch one runs 01:00 to 02:00.
    assert (traces.name, list(traces.y), list(traces.x)) == (
        "trace run", ["run train (8 ranks)", "run train (8 ranks)", None],
        [datetime(2026, 1, 1, 1, 0), datetime(2026, 1, 1, 2, 0), None])


def test_coverage_draws_a_short_run_as_a_sliver_with_its_true_span_in_the_hover() -> None:
    coverage = pl.DataFrame({"host": ["node-a"], "gpu_index": [0],
                             "first_ts": [datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)],
                             "last_ts": [datetime(2026, 1, 2, 0, 0, tzinfo=timezone.utc)]})
    runs = pl.DataFrame({"run": ["short"], "ranks": [2], "time_base": ["epoch"],
                         "first_ns": [1_767_229_200_000_000_000], "last_ns": [1_767_229_205_000_000_000]})
    traces = charts.coverage_figure(coverage, runs).data[1]
    # 5 s in a day: drawn 1/300 of the day (4 min 48 s) wide.
    assert traces.x[1] - traces.x[0] == timedelta(minutes=4, seconds=48)
    assert tuple(traces.customdata[0][1:]) == ("2026-01-01 01:00:00 to 2026-01-01 01:00:05 UTC", "5 s")


def test_coverage_writes_a_short_runs_true_length_beside_its_sliver() -> None:
    coverage = pl.DataFrame({"host": ["node-a"], "gpu_index": [0],
                             "first_ts": [datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)],
                             "last_ts": [datetime(2026, 1, 1, 0, 3, tzinfo=timezone.utc)]})
    runs = pl.DataFrame({"run": ["demo"], "ranks": [8], "time_base": ["epoch"],
                         "first_ns": [1_767_225_690_000_000_000], "last_ns": [1_767_225_690_150_000_000]})
    [label] = [trace for trace in charts.coverage_figure(coverage, runs).data if trace.mode == "text"]
    assert (list(label.y), list(label.text)) == (["run demo (8 ranks)"], ["  0.15 s (drawn wider)"])


def _hosts_coverage(hosts: int) -> pl.DataFrame:
    return pl.DataFrame({"host": [f"node-{h:03d}" for h in range(hosts)], "gpu_index": [0] * hosts,
                         "first_ts": [datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)] * hosts,
                         "last_ts": [datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)] * hosts})


def test_coverage_gives_a_few_hosts_40_px_each() -> None:
    fig = charts.coverage_figure(_hosts_coverage(4), pl.DataFrame())
    assert (fig.layout.height, fig.data[0].line.width) == (160 + 4 * 40, 16)


def test_coverage_of_a_fleet_shares_the_height_of_20_rows_down_to_a_label_each() -> None:
    forty = charts.coverage_figure(_hosts_coverage(40), pl.DataFrame())
    three_hundred = charts.coverage_figure(_hosts_coverage(300), pl.DataFrame())
    assert (forty.layout.height, forty.data[0].line.width) == (160 + 40 * 20, 16)
    assert (three_hundred.layout.height, three_hundred.data[0].line.width) == (160 + 300 * 14, 10)


def test_coverage_says_so_when_nothing_is_on_the_utc_clock() -> None:
    runs = pl.DataFrame({"run": ["old"], "ranks": [1], "time_base": ["trace"], "first_ns": [5], "last_ns": [9]})
    fig = charts.coverage_figure(pl.DataFrame(), runs)
    assert fig.data == () and fig.layout.annotations[0].text.startswith("Nothing on the UTC clock")


def test_template_is_plotly_white_for_the_trace_types_drawn() -> None:
    white = pio.templates["plotly_white"]
    assert charts.TEMPLATE.layout == white.layout
    assert all(getattr(charts.TEMPLATE.data, kind) == getattr(white.data, kind) for kind in charts.TEMPLATE_TRACE_TYPES)


def telemetry_buckets(rows: list[tuple[int, int, float, float | None]]) -> pl.DataFrame:
    """(gpu_index, minute, power_w, throttled_share) rows of `telemetry_timeline` at 60 s buckets on node-a."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return pl.DataFrame(
        [("node-a", gpu, start + timedelta(minutes=minute), power_w, power_w - 5, power_w + 5, 700.0, share)
         for gpu, minute, power_w, share in rows],
        schema={"host": pl.String, "gpu_index": pl.Int32, "bucket_start": pl.Datetime("us", "UTC"),
                "power_w_mean": pl.Float64, "power_w_min": pl.Float64, "power_w_max": pl.Float64,
                "power_limit_w": pl.Float64, "throttled_share": pl.Float64},
        orient="row")


def test_telemetry_series_start_and_step_in_epoch_milliseconds_on_a_date_axis() -> None:
    # No x values at all: plotly.js would read each as a date.
    fig = charts.telemetry_figure(telemetry_buckets([(0, 0, 450.0, 0.0), (0, 1, 460.0, 0.0)]), "power_w", 60)
    gpu = next(trace for trace in fig.data if trace.name == "GPU 0")
    assert gpu.x is None and (gpu.x0, gpu.dx) == (1_767_225_600_000.0, 60_000.0)
    assert gpu.y.tolist() == [450.0, 460.0] and gpu.y.dtype.name == "float32"
    assert fig.layout.xaxis.type == "date" and fig.layout.xaxis.title.text == "Time (UTC)"


def test_telemetry_minute_without_samples_is_a_gap_in_the_line() -> None:
    fig = charts.telemetry_figure(telemetry_buckets([(0, 0, 450.0, 0.0), (0, 3, 470.0, 0.0)]), "power_w", 60)
    gpu = next(trace for trace in fig.data if trace.name == "GPU 0")
    assert gpu.y[0] == 450.0 and all(math.isnan(v) for v in gpu.y[1:3]) and gpu.y[3] == 470.0
    assert gpu.customdata[0].tolist() == [445.0, 455.0]


def test_throttle_strip_is_the_percentage_held_back_per_gpu_and_bucket() -> None:
    fig = charts.throttle_strip_figure(telemetry_buckets([
        (0, 0, 450.0, 0.0), (0, 1, 690.0, 0.5), (1, 0, 440.0, 0.25)]))
    strip = fig.data[0]
    assert list(strip.y) == ["GPU 0", "GPU 1"] and list(strip.x) == [1_767_225_600_000.0, 1_767_225_660_000.0]
    assert strip.z[0].tolist() == [0.0, 50.0]
    # GPU 1 has no sample in the second minute: a gap, not 0 %.
    assert strip.z[1][0] == 25.0 and math.isnan(strip.z[1][1])


def test_every_figure_starts_with_the_gpulens_template_though_streamlit_sets_its_own() -> None:
    import streamlit  # noqa: F401 - makes "streamlit" plotly's default template on import

    pio.templates.default = "streamlit"
    assert charts.empty_figure("t", "nothing").layout.template == charts.TEMPLATE


def test_a_legend_of_many_gpus_sits_at_the_figures_foot_below_the_time_axis_title() -> None:
    # Relative to the plot it landed on the date axis's title, which two-line ticks push down.
    fig = charts.telemetry_figure(telemetry_buckets([(gpu, 0, 450.0, 0.0) for gpu in range(9)]), "power_w", 60)
    legend = fig.layout.legend
    assert (legend.orientation, legend.yref, legend.yanchor, legend.y) == ("h", "container", "bottom", 0.005)


def test_interconnect_series_go_as_start_and_step_with_a_gap_where_no_sample_is() -> None:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    timeline = pl.DataFrame({
        "host": ["node-a"] * 2, "gpu_index": [0, 0], "link": ["nvlink"] * 2, "direction": ["tx"] * 2,
        "bucket_start": [start, start + timedelta(minutes=2)], "achieved_bytes_per_s": [100e9, 120e9],
        "peak_bytes_per_s": [450e9] * 2})
    fig = charts.interconnect_timeline_figure(timeline, "nvlink", 60)
    series = fig.data[0]
    assert (series.x0, series.dx) == (1_767_225_600_000.0, 60_000.0)
    assert series.y[0] == 100.0 and math.isnan(series.y[1]) and series.y[2] == 120.0


def skew_rows(cells: dict[tuple[int, int], tuple[int, float]]) -> pl.DataFrame:
    """`timeline.skew_by_step` rows from {(rank, step): (collectives, mean lateness in µs)}."""
    return pl.DataFrame(
        [("train", rank, step, count, lateness_us * 1e3, 0, 0) for (rank, step), (count, lateness_us) in cells.items()],
        schema=["run", "rank", "step", "collectives", "mean_lateness_ns", "waited_ns", "last_count"], orient="row")


def test_skew_heatmap_gives_each_of_few_steps_a_column_and_a_tick() -> None:
    fig = charts.skew_heatmap_figure(skew_rows({(0, 1): (4, 12.5), (1, 1): (4, -12.5), (0, 2): (4, 3.0), (1, 2): (4, -3.0)}))
    heatmap = fig.data[0]
    assert list(heatmap.x) == [1, 2] and list(heatmap.y) == ["rank 0", "rank 1"]
    assert [list(row) for row in heatmap.z] == [[12.5, 3.0], [-12.5, -3.0]]
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.title.text == "Profiler step"


def test_skew_heatmap_shares_columns_between_steps_past_5000_cells() -> None:
    cells = {(rank, step): (1, 1.0) for rank in range(8) for step in range(1000)}
    cells[(0, 0)], cells[(0, 1)] = (1, 10.0), (3, 30.0)
    fig = charts.skew_heatmap_figure(skew_rows(cells))
    heatmap = fig.data[0]
    # 5,000 cells over 8 ranks: 625 columns at most, 500 at most in any case: two steps a column.
    assert len(heatmap.x) == 500 and list(heatmap.x[:3]) == [0, 2, 4]
    assert len(heatmap.z) * len(heatmap.z[0]) == 4_000
    # Weighted by collectives: (1 × 10 + 3 × 30) / 4.
    assert heatmap.z[0][0] == 25.0 and heatmap.z[1][0] == 1.0
    assert list(heatmap.customdata[0][:2]) == [1, 3]  # each column's last step, for the hover
    assert fig.layout.xaxis.dtick is None and fig.layout.xaxis.title.text == "Profiler step (2 steps a column)"


def test_skew_heatmap_of_many_ranks_numbers_them_and_stays_a_page_high() -> None:
    fig = charts.skew_heatmap_figure(skew_rows({(rank, step): (2, float(rank)) for rank in range(100) for step in range(5)}))
    heatmap = fig.data[0]
    assert list(heatmap.y[:3]) == [0, 1, 2] and fig.layout.yaxis.tickformat == "d"
    assert len(heatmap.x) == 5 and fig.layout.height == 140 + 760


def test_report_idle_share_axis_keeps_the_digits_a_small_share_needs() -> None:
    # A GPU-bound run idles 0.01-0.1 % of a step; ".0%" wrote every tick of
    # that axis as "0%". d3's "~%" writes 0.02 %, 0.04 % ... and 10 %, 20 %.
    from gpulens.dashboard.report.figures import launch_figure

    steps = pl.DataFrame({"run": ["r"] * 3, "rank": [0] * 3, "step": [0, 1, 2], "gpu_idle_share": [0.0012, 0.0004, 0.0]})
    fig = launch_figure(steps)
    assert fig.layout.yaxis.tickformat == "~%"
    assert list(fig.data[0].y) == [0.0012, 0.0004, 0.0]


def test_telemetry_of_17_gpus_draws_their_spread_median_and_the_two_extreme_gpus() -> None:
    # GPU g draws 400 + g W in minute 0 and 410 + g W in minute 1: GPU 16 highest, GPU 0 lowest.
    fig = charts.telemetry_figure(
        telemetry_buckets([(gpu, minute, 400.0 + gpu + 10 * minute, 0.0) for gpu in range(17) for minute in (0, 1)]),
        "power_w", 60)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"all 17 GPUs: highest", "all 17 GPUs: lowest to highest", "median GPU",
                            "GPU 16 (highest mean)", "GPU 0 (lowest mean)", "power limit"}
    assert by_name["all 17 GPUs: highest"].y.tolist() == [416.0, 426.0]
    assert by_name["all 17 GPUs: lowest to highest"].y.tolist() == [400.0, 410.0]
    assert by_name["median GPU"].y.tolist() == [408.0, 418.0]
    assert by_name["GPU 16 (highest mean)"].y.tolist() == [416.0, 426.0]


def test_telemetry_of_16_gpus_still_draws_each_gpu() -> None:
    fig = charts.telemetry_figure(telemetry_buckets([(gpu, 0, 400.0 + gpu, 0.0) for gpu in range(16)]), "power_w", 60)
    assert sorted(trace.name for trace in fig.data if trace.name.startswith("GPU")) == sorted(f"GPU {g}" for g in range(16))


def node_buckets(peaks_w: dict[str, list[float]]) -> pl.DataFrame:
    """`node_power_timeline` rows at 60 s buckets: each node's peak per minute (mean 100 W below, min 200 W
    below, capped at 50 W below the peak)."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return pl.DataFrame(
        [(host, start + timedelta(minutes=m), peak - 200, peak - 100, peak, peak - 100, peak - 50, 60)
         for host, peaks in peaks_w.items() for m, peak in enumerate(peaks)],
        schema={"host": pl.String, "bucket_start": pl.Datetime("us", "UTC"), "node_w_min": pl.Float64,
                "node_w_mean": pl.Float64, "node_w_max": pl.Float64, "capped_node_w_mean": pl.Float64,
                "capped_node_w_max": pl.Float64, "ticks": pl.Int64},
        orient="row")


def test_node_power_of_9_nodes_draws_their_peaks_spread_and_the_two_extreme_nodes() -> None:
    # node-i peaks at 4000 + 100 i W, then 100 W more: node-8 highest, node-0 lowest.
    nodes = node_buckets({f"node-{i}": [4000.0 + 100 * i, 4100.0 + 100 * i] for i in range(9)})
    fig = charts.node_power_figure(nodes, 5600.0, 600.0)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"all 9 nodes: highest peak", "all 9 nodes: lowest to highest peak", "median node's peak",
                            "node-8 peak (highest node)", "node-0 peak (lowest node)",
                            "node-8 peak with GPUs capped at 600 W", "budget 5,600 W"}
    assert list(by_name["all 9 nodes: lowest to highest peak"].y) == [4000.0, 4100.0]
    assert list(by_name["median node's peak"].y) == [4400.0, 4500.0]
    assert list(by_name["node-8 peak with GPUs capped at 600 W"].y) == [4750.0, 4850.0]


def test_node_power_of_8_nodes_still_draws_each_node() -> None:
    fig = charts.node_power_figure(node_buckets({f"node-{i}": [4000.0, 4100.0] for i in range(8)}), 5600.0)
    assert sorted(t.name for t in fig.data if t.name and t.name.endswith(" mean")) == [f"node-{i} mean" for i in range(8)]


def test_interconnect_of_17_gpus_draws_the_spread_of_every_gpu_and_direction() -> None:
    # GPU g sends (tx) 10 + g GB/s and receives (rx) 100 + g GB/s: GPU 16 rx highest, GPU 0 tx lowest.
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [("node-a", gpu, "nvlink", direction, start, (base + gpu) * 1e9, 450e9)
            for gpu in range(17) for direction, base in (("tx", 10), ("rx", 100))]
    timeline = pl.DataFrame(rows, schema=["host", "gpu_index", "link", "direction", "bucket_start",
                                          "achieved_bytes_per_s", "peak_bytes_per_s"], orient="row")
    fig = charts.interconnect_timeline_figure(timeline, "nvlink", 60)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"all 17 GPUs, both directions: highest", "all 17 GPUs, both directions: lowest to highest",
                            "median", "GPU 16 rx (highest mean)", "GPU 0 tx (lowest mean)", "nominal peak 450 GB/s"}
    assert by_name["all 17 GPUs, both directions: lowest to highest"].y.tolist() == [10.0]
    assert by_name["all 17 GPUs, both directions: highest"].y.tolist() == [116.0]


def test_power_distribution_of_17_gpus_pools_their_samples_and_draws_the_two_extreme_gpus() -> None:
    # GPU g: 10 samples in [300 + 10 g, 310 + 10 g) W, limit 700 W: GPU 16 highest, GPU 0 lowest.
    histogram = pl.DataFrame(
        [("node-a", gpu, 300.0 + 10 * gpu, 310.0 + 10 * gpu, 10, 1.0, 700.0) for gpu in range(17)],
        schema=["host", "gpu_index", "bin_low_w", "bin_high_w", "samples", "share", "limit_w"], orient="row")
    fig = charts.power_distribution_figure(histogram)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"all 17 GPUs", "GPU 16 (highest mean)", "GPU 0 (lowest mean)", "limit 700 W"}
    pooled = by_name["all 17 GPUs"]
    assert list(pooled.x) == [300.0] + [300.0 + 10 * g for g in range(17)] + [470.0]
    assert list(pooled.y)[1:-1] == pytest.approx([100 / 17] * 17)


def headroom_rows(p99_w: list[float]) -> pl.DataFrame:
    """power_headroom rows of one GPU each on node-a (GPU i has p99 p99_w[i])."""
    return pl.DataFrame({
        "host": ["node-a"] * len(p99_w), "gpu_index": list(range(len(p99_w))),
        "p50_w": [w / 2 for w in p99_w], "p95_w": [w - 10 for w in p99_w], "p99_w": p99_w,
        "max_w": [w + 5 for w in p99_w], "limit_w": [700.0] * len(p99_w),
    })


def test_power_percentiles_of_17_gpus_rank_them_by_p99_with_names_in_the_hover_only() -> None:
    p99_w = [400.0 + (i * 7) % 17 * 10 for i in range(17)]
    fig = charts.power_percentiles_figure(headroom_rows(p99_w))
    order = list(fig.layout.xaxis.categoryarray)
    assert order[:2] == ["GPU 12", "GPU 7"]  # p99 560 and 550 W
    assert [p99_w[int(label.split()[1])] for label in order] == sorted(p99_w, reverse=True)
    assert fig.layout.xaxis.showticklabels is False
    assert fig.layout.xaxis.title.text == "17 GPUs, highest p99 first (hover for each)"


def test_power_percentiles_of_16_gpus_keep_their_order_and_names() -> None:
    fig = charts.power_percentiles_figure(headroom_rows([500.0 - i for i in range(16)][::-1]))
    assert list(fig.layout.xaxis.categoryarray) == [f"GPU {i}" for i in range(16)]
    assert fig.layout.xaxis.showticklabels is True


def test_interconnect_usage_of_17_gpus_ranks_them_busiest_first() -> None:
    rows = [(g, d, (g * 5) % 17 * 1e9 + (1e8 if d == "rx" else 0)) for g in range(17) for d in ("tx", "rx")]
    usage = pl.DataFrame({
        "host": ["node-a"] * len(rows), "link": ["pcie"] * len(rows), "gpu_index": [g for g, _, _ in rows],
        "direction": [d for _, d, _ in rows], "achieved_bytes_per_s": [v for _, _, v in rows],
        "p95_bytes_per_s": [v for _, _, v in rows], "utilisation": [v / 63e9 for _, _, v in rows],
        "peak_bytes_per_s": [63e9] * len(rows),
    })
    fig = charts.interconnect_usage_figure(usage, "pcie")
    assert list(fig.layout.xaxis.categoryarray)[:3] == ["GPU 10", "GPU 3", "GPU 13"]  # 16, 15 and 14 GB/s each way
    assert fig.layout.xaxis.showticklabels is False


def test_collective_time_of_an_nccl_log_says_it_has_no_gpu_time_rather_than_empty_axes() -> None:
    stats = pl.DataFrame({"op": ["all_reduce", "broadcast"], "size_bucket_bytes": [2**27, 2**8],
                          "total_ns": [None, None], "count": [7403, 1]}, schema_overrides={"total_ns": pl.Int64})
    fig = charts.collective_time_figure(stats)
    assert fig.data == () and "NCCL logs record sizes only" in fig.layout.annotations[0].text


def _patterned_legend_bars(fig) -> list:
    return [trace for trace in fig.data if trace.type == "bar" and trace.showlegend is not False
            and trace.marker.pattern.shape]


def _patterned_bars_of_many_colours(fig) -> list:
    return [trace for trace in fig.data if trace.type == "bar" and trace.marker.pattern.shape
            and not isinstance(trace.marker.color, str)]


def test_interconnect_usage_hatches_only_bars_of_one_colour() -> None:
    # plotly.js logs "Invalid color specifier: Array(n)" for a hatched bar trace of many colours.
    usage = pl.DataFrame({
        "host": ["node-a"] * 4, "link": ["nvlink"] * 4, "gpu_index": [0, 0, 1, 1], "direction": ["rx", "tx"] * 2,
        "achieved_bytes_per_s": [1e9, 2e9, 3e9, 4e9], "p95_bytes_per_s": [2e9, 3e9, 4e9, 5e9],
        "utilisation": [0.1] * 4, "peak_bytes_per_s": [450e9] * 4,
    })
    fig = charts.interconnect_usage_figure(usage, "nvlink")
    assert _patterned_bars_of_many_colours(fig) == []
    rx = [(list(t.x), list(t.y), t.marker.color, t.offsetgroup) for t in fig.data
          if t.type == "bar" and t.marker.pattern.shape == "/" and t.showlegend is False]
    assert rx == [(["GPU 0"], [1.0], theme.gpu_colour(0), "rx"), (["GPU 1"], [3.0], theme.gpu_colour(1), "rx")]
    legend = [(t.name, t.marker.color) for t in fig.data if t.type == "bar" and t.showlegend is not False]
    assert legend == [("rx mean", theme.OTHER_COLOUR), ("tx mean", theme.OTHER_COLOUR)]


def test_collective_delta_hatches_only_bars_of_one_colour() -> None:
    compare = pl.DataFrame({"op": ["all_reduce", "all_gather"], "size_bucket_bytes": [1024, 1024],
                            "busbw_bytes_per_s_a": [1e9, 2e9], "busbw_bytes_per_s_b": [3e9, 4e9]})
    assert _patterned_bars_of_many_colours(charts.collective_delta_figure(compare, "a", "b")) == []


def test_throttle_shading_is_per_gpu_and_names_the_gpu_held_back() -> None:
    fig = charts.telemetry_figure(telemetry_buckets([
        (0, 0, 450.0, 0.0), (0, 1, 450.0, 0.0), (3, 0, 700.0, 0.0), (3, 1, 700.0, 0.5)]), "power_w", 60)
    shades = [trace for trace in fig.data if trace.fill == "toself"]
    assert [(t.name, t.legendgroup, t.fillcolor) for t in shades] == [
        ("GPU 3 throttled (power/heat)", "GPU 3", charts.base._alpha(theme.gpu_colour(3), 0.15))]
    start = datetime(2026, 1, 1, 0, 1)
    assert [x for x in shades[0].x if x is not None] == [start, start, start + timedelta(minutes=1),
                                                          start + timedelta(minutes=1), start]


def test_throttle_shading_of_no_throttled_gpu_draws_nothing() -> None:
    fig = charts.telemetry_figure(telemetry_buckets([(0, 0, 450.0, 0.0), (1, 0, 450.0, 0.0)]), "power_w", 60)
    assert [trace for trace in fig.data if trace.fill == "toself"] == []


def test_empty_figure_is_a_strip_with_its_message_wrapped_to_fit_half_a_page() -> None:
    message = "The traces hold collectives with their sizes but no GPU time: NCCL logs record sizes only."
    fig = charts.empty_figure("Collective time", message)
    assert fig.layout.annotations[0].text == ("The traces hold collectives with their sizes but no GPU<br>"
                                              "time: NCCL logs record sizes only.")
    assert fig.layout.height == 150


def test_throttle_strip_of_one_gpu_keeps_a_readable_colour_bar() -> None:
    fig = charts.throttle_strip_figure(telemetry_buckets([(3, 0, 700.0, 0.5), (3, 1, 700.0, 1.0)]))
    colorbar = fig.data[0].colorbar
    assert (fig.layout.height, colorbar.title.side, list(colorbar.tickvals)) == (230, "right", [0, 50, 100])


def test_step_axis_puts_two_runs_far_apart_steps_side_by_side() -> None:
    fig = charts.new_figure()
    charts.step_axis(fig, [10, 11, 12, 13, 14, 100, 101, 102, 103, 104])
    assert (fig.layout.xaxis.type, list(fig.layout.xaxis.categoryarray)) == (
        "category", [10, 11, 12, 13, 14, 100, 101, 102, 103, 104])


def test_step_axis_keeps_consecutive_steps_numeric_with_a_tick_each() -> None:
    fig = charts.new_figure()
    charts.step_axis(fig, [10, 11, 12, 13, 14])
    assert (fig.layout.xaxis.type, fig.layout.xaxis.dtick) == (None, 1)
