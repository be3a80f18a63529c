"""Kineto events → contract columns, one batch at a time.

`Accumulator.add(batch)` routes a batch of decoded events to their tables
(`kineto_schema.EVENT_TABLES`), turns each table's events into Arrow
columns at once, and keeps only the few events the collectives need later
(communication kernels, `record_param_comms` ops, `nccl:` ranges). Rows
keep file order. Times stay the microseconds read, relative to the trace's
`ts` origin, until `result()` turns each table's into nanoseconds at once
and adds the epoch offset, known only once the whole trace is read.

The work per event is done by C loops (`map` over attribute getters,
`pa.array`, numpy for routing), never a Python loop over all events: one
such loop costs as much as building several columns. A piece the compiled
scanner read (`kineto_native.ScannedPiece`) arrives as columns already,
and `add` builds the same tables from those with numpy and Arrow alone.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, Callable

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.ingest.arrays import add_or_null, int_array, str_array, us_to_ns
from collector.ingest import kineto_native
from collector.ingest.categories import CATEGORIES, COMMUNICATION, MEMORY, categorise
from collector.ingest.kineto_collectives import EventRows
from collector.ingest.kineto_stream import decode_events
from collector.ingest.kineto_schema import (
    BULK_SKIPPED,
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
_TABLE_CODES = {cat: TABLES.index(table) for cat, (table, kind) in EVENT_TABLES.items()}
_UNROUTED = -1
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
        self.events = 0
        self._categories = _memo(_CATEGORIES)
        self._dims = _memo(_DIMS)

    def add(self, batch: list[KinetoEvent] | kineto_native.ScannedPiece) -> None:
        if isinstance(batch, kineto_native.ScannedPiece):
            tables = _PieceReader(self, batch).tables()
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

    def _add_tables(self, piece: kineto_native.ScannedPiece, tables: _PieceTables) -> None:
        self.events += piece.events
        self.skipped.update(tables.skipped)
        for table, (columns, kept) in tables.columns.items():
            offset = self.rows[table]
            for index, event in kept.items():
                self.kept[table][offset + index] = event
            self.parts[table].append(columns)
            self.rows[table] += len(columns["ts_us"])

    def compact(self) -> None:
        """Each table's columns as one array each, not one per batch."""
        for table, parts in self.parts.items():
            if len(parts) > 1:
                self.parts[table] = [{name: _concat([part[name] for part in parts]) for name in parts[0]}]

    def merge(self, later: Accumulator) -> None:
        """Append what `later` read from the events after this one's."""
        for table in TABLES:
            offset = self.rows[table]
            self.kept[table].update((offset + index, event) for index, event in later.kept[table].items())
            self.parts[table].extend(later.parts[table])
            self.rows[table] += later.rows[table]
        self.skipped.update(later.skipped)
        self.events += later.events

    def _route(self, batch: list[KinetoEvent]) -> dict[str, list[KinetoEvent]]:
        """The batch's events by table, in file order; the rest counted.

        One table code per event (a dict lookup, mapped in C), then each
        table's events picked by position: no Python loop over the events.
        """
        cats = list(map(_CAT, batch))
        codes = np.fromiter(map(_TABLE_CODES.get, cats, repeat(_UNROUTED)), np.int8, len(cats))
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
            events = _pick(batch, np.flatnonzero(codes == code).tolist())
            phases = list(map(_PH, events))
            complete = phases.count("X")
            if complete != len(phases):
                # Only complete events (`ph: X`) have an interval.
                self.skipped[f"{table}: ph other than X"] += len(phases) - complete
                events = [event for event, phase in zip(events, phases) if phase == "X"]
            routed[table] = events
        return routed

    def result(self, table: str, offset_ns: int) -> EventRows:
        """The table's columns, times moved by `offset_ns`, and its kept events."""
        parts = self.parts[table]
        if not parts:
            return EventRows({}, {})
        columns = {name: _concat([part[name] for part in parts]) for name in parts[0]}
        start = us_to_ns(columns.pop("ts_us"))
        columns["dur_ns"] = us_to_ns(columns.pop("dur_us"))
        if offset_ns:
            start = add_or_null(start, offset_ns)
        columns["start_ns"] = start
        columns["end_ns"] = add_or_null(start, columns["dur_ns"])
        return EventRows(columns, self.kept[table])

    def first_ts_ns(self) -> int | None:
        """The earliest relative kernel start (which clock the trace uses)."""
        parts = self.parts["kernels"]
        if not parts:
            return None
        return pc.min(us_to_ns(_concat([part["ts_us"] for part in parts]))).as_py()

    # --- per-table column builders (the raw → contract mapping) ------------------

    def _times(self, events: list[KinetoEvent]) -> dict[str, pa.Array]:
        # Microseconds as read; `result` converts a whole table at once
        # (per batch, the conversion's calls would cost more than its work).
        return {"ts_us": pa.array(list(map(_TS, events)), pa.float64()),
                "dur_us": pa.array(list(map(_DUR, events)), pa.float64())}

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
                value = msgspec.json.decode(key) if key else None
                memo[key] = None if value is None else repr(value) if isinstance(value, list) else str(value)
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


