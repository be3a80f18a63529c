"""Collectives of traces that record no collective arguments: nsys exports
and rocprofv3 traces.

Neither format holds what PyTorch's `record_param_comms` op gives a Kineto
trace (sizes, dtype, process group, sequence number). What both do hold is
every NCCL/RCCL kernel, and the call that launched it. So each
communication kernel (the rule in `categories`) is one collective, as a
Kineto trace's bare communication kernels are (`kineto_collectives`, rule
3):

- its op from the `nccl:<op>` range (ProcessGroupNCCL's, as NVTX under
  `nsys profile --pytorch=autograd-nvtx`) its launch call ran inside on
  the same thread, whose interval is then its CPU time; else from the
  kernel's name (`ncclDevKernel_AllReduce_Sum_f32_RING_LL` → `all_reduce`;
  NULL for RCCL's Generic kernel, which runs any of them);
- its time and correlation id the kernel's;
- its size, group and sequence number NULL: the trace does not say.

The communication analyses then still give each op's GPU time, its overlap
with compute and the ranks' skew (instances matched by order within a
rank, as `comm_calls` does without `seq`); bus bandwidth needs sizes.
"""

from __future__ import annotations

import bisect
from operator import itemgetter
from typing import Any, Iterable

import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.base import build_table, normalise_op, op_from_kernel_name
from gpulens.collector.ingest.categories import COMMUNICATION
from gpulens.collector.ingest.kineto_schema import COLLECTIVE_ANNOTATION_PREFIX


class Enclosing:
    """Per thread, which of a set of non-nested CPU ranges holds a time."""

    def __init__(self, tids: Iterable[Any], starts: Iterable[int | None], ends: Iterable[int | None],
                 indices: Iterable[int]) -> None:
        """The ranges given column by column; those missing a time are left out."""
        by_tid: dict[Any, list[tuple[int, int, int]]] = {}
        for tid, start_ns, end_ns, index in zip(tids, starts, ends, indices):
            if start_ns is not None and end_ns is not None:
                by_tid.setdefault(tid, []).append((start_ns, end_ns, index))
        self._by_tid: dict[Any, tuple[list[int], list[int], list[int]]] = {}
        for tid, found in by_tid.items():
            found.sort(key=itemgetter(0))  # by start, stable: ranges that start together keep their order
            starts_ns, ends_ns, held = zip(*found)
            self._by_tid[tid] = (list(starts_ns), list(ends_ns), list(held))

    def find(self, tid: Any, time_ns: int) -> int | None:
        if tid not in self._by_tid:
            return None
        starts, ends, indices = self._by_tid[tid]
        position = bisect.bisect_right(starts, time_ns) - 1
        if position >= 0 and ends[position] >= time_ns:
            return indices[position]
        return None


def add_collectives_from_kernels(tables: dict[str, pa.Table]) -> None:
    """Add `collectives` to a parsed source's tables where its kernels hold
    communication kernels. After the parser counts the events it read:
    these rows are derived, not read."""
    collectives = collectives_from_kernels(*map(tables.get, ("kernels", "api_calls", "annotations")))
    if collectives is not None:
        tables["collectives"] = collectives


def collectives_from_kernels(kernels: pa.Table | None, api_calls: pa.Table | None = None,
                             annotations: pa.Table | None = None) -> pa.Table | None:
    """One `collectives` row per communication kernel (kind kernel) of
    `kernels`, in the kernels' order; None where there is none. The tables
    are a parsed source's (any number of ranks)."""
    if kernels is None or not kernels.num_rows:
        return None
    communication = pc.and_(pc.equal(kernels.column("category"), COMMUNICATION), pc.equal(kernels.column("kind"), "kernel"))
    comm = pc.filter(kernels, pc.fill_null(communication, False))
    if not comm.num_rows:
        return None
    ranks = comm.column("rank").to_pylist()
    correlations = comm.column("correlation_id").to_pylist()
    ranges = _collective_ranges(annotations)
    launches = _launches(api_calls, set(zip(ranks, correlations))) if ranges else {}
    ops, cpu_start, cpu_end = [], [], []
    for rank, correlation, name in zip(ranks, correlations, comm.column("name").to_pylist()):
        launch = launches.get((rank, correlation))
        found = ranges.find((rank, launch[0]), launch[1]) if launch is not None else None
        if found is not None:
            range_name, start_ns, end_ns = found
            ops.append(normalise_op(range_name))
        else:
            ops.append(op_from_kernel_name(name) if name else None)
            start_ns = end_ns = None
        cpu_start.append(start_ns)
        cpu_end.append(end_ns)
    return build_table("collectives", {
        "run": comm.column("run"),
        "rank": comm.column("rank"),
        "op": ops,
        "start_ns": comm.column("start_ns"),
        "end_ns": comm.column("end_ns"),
        "cpu_start_ns": cpu_start,
        "cpu_end_ns": cpu_end,
        "kernel_name": comm.column("name"),
        "correlation_id": comm.column("correlation_id"),
    })


class _Ranges:
    """The `nccl:` ranges by (rank, thread), found by time."""

    def __init__(self, annotations: pa.Table) -> None:
        self.rows = annotations.select(["name", "start_ns", "end_ns"]).to_pylist()
        threads = zip(annotations.column("rank").to_pylist(), annotations.column("tid").to_pylist())
        self.enclosing = Enclosing(threads, (row["start_ns"] for row in self.rows), (row["end_ns"] for row in self.rows),
                                   range(len(self.rows)))

    def __bool__(self) -> bool:
        return bool(self.rows)

    def find(self, thread: tuple[Any, Any], time_ns: int | None) -> tuple[str, int, int] | None:
        index = self.enclosing.find(thread, time_ns) if time_ns is not None else None
        if index is None:
            return None
        row = self.rows[index]
        return row["name"], row["start_ns"], row["end_ns"]


def _collective_ranges(annotations: pa.Table | None) -> _Ranges:
    if annotations is None or not annotations.num_rows:
        return _Ranges(pa.table({"rank": [], "tid": [], "name": [], "start_ns": [], "end_ns": []}))
    named = pc.fill_null(pc.starts_with(annotations.column("name"), COLLECTIVE_ANNOTATION_PREFIX), False)
    return _Ranges(pc.filter(annotations, named))


def _launches(api_calls: pa.Table | None, wanted: set[tuple[Any, Any]]) -> dict[tuple[Any, Any], tuple[Any, int]]:
    """(rank, correlation id) → (thread, start) of the call with that id."""
    if api_calls is None or not api_calls.num_rows:
        return {}
    launches: dict[tuple[Any, Any], tuple[Any, int]] = {}
    columns = [api_calls.column(name).to_pylist() for name in ("rank", "correlation_id", "tid", "start_ns")]
    for rank, correlation, tid, start in zip(*columns):
        key = (rank, correlation)
        if correlation is not None and start is not None and key in wanted:
            launches.setdefault(key, (tid, start))
    return launches
