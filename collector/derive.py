"""Per-kernel facts derived once, when a trace file is written.

The analyses that read every kernel (where GPU time goes, idle causes,
launch delays, energy per phase) need each rank's kernels in time order:
running maxima of kernel ends, the launch call of each kernel, the profiler
step it belongs to. Done in SQL at query time that is a sort of every
kernel for every question (7-20 s at 10 million kernels on 2 cores). Done
here, once per source file at ingest, with numpy, the analyses become scans
and group-bys over stored columns (README, "Derived columns").

`derive_trace_tables(tables)` takes the tables of one source file (the
unit ingest writes atomically) and returns them with:

kernels, new columns (per (run, rank) of the file):
  launch_call_name, launch_call_start_ns, launch_call_ns
      the runtime call with the kernel's correlation id (the earliest, in
      the rare trace where several share one); NULL without one
  launch_delay_ns   kernel start - call end, clipped at 0 (HTA's launch delay)
  launch_queue_ns   kernel start - call start (launch plus queuing)
  step            the profiler step whose window holds the launch call's
                  start (steps made disjoint: one ends where the next
                  starts); NULL without a call or outside every step
  scoped          counted by per-rank aggregates: the rank has fewer than
                  two profiler steps, or the kernel starts before the last
                  step starts, or its launch call does (HTA drops the
                  last, cut-short step the same way)
  Over the scoped kernels with start <= end, all streams of the rank, in
  (start_ns, correlation_id) order, with the running maximum of the ends
  before each kernel (its reach):
  rank_gap_ns             idle time on the rank just before the kernel
                          starts (NULL when there is none)
  rank_gap_host_wait      its launch call started after that gap began
  And within the kernel's stream, in the same order:
  stream_gap_ns, stream_gap_host_wait

annotations, new column:
  gpu_busy_ns     for profiler-step rows: the time some kernel of the rank
                  ran within the step's window (its rows merged: first
                  start to last end)

rank_summary, a new table, one row per rank: from the same sweep, what
the kernels add to the unions of those before them summed (busy time, and
per category), the span and the idle gaps; the device most kernels ran on.

kernel_names, a new table, one row per kernel name of a rank: the
count, total and spread of the scoped kernels' durations (kernel_stats),
and the launched kernels' count, GPU time and launch-call time.

step_launches, a new table, one row per profiler step of a rank (and one,
step NULL, for the kernels launched outside every step): the launched
kernels' count, summed launch-and-queue time, call time and delay, and
the delay's median and 95th percentile.

gpu_phases, a new table: per (run, rank, device), its time tiled into rows
of one phase: 'compute' when any compute kernel runs, else
'communication', else 'memory', else 'idle'; rows are cut at multiples of
2^bucket_bits ns (their `bucket`: 2^24 ns, wider where a device's span
would need more than PHASE_MAX_BUCKETS of those) and carry the time of each
phase before them, so the time of a phase up to any instant is one lookup.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema import (
    GPU_PHASES_SCHEMA,
    KERNEL_NAMES_SCHEMA,
    RANK_SUMMARY_SCHEMA,
    STEP_LAUNCHES_SCHEMA,
    TRACE_SCHEMAS,
)

_MIN = np.iinfo(np.int64).min
_MAX = np.iinfo(np.int64).max
COMPUTE, COMMUNICATION, MEMORY = 0, 1, 2
PHASE_NAMES = ("compute", "communication", "memory")

# The tables derive_trace_tables adds beside the parsed ones.
DERIVED_TABLES = ("gpu_phases", "rank_summary", "step_launches", "kernel_names")

KERNEL_DERIVED_COLUMNS = (
    "launch_call_name", "launch_call_start_ns", "launch_call_ns", "launch_delay_ns", "launch_queue_ns", "step",
    "scoped", "rank_gap_ns", "rank_gap_host_wait", "stream_gap_ns", "stream_gap_host_wait",
)


def derive_trace_tables(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The tables of one source file, with the derived columns and gpu_phases."""
    kernels = tables.get("kernels")
    api_calls = tables.get("api_calls")
    annotations = tables.get("annotations")
    derived = dict(tables)
    if kernels is None:
        kernels = TRACE_SCHEMAS["kernels"].empty_table()
    if api_calls is None:
        api_calls = TRACE_SCHEMAS["api_calls"].empty_table()
    if annotations is None:
        annotations = TRACE_SCHEMAS["annotations"].empty_table()

    kernel_groups = _groups(kernels)
    call_groups = _groups(api_calls)
    step_rows = _profiler_step_rows(annotations)
    step_groups = _groups(annotations.take(step_rows)) if len(step_rows) else {}

    n = kernels.num_rows
    out = _KernelColumns(n)
    busy_ns = np.full(annotations.num_rows, _MIN, dtype=np.int64)
    phases: list[pa.Table] = []
    summaries: list[dict] = []
    step_launch_tables: list[pa.Table] = []
    kernel_cols = _Columns(kernels, ("start_ns", "end_ns", "correlation_id", "stream", "device"))
    categories = _category_codes(kernels)
    call_cols = _Columns(api_calls, ("start_ns", "dur_ns", "correlation_id"))
    step_table = annotations.take(step_rows) if len(step_rows) else None
    step_cols = _Columns(step_table, ("start_ns", "end_ns", "step")) if step_table is not None else None

    # In (run, rank) order: the derived rows must not depend on hash order.
    keys = sorted(set(kernel_groups) | set(step_groups), key=lambda k: (k[0] is None, k[0] or "", k[1] is None, k[1] or 0))
    for key in keys:
        k_idx = kernel_groups.get(key, np.empty(0, dtype=np.int64))
        c_idx = call_groups.get(key, np.empty(0, dtype=np.int64))
        s_idx = step_groups.get(key, np.empty(0, dtype=np.int64))
        steps = _step_windows(step_cols, s_idx) if step_cols is not None else _StepWindows.none()
        rank = _RankKernels(kernel_cols, categories, k_idx)
        if len(k_idx):
            summary = _derive_rank(rank, call_cols, api_calls, c_idx, steps, out)
            summaries.append({"run": key[0], "rank": key[1], **summary})
            launches = out.step_launches.pop()
            if launches:
                rows_n = len(launches["step"])
                step_launch_tables.append(pa.Table.from_pydict(
                    {"run": [key[0]] * rows_n, "rank": [key[1]] * rows_n, **launches}, schema=STEP_LAUNCHES_SCHEMA))
            phases.extend(_phases(rank, key, summary, steps))
        if len(s_idx):
            merged_busy = rank.busy_between(steps.merged_start, steps.merged_end)
            has_window = steps.row_window >= 0
            busy_ns[step_rows[s_idx][has_window]] = merged_busy[steps.row_window[has_window]]

    if n:
        derived["kernels"] = out.attach(kernels)
        derived["kernel_names"] = _kernel_names(derived["kernels"])
    else:
        derived["kernel_names"] = KERNEL_NAMES_SCHEMA.empty_table()
    if annotations.num_rows:
        busy = pa.array(busy_ns, mask=busy_ns == _MIN, type=pa.int64())
        derived["annotations"] = _set_column(annotations, "gpu_busy_ns", busy)
    derived["gpu_phases"] = pa.concat_tables(phases) if phases else GPU_PHASES_SCHEMA.empty_table()
    derived["rank_summary"] = pa.Table.from_pylist(summaries, schema=RANK_SUMMARY_SCHEMA)
    derived["step_launches"] = (pa.concat_tables(step_launch_tables) if step_launch_tables
                                else STEP_LAUNCHES_SCHEMA.empty_table())
    return derived


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
            self.values[name] = column.cast(pa.int64()).to_numpy(zero_copy_only=False)

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
    keys = pa.table({"run": run, "rank": rank, "row": pa.array(np.arange(table.num_rows, dtype=np.int64))})
    grouped = keys.group_by(["run", "rank"], use_threads=False).aggregate([("row", "list")])
    return {
        (r, k): np.asarray(rows, dtype=np.int64)
        for r, k, rows in zip(grouped.column("run").to_pylist(), grouped.column("rank").to_pylist(),
                              grouped.column("row_list").to_pylist())
    }


