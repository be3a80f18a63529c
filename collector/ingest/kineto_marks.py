"""Kineto's instants and metadata events → memory_events, instants, names.

Beside its complete events (`ph: X`), a Kineto trace holds:

- PyTorch's allocator events, instants named `[memory]` (and
  `[OutOfMemory]` where an allocation failed), with `profile_memory=True`:
  one per allocation or free, its `args` giving the block's size (`Bytes`,
  negative for a free), address, device and the allocator's totals after
  it. The V100 trace of `../shared/traces` has 28,010, half of them frees.
  Each becomes a `memory_events` row: the memory a rank held over time.
- Other instants: the profiler's own marks (`Iteration Start: PyTorch
  Profiler`, `Record Window End`) and any a user recorded. Each becomes an
  `annotations` row of kind `instant`, starting and ending at its time.
- Metadata events (`ph: M`): the names of processes and threads
  (`thread 2919752 (pt_autograd_0)`), which go to the run's
  `metadata_json` as `process_name` and `thread_names`, so a CPU op's
  `tid` can be named.

Both ways of reading a trace give this module the same rows, in file
order: msgspec's decoders hand it decoded events (`InstantEvent`,
`MetadataEvent`, or the lenient `KinetoEvent`); the compiled scanner's
path hands it the allocator events already in columns (`kineto_scanned`,
the same columns `_memory_columns` builds), and the other instants and
metadata events decoded from their spans. So the rows do not depend on
the path.
"""

from __future__ import annotations

import functools
import re
from itertools import compress
from operator import attrgetter, or_
from typing import Any

import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.arrays import int_array, str_array, times_to_ns
from gpulens.collector.ingest.base import INSTANT_KIND
from gpulens.collector.ingest.kineto_schema import MarkArgs

# Instants that are allocator events, by name.
MEMORY_EVENT_NAMES: tuple[str, ...] = ("[memory]", "[OutOfMemory]")

# c10::DeviceType, as PyTorch names them (ROCm builds report their GPUs as cuda).
DEVICE_TYPES: dict[int, str] = {
    0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga", 8: "maia",
    9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu", 16: "ve", 17: "lazy",
    18: "ipu", 19: "mtia", 20: "privateuse1",
}
# Kineto names a CPU thread `thread <tid> (<name>)`.
_THREAD_NAME = re.compile(r"thread \d+ \((?P<name>.*)\)$")

_PH, _NAME, _PID, _TID, _TS, _ARGS = map(attrgetter, ("ph", "name", "pid", "tid", "ts", "args"))
_ARG_FIELDS = tuple(map(attrgetter, ("alloc_bytes", "total_allocated", "total_reserved", "addr", "device_id",
                                     "device_type")))
_NO_ARGS = MarkArgs()
_MEMORY_NAMES = frozenset(MEMORY_EVENT_NAMES)


