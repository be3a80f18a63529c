"""gpulens.collector.arrow_compute: pyarrow.compute's functions with the
options ingest relies on (bounds-checked take, NULL-dropping filter, safe
casts), and derive's grouping of a multi-rank table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpulens.collector import arrow_compute as pc
from gpulens.collector.derive.inputs import _groups

NAMES = pa.chunked_array([["ncclDevKernel_Generic_4", None, "Memcpy HtoD (Host -> Device)"],
                          ["ampere_sgemm_128x64_nn", "ncclDevKernel_Generic_4", "MEMORY_COPY_DEVICE_TO_HOST"]])
DURATIONS_NS = pa.array([1_200, None, -5, 2_048, 0, 310], pa.int64())
STARTS_US = pa.array([1_700_000_000.25, 12.5, None, 3.0, 7.75, 0.0], pa.float64())
FLAGS = pa.array([True, None, False, True, False, True])
OTHER_FLAGS = pa.array([False, True, None, True, True, False])
INDICES = pa.array([5, 0, None, 2], pa.int64())
KERNELS = pa.table({"rank": pa.array([1, 0, 1, None, 0, 0], pa.int32()), "name": NAMES, "dur_ns": DURATIONS_NS})

def test_sort_by_orders_a_table_as_table_sort_by_does() -> None:
    keys = [("rank", "ascending"), ("dur_ns", "descending")]
    assert pc.sort_by(KERNELS, keys).equals(KERNELS.sort_by(keys))


def test_filter_drops_rows_whose_mask_is_null() -> None:
    assert pc.filter(KERNELS, FLAGS)["dur_ns"].to_pylist() == [1_200, 2_048, 310]


def test_fill_null_converts_the_fill_value_to_the_values_type() -> None:
    filled = pc.fill_null(pa.array([0, None, 2], pa.int8()), pa.scalar(7, pa.int64()))
    assert filled.type == pa.int8() and filled.to_pylist() == [0, 7, 2]


def test_count_distinct_leaves_nulls_out() -> None:
    assert pc.count_distinct(KERNELS["rank"]).as_py() == 2


def test_take_out_of_bounds_raises_as_pyarrow_compute_does() -> None:
    with pytest.raises(IndexError):
        pc.take(NAMES, pa.array([6]))


def test_a_safe_cast_raises_where_a_value_does_not_fit() -> None:
    with pytest.raises(pa.ArrowInvalid):
        pc.cast(pa.array([300], pa.int64()), pa.int8())
    assert pc.cast(pa.array([300], pa.int64()), pa.int8(), safe=False).to_pylist() == [44]


def test_groups_rows_by_run_and_rank_in_order_of_first_appearance() -> None:
    # Several ranks in one table (an NCCL log, a merged source): no Acero group-by.
    table = pa.table({"run": ["b", "a", "b", "a", None, "b"], "rank": pa.array([1, 0, 1, None, 0, 0], pa.int32())})
    groups = _groups(table)
    assert list(groups) == [("b", 1), ("a", 0), ("a", None), (None, 0), ("b", 0)]
    assert [rows.tolist() for rows in groups.values()] == [[0, 2], [1], [3], [4], [5]]
    assert all(rows.dtype == np.int64 for rows in groups.values())