def _category_codes(kernels: pa.Table) -> np.ndarray:
    category = kernels.column("category")
    codes = np.zeros(kernels.num_rows, dtype=np.int8)
    if kernels.num_rows:
        codes[pc.equal(category, "communication").fill_null(False).to_numpy(zero_copy_only=False)] = COMMUNICATION
        codes[pc.equal(category, "memory").fill_null(False).to_numpy(zero_copy_only=False)] = MEMORY
    return codes


def _profiler_step_rows(annotations: pa.Table) -> np.ndarray:
    if annotations.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    mask = pc.and_(pc.equal(annotations.column("kind"), "profiler_step"), pc.is_valid(annotations.column("step")))
    return np.flatnonzero(mask.fill_null(False).to_numpy(zero_copy_only=False))


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


class _KernelColumns:
    """The derived columns of a whole kernels table, filled rank by rank."""

    def __init__(self, n: int) -> None:
        self.call_row = np.full(n, -1, dtype=np.int64)
        self.call_start = np.zeros(n, dtype=np.int64)
        self.call_dur = np.zeros(n, dtype=np.int64)
        self.call_dur_valid = np.zeros(n, dtype=bool)
        self.queue = np.zeros(n, dtype=np.int64)
        self.queue_valid = np.zeros(n, dtype=bool)
        self.delay = np.zeros(n, dtype=np.int64)
        self.delay_valid = np.zeros(n, dtype=bool)
        self.step = np.zeros(n, dtype=np.int64)
        self.step_valid = np.zeros(n, dtype=bool)
        self.scoped = np.zeros(n, dtype=bool)
        self.rank_gap = np.zeros(n, dtype=np.int64)
        self.rank_gap_valid = np.zeros(n, dtype=bool)
        self.rank_gap_host_wait = np.zeros(n, dtype=bool)
        self.stream_gap = np.zeros(n, dtype=np.int64)
        self.stream_gap_valid = np.zeros(n, dtype=bool)
        self.stream_gap_host_wait = np.zeros(n, dtype=bool)
        self.call_source: pa.Table | None = None
        self.step_launches: list[dict[str, list]] = []

    def attach(self, kernels: pa.Table) -> pa.Table:
        has_call = self.call_row >= 0
        if self.call_source is not None and has_call.any():
            names = self.call_source.column("name").take(pa.array(np.where(has_call, self.call_row, 0)))
            names = pc.if_else(pa.array(has_call), names, pa.nulls(len(has_call), pa.string()))
        else:
            names = pa.nulls(len(has_call), pa.string())
        gap_present = self.rank_gap_valid
        stream_gap_present = self.stream_gap_valid
        columns = {
            "launch_call_name": names,
            "launch_call_start_ns": _int(self.call_start, has_call),
            "launch_call_ns": _int(self.call_dur, has_call & self.call_dur_valid),
            "launch_delay_ns": _int(self.delay, self.delay_valid),
            "launch_queue_ns": _int(self.queue, self.queue_valid),
            "step": _int(self.step, self.step_valid),
            "scoped": pa.array(self.scoped, type=pa.bool_()),
            "rank_gap_ns": _int(self.rank_gap, gap_present),
            "rank_gap_host_wait": pa.array(self.rank_gap_host_wait, mask=~gap_present, type=pa.bool_()),
            "stream_gap_ns": _int(self.stream_gap, stream_gap_present),
            "stream_gap_host_wait": pa.array(self.stream_gap_host_wait, mask=~stream_gap_present, type=pa.bool_()),
        }
        for name in KERNEL_DERIVED_COLUMNS:
            kernels = _set_column(kernels, name, columns[name])
        return kernels


