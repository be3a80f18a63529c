"""Where GPU time comes from on the CPU: `annotation_gpu_time` (user
ranges) and `operator_kernels` (CPU operators), and `idle_intervals` (the
idle gaps per stream and cause). One hand-made rank, times in µs."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gpulens.analysis import time_breakdown as tb
from gpulens.analysis.dataset import open_dataset
from conftest import write_trace_table

T0 = 1_700_000_000_000_000_000
US = 1_000
# Launch calls: (correlation id, tid, start, duration).
CALLS = [(1, 1, 10, 2), (2, 1, 30, 2), (3, 1, 60, 2), (4, 2, 15, 2)]
# Kernels: (correlation id, name, stream, start, duration); 5 has no launch call.
KERNELS = [(1, "gemm", 7, 20, 10), (2, "relu", 7, 40, 5), (3, "gemm", 7, 75, 10), (4, "copy", 9, 25, 4),
           (5, "orphan", 7, 90, 1)]
# CPU ops on thread 1: (name, start, end); aten::mm sits inside aten::linear.
OPS = [("aten::linear", 5, 50), ("aten::mm", 8, 25), ("aten::relu", 28, 35), ("aten::mm", 55, 65)]
# User ranges on thread 1.
RANGES = [("forward", 0, 100), ("block", 5, 50)]


def _table(rows: list[tuple], **columns) -> dict:
    return {name: [make(row) for row in rows] for name, make in columns.items()}


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root: Path = tmp_path_factory.mktemp("attribution")
    common = {"run": lambda r: "train", "rank": lambda r: 0}
    write_trace_table(root, "train", "api_calls", _table(
        CALLS, **common, pid=lambda r: 1, tid=lambda r: r[1], name=lambda r: "cudaLaunchKernel",
        start_ns=lambda r: T0 + r[2] * US, end_ns=lambda r: T0 + (r[2] + r[3]) * US, dur_ns=lambda r: r[3] * US,
        correlation_id=lambda r: r[0]))
    write_trace_table(root, "train", "cpu_ops", _table(
        OPS, **common, pid=lambda r: 1, tid=lambda r: 1, name=lambda r: r[0], start_ns=lambda r: T0 + r[1] * US,
        end_ns=lambda r: T0 + r[2] * US, dur_ns=lambda r: (r[2] - r[1]) * US))
    write_trace_table(root, "train", "annotations", _table(
        RANGES, **common, pid=lambda r: 1, tid=lambda r: 1, name=lambda r: r[0], kind=lambda r: "user",
        start_ns=lambda r: T0 + r[1] * US, end_ns=lambda r: T0 + r[2] * US, dur_ns=lambda r: (r[2] - r[1]) * US))
    write_trace_table(root, "train", "kernels", _table(
        KERNELS, **common, device=lambda r: 0, stream=lambda r: r[2], name=lambda r: r[1],
        category=lambda r: "compute", kind=lambda r: "kernel", start_ns=lambda r: T0 + r[3] * US,
        end_ns=lambda r: T0 + (r[3] + r[4]) * US, dur_ns=lambda r: r[4] * US, correlation_id=lambda r: r[0]))
    return open_dataset(root)


def test_operator_kernels_gives_each_kernel_to_the_innermost_op_around_its_launch(con):
    rows = tb.operator_kernels(con).select(
        "operator", "kernel", "kernel_count", "gpu_ns", "launch_delay_mean_ns", "launch_delay_max_ns").rows()
    # gemm's delays: 20 - (10 + 2) = 8 and 75 - (60 + 2) = 13 µs; relu's 40 - 32 = 8.
    assert rows == [("aten::mm", "gemm", 2, 20 * US, 10.5 * US, 13 * US), ("aten::relu", "relu", 1, 5 * US, 8 * US, 8 * US)]


def test_annotation_gpu_time_counts_the_kernels_launched_inside_each_range_and_its_parents(con):
    rows = tb.annotation_gpu_time(con).select("name", "range_count", "range_ns", "kernel_count", "gpu_ns").rows()
    # copy's call ran on another thread, orphan has no call: neither belongs to a range.
    assert rows == [("forward", 1, 100 * US, 3, 25 * US), ("block", 1, 45 * US, 2, 15 * US)]
    assert tb.annotation_gpu_time(con)["launch_delay_mean_ns"].to_list() == [29 * US / 3, 8 * US]


def test_idle_intervals_gives_each_streams_gaps_by_cause(con):
    rows = tb.idle_intervals(con).select("stream", "cause", "gap_count", "total_ns", "p50_ns", "p95_ns", "max_ns").rows()
    # Stream 7: gaps [30,40] (relu launched at 30, before it: 10 µs, kernel wait), [45,75] (the second gemm
    # launched at 60, inside it: host wait), [85,90] (orphan: no launch call, never host wait; kernel wait).
    assert rows == [(7, "host_wait", 1, 30 * US, 30 * US, 30 * US, 30 * US),
                    (7, "kernel_wait", 2, 15 * US, 7.5 * US, 9.75 * US, 10 * US)]
