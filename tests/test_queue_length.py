"""gpulens.analysis.timeline.step_queue_length: each stream's launch queue over one step.

A kernel is in its stream's queue from its launch call's start to its end
on the GPU. One hand-made step of 1.5 ms, so that at 1,500 pixels a pixel
is 1 µs and every change below has a pixel of its own.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gpulens.analysis import timeline
from gpulens.analysis.dataset import open_dataset
from conftest import write_trace_table

T0 = 1_700_000_000_000_000_000
STEP_NS = 1_500_000
US = 1_000
# (stream, name, launch call start, kernel start, kernel end) in µs after the step's start.
KERNELS = [
    (7, "before", -5, -1, 5),  # launched before the step, still running at its start
    (7, "gemm", 0, 10, 20),
    (7, "relu", 2, 20, 30),  # queued behind gemm
    (7, "add", 40, 41, 50),
    (13, "nccl", 100, 200, 300),
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
    calls = [(i + 1, T0 + k[2] * US) for i, k in enumerate(KERNELS) if k[2] is not None]
    write_trace_table(root, "train", "api_calls", {
        "run": ["train"] * len(calls), "rank": [0] * len(calls), "pid": [1] * len(calls), "tid": [1] * len(calls),
        "name": ["cudaLaunchKernel"] * len(calls), "start_ns": [c[1] for c in calls],
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
        # `before` and gemm are queued at the start; relu joins; before ends, gemm ends, relu ends.
        (7, 0, 0, 2, 2, 2), (7, 2 * US, 2 * US, 3, 3, 3), (7, 5 * US, 5 * US, 2, 2, 2),
        (7, 20 * US, 20 * US, 1, 1, 1), (7, 30 * US, 30 * US, 0, 0, 0),
        (7, 40 * US, 40 * US, 1, 1, 1), (7, 50 * US, 50 * US, 0, 0, 0),
        # Stream 13 starts empty; the kernel without a launch call and the later one are not counted.
        (13, 0, 0, 0, 0, 0), (13, 100 * US, 100 * US, 1, 1, 1), (13, 300 * US, 300 * US, 0, 0, 0),
    ]


def test_each_stream_has_its_exact_time_weighted_mean_deepest_queue_and_empty_share(con):
    queue = timeline.step_queue_length(con, "train", 0, 4)
    summary = queue.select(SUMMARY).unique().sort("stream").rows()
    # Stream 7: 2 for 2 µs, 3 for 3, 2 for 15, 1 for 10, 0 for 10, 1 for 10, then 0: 63 queue-µs in 1,500 µs.
    assert summary == [(7, 63 / 1_500, 3, 1_460 / 1_500), (13, 200 / 1_500, 1, 1_300 / 1_500)]


def test_fewer_pixels_keep_each_pixels_shallowest_deepest_and_last_queue(con):
    # 150 pixels: 10 µs each, so the changes at 0, 2 and 5 µs are one pixel.
    queue = timeline.step_queue_length(con, "train", 0, 4, pixels=150)
    assert queue.filter(queue["stream"] == 7).select(COLUMNS).rows()[0] == (7, 0, 5 * US, 2, 3, 2)
    assert queue.height == 8


def test_a_window_counts_what_was_queued_before_it_from_its_start(con):
    queue = timeline.step_queue_length(con, "train", 0, 4, window_start_ns=25 * US, window_end_ns=45 * US)
    # relu is queued at 25 µs and ends at 30; add joins at 40 and is still queued at the window's end.
    assert queue.select(COLUMNS).rows() == [
        (7, 25 * US, 25 * US, 1, 1, 1), (7, 30 * US, 30 * US, 0, 0, 0), (7, 40 * US, 40 * US, 1, 1, 1)]
    assert queue.select(SUMMARY).unique().rows() == [(7, 10 / 20, 1, 10 / 20)]
    assert queue.select("window_offset_ns", "window_end_offset_ns").unique().rows() == [(25 * US, 45 * US)]


def test_a_step_that_does_not_exist_has_no_queue(con):
    assert timeline.step_queue_length(con, "train", 0, 99).is_empty()
    assert timeline.step_queue_length(con, "train", 3, 4).is_empty()