def _int(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    if valid.all():
        return pa.array(values, type=pa.int64())
    return pa.array(values, mask=~valid, type=pa.int64())


def _set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(name)
    if index >= 0:
        return table.set_column(index, name, values)
    return table.append_column(name, values)


def _derive_rank(rank: _RankKernels, call_cols: _Columns, api_calls: pa.Table, call_rows: np.ndarray,
                 steps: _StepWindows, out: _KernelColumns) -> dict:
    """Fill the rank's kernel columns in `out`; its rank_summary values."""
    rows = rank.rows
    n = len(rows)
    # Launch calls: by correlation id, the earliest call where several share one.
    call_index = np.full(n, -1, dtype=np.int64)
    if len(call_rows):
        valid_calls = call_rows[call_cols.valid["correlation_id"][call_rows] & call_cols.valid["start_ns"][call_rows]]
        corr = call_cols["correlation_id"][valid_calls]
        order = _order_by(corr, call_cols["start_ns"][valid_calls])
        corr, sorted_rows = corr[order], valid_calls[order]
        first = np.ones(len(corr), dtype=bool)
        first[1:] = corr[1:] != corr[:-1]
        corr, sorted_rows = corr[first], sorted_rows[first]
        if len(corr):
            position = np.searchsorted(corr, rank.correlation)
            position = np.minimum(position, len(corr) - 1)
            matched = rank.correlation_valid & (corr[position] == rank.correlation)
            call_index = np.where(matched, sorted_rows[position], -1)
        out.call_source = api_calls
    has_call = call_index >= 0
    safe_call = np.maximum(call_index, 0)
    call_start = np.where(has_call, call_cols["start_ns"][safe_call] if len(call_cols["start_ns"]) else 0, 0)
    out.call_row[rows] = call_index
    out.call_start[rows] = call_start
    if len(call_cols["dur_ns"]):
        out.call_dur[rows] = np.where(has_call, call_cols["dur_ns"][safe_call], 0)
        out.call_dur_valid[rows] = has_call & call_cols.valid["dur_ns"][safe_call]

    # Launch and queue time (kernel start - call start) and launch delay
    # (kernel start - call end, clipped at 0).
    queue_valid = has_call & rank.start_valid
    queue = np.where(queue_valid, rank.start - call_start, 0)
    call_dur, call_dur_valid = out.call_dur[rows], out.call_dur_valid[rows]
    out.queue[rows], out.queue_valid[rows] = queue, queue_valid
    out.delay[rows] = np.maximum(queue - call_dur, 0)
    out.delay_valid[rows] = queue_valid & call_dur_valid

    # The step of each launch call.
    step, in_step = steps.step_at(call_start)
    out.step[rows] = step
    out.step_valid[rows] = has_call & in_step
    out.step_launches.append(_step_launches(
        np.where(in_step, step, _MIN), queue, queue_valid, call_dur, call_dur_valid, out.delay[rows]))

    # Scope: the complete profiler steps.
    if steps.count >= 2:
        last = steps.last_start_ns
        scoped = rank.start_valid & ((rank.start < last) | (has_call & (call_start < last)))
    else:
        scoped = np.ones(n, dtype=bool)
    out.scoped[rows] = scoped

    starts = rank.start[rank.start_valid]
    ends = rank.end[rank.end_valid]
    summary = {
        "kernel_count": n,
        "first_kernel_start_ns": int(starts.min()) if len(starts) else None,
        "last_kernel_end_ns": int(ends.max()) if len(ends) else None,
        "scoped_kernel_count": 0, "span_start_ns": None, "span_end_ns": None, "busy_ns": 0,
        "compute_union_ns": 0, "comm_union_ns": 0, "memory_union_ns": 0, "compute_comm_union_ns": 0,
        "idle_gap_count": 0, "idle_ns": 0, "idle_host_wait_ns": 0,
        "first_launch_call_start_ns": int(call_start[has_call].min()) if has_call.any() else None,
        **_main_device(rank),
    }
    # The rank sweep: scoped kernels with start <= end, by (start, correlation id).
    swept = np.flatnonzero(scoped & rank.valid)
    if len(swept) == 0:
        return summary
    correlation_key = np.where(rank.correlation_valid[swept], rank.correlation[swept], _MAX)
    order = swept[_order_by(rank.start[swept], correlation_key)]
    start, end, code = rank.start[order], rank.end[order], rank.category[order]
    reach = [_reach_before(np.where(code == k, end, _MIN)) for k in (COMPUTE, COMMUNICATION, MEMORY)]
    gap_start = np.maximum(np.maximum(reach[0], reach[1]), reach[2])
    has_before = gap_start != _MIN
    from_ns = np.where(has_before, np.maximum(start, gap_start), start)
    own_reach = np.choose(code, reach)
    compute_comm_reach = np.maximum(reach[0], reach[1])
    gap = has_before & (start > gap_start)
    # What each kernel adds to the union of those before it, in all and
    # within its own category; unions of several sets have the greatest reach.
    category_added = np.maximum(end - np.maximum(start, own_reach), 0)
    compute_comm_added = np.maximum(end - np.maximum(start, compute_comm_reach), 0)
    gap_ns = np.where(gap, start - np.where(has_before, gap_start, start), 0)
    host_wait = gap & has_call[order] & (call_start[order] > gap_start)
    target = rows[order]
    out.rank_gap[target] = gap_ns
    out.rank_gap_valid[target] = gap
    out.rank_gap_host_wait[target] = host_wait
    summary.update({
        "scoped_kernel_count": len(order),
        "span_start_ns": int(start.min()),
        "span_end_ns": int(end.max()),
        "busy_ns": int(np.maximum(end - from_ns, 0).sum()),
        "compute_union_ns": int(category_added[code == COMPUTE].sum()),
        "comm_union_ns": int(category_added[code == COMMUNICATION].sum()),
        "memory_union_ns": int(category_added[code == MEMORY].sum()),
        "compute_comm_union_ns": int(compute_comm_added[code != MEMORY].sum()),
        "idle_gap_count": int(gap.sum()),
        "idle_ns": int(gap_ns.sum()),
        "idle_host_wait_ns": int(gap_ns[host_wait].sum()),
    })

    # The stream sweep, the same order within each stream.
    stream_key = np.where(rank.stream_valid[order], rank.stream[order], _MIN)
    by_stream = np.argsort(stream_key, kind="stable")  # keeps (start, correlation) order within a stream
    keys = stream_key[by_stream]
    bounds = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1], [True])))
    stream_reach = np.empty(len(order), dtype=np.int64)
    ends_by_stream = end[by_stream]
    for a, b in zip(bounds[:-1], bounds[1:]):
        stream_reach[a:b] = _reach_before(ends_by_stream[a:b])
    reach_in_order = np.empty_like(stream_reach)
    reach_in_order[by_stream] = stream_reach
    stream_gap = (reach_in_order != _MIN) & (start > reach_in_order)
    out.stream_gap[target] = np.where(stream_gap, start - np.where(stream_gap, reach_in_order, start), 0)
    out.stream_gap_valid[target] = stream_gap
    out.stream_gap_host_wait[target] = stream_gap & has_call[order] & (call_start[order] > reach_in_order)
    return summary


