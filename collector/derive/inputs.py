"""What collector.derive reads, as numpy arrays: a source file's columns,
the rows of each (run, rank), its profiler steps and its kernels.

Columns are int64 numpy views with NULL as a flag array beside; a rank's
profiler steps are merged into windows (and made disjoint, to place launch
calls in them); a rank's kernels carry the union of their busy time. The
category codes (COMPUTE, COMMUNICATION, MEMORY) and the int64 bounds used
as "none" live here too, shared by the package's modules (`group_stats`, `phases`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc

_MIN = np.iinfo(np.int64).min
_MAX = np.iinfo(np.int64).max
COMPUTE, COMMUNICATION, MEMORY = 0, 1, 2
PHASE_NAMES = ("compute", "communication", "memory")
# Runtime calls that replay a CUDA or HIP graph (and their suffixed forms,
# `cudaGraphLaunch_v10000`): every kernel of the replay carries the call's
# correlation id, so none has a launch delay of its own. The view
# kernel_launches (`graph_launch`) applies the same prefixes; a test checks
# they match.
GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")


def graph_launch_calls(names: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Which of these runtime call names replay a graph (GRAPH_LAUNCH_PREFIXES)."""
    found = np.zeros(len(names), dtype=bool)
    for prefix in GRAPH_LAUNCH_PREFIXES:
        found |= pc.fill_null(pc.starts_with(names, prefix), False).to_numpy(zero_copy_only=False)
    return found


# --- reading columns -----------------------------------------------------------


class _Columns:
    """int64 numpy views of some columns, NULL as a flag array beside."""

    def __init__(self, table: pa.Table, names: tuple[str, ...]) -> None:
        self.values: dict[str, np.ndarray] = {}
        self.valid: dict[str, np.ndarray] = {}
        for name in names:
            column = table.column(name)
            if column.null_count:
                self.valid[name] = pc.is_valid(column).to_numpy(zero_copy_only=False)
                column = pc.fill_null(column, 0)
            else:
                self.valid[name] = np.ones(table.num_rows, dtype=bool)
            self.values[name] = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]


def _groups(table: pa.Table) -> dict[tuple[str | None, int | None], np.ndarray]:
    """Row indices per (run, rank)."""
    if table.num_rows == 0:
        return {}
    run = table.column("run")
    rank = table.column("rank")
    if pc.count_distinct(run).as_py() <= 1 and pc.count_distinct(rank).as_py() <= 1 and not (run.null_count or rank.null_count):
        return {(run[0].as_py(), rank[0].as_py()): np.arange(table.num_rows, dtype=np.int64)}
    # Rows grouped by a (run, rank) code, groups in the order they first
    # appear (as a hash group-by gives them; not `Table.group_by`, whose
    # Acero engine imports `pyarrow.compute`).
    run_codes, _ = _sorted_codes(run)
    rank_codes, rank_values = _sorted_codes(rank)
    key = run_codes * len(rank_values) + rank_codes
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    groups = sorted(np.split(order, bounds), key=lambda rows: rows[0])
    return {(run[int(rows[0])].as_py(), rank[int(rows[0])].as_py()): rows for rows in groups}


def _sorted_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """Each value's position among the column's distinct values in
    ascending order (NULL last), and those values."""
    encoded = pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
    dictionary = encoded.dictionary
    order = pc.sort_indices(dictionary).to_numpy()
    position = np.empty(len(dictionary), dtype=np.int64)
    position[order] = np.arange(len(dictionary))
    codes = pc.fill_null(encoded.indices, len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
    codes = np.append(position, len(dictionary))[codes]
    return codes, pc.take(dictionary, pa.array(order)).to_pylist() + [None]


def _category_codes(kernels: pa.Table) -> np.ndarray:
    category = kernels.column("category")
    codes = np.zeros(kernels.num_rows, dtype=np.int8)
    if kernels.num_rows:
        codes[pc.fill_null(pc.equal(category, "communication"), False).to_numpy(zero_copy_only=False)] = COMMUNICATION
        codes[pc.fill_null(pc.equal(category, "memory"), False).to_numpy(zero_copy_only=False)] = MEMORY
    return codes


def _profiler_step_rows(annotations: pa.Table) -> np.ndarray:
    if annotations.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    mask = pc.and_(pc.equal(annotations.column("kind"), "profiler_step"), pc.is_valid(annotations.column("step")))
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))


# --- profiler steps ------------------------------------------------------------


