"""Kineto events → contract columns, one batch at a time.

`Accumulator.add(batch)` routes a batch of decoded events to their tables
(`kineto_schema.EVENT_TABLES`), turns each table's events into Arrow
columns at once, and keeps only the few events the collectives need later
(communication kernels, `record_param_comms` ops, `nccl:` ranges). Rows
keep file order. Times stay relative to the trace's `ts` origin until
`result()` adds the epoch offset, known only once the whole trace is read.
"""

from __future__ import annotations

import re
from collections import Counter
from operator import attrgetter
from typing import Any, Callable

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from collector.ingest.arrays import int_array, str_array, us_to_ns
from collector.ingest.categories import COMMUNICATION, categorise
from collector.ingest.kineto_collectives import EventRows
from collector.ingest.kineto_schema import (
    COLLECTIVE_ANNOTATION_PREFIX,
    EVENT_TABLES,
    NO_ARGS,
    PARAM_COMMS_OP,
    KinetoArgs,
    KinetoEvent,
)

TABLES: tuple[str, ...] = ("kernels", "api_calls", "cpu_ops", "annotations")
_CAT, _PH, _NAME, _PID, _TID, _TS, _DUR, _ARGS = map(
    attrgetter, ("cat", "ph", "name", "pid", "tid", "ts", "dur", "args"))
_DEVICE, _STREAM, _CORRELATION, _EXTERNAL, _GRID, _BLOCK, _BYTES, _COLLECTIVE_NAME = map(
    attrgetter, ("device", "stream", "correlation", "external_id", "grid", "block", "bytes", "collective_name"))
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")
_KINDS = {cat: kind for cat, (table, kind) in EVENT_TABLES.items()}