def _kernel_names(kernels: pa.Table) -> pa.Table:
    """Per (run, rank, name), in that order: kernel_stats over the scoped
    kernels, and the launched kernels' totals short_kernels and
    launch_outliers start from. What DuckDB's group-by with filtered
    aggregates gives (NULL sums and extremes over no rows, `min` of the
    category among the counted kernels else among all), computed with numpy:
    a DuckDB connection costs more than the work."""
    n = kernels.num_rows
    if n == 0:
        return KERNEL_NAMES_SCHEMA.empty_table()
    runs, run_values = _sorted_codes(kernels.column("run"))
    ranks, rank_values = _sorted_codes(kernels.column("rank"))
    names, name_values = _sorted_codes(kernels.column("name"))
    order = np.lexsort((names, ranks, runs))
    group_keys = np.column_stack((runs[order], ranks[order], names[order]))
    starts = np.flatnonzero(np.concatenate(([True], (group_keys[1:] != group_keys[:-1]).any(axis=1))))
    opens = np.zeros(n, dtype=bool)
    opens[starts] = True
    group = np.empty(n, dtype=np.int64)
    group[order] = np.cumsum(opens) - 1
    groups = len(starts)

    cols = _Columns(kernels, ("dur_ns", "launch_call_ns"))
    scoped = kernels.column("scoped").fill_null(False).to_numpy(zero_copy_only=False)
    counted = scoped & cols.valid["dur_ns"] & (cols["dur_ns"] >= 0)
    launched = kernels.column("launch_queue_ns").is_valid().to_numpy(zero_copy_only=False)
    dur_ns = cols["dur_ns"]

    kernel_count = np.bincount(group, weights=counted, minlength=groups).astype(np.int64)
    total_ns = _group_sum(group, dur_ns, counted, groups)
    min_ns = _group_extreme(group, dur_ns, counted, groups, np.minimum, _MAX)
    max_ns = _group_extreme(group, dur_ns, counted, groups, np.maximum, _MIN)
    quantiles = _group_quantiles(group, dur_ns, counted, groups, (0.5, 0.95))
    launched_count = np.bincount(group, weights=launched, minlength=groups).astype(np.int64)
    launched_gpu_ns = _group_sum(group, dur_ns, launched & cols.valid["dur_ns"], groups)
    launch_call_ns = _group_sum(group, cols["launch_call_ns"], launched & cols.valid["launch_call_ns"], groups)
    first = order[starts]
    return pa.table({
        "run": pa.array(run_values, pa.string()).take(runs[first]),
        "rank": pa.array(rank_values, pa.int32()).take(ranks[first]),
        "name": pa.array(name_values, pa.string()).take(names[first]),
        "category": _group_min_text(kernels.column("category"), group, counted, groups),
        "kind": _group_min_text(kernels.column("kind"), group, counted, groups),
        "kernel_count": kernel_count,
        "total_ns": total_ns,
        "min_ns": min_ns,
        "max_ns": max_ns,
        "p50_ns": quantiles[0],
        "p95_ns": quantiles[1],
        "launched_count": launched_count,
        "launched_gpu_ns": launched_gpu_ns,
        "launch_call_total_ns": launch_call_ns,
    }, schema=KERNEL_NAMES_SCHEMA)