def _pick(batch: list[KinetoEvent], positions: list[int]) -> list[KinetoEvent]:
    """The events at `positions`, in order."""
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


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


# --- tables from a scanned piece's columns (the compiled fast path) ------------

# Per scanner code (offset by 2: CAT_OTHER, CAT_MISSING, then `CATS`), the
# table's index in TABLES, -1 where the events are skipped.
_SCANNED_TABLE = np.array([-1, -1, *(max(_TABLE_CODES[cat], -1) for cat in kineto_native.CATS)], np.int8)
_SCANNED_KINDS = (None, None, *(_KINDS.get(cat) for cat in kineto_native.CATS))
_MEMORY_KINDS = np.array([False, False, *(_KINDS.get(cat) in ("memcpy", "memset") for cat in kineto_native.CATS)])
_USER_ANNOTATION = 2 + kineto_native.CATS.index("user_annotation")
_INT32 = (-(1 << 31), (1 << 31) - 1)


class _PieceTables:
    """What a scanned piece adds: per table its columns and kept events."""

    def __init__(self) -> None:
        self.columns: dict[str, tuple[dict[str, pa.Array], dict[int, KinetoEvent]]] = {}
        self.skipped: Counter[str] = Counter()


class _PieceReader:
    """One scanned piece's tables, the same as `Accumulator._route` and the
    per-table builders make from decoded events."""

    def __init__(self, accumulator: Accumulator, piece: kineto_native.ScannedPiece) -> None:
        self.acc = accumulator
        self.piece = piece
        raw = piece.columns
        self.n = piece.events
        self.codes = np.frombuffer(raw["cat"], np.int8).astype(np.intp) + 2
        self.present = np.frombuffer(raw["present"], np.uint16)
        self._names: pa.Array | None = None

    def tables(self) -> _PieceTables | None:
        """None where a table reads an id the scanner could not (see `add`)."""
        out = _PieceTables()
        counts = np.bincount(self.codes, minlength=2 + len(kineto_native.CATS)).tolist()
        if counts[1]:
            out.skipped["(no cat)"] += counts[1]
        out.skipped.update(self.piece.other_cats)
        for cat, count, table in zip(kineto_native.CATS, counts[2:], _SCANNED_TABLE[2:].tolist()):
            if count and table < 0:
                out.skipped[cat] += count
        tables = _SCANNED_TABLE[self.codes]
        complete = np.frombuffer(self.piece.columns["complete"], np.bool_)
        odd = np.frombuffer(self.piece.columns["odd"], np.uint16)
        for code, table in enumerate(TABLES):
            in_table = tables == code
            rows = np.flatnonzero(in_table & complete)
            other_phases = int(np.count_nonzero(in_table)) - len(rows)
            if other_phases:
                out.skipped[f"{table}: ph other than X"] += other_phases
            if not len(rows):
                continue
            if (odd[rows] & _READ_INTS[table]).any():
                return None  # an id the table reads is not an integer: msgspec's path normalises it
            columns, kept_rows = getattr(self, f"_{table}")(rows)
            kept = self._kept(rows, kept_rows)
            if kept is None:
                return None
            out.columns[table] = (columns, kept)
        return out

    # --- columns ----------------------------------------------------------------

    def _has(self, bit: int, rows: np.ndarray) -> np.ndarray:
        return (self.present[rows] & bit) != 0

    def _raw(self, key: str, dtype: type) -> np.ndarray:
        return np.frombuffer(self.piece.columns[key], dtype)

    def _ints(self, key: str, bit: int, rows: np.ndarray) -> pa.Array:
        return _masked(self._raw(key, np.int64)[rows], self._has(bit, rows), pa.int64())

    def _times(self, rows: np.ndarray) -> dict[str, pa.Array]:
        return {"ts_us": _masked(self._raw("ts", np.float64)[rows], self._has(kineto_native.TS, rows), pa.float64()),
                "dur_us": _masked(self._raw("dur", np.float64)[rows], self._has(kineto_native.DUR, rows), pa.float64())}

    def _strings(self, key: str, bit: int) -> pa.Array:
        raw = self.piece.columns
        valid = (self.present & bit) != 0
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.StringArray.from_buffers(self.n, pa.py_buffer(raw[f"{key}_offsets"]), pa.py_buffer(raw[f"{key}_data"]), bitmap)

    def _name(self, rows: np.ndarray) -> pa.Array:
        if self._names is None:
            self._names = self._strings("name", kineto_native.NAME)
        return self._names.take(_numeric(rows, pa.int64()))

    def _host(self, rows: np.ndarray) -> dict[str, pa.Array]:
        return {
            "pid": self._ints("pid", kineto_native.PID, rows),
            "tid": self._ints("tid", kineto_native.TID, rows),
            "name": self._name(rows),
            **self._times(rows),
        }

    def _own_or_event(self, key: str, bit: int, fallback: str, fallback_bit: int, rows: np.ndarray,
                      bounds: tuple[int, int] | None = None) -> np.ndarray | pa.Array:
        """An arg's integers, the event's own field where the arg is absent
        (as `_int_or_event`); values beyond `bounds` are NULL."""
        own = self._has(bit, rows)
        values = np.where(own, self._raw(key, np.int64)[rows], self._raw(fallback, np.int64)[rows])
        valid = own | (~own & self._has(fallback_bit, rows))
        if bounds is not None:
            valid &= (values >= bounds[0]) & (values <= bounds[1])
            return _masked(values.astype(np.int32), valid, pa.int32())
        return _masked(values, valid, pa.int64())

    def _kernels(self, rows: np.ndarray) -> tuple[dict[str, pa.Array], np.ndarray]:
        codes = self.codes[rows]
        names = self._name(rows)
        category = self._categories(names, codes, self._has(kineto_native.COLLECTIVE, rows))
        columns = {
            "device": self._own_or_event("device", kineto_native.DEVICE, "pid", kineto_native.PID, rows, _INT32),
            "stream": self._own_or_event("stream", kineto_native.STREAM, "tid", kineto_native.TID, rows),
            "name": names,
            "category": _texts(CATEGORIES).take(_numeric(category, pa.int8())),
            "kind": _texts(_SCANNED_KINDS).take(_numeric(codes, pa.int64())),
            **self._times(rows),
            "correlation_id": self._ints("correlation", kineto_native.CORRELATION, rows),
            "external_id": self._ints("external_id", kineto_native.EXTERNAL, rows),
            "grid": self._dims("grid", kineto_native.GRID, rows),
            "block": self._dims("block", kineto_native.BLOCK, rows),
            "bytes": self._ints("bytes", kineto_native.BYTES, rows),
        }
        return columns, np.flatnonzero(category == _COMMUNICATION_CODE)

    def _api_calls(self, rows: np.ndarray) -> tuple[dict[str, pa.Array], np.ndarray]:
        return {
            **self._host(rows),
            "correlation_id": self._ints("correlation", kineto_native.CORRELATION, rows),
            "external_id": self._ints("external_id", kineto_native.EXTERNAL, rows),
        }, _NONE

    def _cpu_ops(self, rows: np.ndarray) -> tuple[dict[str, pa.Array], np.ndarray]:
        columns = {**self._host(rows), "external_id": self._ints("external_id", kineto_native.EXTERNAL, rows)}
        return columns, _true_rows(pc.equal(columns["name"], PARAM_COMMS_OP))

    def _annotations(self, rows: np.ndarray) -> tuple[dict[str, pa.Array], np.ndarray]:
        columns = self._host(rows)
        # Few rows (steps and user ranges): read as the decoded path does.
        kinds: list[str | None] = []
        steps: list[int | None] = []
        user = self.codes[rows] == _USER_ANNOTATION
        for name, is_user in zip(columns["name"].to_pylist(), user.tolist()):
            kind, step = ("user" if is_user else "gpu_user"), None
            if is_user and name is not None:
                match = _PROFILER_STEP.match(name)
                if match:
                    kind, step = "profiler_step", int(match.group(1))
            kinds.append(kind)
            steps.append(step)
        columns["kind"] = pa.array(kinds, pa.string())
        columns["step"] = pa.array(steps, pa.int64())
        ranges = pc.starts_with(pc.fill_null(columns["name"], ""), COLLECTIVE_ANNOTATION_PREFIX).to_numpy(zero_copy_only=False)
        return columns, np.flatnonzero(ranges & user)

    def _categories(self, names: pa.Array, codes: np.ndarray, collective: np.ndarray) -> np.ndarray:
        """Category codes (index in CATEGORIES): one `categorise` per distinct
        name, memcpy/memset by their kind, collective args communication."""
        encoded = names.dictionary_encode()
        memo = self.acc._categories
        distinct = encoded.dictionary.to_pylist()
        for name in set(distinct).difference(memo):
            memo[name] = categorise(name, "kernel")
        # A kernel without a name is categorised by the text "None", as str(None).
        by_name = np.array([*(_CATEGORY_CODE[memo[name]] for name in distinct),
                            _CATEGORY_CODE[categorise("None", "kernel")]], np.int8)
        indices = pc.fill_null(encoded.indices, len(distinct)).to_numpy()
        category = by_name[indices]
        category[collective] = _COMMUNICATION_CODE
        category[_MEMORY_KINDS[codes]] = _MEMORY_CODE
        return category

    def _dims(self, key: str, bit: int, rows: np.ndarray) -> pa.Array:
        """Launch dimensions as `Accumulator._dims_texts` writes them (an
        absent arg is empty text, which the memo maps to NULL)."""
        raw = self.piece.columns
        if not self._has(bit, rows).any():
            return pa.nulls(len(rows), pa.string())
        buffers = [None, pa.py_buffer(raw[f"{key}_offsets"]), pa.py_buffer(raw[f"{key}_data"])]
        texts = pa.Array.from_buffers(pa.binary(), self.n, buffers).take(_numeric(rows, pa.int64()))
        encoded = texts.dictionary_encode()
        memo = self.acc._dims
        distinct = encoded.dictionary.to_pylist()
        for key_bytes in set(distinct).difference(memo):
            value = msgspec.json.decode(key_bytes) if key_bytes else None
            memo[key_bytes] = None if value is None else repr(value) if isinstance(value, list) else str(value)
        values = pa.array([memo[text] for text in distinct], pa.string())
        return values.take(encoded.indices)

    # --- kept events ------------------------------------------------------------

    def _kept(self, rows: np.ndarray, kept_rows: np.ndarray) -> dict[int, KinetoEvent] | None:
        """The kept rows' events, decoded in full by msgspec from their spans."""
        if not len(kept_rows):
            return {}
        starts = self._raw("span_start", np.int64)[rows[kept_rows]].tolist()
        ends = self._raw("span_end", np.int64)[rows[kept_rows]].tolist()
        data = self.piece.data
        text = b"".join((b"[", b",".join(data[start:end] for start, end in zip(starts, ends)), b"]"))
        try:
            events = decode_events(text)
        except msgspec.DecodeError:
            return None
        return dict(zip(kept_rows.tolist(), events))


