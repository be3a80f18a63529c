"""analysis.time_breakdown.memcpy_stats and the `pageable_memcpy` finding.

Copies are told apart by the names every ingester gives them (Kineto's:
`Memcpy HtoD (Pageable -> Device)`); rank 0 spends a fifth of its 1 ms
span copying from pageable memory, rank 1 only reads a 4-byte loss back.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gpulens.analysis import time_breakdown
from gpulens.analysis.dataset import open_dataset
from conftest import write_trace_table

T0 = 1_700_000_000_000_000_000
US = 1_000
MIB = 1 << 20
# (rank, kind, name, start µs, duration µs, bytes)
ACTIVITIES = [
    (0, "kernel", "gemm", 0, 1_000, None),
    (0, "memcpy", "Memcpy HtoD (Pageable -> Device)", 100, 100, MIB),
    (0, "memcpy", "Memcpy HtoD (Pageable -> Device)", 300, 100, MIB),
    (0, "memcpy", "Memcpy HtoD (Pinned -> Device)", 500, 100, 4 * MIB),
    (0, "memset", "Memset (Device)", 700, 10, 1024),
    (0, "memcpy", "Memcpy DtoH (Device -> Pageable)", 900, 2, 4),
    (1, "kernel", "gemm", 0, 1_000, None),
    (1, "memcpy", "Memcpy DtoH (Device -> Pageable)", 900, 2, 4),
    (1, "memcpy", "Memcpy HtoD (Host -> Device)", 100, 50, MIB),  # ROCm's name: pinned or not is not said
]
COLUMNS = ("rank", "kind", "direction", "src_memory", "dst_memory", "pageable", "copy_count", "bytes", "total_ns", "time_share")


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root: Path = tmp_path_factory.mktemp("memcpy")
    n = len(ACTIVITIES)
    write_trace_table(root, "train", "kernels", {
        "run": ["train"] * n, "rank": [a[0] for a in ACTIVITIES], "device": [a[0] for a in ACTIVITIES],
        "stream": [7] * n, "name": [a[2] for a in ACTIVITIES],
        "category": ["compute" if a[1] == "kernel" else "memory" for a in ACTIVITIES], "kind": [a[1] for a in ACTIVITIES],
        "start_ns": [T0 + a[3] * US for a in ACTIVITIES], "end_ns": [T0 + (a[3] + a[4]) * US for a in ACTIVITIES],
        "dur_ns": [a[4] * US for a in ACTIVITIES], "correlation_id": list(range(1, n + 1)),
        "bytes": [a[5] for a in ACTIVITIES],
    })
    return open_dataset(root)


def test_copies_are_grouped_by_direction_and_the_memory_at_each_end_longest_first(con):
    stats = time_breakdown.memcpy_stats(con)
    assert stats.select(COLUMNS).rows() == [
        (0, "memcpy", "HtoD", "Pageable", "Device", True, 2, 2 * MIB, 200 * US, 0.2),
        (0, "memcpy", "HtoD", "Pinned", "Device", False, 1, 4 * MIB, 100 * US, 0.1),
        (0, "memset", "set", None, "Device", False, 1, 1024, 10 * US, 0.01),
        (0, "memcpy", "DtoH", "Device", "Pageable", True, 1, 4, 2 * US, 0.002),
        (1, "memcpy", "HtoD", "Host", "Device", False, 1, MIB, 50 * US, 0.05),
        (1, "memcpy", "DtoH", "Device", "Pageable", True, 1, 4, 2 * US, 0.002),
    ]


def test_bandwidth_is_bytes_over_the_time_spent_copying(con):
    stats = time_breakdown.memcpy_stats(con)
    pinned = stats.filter(stats["src_memory"] == "Pinned").row(0, named=True)
    assert pinned["bytes_per_s"] == pytest.approx(4 * MIB / 100e-6) and pinned["mean_bytes"] == 4 * MIB


def test_pageable_copies_past_a_hundredth_of_the_span_are_a_finding_and_a_loss_read_back_is_not(con):
    findings = time_breakdown.pageable_memcpy_findings(con)
    assert [(f.id, f.severity, f.subject) for f in findings] == [("pageable_memcpy", "warning", {"run": "train", "rank": 0})]
    assert findings[0].title == ("Rank 0 spent 20.2% of its GPU time copying to or from pageable host memory "
                                 "(3 copies, mostly HtoD at 10.4 GB/s)")
    assert findings[0].evidence["total_ns"] == 202 * US and findings[0].evidence["bytes"] == 2 * MIB + 4


def test_the_pageable_threshold_is_a_parameter(con):
    assert [f.subject["rank"] for f in time_breakdown.pageable_memcpy_findings(con, pageable_share_max=0.001)] == [0, 1]
    assert time_breakdown.pageable_memcpy_findings(con, pageable_share_max=0.25) == []