def _step_launches(step_key: np.ndarray, queue_ns: np.ndarray, launched: np.ndarray, call_ns: np.ndarray,
                   call_ns_valid: np.ndarray, delay_ns: np.ndarray) -> dict[str, list]:
    """Per step in order (step_key _MIN: outside every step, last), over the
    launched kernels whose launch call it holds: what step_launch_summary
    reports that no threshold changes. The quantiles are exactly DuckDB's
    `quantile_cont` (see `_group_quantiles`). The delay is known where the
    call's duration is."""
    if not launched.any():
        return {}
    steps = step_key[launched]
    # Outside every step sorts last, as NULLs do.
    step_values, group = np.unique(np.where(steps == _MIN, _MAX, steps), return_inverse=True)
    groups = len(step_values)
    known = call_ns_valid[launched]
    delay = delay_ns[launched]
    delay_sums = _group_sum(group, delay, known, groups)
    call_sums = _group_sum(group, call_ns[launched], known, groups)
    quantiles = _group_quantiles(group, delay, known, groups, (0.5, 0.95))
    return {
        "step": [None if value == _MAX else int(value) for value in step_values],
        "kernel_count": np.bincount(group, minlength=groups).tolist(),
        "tklqt_ns": _group_sum(group, queue_ns[launched], np.ones(len(group), dtype=bool), groups).to_pylist(),
        "launch_call_total_ns": pc.fill_null(call_sums, 0).to_pylist(),
        "launch_delay_total_ns": pc.fill_null(delay_sums, 0).to_pylist(),
        "launch_delay_p50_ns": quantiles[0].to_pylist(),
        "launch_delay_p95_ns": quantiles[1].to_pylist(),
    }


