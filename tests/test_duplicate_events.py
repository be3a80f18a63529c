"""collector.ingest.base.duplicate_events: events recorded twice, counted exactly."""

from __future__ import annotations

import pyarrow as pa

from gpulens.collector.ingest.base import duplicate_events


def _kernels(names: list[str], starts: list[int | None], durations: list[int | None]) -> dict[str, pa.Table]:
    return {"kernels": pa.table({"name": names, "start_ns": pa.array(starts, pa.int64()),
                                 "dur_ns": pa.array(durations, pa.int64())})}


def test_a_row_equal_to_an_earlier_one_in_every_field_is_one_duplicate() -> None:
    tables = _kernels(["gemm", "relu", "gemm", "gemm"], [1_700_000_000_000_000_001, 2, 1_700_000_000_000_000_001, 1],
                      [5, None, 5, 5])
    assert duplicate_events(tables) == {"kernels": 1}


def test_rows_equal_in_every_number_but_their_name_are_not_duplicates() -> None:
    assert duplicate_events(_kernels(["gemm", "relu", "softmax"], [7, 7, 7], [3, 3, 3])) == {}


def test_times_that_differ_by_one_nanosecond_past_float_precision_are_not_duplicates() -> None:
    # Equal as float64 (the hash's first pass), different as integers.
    start_ns = 1_764_400_000_123_456_789
    assert duplicate_events(_kernels(["gemm", "gemm"], [start_ns, start_ns + 1], [10, 10])) == {}


def test_null_fields_are_equal_to_each_other() -> None:
    assert duplicate_events(_kernels(["memset", "memset"], [None, None], [None, None])) == {"kernels": 1}