class _StepWindows:
    """A rank's profiler steps, rows of one step merged (first start, last end)."""

    def __init__(self, step: np.ndarray, start: np.ndarray, end: np.ndarray, row_window: np.ndarray) -> None:
        self.step = step
        self.merged_start = start
        self.merged_end = end
        self.row_window = row_window  # for each annotation row, its merged window
        self.count = len(step)
        self.last_start_ns = int(start.max()) if len(start) else None
        # Disjoint windows for placing launch calls: a step ends no later
        # than the next one (by start) starts.
        order = np.argsort(start, kind="stable")
        s, e, st = start[order], end[order], step[order]
        e = np.minimum(e, np.append(s[1:], _MAX)) if len(s) else e
        keep = e > s
        self.disjoint_start, self.disjoint_end, self.disjoint_step = s[keep], e[keep], st[keep]

    @classmethod
    def none(cls) -> "_StepWindows":
        empty = np.empty(0, dtype=np.int64)
        return cls(empty, empty, empty, empty)

    def step_at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step whose disjoint window holds each time, and where there is one."""
        i = np.searchsorted(self.disjoint_start, t, side="right") - 1
        found = i >= 0
        i = np.maximum(i, 0)
        if len(self.disjoint_start) == 0:
            return np.zeros(len(t), dtype=np.int64), np.zeros(len(t), dtype=bool)
        found &= t < self.disjoint_end[i]
        return self.disjoint_step[i], found


def _step_windows(cols: _Columns, rows: np.ndarray) -> _StepWindows:
    if len(rows) == 0:
        return _StepWindows.none()
    valid = cols.valid["start_ns"][rows] & cols.valid["end_ns"][rows]
    step = cols["step"][rows]
    steps, row_window = np.unique(step, return_inverse=True)
    start = np.where(valid, cols["start_ns"][rows], _MAX)
    end = np.where(valid, cols["end_ns"][rows], _MIN)
    merged_start = np.full(len(steps), _MAX, dtype=np.int64)
    merged_end = np.full(len(steps), _MIN, dtype=np.int64)
    np.minimum.at(merged_start, row_window, start)
    np.maximum.at(merged_end, row_window, end)
    has_times = merged_start <= merged_end
    window = _StepWindows(steps[has_times], merged_start[has_times], merged_end[has_times],
                          np.zeros(0, dtype=np.int64))
    # Rows map to windows by position among the steps that have times.
    position = np.cumsum(has_times) - 1
    window.row_window = np.where(has_times[row_window], position[row_window], -1)
    window.count = len(steps)  # steps counted as in SQL: by number, times or not
    return window


# --- one rank's kernels ----------------------------------------------------------


class _RankKernels:
    def __init__(self, cols: _Columns, categories: np.ndarray, rows: np.ndarray) -> None:
        self.rows = rows
        self.start = cols["start_ns"][rows]
        self.end = cols["end_ns"][rows]
        self.start_valid = cols.valid["start_ns"][rows]
        self.end_valid = cols.valid["end_ns"][rows]
        self.valid = self.start_valid & self.end_valid & (self.end >= self.start)
        self.correlation = cols["correlation_id"][rows]
        self.correlation_valid = cols.valid["correlation_id"][rows]
        self.stream = cols["stream"][rows]
        self.stream_valid = cols.valid["stream"][rows]
        self.device = cols["device"][rows]
        self.device_valid = cols.valid["device"][rows]
        self.category = categories[rows]
        self._merged: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The union of all the rank's kernels: island starts, ends, busy before each."""
        if self._merged is None:
            s, e = self.start[self.valid], self.end[self.valid]
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            if len(s) == 0:
                empty = np.empty(0, dtype=np.int64)
                self._merged = (empty, empty, empty)
            else:
                reach = np.maximum.accumulate(e)
                opens = np.ones(len(s), dtype=bool)
                opens[1:] = s[1:] > reach[:-1]
                first = np.flatnonzero(opens)
                island_start = s[first]
                island_end = reach[np.append(first[1:] - 1, len(s) - 1)]
                lengths = island_end - island_start
                before = np.concatenate(([0], np.cumsum(lengths)[:-1]))
                self._merged = (island_start, island_end, before)
        return self._merged

    def busy_before(self, t: np.ndarray) -> np.ndarray:
        island_start, island_end, before = self.merged()
        if len(island_start) == 0:
            return np.zeros(len(t), dtype=np.int64)
        i = np.searchsorted(island_start, t, side="right") - 1
        inside = i >= 0
        i = np.maximum(i, 0)
        partial = np.clip(np.minimum(island_end[i], t) - island_start[i], 0, None)
        return np.where(inside, before[i] + partial, 0)

    def busy_between(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        return self.busy_before(end) - self.busy_before(start)