# --- per-group aggregates, as DuckDB computes them ------------------------------


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
    codes = encoded.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
    codes = np.append(position, len(dictionary))[codes]
    return codes, dictionary.take(pa.array(order)).to_pylist() + [None]


def _group_sum(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int) -> pa.Array:
    """Exact int64 sums of the kept values per group; NULL where none is kept."""
    kept = np.flatnonzero(keep)
    sums = np.zeros(groups, dtype=np.int64)
    np.add.at(sums, group[kept], values[kept])
    any_kept = np.bincount(group[kept], minlength=groups) > 0
    return pa.array(sums, mask=~any_kept, type=pa.int64())


def _group_extreme(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int,
                   ufunc: np.ufunc, identity: int) -> pa.Array:
    kept = np.flatnonzero(keep)
    out = np.full(groups, identity, dtype=np.int64)
    ufunc.at(out, group[kept], values[kept])
    any_kept = np.bincount(group[kept], minlength=groups) > 0
    return pa.array(out, mask=~any_kept, type=pa.int64())


def _group_quantiles(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int,
                     quantiles: tuple[float, ...]) -> list[pa.Array]:
    """Per group, DuckDB's `quantile_cont` of the kept values: position
    RN = (n - 1) q in the sorted values, between its neighbours lo and hi
    (d = RN - floor(RN)) at lo (1 - d) + hi d; NULL where none is kept."""
    kept = np.flatnonzero(keep)
    kept_group, kept_values = group[kept], values[kept]
    order = np.lexsort((kept_values, kept_group))
    ordered = kept_values[order].astype(np.float64)
    counts = np.bincount(kept_group, minlength=groups)
    offsets = np.cumsum(counts) - counts
    some = counts > 0
    results = []
    for q in quantiles:
        position = (counts[some] - 1) * q
        low = np.floor(position)
        lo, hi = ordered[offsets[some] + low.astype(np.int64)], ordered[offsets[some] + np.ceil(position).astype(np.int64)]
        value = np.zeros(groups, dtype=np.float64)
        value[some] = [_interpolate(a, b, d) for a, b, d in zip(lo.tolist(), hi.tolist(), (position - low).tolist())]
        results.append(pa.array(value, mask=~some, type=pa.float64()))
    return results


