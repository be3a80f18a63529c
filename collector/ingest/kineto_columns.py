"""Kineto events → contract columns, one batch at a time.

`Accumulator.add(batch)` routes a batch of decoded events to their tables
(`kineto_schema.EVENT_TABLES`), turns each table's events into Arrow
columns at once, and keeps only the few events the collectives need later
(communication kernels, `record_param_comms` ops, `nccl:` ranges). Rows
keep file order. Times become int64 nanoseconds as each batch is read
(exactly: `arrays.times_to_ns`), relative to the trace's `ts` origin, until
`result()` adds the epoch offset, known only once the whole trace is read.

The work per event is done by C loops (`map` over attribute getters,
`pa.array`, numpy for routing), never a Python loop over all events: one
such loop costs as much as building several columns. A piece the compiled
scanner read (`kineto_native.ScannedPiece`) arrives as columns already;
`add` hands it to `kineto_scanned`, which builds the same tables from
them.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, Callable

import msgspec
import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.arrays import add_or_null, int_array, str_array, times_to_ns
from gpulens.collector.ingest import kineto_native
from gpulens.collector.ingest.categories import COMMUNICATION, categorise
from gpulens.collector.ingest.kineto_collectives import EventRows
from gpulens.collector.ingest.kineto_marks import Marks
from gpulens.collector.ingest.kineto_scanned import PieceTables, scanned_tables
from gpulens.collector.ingest.kineto_stream import decode_events
from gpulens.collector.ingest.kineto_schema import (
    BULK_SKIPPED,
    COLLECTIVE_ANNOTATION_PREFIX,
    EVENT_KINDS,
    EVENT_TABLES,
    MARK_PHASES,
    NO_ARGS,
    PARAM_COMMS_OP,
    TABLES,
    KinetoArgs,
    KinetoEvent,
    annotation_kind,
    launch_dims_text,
)

_CAT, _PH, _NAME, _PID, _TID, _TS, _DUR, _ARGS = map(
    attrgetter, ("cat", "ph", "name", "pid", "tid", "ts", "dur", "args"))
_DEVICE, _STREAM, _CORRELATION, _EXTERNAL, _GRID, _BLOCK, _BYTES, _COLLECTIVE_NAME = map(
    attrgetter, ("device", "stream", "correlation", "external_id", "grid", "block", "bytes", "collective_name"))
_KINDS = EVENT_KINDS
_TABLE_CODES = {cat: TABLES.index(table) for cat, (table, kind) in EVENT_TABLES.items()}
_UNROUTED = -1
# The code of instants and metadata events, which `kineto_marks` reads: no
# table's, nor counted as skipped.
_MARK = 127
_MARK_PHASE = dict.fromkeys(MARK_PHASES, True)
# Categories skipped in bulk are counted by code; other unrouted ones by name.
_TABLE_CODES.update({cat: _UNROUTED - 1 - i for i, cat in enumerate(BULK_SKIPPED)})
# Kernel names' categories and launch dimensions' texts, kept across the
# files one process reads: the ranks of a job launch the same kernels, and
# converting each file's few hundred names again cost a small file 1.5 ms.
_CATEGORIES: dict[str, str] = {}
_DIMS: dict[bytes, str | None] = {}
# Entries a memo keeps at most (a process watching a trace folder lives long).
_MEMO_ENTRIES = 1 << 16


class Accumulator:
    def __init__(self) -> None:
        self.parts: dict[str, list[dict[str, pa.Array]]] = {table: [] for table in TABLES}
        self.rows: dict[str, int] = {table: 0 for table in TABLES}
        self.kept: dict[str, dict[int, KinetoEvent]] = {table: {} for table in TABLES}
        self.skipped: Counter[str] = Counter()
        self.marks = Marks()
        self.events = 0
        self._categories = _memo(_CATEGORIES)
        self._dims = _memo(_DIMS)

    def add(self, batch: list[KinetoEvent] | kineto_native.ScannedPiece) -> None:
        if isinstance(batch, kineto_native.ScannedPiece):
            tables = scanned_tables(batch, self._categories, self._dims)
            if tables is not None:
                self._add_tables(batch, tables)
                return
            # An id a table reads written as text, which msgspec's path
            # normalises: this piece that way.
            batch = decode_events(batch.text())
        self.events += len(batch)
        for table, events in self._route(batch).items():
            if not events:
                continue
            columns = _BUILDERS[table](self, events)
            offset = self.rows[table]
            for index in _KEEP[table](events, columns):
                self.kept[table][offset + index] = _detached(events[index])
            self.parts[table].append(columns)
            self.rows[table] += len(events)

    def _add_tables(self, piece: kineto_native.ScannedPiece, tables: PieceTables) -> None:
        self.events += piece.events
        self.skipped.update(tables.skipped)
        self.marks.add(tables.marks)
        if tables.memory:
            self.marks.add_memory_columns(tables.memory)
        for table, (columns, kept) in tables.columns.items():
            offset = self.rows[table]
            for index, event in kept.items():
                self.kept[table][offset + index] = event
            self.parts[table].append(columns)
            self.rows[table] += len(columns["ts_ns"])

    def compact(self) -> None:
        """Each table's columns as one array each, not one per batch."""
        for table, parts in self.parts.items():
            if len(parts) > 1:
                self.parts[table] = [{name: _concat([part[name] for part in parts]) for name in parts[0]}]
        self.marks.compact()

    def merge(self, later: Accumulator) -> None:
        """Append what `later` read from the events after this one's."""
        for table in TABLES:
            offset = self.rows[table]
            self.kept[table].update((offset + index, event) for index, event in later.kept[table].items())
            self.parts[table].extend(later.parts[table])
            self.rows[table] += later.rows[table]
        self.skipped.update(later.skipped)
        self.marks.merge(later.marks)
        self.events += later.events

    def _route(self, batch: list[KinetoEvent]) -> dict[str, list[KinetoEvent]]:
        """The batch's events by table, in file order; the rest counted.

        One table code per event (a dict lookup, mapped in C), then each
        table's events picked by position: no Python loop over the events.
        Instants and metadata events go to `marks`.
        """
        cats = list(map(_CAT, batch))
        phases = list(map(_PH, batch))
        codes = np.fromiter(map(_TABLE_CODES.get, cats, repeat(_UNROUTED)), np.int8, len(cats))
        marks = np.fromiter(map(_MARK_PHASE.get, phases, repeat(False)), np.bool_, len(cats))
        if marks.any():
            positions = np.flatnonzero(marks)
            self.marks.add(_pick(batch, positions.tolist()))
            codes[positions] = _MARK
        bulk = np.bincount(_UNROUTED - 1 - codes[codes < _UNROUTED], minlength=len(BULK_SKIPPED))
        for cat, count in zip(BULK_SKIPPED, bulk.tolist()):
            if count:
                self.skipped[cat] += count
        unrouted = codes == _UNROUTED
        if unrouted.any():
            for cat, count in Counter(compress(cats, unrouted.tolist())).items():
                self.skipped[cat if cat is not None else "(no cat)"] += count
        routed: dict[str, list[KinetoEvent]] = {}
        for code, table in enumerate(TABLES):
            positions = np.flatnonzero(codes == code).tolist()
            events, table_phases = _pick(batch, positions), _pick(phases, positions)
            complete = table_phases.count("X")
            if complete != len(table_phases):
                # Only complete events (`ph: X`) have an interval.
                self.skipped[f"{table}: ph other than X"] += len(table_phases) - complete
                events = [event for event, phase in zip(events, table_phases) if phase == "X"]
            routed[table] = events
        return routed

    def result(self, table: str, offset_ns: int) -> EventRows:
        """The table's columns, times moved by `offset_ns`, and its kept
        events. Annotations end with the trace's instants (`kineto_marks`)."""
        parts = self.parts[table]
        if table == "annotations" and self.marks.instants:
            parts = [*parts, self.marks.instant_columns()]
        if not parts:
            return EventRows({}, {})
        columns = {name: _concat([part[name] for part in parts]) for name in parts[0]}
        start = _moved(columns.pop("ts_ns"), offset_ns)
        columns["dur_ns"] = columns.pop("dur_ns")  # after the start, in the contract's order
        columns["start_ns"] = start
        columns["end_ns"] = add_or_null(start, columns["dur_ns"])
        return EventRows(columns, self.kept[table])

    def memory_events(self, offset_ns: int) -> dict[str, pa.Array]:
        """memory_events' columns (`kineto_marks`), times moved by `offset_ns`."""
        columns = self.marks.memory_columns()
        if columns:
            columns["ts_ns"] = _moved(columns["ts_ns"], offset_ns)
        return columns

    def first_ts_ns(self) -> int | None:
        """The earliest relative kernel start (which clock the trace uses)."""
        parts = self.parts["kernels"]
        if not parts:
            return None
        return pc.min(_concat([part["ts_ns"] for part in parts])).as_py()

    # --- per-table column builders (the raw → contract mapping) ------------------

    def _times(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        # Nanoseconds from the trace's origin; `result` moves them by its offset.
        return {"ts_ns": times_to_ns(list(map(_TS, events))), "dur_ns": times_to_ns(list(map(_DUR, events)))}

    def _kernels(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        args = _args(events)
        kinds = list(map(_KINDS.__getitem__, map(_CAT, events)))
        names = list(map(_NAME, events))
        return {
            "device": _int_or_event(list(map(_DEVICE, args)), events, _PID, pa.int32()),
            "stream": _int_or_event(list(map(_STREAM, args)), events, _TID, pa.int64()),
            "name": str_array(names),
            "category": pa.array(self._categories_of(names, kinds, args), pa.string()),
            "kind": pa.array(kinds, pa.string()),
            **self._times(events),
            "correlation_id": int_array(list(map(_CORRELATION, args))),
            "external_id": int_array(list(map(_EXTERNAL, args))),
            "grid": pa.array(self._dims_texts(list(map(_GRID, args))), pa.string()),
            "block": pa.array(self._dims_texts(list(map(_BLOCK, args))), pa.string()),
            "bytes": int_array(list(map(_BYTES, args))),
        }

    def _host(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        return {
            "pid": int_array(list(map(_PID, events))),
            "tid": int_array(list(map(_TID, events))),
            "name": str_array(list(map(_NAME, events))),
            **self._times(events),
        }

    def _api_calls(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        args = _args(events)
        return {
            **self._host(events),
            "correlation_id": int_array(list(map(_CORRELATION, args))),
            "external_id": int_array(list(map(_EXTERNAL, args))),
        }

    def _cpu_ops(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        return {**self._host(events), "external_id": int_array(list(map(_EXTERNAL, _args(events))))}

    def _annotations(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        kinds, steps = zip(*(annotation_kind(_KINDS[event.cat], event.name) for event in events))  # type: ignore[index]
        return {**self._host(events), "kind": pa.array(kinds, pa.string()), "step": pa.array(steps, pa.int64())}

    def _categories_of(self, names: list[Any], kinds: list[str], args: list[KinetoArgs]) -> list[str]:
        """One `categorise` call per distinct kernel name; names repeat a lot.
        Memcpy and memset activities are memory by their kind."""
        memo = self._categories
        try:
            categories = list(map(memo.__getitem__, names))
        except (KeyError, TypeError):  # TypeError: an unhashable name (a JSON array or object)
            for name in set(map(str, names)).difference(memo):
                memo[name] = categorise(name, "kernel")
            categories = list(map(memo.__getitem__, map(str, names)))
        if kinds.count("kernel") != len(kinds):
            for i, kind in enumerate(kinds):
                if kind != "kernel":
                    categories[i] = categorise(str(names[i]), kind)
        # Kernels that carry collective args are communication whatever their name.
        collectives = list(map(_COLLECTIVE_NAME, args))
        if collectives.count(None) != len(collectives):
            for i, collective in enumerate(collectives):
                if collective is not None and kinds[i] == "kernel":
                    categories[i] = categorise(str(names[i]), kinds[i], True)
        return categories

    def _dims_texts(self, raws: list[msgspec.Raw]) -> list[str | None]:
        """Launch dimensions as text DuckDB casts to a list: `[8, 1, 1]` (a
        list's repr, which is exactly that); other values with str(). Each
        distinct raw JSON text is converted once."""
        memo = self._dims
        keys = list(map(bytes, raws))
        try:
            return list(map(memo.__getitem__, keys))
        except KeyError:
            for key in set(keys).difference(memo):
                memo[key] = launch_dims_text(key)
            return list(map(memo.__getitem__, keys))


_BUILDERS: dict[str, Callable[[Accumulator, list[KinetoEvent]], dict[str, pa.Array]]] = {
    "kernels": Accumulator._kernels,
    "api_calls": Accumulator._api_calls,
    "cpu_ops": Accumulator._cpu_ops,
    "annotations": Accumulator._annotations,
}


def _memo(memo: dict) -> dict:
    """The process's memo, emptied first where it has grown past its bound."""
    if len(memo) > _MEMO_ENTRIES:
        memo.clear()
    return memo


def _int_or_event(values: list[Any], events: list[KinetoEvent], fallback: attrgetter, type: pa.DataType) -> pa.Array:
    """Integer arg values, with the event's own field where the arg is
    missing (looked for only where the column has nulls)."""
    array = int_array(values, type)
    if array.null_count and None in values:
        array = int_array([v if v is not None else fallback(e) for v, e in zip(values, events)], type)
    return array


def _args(events: list[KinetoEvent]) -> list[KinetoArgs]:
    """Each event's args, `NO_ARGS` where it has none."""
    args = list(map(_ARGS, events))
    # all(): a truth test per struct, where `None in` would call each one's __eq__.
    if not all(args):
        args = [a if a is not None else NO_ARGS for a in args]
    return args


def _pick(batch: list[Any], positions: list[int]) -> list[Any]:
    """The items (events, or their phases) at `positions`, in order."""
    if len(positions) > 1:
        return list(itemgetter(*positions)(batch))
    return [batch[i] for i in positions]


def _indices(mask: pa.Array) -> list[int]:
    return pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()


# Which events of a batch the collectives need later, by table.
_KEEP: dict[str, Callable[[list[KinetoEvent], dict[str, pa.Array]], list[int]]] = {
    "kernels": lambda events, columns: _indices(pc.equal(columns["category"], COMMUNICATION)),
    "api_calls": lambda events, columns: [],
    "cpu_ops": lambda events, columns: _indices(pc.equal(columns["name"], PARAM_COMMS_OP)),
    "annotations": lambda events, columns: [
        i for i, e in enumerate(events)
        # CPU-side ranges only: the GPU copies (`gpu_user_annotation`) sit on streams.
        if e.cat == "user_annotation" and isinstance(e.name, str) and e.name.startswith(COLLECTIVE_ANNOTATION_PREFIX)
    ],
}


def _detached(event: KinetoEvent) -> KinetoEvent:
    """A kept event whose raw fields no longer pin its batch's text."""
    args = event.args
    if args is None:
        return event
    raws = {name: msgspec.Raw(bytes(raw)) for name in _RAW_ARGS if (raw := getattr(args, name))}
    if not raws:
        return event
    return msgspec.structs.replace(event, args=msgspec.structs.replace(args, **raws))


# The args kept as raw JSON (slices of the batch's text).
_RAW_ARGS = tuple(name for name, default in zip(KinetoArgs.__struct_fields__, KinetoArgs.__struct_defaults__)
                  if isinstance(default, msgspec.Raw))


def _moved(nanos: pa.Array, offset_ns: int) -> pa.Array:
    """Nanoseconds from the trace's origin, moved by `offset_ns`."""
    return add_or_null(nanos, offset_ns) if offset_ns else nanos


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