class Marks:
    """What one trace's instants and metadata events give, batch by batch."""

    def __init__(self) -> None:
        self.memory_parts: list[dict[str, pa.Array]] = []
        # (name, pid, tid, ts µs) of each other instant, in file order.
        self.instants: list[tuple[Any, Any, Any, float | None]] = []
        # (name, pid, tid, the name or labels it gives), in file order.
        self.metadata: list[tuple[Any, Any, Any, Any]] = []

    def add(self, events: list[Any]) -> None:
        """Read decoded events of the phases `MARK_PHASES`, in file order.
        (Allocator events can be most of a trace: they are told apart and
        read by C loops, `map`, not one by one.)"""
        names = list(map(_NAME, events))
        try:
            allocator = list(map(_MEMORY_NAMES.__contains__, names))
        except TypeError:  # a name that is a JSON array or object
            allocator = [isinstance(name, str) and name in _MEMORY_NAMES for name in names]
        metadata = list(map("M".__eq__, map(_PH, events)))
        if any(metadata):
            for event in compress(events, metadata):
                args = event.args
                given = None if args is None else args.labels if event.name == "process_labels" else args.name
                self.metadata.append((event.name, event.pid, event.tid, given))
            allocator = [is_allocator and not is_metadata for is_allocator, is_metadata in zip(allocator, metadata)]
        if any(allocator):
            self.memory_parts.append(_memory_columns(list(compress(events, allocator))))
        if not all(map(or_, allocator, metadata)):
            self.instants.extend((event.name, event.pid, event.tid, event.ts)
                                 for event, is_allocator, is_metadata in zip(events, allocator, metadata)
                                 if not (is_allocator or is_metadata))

    def add_memory_columns(self, columns: dict[str, pa.Array]) -> None:
        """Allocator events already in columns (the scanner's path), next in file order."""
        self.memory_parts.append(columns)

    def merge(self, later: Marks) -> None:
        """Append what `later` read from the events after this one's."""
        self.memory_parts.extend(later.memory_parts)
        self.instants.extend(later.instants)
        self.metadata.extend(later.metadata)

    def compact(self) -> None:
        """The allocator events as one array a column (cheap to send between processes)."""
        if len(self.memory_parts) > 1:
            parts = self.memory_parts
            self.memory_parts = [{name: pa.concat_arrays([part[name] for part in parts]) for name in parts[0]}]

    def memory_columns(self) -> dict[str, pa.Array]:
        """memory_events' columns, times from the trace's origin (`ts_ns`)."""
        self.compact()
        return dict(self.memory_parts[0]) if self.memory_parts else {}

    def instant_columns(self) -> dict[str, pa.Array]:
        """The other instants as annotations' columns (`ts_ns`, `dur_ns` 0)."""
        if not self.instants:
            return {}
        names, pids, tids, times = zip(*self.instants)
        n = len(names)
        return {
            "pid": int_array(list(pids)),
            "tid": int_array(list(tids)),
            "name": str_array(list(names)),
            "ts_ns": times_to_ns(list(times)),
            "dur_ns": pa.array([0] * n, pa.int64()),
            "kind": pa.array([INSTANT_KIND] * n, pa.string()),
            "step": pa.nulls(n, pa.int64()),
        }

    def names(self, pid: int | None) -> dict[str, Any]:
        """`process_name` (of process `pid`, the profiled one) and
        `thread_names` (tid → name, of the threads of processes that are no
        GPU) for the run's metadata; the last name given wins, as in a
        trace viewer."""
        labels = {p: given for name, p, _, given in self.metadata if name == "process_labels"}
        process_name = None
        threads: dict[str, Any] = {}
        for name, p, tid, given in self.metadata:
            if name == "process_name" and p == pid and pid is not None:
                process_name = given
            elif name == "thread_name" and isinstance(given, str) and tid is not None:
                label = labels.get(p)
                if isinstance(label, str) and label.startswith("GPU"):
                    continue  # a GPU's streams: `stream 7`
                match = _THREAD_NAME.match(given)
                threads[str(tid)] = match["name"] if match else given
        found: dict[str, Any] = {}
        if process_name is not None:
            found["process_name"] = process_name
        if threads:
            found["thread_names"] = threads
        return found


def _memory_columns(events: list[Any]) -> dict[str, pa.Array]:
    args = list(map(_ARGS, events))
    if not all(args):  # a truth test per struct (`None in` would compare each)
        args = [a if a is not None else _NO_ARGS for a in args]
    alloc, allocated, reserved, addr, device_id, device_type = (list(map(field, args)) for field in _ARG_FIELDS)
    device = int_array(device_id, pa.int32())
    # The CPU's allocator events say device -1: no device.
    device = pc.if_else(pc.less(device, 0), pa.scalar(None, pa.int32()), device)
    return {
        "pid": int_array(list(map(_PID, events))),
        "tid": int_array(list(map(_TID, events))),
        "name": str_array(list(map(_NAME, events))),
        "ts_ns": times_to_ns(list(map(_TS, events))),
        "device_type": pa.array(list(map(device_type_name, int_array(device_type).to_pylist())), pa.string()),
        "device": device,
        "addr": int_array(addr),
        "bytes": int_array(alloc),
        "total_allocated_bytes": int_array(allocated),
        "total_reserved_bytes": int_array(reserved),
    }


@functools.cache
def device_type_name(code: int | None) -> str | None:
    """PyTorch's name of a `Device Type` number (`DEVICE_TYPES`)."""
    if code is None:
        return None
    return DEVICE_TYPES.get(code, f"device type {code}")