def _interpolate(lo: float, hi: float, d: float) -> float:
    """lo (1 - d) + hi d as DuckDB's build computes it: hi d rounded, then
    lo (1 - d) added with one rounding (a fused multiply-add). So the
    stored quantiles equal what the same SQL gives, to the last bit, and a
    quantile that lies on a whole number is that number. One call per
    group and quantile: a few hundred a file.

    Exact: the three doubles' ratios have power-of-two denominators, so
    the sum is taken over the larger one in integers, and int / int rounds
    once, as float(Fraction) does (7x faster than Fractions, which cost a
    small file 4 ms: a twentieth of its ingest)."""
    if d == 0.0:
        return lo
    lo_num, lo_den = lo.as_integer_ratio()
    weight_num, weight_den = (1.0 - d).as_integer_ratio()
    high_num, high_den = (hi * d).as_integer_ratio()
    num, den = lo_num * weight_num, lo_den * weight_den
    if high_den > den:
        num, den = num * (high_den // den), high_den
    return (num + high_num * (den // high_den)) / den


def _group_min_text(column: pa.ChunkedArray, group: np.ndarray, preferred: np.ndarray, groups: int) -> pa.Array:
    """coalesce(min(column) filter (where preferred), min(column)) per group."""
    codes, values = _sorted_codes(column)
    null_code = len(values) - 1
    present = codes != null_code
    best = _group_extreme(group, codes, present & preferred, groups, np.minimum, _MAX)
    fallback = _group_extreme(group, codes, present, groups, np.minimum, _MAX)
    chosen = pc.coalesce(best, fallback).fill_null(null_code).to_numpy(zero_copy_only=False)
    return pa.array(values, pa.string()).take(pa.array(chosen))


def _main_device(rank: _RankKernels) -> dict:
    """The device most of the rank's kernels ran on (the lowest on a tie),
    and the span of the kernels there: how traces meet telemetry."""
    devices = rank.device[rank.device_valid]
    if len(devices) == 0:
        return {"main_device": None, "main_device_start_ns": None, "main_device_end_ns": None}
    values, counts = np.unique(devices, return_counts=True)
    device = int(values[np.argmax(counts)])
    on = rank.device_valid & (rank.device == device)
    starts = rank.start[on & rank.start_valid]
    ends = rank.end[on & rank.end_valid]
    return {
        "main_device": device,
        "main_device_start_ns": int(starts.min()) if len(starts) else None,
        "main_device_end_ns": int(ends.max()) if len(ends) else None,
    }


def _order_by(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """Indices sorting by (first, then): np.lexsort's result, faster on the
    nearly sorted columns traces hold (stable sorts of int64 are timsort)."""
    by_then = np.argsort(then, kind="stable")
    return by_then[np.argsort(first[by_then], kind="stable")]


def _reach_before(ends: np.ndarray) -> np.ndarray:
    """For each position, the greatest value before it (_MIN at the first)."""
    reach = np.empty(len(ends), dtype=np.int64)
    if len(ends):
        reach[0] = _MIN
        np.maximum.accumulate(ends[:-1], out=reach[1:])
    return reach


# Phase rows are cut at every multiple of 2^PHASE_BUCKET_BITS ns (about
# 17 ms), so a time's row is found by an equality join on its bucket, not a
# sort. A device whose span would take more than PHASE_MAX_BUCKETS buckets
# (2.4 hours) gets wider ones: one kernel with a bogus time 51 days away
# tiled 266 million rows and took 24 GB.
PHASE_BUCKET_BITS = 24
PHASE_BUCKET_NS = 1 << PHASE_BUCKET_BITS
PHASE_MAX_BUCKETS = 1 << 19
_IDLE = 3


def bucket_bits(low_ns: int, high_ns: int) -> int:
    """The bucket width (as a power of two, in ns) for tiling [low, high):
    2^24, or the narrowest wider one that keeps to PHASE_MAX_BUCKETS."""
    bits = PHASE_BUCKET_BITS
    while ((high_ns - 1) >> bits) - (low_ns >> bits) + 1 > PHASE_MAX_BUCKETS:
        bits += 1
    return bits


def _phases(rank: _RankKernels, key: tuple[str | None, int | None], summary: dict,
            steps: _StepWindows) -> list[pa.Table]:
    """Per device of the rank, its time tiled by phase: a sweep over kernel
    edges, idle gaps filled in, cut at bucket bounds, with the time of each
    phase before each row. The rank's main device is tiled over the window
    energy analyses use (its kernels and the profiler steps)."""
    tables = []
    keep = rank.valid & (rank.end > rank.start) & rank.device_valid
    devices = np.unique(rank.device[keep]) if keep.any() else np.empty(0, dtype=np.int64)
    main = summary.get("main_device")
    if main is not None and main not in devices:
        devices = np.append(devices, main)
    for device in devices:
        on = np.flatnonzero(keep & (rank.device == device))
        s, e, code = rank.start[on], rank.end[on], rank.category[on].astype(np.int64)
        times = np.concatenate((s, e))
        # in-flight counts packed in one number, 20 bits per kind
        weight = np.left_shift(np.int64(1), 20 * code)
        delta = np.concatenate((weight, -weight))
        order = np.argsort(times, kind="stable")
        times, running = times[order], np.cumsum(delta[order])
        phase = np.where(running & 0xFFFFF, COMPUTE,
                         np.where((running >> 20) & 0xFFFFF, COMMUNICATION,
                                  np.where(running >> 40, MEMORY, _IDLE)))
        # Segment i runs from edge i to edge i+1; the last edge at an instant
        # has the full counts, the others give empty segments.
        seg_start, seg_end, seg_phase = times[:-1], times[1:], phase[:-1]
        real = seg_end > seg_start
        seg_start, seg_end, seg_phase = seg_start[real], seg_end[real], seg_phase[real]
        low = int(seg_start[0]) if len(seg_start) else None
        high = int(seg_end[-1]) if len(seg_end) else None
        if device == main:
            bounds = [v for v in (summary.get("main_device_start_ns"), summary.get("main_device_end_ns")) if v is not None]
            if len(steps.merged_start):
                bounds += [int(steps.merged_start.min()), int(steps.merged_end.max())]
            if bounds:
                low = min(bounds + ([low] if low is not None else []))
                high = max(bounds + ([high] if high is not None else []))
        if low is None or high is None or high <= low:
            continue
        # Idle before the first kernel and after the last, where the window is wider.
        if len(seg_start):
            seg_start, seg_end = (np.concatenate(([low], seg_start, [seg_end[-1]])),
                                  np.concatenate(([seg_start[0]], seg_end, [high])))
            seg_phase = np.concatenate(([_IDLE], seg_phase, [_IDLE]))
        else:
            seg_start, seg_end, seg_phase = np.array([low]), np.array([high]), np.array([_IDLE])
        real = seg_end > seg_start
        seg_start, seg_end, seg_phase = seg_start[real], seg_end[real], seg_phase[real]
        # Merge touching rows of one phase, then cut them at bucket bounds.
        opens = np.ones(len(seg_start), dtype=bool)
        opens[1:] = (seg_start[1:] != seg_end[:-1]) | (seg_phase[1:] != seg_phase[:-1])
        first = np.flatnonzero(opens)
        last = np.append(first[1:] - 1, len(seg_start) - 1)
        start_ns, end_ns, phase_code = seg_start[first], seg_end[last], seg_phase[first]
        bits = bucket_bits(low, high)
        first_bucket = start_ns >> bits
        pieces = ((end_ns - 1) >> bits) - first_bucket + 1
        row = np.repeat(np.arange(len(start_ns)), pieces)
        bucket = first_bucket[row] + (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces))
        piece_start = np.maximum(start_ns[row], bucket << bits)
        piece_end = np.minimum(end_ns[row], (bucket + 1) << bits)
        piece_phase = phase_code[row]
        length = piece_end - piece_start
        before = {}
        for name, code_value in (("compute_before_ns", COMPUTE), ("communication_before_ns", COMMUNICATION),
                                 ("memory_before_ns", MEMORY)):
            of_phase = np.where(piece_phase == code_value, length, 0)
            before[name] = np.cumsum(of_phase) - of_phase
        count = len(piece_start)
        tables.append(pa.Table.from_arrays([
            pa.array([key[0]] * count, pa.string()),
            pa.array([key[1]] * count, pa.int32()),
            pa.array(np.full(count, device), pa.int32()),
            pa.array(np.array(PHASE_NAMES + ("idle",), dtype=object)[piece_phase], pa.string()),
            pa.array(piece_start, pa.int64()),
            pa.array(piece_end, pa.int64()),
            pa.array(length, pa.int64()),
            pa.array(bucket, pa.int64()),
            pa.array(np.full(count, bits), pa.int8()),
            pa.array(before["compute_before_ns"], pa.int64()),
            pa.array(before["communication_before_ns"], pa.int64()),
            pa.array(before["memory_before_ns"], pa.int64()),
        ], schema=GPU_PHASES_SCHEMA))
    return tables
