"""The launch queue: `timeline.step_queue_length` over one step and
`launch.queue_length` over the whole trace.

A kernel is in its stream's queue from its launch call's start to its start
on the GPU (as HTA counts); kernels replayed from a CUDA graph are not. One
hand-made step of 1.5 ms, so that at 1,500 pixels a pixel is 1 µs and every
change below has a pixel of its own.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpulens.analysis import launch, timeline
from gpulens.analysis.dataset import open_dataset
from conftest import write_trace_table

T0 = 1_700_000_000_000_000_000
STEP_NS = 1_500_000
US = 1_000
# (stream, name, launch call start, kernel start, kernel end[, launch call]) in µs after the step's start.
KERNELS = [
    (7, "before", -5, -1, 5),  # launched and started before the step: not queued in it
    (7, "gemm", 0, 10, 20),
    (7, "relu", 2, 20, 30),  # queued behind gemm
    (7, "add", 40, 41, 50),
    (7, "graphed", 3, 12, 14, "cudaGraphLaunch"),  # replayed from a CUDA graph: not counted
    (13, "nccl", 100, 200, 300),
    (13, "triton", 250, 260, 270, "cuLaunchKernelEx"),  # a driver launch HTA does not list: counted
    (13, "untraced", None, 400, 500),  # no launch call in the trace: not counted
    (13, "later", 1_600, 1_610, 1_620),  # launched after the step
]
COLUMNS = ("stream", "offset_ns", "end_offset_ns", "queue_min", "queue_max", "queue_last")
SUMMARY = ("stream", "mean_queue_length", "max_queue_length", "empty_share")


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root: Path = tmp_path_factory.mktemp("queue")
    n = len(KERNELS)
    write_trace_table(root, "train", "kernels", {
        "run": ["train"] * n, "rank": [0] * n, "device": [0] * n, "stream": [k[0] for k in KERNELS],
        "name": [k[1] for k in KERNELS], "category": ["compute"] * n, "kind": ["kernel"] * n,
        "start_ns": [T0 + k[3] * US for k in KERNELS], "end_ns": [T0 + k[4] * US for k in KERNELS],
        "dur_ns": [(k[4] - k[3]) * US for k in KERNELS], "correlation_id": list(range(1, n + 1)),
    })
    # The launch calls, 500 ns each; ingest links each kernel to its call by correlation id.
    calls = [(i + 1, T0 + k[2] * US, k[5] if len(k) > 5 else "cudaLaunchKernel")
             for i, k in enumerate(KERNELS) if k[2] is not None]
    write_trace_table(root, "train", "api_calls", {
        "run": ["train"] * len(calls), "rank": [0] * len(calls), "pid": [1] * len(calls), "tid": [1] * len(calls),
        "name": [c[2] for c in calls], "start_ns": [c[1] for c in calls],
        "end_ns": [c[1] + 500 for c in calls], "dur_ns": [500] * len(calls), "correlation_id": [c[0] for c in calls],
    })
    write_trace_table(root, "train", "annotations", {
        "run": ["train"], "rank": [0], "name": ["ProfilerStep#4"], "kind": ["profiler_step"], "step": [4],
        "start_ns": [T0], "end_ns": [T0 + STEP_NS], "dur_ns": [STEP_NS],
    })
    return open_dataset(root)


def test_each_change_of_a_queue_is_a_row_at_one_pixel_a_microsecond(con):
    queue = timeline.step_queue_length(con, "train", 0, 4)
    assert queue.select(COLUMNS).rows() == [
        # gemm is queued at the start; relu joins; gemm starts, relu starts; add joins and starts.
        (7, 0, 0, 1, 1, 1), (7, 2 * US, 2 * US, 2, 2, 2), (7, 10 * US, 10 * US, 1, 1, 1),
        (7, 20 * US, 20 * US, 0, 0, 0), (7, 40 * US, 40 * US, 1, 1, 1), (7, 41 * US, 41 * US, 0, 0, 0),
        # Stream 13 starts empty; the kernel without a launch call and the later one are not counted.
        (13, 0, 0, 0, 0, 0), (13, 100 * US, 100 * US, 1, 1, 1), (13, 200 * US, 200 * US, 0, 0, 0),
        (13, 250 * US, 250 * US, 1, 1, 1), (13, 260 * US, 260 * US, 0, 0, 0),
    ]


def test_each_stream_has_its_exact_time_weighted_mean_deepest_queue_and_empty_share(con):
    queue = timeline.step_queue_length(con, "train", 0, 4)
    summary = queue.select(SUMMARY).unique().sort("stream").rows()
    # Stream 7: 1 for 2 µs, 2 for 8, 1 for 10, 0 for 20, 1 for 1, then 0: 29 queue-µs in 1,500 µs.
    assert summary == [(7, 29 / 1_500, 2, 1_479 / 1_500), (13, 110 / 1_500, 1, 1_390 / 1_500)]


def test_fewer_pixels_keep_each_pixels_shallowest_deepest_and_last_queue(con):
    # 150 pixels: 10 µs each, so the changes at 0, 2 and 5 µs are one pixel.
    queue = timeline.step_queue_length(con, "train", 0, 4, pixels=150)
    assert queue.filter(queue["stream"] == 7).select(COLUMNS).rows()[0] == (7, 0, 2 * US, 1, 2, 2)
    assert queue.height == 9


def test_a_window_counts_what_was_queued_before_it_from_its_start(con):
    queue = timeline.step_queue_length(con, "train", 0, 4, window_start_ns=25 * US, window_end_ns=45 * US)
    # Nothing is queued at 25 µs (relu started at 20); add joins at 40 and starts at 41.
    assert queue.select(COLUMNS).rows() == [
        (7, 25 * US, 25 * US, 0, 0, 0), (7, 40 * US, 40 * US, 1, 1, 1), (7, 41 * US, 41 * US, 0, 0, 0)]
    assert queue.select(SUMMARY).unique().rows() == [(7, 1 / 20, 1, 19 / 20)]
    assert queue.select("window_offset_ns", "window_end_offset_ns").unique().rows() == [(25 * US, 45 * US)]


def test_a_step_that_does_not_exist_has_no_queue(con):
    assert timeline.step_queue_length(con, "train", 0, 99).is_empty()
    assert timeline.step_queue_length(con, "train", 3, 4).is_empty()


# --- the whole trace ------------------------------------------------------------------


QUEUE_COLUMNS = ("stream", "change_count", "min_queue_length", "max_queue_length", "p50_queue_length",
                 "full_queue_ns", "span_ns")


def test_queue_length_summarises_each_streams_points_as_hta_does(con):
    # One profiler step: every kernel counts. Stream 7's points, in time order
    # (`before` and starts before launches at equal times):
    # -5 +1 → 1, -1 -1 → 0, 0 +1 → 1, 2 +1 → 2, 10 -1 → 1, 20 -1 → 0, 40 +1 → 1, 41 -1 → 0.
    row = launch.queue_length(con).filter(pl.col("stream") == 7).row(0, named=True)
    levels = [1, 0, 1, 2, 1, 0, 1, 0]
    assert (row["change_count"], row["min_queue_length"], row["max_queue_length"]) == (8, 0, 2)
    assert row["mean_queue_length"] == sum(levels) / 8
    assert row["p25_queue_length"] == 0.0 and row["p50_queue_length"] == 1.0 and row["p75_queue_length"] == 1.0
    assert row["span_ns"] == 46 * US
    # Time-weighted: 1 for 4 µs, 0 for 1, 1 for 2, 2 for 8, 1 for 10, 0 for 20, 1 for 1: 33 queue-µs.
    assert row["time_mean_queue_length"] == 33 / 46


def test_queue_length_counts_the_time_the_queue_was_full(con):
    full = launch.queue_length(con, queue_full_length=2).select(QUEUE_COLUMNS).rows()
    # Stream 7 holds 2 from 2 µs to 10 µs; stream 13 never reaches 2.
    assert [(row[0], row[5]) for row in full] == [(7, 8 * US), (13, 0)]
    assert launch.queue_length(con).get_column("full_queue_ns").to_list() == [0, 0]