class Accumulator:
    def __init__(self) -> None:
        self.parts: dict[str, list[dict[str, pa.Array]]] = {table: [] for table in TABLES}
        self.rows: dict[str, int] = {table: 0 for table in TABLES}
        self.kept: dict[str, dict[int, KinetoEvent]] = {table: {} for table in TABLES}
        self.skipped: Counter[str] = Counter()
        self.events = 0
        self._categories: dict[tuple, str] = {}

    def add(self, batch: list[KinetoEvent]) -> None:
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

    def _route(self, batch: list[KinetoEvent]) -> dict[str, list[KinetoEvent]]:
        routed: dict[str, list[KinetoEvent]] = {table: [] for table in TABLES}
        appenders = {cat: routed[table].append for cat, (table, _) in EVENT_TABLES.items()}
        cats = list(map(_CAT, batch))
        for cat, count in Counter(cats).items():
            if cat not in appenders:
                self.skipped[cat if cat is not None else "(no cat)"] += count
        for event, cat in zip(batch, cats):
            append = appenders.get(cat)  # type: ignore[arg-type]
            if append is not None:
                append(event)
        for table, events in routed.items():
            phases = list(map(_PH, events))
            complete = phases.count("X")
            if complete != len(phases):
                # Only complete events (`ph: X`) have an interval.
                self.skipped[f"{table}: ph other than X"] += len(phases) - complete
                routed[table] = [event for event, phase in zip(events, phases) if phase == "X"]
        return routed

    def result(self, table: str, offset_ns: int) -> EventRows:
        """The table's columns, times moved by `offset_ns`, and its kept events."""
        parts = self.parts[table]
        if not parts:
            return EventRows({}, {})
        columns = {name: _concat([part[name] for part in parts]) for name in parts[0]}
        start = columns.pop("start_rel_ns")
        if offset_ns:
            start = pc.add(start, offset_ns)
        columns["start_ns"] = start
        columns["end_ns"] = pc.add(start, columns["dur_ns"])
        return EventRows(columns, self.kept[table])

    def first_ts_ns(self) -> int | None:
        """The earliest relative kernel start (which clock the trace uses)."""
        starts = [pc.min(part["start_rel_ns"]).as_py() for part in self.parts["kernels"]]
        starts = [s for s in starts if s is not None]
        return min(starts) if starts else None

    # --- per-table column builders (the raw → contract mapping) ------------------

    def _times(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        return {"start_rel_ns": us_to_ns(list(map(_TS, events))), "dur_ns": us_to_ns(list(map(_DUR, events)))}

    def _kernels(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        args = [a if a is not None else NO_ARGS for a in map(_ARGS, events)]
        kinds = [_KINDS[cat] for cat in map(_CAT, events)]  # type: ignore[index]
        names = list(map(_NAME, events))
        return {
            "device": int_array(_or_event(list(map(_DEVICE, args)), events, _PID), pa.int32()),
            "stream": int_array(_or_event(list(map(_STREAM, args)), events, _TID)),
            "name": str_array(names),
            "category": pa.array(self._categories_of(names, kinds, args), pa.string()),
            "kind": pa.array(kinds, pa.string()),
            **self._times(events),
            "correlation_id": int_array(list(map(_CORRELATION, args))),
            "external_id": int_array(list(map(_EXTERNAL, args))),
            "grid": pa.array(_dims_texts(list(map(_GRID, args))), pa.string()),
            "block": pa.array(_dims_texts(list(map(_BLOCK, args))), pa.string()),
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
        args = [a if a is not None else NO_ARGS for a in map(_ARGS, events)]
        return {
            **self._host(events),
            "correlation_id": int_array(list(map(_CORRELATION, args))),
            "external_id": int_array(list(map(_EXTERNAL, args))),
        }

    def _cpu_ops(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        external = [(a if a is not None else NO_ARGS).external_id for a in map(_ARGS, events)]
        return {**self._host(events), "external_id": int_array(external)}

    def _annotations(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        kinds: list[str | None] = []
        steps: list[int | None] = []
        for event in events:
            kind, step = _KINDS[event.cat], None  # type: ignore[index]
            if kind == "user" and isinstance(event.name, str):
                match = _PROFILER_STEP.match(event.name)
                if match:
                    kind, step = "profiler_step", int(match.group(1))
            kinds.append(kind)
            steps.append(step)
        return {**self._host(events), "kind": pa.array(kinds, pa.string()), "step": pa.array(steps, pa.int64())}

    def _categories_of(self, names: list[Any], kinds: list[str], args: list[KinetoArgs]) -> list[str]:
        """One `categorise` call per distinct (name, kind); names repeat a lot."""
        memo = self._categories
        for key in set(zip(names, kinds)):
            if key not in memo:
                memo[key] = categorise(str(key[0]), key[1])
        categories = [memo[key] for key in zip(names, kinds)]
        # Kernels that carry collective args are communication whatever their name.
        for i, collective in enumerate(map(_COLLECTIVE_NAME, args)):
            if collective is not None and kinds[i] == "kernel":
                categories[i] = categorise(str(names[i]), kinds[i], True)
        return categories


_BUILDERS: dict[str, Callable[[Accumulator, list[KinetoEvent]], dict[str, pa.Array]]] = {
    "kernels": Accumulator._kernels,
    "api_calls": Accumulator._api_calls,
    "cpu_ops": Accumulator._cpu_ops,
    "annotations": Accumulator._annotations,
}


def _or_event(values: list[Any], events: list[KinetoEvent], fallback: attrgetter) -> list[Any]:
    """Arg values, with the event's own field where the arg is missing."""
    if None in values:
        values = [v if v is not None else fallback(e) for v, e in zip(values, events)]
    return values


def _dims_texts(values: list[Any]) -> list[str | None]:
    """Launch dimensions as text DuckDB casts to a list: `[8, 1, 1]` (a
    list's repr, which is exactly that)."""
    return [None if v is None else repr(v) if isinstance(v, list) else str(v) for v in values]


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
    if args is None or not (args.input_dims or args.input_type):
        return event
    args = msgspec.structs.replace(args, input_dims=msgspec.Raw(bytes(args.input_dims)),
                                   input_type=msgspec.Raw(bytes(args.input_type)))
    return msgspec.structs.replace(event, args=args)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
