"""gpulens.analysis.timeline.step_kernel_runs: a step's kernels merged at drawing resolution.

One hand-made step of 1.5 ms, so that at 1,500 pixels one pixel is 1 µs:
kernels of a stream and category less than 1 µs apart are one run.
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
# (stream, category, name, start, dur) in ns after the step's start.
KERNELS = [
    (7, "compute", "gemm", 0, 10_000),
    (7, "compute", "relu", 10_500, 500),       # 0.5 µs after gemm: merged with it
    (7, "compute", "add", 20_000, 1_000),      # 9 µs later: a run of its own
    (7, "memory", "memcpy", 11_200, 100),      # same stream, other category: never merged with compute
    (13, "communication", "nccl", 10_800, 1_200),
    (7, "compute", "before", -3_000, 1_000),   # ends before the step
    (7, "compute", "after", STEP_NS + 10, 50),  # starts after it
]
COLUMNS = ("stream", "category", "kernel_count", "busy_ns", "name", "longest_ns", "offset_ns", "end_offset_ns")


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root: Path = tmp_path_factory.mktemp("timeline")
    n = len(KERNELS)
    write_trace_table(root, "train", "kernels", {
        "run": ["train"] * n, "rank": [0] * n, "device": [0] * n, "stream": [k[0] for k in KERNELS],
        "name": [k[2] for k in KERNELS], "category": [k[1] for k in KERNELS], "kind": ["kernel"] * n,
        "start_ns": [T0 + k[3] for k in KERNELS], "end_ns": [T0 + k[3] + k[4] for k in KERNELS],
        "dur_ns": [k[4] for k in KERNELS], "correlation_id": list(range(1, n + 1)),
    })
    write_trace_table(root, "train", "annotations", {
        "run": ["train"], "rank": [0], "name": ["ProfilerStep#4"], "kind": ["profiler_step"], "step": [4],
        "start_ns": [T0], "end_ns": [T0 + STEP_NS], "dur_ns": [STEP_NS],
    })
    return open_dataset(root)


def test_kernels_less_than_a_pixel_apart_on_a_stream_are_one_run(con):
    runs = timeline.step_kernel_runs(con, "train", 0, 4)
    assert runs.select(COLUMNS).rows() == [
        (7, "compute", 2, 10_500, "gemm", 10_000, 0, 11_000),
        (7, "compute", 1, 1_000, "add", 1_000, 20_000, 21_000),
        (7, "memory", 1, 100, "memcpy", 100, 11_200, 11_300),
        (13, "communication", 1, 1_200, "nccl", 1_200, 10_800, 12_000),
    ]


def test_every_kernel_of_the_step_is_in_exactly_one_run(con):
    runs = timeline.step_kernel_runs(con, "train", 0, 4)
    assert runs["kernel_count"].sum() == 5
    assert set(runs["kernels_in_window"].to_list()) == {5}
    assert set(runs["pixel_ns"].to_list()) == {1_000}


def test_a_narrow_window_draws_each_kernel_and_clips_those_it_cuts(con):
    # 10 µs at 1,500 pixels: a pixel is 6 ns, so gemm and relu part; gemm is cut at 5 µs.
    runs = timeline.step_kernel_runs(con, "train", 0, 4, window_start_ns=5_000, window_end_ns=15_000)
    assert runs.select(COLUMNS).rows() == [
        (7, "compute", 1, 5_000, "gemm", 10_000, 5_000, 10_000),
        (7, "compute", 1, 500, "relu", 500, 10_500, 11_000),
        (7, "memory", 1, 100, "memcpy", 100, 11_200, 11_300),
        (13, "communication", 1, 1_200, "nccl", 1_200, 10_800, 12_000),
    ]
    assert runs.select("window_offset_ns", "window_end_offset_ns").unique().rows() == [(5_000, 15_000)]


def test_fewer_pixels_merge_more(con):
    # 150 pixels: 10 µs each, so add (9 µs after relu) joins gemm's run too.
    runs = timeline.step_kernel_runs(con, "train", 0, 4, pixels=150)
    compute = runs.filter(runs["category"] == "compute")
    assert compute.select(COLUMNS).rows() == [(7, "compute", 3, 11_500, "gemm", 10_000, 0, 21_000)]


def test_a_step_that_does_not_exist_has_no_runs(con):
    assert timeline.step_kernel_runs(con, "train", 0, 99).is_empty()
    assert timeline.step_kernel_runs(con, "train", 3, 4).is_empty()
