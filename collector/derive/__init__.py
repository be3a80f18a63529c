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
      the rare trace where several share one); NULL without one. A CUDA or
      HIP graph replay's kernels all have its call (GRAPH_LAUNCH_PREFIXES),
      whose time counts once: launch_call_ns is NULL on all but the first
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
per category), the span and the idle gaps; the device most kernels ran on;
and the scoped activities whose launch call the trace lacks
(`unlaunched_count`: their correlation id is on no runtime call, typically
launched before the profiler started while the GPU ran behind the CPU)
and `unlaunched_busy_ns`, the busy time only they cover (busy_ns minus
the union of the launched ones): gpulens counts that GPU time, HTA drops
those activities, so busy_ns - unlaunched_busy_ns is HTA's busy time.

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

from gpulens.collector import arrow_compute as pc
from gpulens.collector.derive.inputs import (
    COMMUNICATION,
    COMPUTE,
    GRAPH_LAUNCH_PREFIXES,
    MEMORY,
    PHASE_NAMES,
    _MAX,
    _MIN,
    _category_codes,
    _Columns,
    _groups,
    _profiler_step_rows,
    _RankKernels,
    _step_windows,
    _StepWindows,
    graph_launch_calls,
)
from gpulens.collector.derive.phases import PHASE_BUCKET_BITS, PHASE_BUCKET_NS, PHASE_MAX_BUCKETS, _phases, bucket_bits
from gpulens.collector.derive.group_stats import _kernel_names, _step_launches
from gpulens.collector.schema import (
    GPU_PHASES_SCHEMA,
    KERNEL_NAMES_SCHEMA,
    RANK_SUMMARY_SCHEMA,
    STEP_LAUNCHES_SCHEMA,
    TRACE_SCHEMAS,
)

# The tables derive_trace_tables adds beside the parsed ones.
DERIVED_TABLES = ("gpu_phases", "rank_summary", "step_launches", "kernel_names")
# The input tables derive_trace_tables gives back with columns added; it
# returns every other one as it is (so a writer may write those meanwhile).
CHANGED_TABLES = ("kernels", "annotations")

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
    step_groups = _groups(pc.take(annotations, step_rows)) if len(step_rows) else {}

    n = kernels.num_rows
    out = _KernelColumns(n)
    busy_ns = np.full(annotations.num_rows, _MIN, dtype=np.int64)
    phases: list[pa.Table] = []
    summaries: list[dict] = []
    step_launch_tables: list[pa.Table] = []
    kernel_cols = _Columns(kernels, ("start_ns", "end_ns", "correlation_id", "stream", "device"))
    categories = _category_codes(kernels)
    call_cols = _Columns(api_calls, ("start_ns", "dur_ns", "correlation_id"))
    graph_calls = graph_launch_calls(api_calls.column("name"))
    step_table = pc.take(annotations, step_rows) if len(step_rows) else None
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
            summary = _derive_rank(rank, call_cols, api_calls, graph_calls, c_idx, steps, out)
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


# --- one rank's kernels ----------------------------------------------------------


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
            names = pc.take(self.call_source.column("name"), pa.array(np.where(has_call, self.call_row, 0)))
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


def _derive_rank(rank: _RankKernels, call_cols: _Columns, api_calls: pa.Table, graph_calls: np.ndarray,
                 call_rows: np.ndarray, steps: _StepWindows, out: _KernelColumns) -> dict:
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
    # A graph replay's kernels share its call: their delays are the graph's
    # earlier kernels running, so the step's delay statistics leave them out,
    # and the call's time counts once, with the replay's first kernel (its
    # later kernels' launch_call_ns is NULL), so that launch-call totals are
    # the CPU's time and their mean per kernel what the graph saves.
    graph = has_call & graph_calls[safe_call] if len(graph_calls) else np.zeros(n, dtype=bool)
    call_counted = call_dur_valid.copy()
    if graph.any():
        replayed = np.flatnonzero(graph)
        replayed = replayed[_order_by(call_index[replayed], rank.start[replayed])]
        later = np.zeros(len(replayed), dtype=bool)
        later[1:] = call_index[replayed][1:] == call_index[replayed][:-1]
        call_counted[replayed[later]] = False
        out.call_dur_valid[rows] = call_counted
    out.step_launches.append(_step_launches(
        np.where(in_step, step, _MIN), queue, queue_valid, call_dur, call_counted, out.delay[rows],
        call_dur_valid & ~graph))

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
        "idle_gap_count": 0, "idle_ns": 0, "idle_host_wait_ns": 0, "unlaunched_count": 0, "unlaunched_busy_ns": 0,
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
    busy_ns = int(np.maximum(end - from_ns, 0).sum())
    launched = has_call[order]
    unlaunched_busy_ns = busy_ns - _union_ns(start[launched], end[launched]) if not launched.all() else 0
    out.rank_gap[target] = gap_ns
    out.rank_gap_valid[target] = gap
    out.rank_gap_host_wait[target] = host_wait
    summary.update({
        "scoped_kernel_count": len(order),
        "span_start_ns": int(start.min()),
        "span_end_ns": int(end.max()),
        "busy_ns": busy_ns,
        "compute_union_ns": int(category_added[code == COMPUTE].sum()),
        "comm_union_ns": int(category_added[code == COMMUNICATION].sum()),
        "memory_union_ns": int(category_added[code == MEMORY].sum()),
        "compute_comm_union_ns": int(compute_comm_added[code != MEMORY].sum()),
        "idle_gap_count": int(gap.sum()),
        "idle_ns": int(gap_ns.sum()),
        "idle_host_wait_ns": int(gap_ns[host_wait].sum()),
        "unlaunched_count": int(len(order) - launched.sum()),
        "unlaunched_busy_ns": unlaunched_busy_ns,
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


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """The length of the union of intervals given in order of start."""
    reach = _reach_before(ends)
    return int(np.maximum(ends - np.maximum(starts, reach), 0).sum())


def _reach_before(ends: np.ndarray) -> np.ndarray:
    """For each position, the greatest value before it (_MIN at the first)."""
    reach = np.empty(len(ends), dtype=np.int64)
    if len(ends):
        reach[0] = _MIN
        np.maximum.accumulate(ends[:-1], out=reach[1:])
    return reach


# Besides this module's own: what callers import from `inputs` and `phases`
# through the package.
__all__ = [
    "COMMUNICATION", "COMPUTE", "DERIVED_TABLES", "GRAPH_LAUNCH_PREFIXES", "KERNEL_DERIVED_COLUMNS", "MEMORY",
    "PHASE_BUCKET_BITS", "PHASE_BUCKET_NS", "PHASE_MAX_BUCKETS", "PHASE_NAMES", "bucket_bits", "derive_trace_tables",
]
