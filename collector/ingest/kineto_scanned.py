"""Kineto tables from a piece the compiled scanner read (`kineto_native`).

The scanner gives one row per event of the piece, column by column: its
category code, its phase (`ph`), its times, ids, name and launch
dimensions, and where it lies in the text; and an instant's allocator
args. `scanned_tables`
routes those rows to their tables and builds each table's columns with
numpy and Arrow, the same columns `kineto_columns.Accumulator` builds from
events msgspec decoded (the tests compare both on every trace at hand).
The few events the collectives need (communication kernels,
`record_param_comms` ops, `nccl:` ranges), and the instants and metadata
events (`kineto_marks`), are decoded in full by msgspec from their spans.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import msgspec
import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest import kineto_native
from gpulens.collector.ingest.categories import CATEGORIES, COMMUNICATION, MEMORY, categorise
from gpulens.collector.ingest.kineto_schema import (
    COLLECTIVE_ANNOTATION_PREFIX,
    EVENT_KINDS,
    EVENT_TABLES,
    MARK_PHASES,
    PARAM_COMMS_OP,
    TABLES,
    KinetoEvent,
    annotation_kind,
    launch_dims_text,
)
from gpulens.collector.ingest.kineto_marks import MEMORY_EVENT_NAMES, device_type_name
from gpulens.collector.ingest.kineto_stream import decode_events

# Per scanner code (offset by 2: CAT_OTHER, CAT_MISSING, then `CATS`), the
# table's index in TABLES, -1 where the events are skipped.
_SCANNED_TABLE = np.array([-1, -1, *(TABLES.index(EVENT_TABLES[cat][0]) if cat in EVENT_TABLES else -1
                                      for cat in kineto_native.CATS)], np.int8)
_SCANNED_KINDS = (None, None, *(EVENT_KINDS.get(cat) for cat in kineto_native.CATS))
_MEMORY_KINDS = np.array([False, False, *(EVENT_KINDS.get(cat) in ("memcpy", "memset") for cat in kineto_native.CATS)])
_USER_ANNOTATION = 2 + kineto_native.CATS.index("user_annotation")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_COMPLETE = ord("X")
# Bits of the scanner's `instant_present` (`I_*` in `_kineto_scan.c`).
_I_ALLOC, _I_TOTAL_ALLOCATED, _I_TOTAL_RESERVED, _I_ADDR, _I_DEVICE_ID, _I_DEVICE_TYPE = (1 << bit for bit in range(6))
_MARK_PHASES = np.array([ord(phase) for phase in MARK_PHASES], np.uint8)


class PieceTables:
    """What a scanned piece adds: per table its columns and kept events;
    its instants and metadata events, decoded."""

    def __init__(self) -> None:
        self.columns: dict[str, tuple[dict[str, pa.Array], dict[int, KinetoEvent]]] = {}
        self.skipped: Counter[str] = Counter()
        self.marks: list[KinetoEvent] = []
        # memory_events' columns (`kineto_marks.Marks.memory_columns`), where
        # the piece's allocator events were read from the scanner's columns.
        self.memory: dict[str, pa.Array] = {}


def scanned_tables(piece: kineto_native.ScannedPiece, categories: dict[str, str],
                   dims: dict[bytes, str | None]) -> PieceTables | None:
    """The piece's rows by table, with the skipped events counted; None
    where a table reads an id the scanner could not read as an integer
    (written as text): msgspec's path normalises it, so the caller decodes
    the piece that way. `categories` and `dims` are the process's memos of
    kernel names' categories and launch dimensions' texts."""
    return _PieceReader(piece, categories, dims).tables()


class _PieceReader:
    """One scanned piece's tables, the same as `Accumulator._route` and the
    per-table builders make from decoded events."""

    def __init__(self, piece: kineto_native.ScannedPiece, categories: dict[str, str],
                 dims: dict[bytes, str | None]) -> None:
        self.categories = categories
        self.dims = dims
        self.piece = piece
        raw = piece.columns
        self.n = piece.events
        self.codes = np.frombuffer(raw["cat"], np.int8).astype(np.intp) + 2
        self.present = np.frombuffer(raw["present"], np.uint16)
        self._names: pa.Array | None = None

    def tables(self) -> PieceTables | None:
        out = PieceTables()
        phase = np.frombuffer(self.piece.columns["phase"], np.uint8)
        marks = np.isin(phase, _MARK_PHASES)
        if marks.any() and not self._marks(marks, out):
            return None
        # Instants and metadata events are read (by `kineto_marks`), not
        # skipped (nor among the scanner's `other_cats`).
        counts = np.bincount(self.codes[~marks], minlength=2 + len(kineto_native.CATS)).tolist()
        if counts[1]:
            out.skipped["(no cat)"] += counts[1]
        out.skipped.update(self.piece.other_cats)
        for cat, count, table in zip(kineto_native.CATS, counts[2:], _SCANNED_TABLE[2:].tolist()):
            if count and table < 0:
                out.skipped[cat] += count
        tables = _SCANNED_TABLE[self.codes]
        complete = phase == _COMPLETE
        odd = np.frombuffer(self.piece.columns["odd"], np.uint16)
        for code, table in enumerate(TABLES):
            in_table = (tables == code) & ~marks
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

    def _time(self, key: str, bit: int, rows: np.ndarray) -> pa.Array:
        """Nanoseconds, which the scanner read from the decimal text exactly."""
        return _masked(self._raw(key, np.int64)[rows], self._has(bit, rows), pa.int64())

    def _times(self, rows: np.ndarray) -> dict[str, pa.Array]:
        return {"ts_ns": self._time("ts", kineto_native.TS, rows), "dur_ns": self._time("dur", kineto_native.DUR, rows)}

    def _strings(self, key: str, bit: int) -> pa.Array:
        raw = self.piece.columns
        valid = (self.present & bit) != 0
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.StringArray.from_buffers(self.n, pa.py_buffer(raw[f"{key}_offsets"]), pa.py_buffer(raw[f"{key}_data"]), bitmap)

    def _name(self, rows: np.ndarray) -> pa.Array:
        if self._names is None:
            self._names = self._strings("name", kineto_native.NAME)
        return pc.take(self._names, _numeric(rows, pa.int64()))

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
            "category": pc.take(_texts(CATEGORIES), _numeric(category, pa.int8())),
            "kind": pc.take(_texts(_SCANNED_KINDS), _numeric(codes, pa.int64())),
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
        user = self.codes[rows] == _USER_ANNOTATION
        kinds, steps = zip(*(annotation_kind("user" if is_user else "gpu_user", name)
                             for name, is_user in zip(columns["name"].to_pylist(), user.tolist())))
        columns["kind"] = pa.array(kinds, pa.string())
        columns["step"] = pa.array(steps, pa.int64())
        ranges = pc.starts_with(pc.fill_null(columns["name"], ""), COLLECTIVE_ANNOTATION_PREFIX).to_numpy(zero_copy_only=False)
        return columns, np.flatnonzero(ranges & user)

    def _categories(self, names: pa.Array, codes: np.ndarray, collective: np.ndarray) -> np.ndarray:
        """Category codes (index in CATEGORIES): one `categorise` per distinct
        name, memcpy/memset by their kind, collective args communication."""
        encoded = pc.dictionary_encode(names)
        memo = self.categories
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
        """Launch dimensions as text (`launch_dims_text`; an absent arg is
        empty text, which it maps to NULL)."""
        raw = self.piece.columns
        if not self._has(bit, rows).any():
            return pa.nulls(len(rows), pa.string())
        buffers = [None, pa.py_buffer(raw[f"{key}_offsets"]), pa.py_buffer(raw[f"{key}_data"])]
        texts = pc.take(pa.Array.from_buffers(pa.binary(), self.n, buffers), _numeric(rows, pa.int64()))
        encoded = pc.dictionary_encode(texts)
        memo = self.dims
        distinct = encoded.dictionary.to_pylist()
        for text in set(distinct).difference(memo):
            memo[text] = launch_dims_text(text)
        values = pa.array([memo[text] for text in distinct], pa.string())
        return pc.take(values, encoded.indices)

    # --- instants and metadata events ------------------------------------------

    def _marks(self, marks: np.ndarray, out: PieceTables) -> bool:
        """Fill `out.memory` with the piece's allocator events, from the
        scanner's columns, and `out.marks` with the other instants and the
        metadata events, decoded by msgspec (all of them where an allocator
        event has a value the scanner could not read as an integer); False
        where msgspec refuses them."""
        raw = self.piece.columns
        instant_rows = self._raw("instant_row", np.int64)
        names = self._name(instant_rows)
        allocator = pc.fill_null(pc.is_in(names, _texts(MEMORY_EVENT_NAMES)), False).to_numpy(zero_copy_only=False)
        instant_odd = np.frombuffer(raw["instant_odd"], np.uint8)
        odd = np.frombuffer(raw["odd"], np.uint16)[instant_rows] & (kineto_native.PID | kineto_native.TID)
        from_columns = allocator.any() and not (instant_odd[allocator].any() or odd[allocator].any())
        decode = marks.copy()
        if from_columns:
            decode[instant_rows[allocator]] = False
            out.memory = self._memory(instant_rows[allocator], pc.filter(names, pa.array(allocator)), allocator)
        if decode.any():
            decoded = self._decoded(np.flatnonzero(decode))
            if decoded is None:
                return False
            out.marks = decoded
        return True

    def _memory(self, rows: np.ndarray, names: pa.Array, allocator: np.ndarray) -> dict[str, pa.Array]:
        """memory_events' columns of the allocator events at `rows` (their
        instants: `allocator`), as `kineto_marks` builds them."""
        present = np.frombuffer(self.piece.columns["instant_present"], np.uint8)[allocator]

        def arg(key: str, bit: int) -> tuple[np.ndarray, np.ndarray]:
            return self._raw(f"instant_{key}", np.int64)[allocator], (present & bit) != 0

        device_id, has_device = arg("device_id", _I_DEVICE_ID)
        # NULL beyond int32 (as int_array) and for the CPU's -1.
        has_device &= (device_id >= 0) & (device_id <= _INT32[1])
        types, has_type = arg("device_type", _I_DEVICE_TYPE)
        distinct, which = np.unique(types, return_inverse=True)
        labels = pa.array([device_type_name(code) for code in distinct.tolist()], pa.string())
        return {
            "pid": self._ints("pid", kineto_native.PID, rows),
            "tid": self._ints("tid", kineto_native.TID, rows),
            "name": names,
            "ts_ns": self._time("ts", kineto_native.TS, rows),
            "device_type": pc.take(labels, _masked(which.reshape(-1), has_type, pa.int64())),
            "device": _masked(device_id.astype(np.int32), has_device, pa.int32()),
            "addr": _masked(*arg("addr", _I_ADDR), pa.int64()),
            "bytes": _masked(*arg("alloc", _I_ALLOC), pa.int64()),
            "total_allocated_bytes": _masked(*arg("total_allocated", _I_TOTAL_ALLOCATED), pa.int64()),
            "total_reserved_bytes": _masked(*arg("total_reserved", _I_TOTAL_RESERVED), pa.int64()),
        }

    # --- kept events ------------------------------------------------------------

    def _kept(self, rows: np.ndarray, kept_rows: np.ndarray) -> dict[int, KinetoEvent] | None:
        """The kept rows' events, decoded in full by msgspec from their spans."""
        if not len(kept_rows):
            return {}
        events = self._decoded(rows[kept_rows])
        return None if events is None else dict(zip(kept_rows.tolist(), events))

    def _decoded(self, rows: np.ndarray) -> list[KinetoEvent] | None:
        """The events of `rows`, decoded by msgspec from their spans, as a
        batch of them alone would be; None where msgspec refuses them."""
        starts = self._raw("span_start", np.int64)[rows].tolist()
        ends = self._raw("span_end", np.int64)[rows].tolist()
        data = self.piece.data
        text = b"".join((b"[", b",".join(data[start:end] for start, end in zip(starts, ends)), b"]"))
        try:
            return decode_events(text)
        except msgspec.DecodeError:
            return None


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
    """A constant string array, made on first use, not at import."""
    return pa.array(list(values), pa.string())


def _numeric(values: np.ndarray, type: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array of `type`, sharing its buffer."""
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(np.ascontiguousarray(values, dtype=_NUMPY[type]))])


def _true_rows(mask: pa.Array) -> np.ndarray:
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
