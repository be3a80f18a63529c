"""gpulens.collector.arrow_compute: pyarrow.compute's functions, called without
importing pyarrow.compute, give what pyarrow.compute gives; a pyarrow that
moves the compiled registry is noticed here, not by users."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as reference  # the namesakes, imported here only
import pytest
from tests.conftest import modules_loaded_by
from tests.test_ingest_nccl_log import TWO_NODES_LOG
from tests.test_ingest_nsys import build_export
from tests.test_ingest_rocprof import _process

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

# (function, its arguments): each the way ingest or the collector calls it.
CASES = [
    ("add", (DURATIONS_NS, 5)),
    ("add_checked", (DURATIONS_NS, DURATIONS_NS)),
    ("subtract", (DURATIONS_NS, 1)),
    ("divide", (DURATIONS_NS, 4)),
    ("equal", (NAMES, "ncclDevKernel_Generic_4")),
    ("less", (DURATIONS_NS, 0)),
    ("greater", (DURATIONS_NS, 1_000)),
    ("greater_equal", (DURATIONS_NS, 0)),
    ("and_", (FLAGS, OTHER_FLAGS)),
    ("or_", (FLAGS, OTHER_FLAGS)),
    ("invert", (FLAGS,)),
    ("if_else", (FLAGS, "nvtx", "profiler_step")),
    ("coalesce", (DURATIONS_NS, pa.array([9, 8, 7, 6, 5, 4], pa.int64()))),
    ("is_valid", (NAMES,)),
    ("is_null", (STARTS_US,)),
    ("utf8_upper", (NAMES,)),
    ("binary_join_element_wise", (pa.array(["1", "2", None]), pa.array(["64", None, "8"]), ", ")),
    ("min", (DURATIONS_NS,)),
    ("max", (STARTS_US,)),
    ("sum", (DURATIONS_NS,)),
    ("unique", (NAMES,)),
    ("value_counts", (KERNELS["rank"],)),
    ("indices_nonzero", (pc.fill_null(FLAGS, False),)),
    ("dictionary_encode", (NAMES,)),
    ("drop_null", (DURATIONS_NS,)),
    ("count_distinct", (KERNELS["rank"],)),
    ("sort_indices", (DURATIONS_NS,)),
    ("take", (NAMES, INDICES)),
    ("take", (KERNELS, INDICES)),
    ("filter", (KERNELS, FLAGS)),
    ("cast", (DURATIONS_NS, pa.float64())),
    ("cast", (pa.array([1_700_000_000_000_000, None], pa.int64()), pa.timestamp("us", tz="UTC"))),
    ("cast", (KERNELS["rank"], "int64")),
    ("fill_null", (DURATIONS_NS, 0)),
    ("fill_null", (NAMES, "")),
    ("fill_null", (pa.array([0, None, 2], pa.int8()), pa.scalar(7, pa.int64()))),
    ("is_in", (NAMES, pa.array(["ncclDevKernel_Generic_4", None]))),
    ("starts_with", (NAMES, "nccl")),
    ("replace_substring_regex", (NAMES, "^MEMORY_COPY_", "")),
]


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{name}-{i}" for i, (name, _) in enumerate(CASES)])
def test_each_function_gives_what_its_pyarrow_compute_namesake_gives(name: str, args: tuple) -> None:
    assert getattr(pc, name)(*args).equals(getattr(reference, name)(*args))


def test_sort_by_orders_a_table_as_table_sort_by_does() -> None:
    keys = [("rank", "ascending"), ("dur_ns", "descending")]
    assert pc.sort_by(KERNELS, keys).equals(KERNELS.sort_by(keys))


def test_take_out_of_bounds_raises_as_pyarrow_compute_does() -> None:
    with pytest.raises(IndexError):
        pc.take(NAMES, pa.array([6]))


def test_a_safe_cast_raises_where_a_value_does_not_fit() -> None:
    with pytest.raises(pa.ArrowInvalid):
        pc.cast(pa.array([300], pa.int64()), pa.int8())
    assert pc.cast(pa.array([300], pa.int64()), pa.int8(), safe=False).to_pylist() == [44]


def test_filter_drops_rows_whose_mask_is_null() -> None:
    assert pc.filter(KERNELS, FLAGS)["dur_ns"].to_pylist() == [1_200, 2_048, 310]


def test_fill_null_converts_the_fill_value_to_the_values_type() -> None:
    filled = pc.fill_null(pa.array([0, None, 2], pa.int8()), pa.scalar(7, pa.int64()))
    assert filled.type == pa.int8() and filled.to_pylist() == [0, 7, 2]


def test_count_distinct_leaves_nulls_out() -> None:
    assert pc.count_distinct(KERNELS["rank"]).as_py() == 2


def test_the_functions_come_from_pyarrows_compiled_registry_not_the_fallback() -> None:
    # Fails when a pyarrow release moves `pyarrow._compute`: users then get
    # pyarrow.compute (the fallback, same results, its import's cost), and
    # this module's docstring and its measured gain need looking at again.
    from gpulens.collector.pyarrow_internals import compute_registry

    assert compute_registry.__name__ == "pyarrow._compute"


def test_groups_rows_by_run_and_rank_in_order_of_first_appearance() -> None:
    # Several ranks in one table (an NCCL log, a merged source): no Acero group-by.
    table = pa.table({"run": ["b", "a", "b", "a", None, "b"], "rank": pa.array([1, 0, 1, None, 0, 0], pa.int32())})
    groups = _groups(table)
    assert list(groups) == [("b", 1), ("a", 0), ("a", None), (None, 0), ("b", 0)]
    assert [rows.tolist() for rows in groups.values()] == [[0, 2], [1], [3], [4], [5]]
    assert all(rows.dtype == np.int64 for rows in groups.values())


def _kineto(folder: Path) -> list[str]:
    # A simulated training rank: profiler steps, annotations, collectives,
    # memory events, so every table's code path runs.
    from gpulens.collector.sim_trace import write_training_traces

    write_training_traces(folder, ranks=1, steps=2, seed=0, kernels_per_step=60)
    return [str(path) for path in sorted(folder.iterdir())]


def _nsys(folder: Path) -> list[str]:
    build_export(folder / "report.sqlite")
    return [str(folder / "report.sqlite")]


def _rocprof(folder: Path) -> list[str]:
    return [str(path) for path in _process(folder, "kernel_trace", "hip_api_trace", "marker_api_trace")]


def _nccl(folder: Path) -> list[str]:
    (folder / "nccl.log").write_text(TWO_NODES_LOG)
    return [str(folder / "nccl.log")]


@pytest.mark.parametrize("write", [_kineto, _nsys, _rocprof, _nccl], ids=["kineto", "nsys", "rocprofv3", "nccl"])
def test_ingest_of_each_format_imports_neither_pyarrow_compute_nor_pyarrow_parquet(tmp_path: Path, node_python: Path,
                                                                                  write) -> None:
    # pyarrow.compute builds ~290 wrappers with parsed docstrings (21 ms and
    # 1.7 MB in every ingest process); pyarrow.parquet brings pyarrow.fs, with
    # S3, GCS, Azure and OpenSSL (13 ms and 8.6 MB). collector.parquet_io
    # and collector.arrow_compute call what they wrap without them.
    (tmp_path / "in").mkdir()
    command = ["ingest", *write(tmp_path / "in"), "--out", str(tmp_path / "out")]
    names = ("pyarrow.compute", "pyarrow.acero", "pyarrow.parquet", "pyarrow.fs", "pyarrow._fs")
    assert modules_loaded_by(command, names, node_python) == []