# The integer fields each table reads (bits of the scanner's `present`).
_READ_INTS = {
    "kernels": kineto_native.PID | kineto_native.TID | kineto_native.DEVICE | kineto_native.STREAM
    | kineto_native.CORRELATION | kineto_native.EXTERNAL | kineto_native.BYTES,
    "api_calls": kineto_native.PID | kineto_native.TID | kineto_native.CORRELATION | kineto_native.EXTERNAL,
    "cpu_ops": kineto_native.PID | kineto_native.TID | kineto_native.EXTERNAL,
    "annotations": kineto_native.PID | kineto_native.TID,
}
_NUMPY = {pa.int8(): np.int8, pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}
_CATEGORY_CODE = {name: code for code, name in enumerate(CATEGORIES)}
_COMMUNICATION_CODE = _CATEGORY_CODE[COMMUNICATION]
_MEMORY_CODE = _CATEGORY_CODE[MEMORY]
_NONE = np.array([], np.intp)


def _masked(values: np.ndarray, valid: np.ndarray, type: pa.DataType) -> pa.Array:
    """`values` (of `type`'s width) where `valid`, else NULL, from their
    buffers (as `_numeric`)."""
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type, len(values), [bitmap, pa.py_buffer(np.ascontiguousarray(values, dtype=_NUMPY[type]))])


@cache
def _texts(values: tuple[str | None, ...] | list[str | None]) -> pa.Array:
    """A constant string array, made on first use: `pa.array` at import
    would import pandas before `gpulens ingest` can refuse it (no_pandas)."""
    return pa.array(list(values), pa.string())


def _numeric(values: np.ndarray, type: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array of `type`, sharing its buffer."""
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(np.ascontiguousarray(values, dtype=_NUMPY[type]))])


def _true_rows(mask: pa.Array) -> np.ndarray:
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
