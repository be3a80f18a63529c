"""`nvidia-smi --query-gpu=... --format=csv` logs → telemetry rows.

With the header (`power.draw [W]`, values `627.40 W`), with `nounits`
(values `627.40`), or with `noheader` and the field list given as
`columns` (as passed to `--query-gpu`). Fields that no telemetry column
holds are not read. Read by pyarrow's streaming CSV reader, one block at
a time, and converted column by column with Arrow compute functions (no
Python loop over rows): memory does not grow with the log's length.
Where the compiled scanner is built (`nvsmi_native`), a block is read and
converted by it in one pass instead, and a block it does not read takes
the path above; both give the same tables.

Values: `[N/A]`, `[Not Supported]` and any other bracketed answer, `N/A`
and empty cells are NULL; units after a number are dropped (`W`, `%`,
`MiB`, `MHz`, `us`); numbers are locale-free, as nvidia-smi writes them.
`ERR!` (nvidia-smi could not read the value) is NULL, and so is an odd
value (`rows.is_odd`: NaN, infinite, negative, beyond its column); both
are counted in `warnings`. Any other text where a number belongs stops
the import at its line.

Times: `timestamp` is the node's local time without a zone
(`2024/05/01 12:00:00.123`); `timezone` names that zone (default UTC).
nvidia-smi reads the GPUs of one poll one after another, so their
timestamps differ by milliseconds: the rows of one poll all take the
first one's, so that the GPUs of a node share a tick, as the collector's
do (`power_node_ticks` sums a node's power per tick). A poll ends where
the GPU index does not rise or more than POLL_GAP_US passes between rows.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv

from gpulens.collector.errors import ImportSourceError, one_line
from gpulens.collector.imports import nvsmi_native
from gpulens.collector.imports.rows import counted, numbers, odd_mask
from gpulens.collector.schema import TELEMETRY_ENCODED_SCHEMA, TELEMETRY_SCHEMA
from gpulens.collector.throttle import CLOCK_EVENT_REASONS, decode_clock_event_reasons

POLL_GAP_US = 500_000
_MIB = 1 << 20
# Characters trimmed around a number: spaces and the units nvidia-smi writes.
_NUMBER_TRIM = " %WMiBHzus"


@dataclass(frozen=True)
class Field:
    """How one `--query-gpu` field becomes a column: its kind, and the factor
    that turns its unit into the column's."""

    column: str
    kind: str  # float | int | hex | text | timestamp
    scale: float = 1


# --query-gpu field → column, in preference order where several fields
# give one column (the first present in the log wins). nvidia-smi's
# older names (clocks_throttle_reasons.*, clocks.sm) are aliases.
TELEMETRY_FIELDS: dict[str, Field] = {
    "timestamp": Field("ts", "timestamp"),
    "index": Field("gpu_index", "int"),
    "uuid": Field("gpu_uuid", "text"),
    "hostname": Field("host", "text"),
    # Ampere and newer: the 1 s average; older GPUs: instantaneous.
    "power.draw": Field("power_w", "float"),
    "power.draw.average": Field("power_w", "float"),
    "power.draw.instant": Field("power_instant_w", "float"),
    "enforced.power.limit": Field("power_limit_w", "float"),
    "power.limit": Field("power_limit_w", "float"),
    "utilization.gpu": Field("gpu_util_pct", "float"),
    "utilization.memory": Field("mem_util_pct", "float"),
    "clocks.current.sm": Field("sm_clock_mhz", "int"),
    "clocks.sm": Field("sm_clock_mhz", "int"),
    "clocks.current.memory": Field("mem_clock_mhz", "int"),
    "clocks.mem": Field("mem_clock_mhz", "int"),
    "temperature.gpu": Field("temp_c", "float"),
    "temperature.memory": Field("mem_temp_c", "float"),
    "memory.used": Field("mem_used_bytes", "int", _MIB),
    "memory.total": Field("mem_total_bytes", "int", _MIB),
    "clocks_event_reasons.active": Field("throttle_reasons_mask", "hex"),
    "clocks_throttle_reasons.active": Field("throttle_reasons_mask", "hex"),
    # Microseconds the clocks were held below those requested by the power
    # (thermal) capping algorithm: NVML's power (thermal) violation time.
    "clocks_event_reasons_counters.sw_power_cap": Field("power_violation_ns", "int", 1000),
    "clocks_throttle_reasons_counters.sw_power_cap": Field("power_violation_ns", "int", 1000),
    "clocks_event_reasons_counters.sw_thermal_slowdown": Field("thermal_violation_ns", "int", 1000),
    "clocks_throttle_reasons_counters.sw_thermal_slowdown": Field("thermal_violation_ns", "int", 1000),
    "ecc.errors.corrected.volatile.total": Field("ecc_corrected_count", "int"),
    "ecc.errors.uncorrected.volatile.total": Field("ecc_uncorrected_count", "int"),
}

# --query-gpu field → devices column (from each GPU's last row).
DEVICE_FIELDS: dict[str, Field] = {
    "name": Field("model", "text"),
    "pci.bus_id": Field("pci_bus_id", "text"),
    "serial": Field("serial", "text"),
    "driver_version": Field("driver_version", "text"),
    "power.default_limit": Field("power_limit_default_w", "float"),
    "power.min_limit": Field("power_limit_min_w", "float"),
    "power.max_limit": Field("power_limit_max_w", "float"),
    "pcie.link.gen.max": Field("pcie_gen", "int"),
    "pcie.link.width.max": Field("pcie_width", "int"),
}

_TYPES = {name: dtype for name, dtype in zip(TELEMETRY_SCHEMA.names, TELEMETRY_SCHEMA.types)}


@dataclass
class Plan:
    """Which of a log's fields are read, and as what."""

    names: list[str]  # every field of a row, in order
    telemetry: dict[str, str]  # column → the field read for it
    devices: dict[str, str]  # devices column → field
    header_lines: int  # lines before the first row


def field_name(header_cell: str) -> str:
    """`' power.draw [W]'` → `'power.draw'`."""
    return header_cell.split("[", 1)[0].strip()


def plan_for(names: list[str], source: str, header_lines: int) -> Plan:
    telemetry: dict[str, str] = {}
    devices: dict[str, str] = {}
    present = set(names)
    for name, spec in TELEMETRY_FIELDS.items():
        if name in present and spec.column not in telemetry:
            telemetry[spec.column] = name
    for name, spec in DEVICE_FIELDS.items():
        if name in present and spec.column not in devices:
            devices[spec.column] = name
    if "ts" not in telemetry:
        raise ImportSourceError(source, "an nvidia-smi log needs the timestamp field (--query-gpu=timestamp,...)")
    if "gpu_index" not in telemetry and "gpu_uuid" not in telemetry:
        raise ImportSourceError(source, "an nvidia-smi log needs the index or uuid field to tell its GPUs apart")
    return Plan(names, telemetry, devices, header_lines)


def read_plan(path: Path, columns: list[str] | None) -> Plan:
    """The plan of a log: from its header, or from `columns` (noheader)."""
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8-sig", "replace").strip()  # a BOM: nvidia-smi on Windows
    if columns:
        names = [field_name(c) for c in columns]
        header = [field_name(c) for c in first.split(",")]
        # A log with a header given --columns as well: its header is skipped.
        header_lines = 1 if header == names else 0
        return plan_for(names, str(path), header_lines)
    names = [field_name(c) for c in first.split(",")]
    if "timestamp" not in names and not any(n in TELEMETRY_FIELDS for n in names):
        raise ImportSourceError(str(path), "no header line: give the fields with --columns (as passed to --query-gpu)", 1)
    return plan_for(names, str(path), 1)


class _Polls:
    """Assigns each row the timestamp of its poll's first row, across blocks."""

    def __init__(self) -> None:
        self.last_ts: int | None = None
        self.last_index: int | None = None
        self.poll_ts: int | None = None

    def align(self, ts_us: np.ndarray, index: np.ndarray) -> np.ndarray:
        previous_ts = np.empty_like(ts_us)
        previous_index = np.empty_like(index)
        previous_ts[1:], previous_index[1:] = ts_us[:-1], index[:-1]
        first_is_new = self.last_ts is None
        previous_ts[0] = ts_us[0] if first_is_new else self.last_ts
        previous_index[0] = -1 if first_is_new else self.last_index
        starts = (index <= previous_index) | (ts_us - previous_ts > POLL_GAP_US)
        starts[0] |= first_is_new
        poll = np.cumsum(starts)  # 0 for rows that continue the previous block's poll
        start_ts = ts_us[starts]
        carried = np.int64(self.poll_ts if self.poll_ts is not None else ts_us[0])
        aligned = np.where(poll == 0, carried, start_ts[np.maximum(poll - 1, 0)]) if len(start_ts) else \
            np.full_like(ts_us, carried)
        self.last_ts, self.last_index, self.poll_ts = int(ts_us[-1]), int(index[-1]), int(aligned[-1])
        return aligned


class NvidiaSmiReader:
    """Streams a log's rows as telemetry tables; the last row of each GPU
    gives its devices row."""

    block_bytes = 8 << 20

    def __init__(self, path: Path, host: str | None, columns: list[str] | None = None,
                 timezone: str = "UTC") -> None:
        self.path = Path(path)
        self.source = str(path)
        self.host = host
        self.timezone = timezone
        self.plan = read_plan(self.path, columns)
        self._last_rows: dict[tuple[str, int], tuple[pa.Table, pa.Table]] = {}
        self._uuid_index: dict[str, int] = {}
        self._rows_before = 0  # data rows (incl. repeated headers) of earlier blocks
        self._kept_columns: dict[tuple[pa.DataType, int | None], pa.Array] = {}  # `_nulls`, `_constant`
        self._dictionaries: dict[str, pa.Array] = {}  # `_constant`
        self._reason_names: dict[str, int] = {name: code for code, (_, name) in enumerate(CLOCK_EVENT_REASONS)}
        self._reason_dictionary: pa.Array | None = None
        self._scan_plan = _scan_plan(self.plan) if nvsmi_native.available() else None
        # Per column: values nvidia-smi could not read (ERR!), odd values.
        self._unreadable: dict[str, int] = {}
        self._dropped: dict[str, int] = {}

    @property
    def warnings(self) -> list[str]:
        """The values set to NULL, counted: `ERR!`, and odd values."""
        lines = [counted("unreadable value{s} (ERR!) NULL", self._unreadable),
                 counted("odd value{s} dropped", self._dropped)]
        return [line for line in lines if line]

    def tables(self) -> Iterator[pa.Table]:
        """The log's rows as telemetry tables, a block of about
        `block_bytes` at a time: read by the compiled scanner where it is
        built and reads the block, else parsed by pyarrow and converted."""
        polls = _Polls()
        parse = self._parser()
        for block in self._raw_blocks():
            scanned = self._scanned(block, polls)
            if scanned is None:
                parsed = parse(block)
                rows = 0 if parsed is None else parsed.num_rows
                converted = self._convert(parsed, polls) if rows else None
            else:
                converted, rows = scanned
            self._rows_before += rows
            if converted is not None and converted.num_rows:
                yield converted

    def parsed_blocks(self) -> Iterator[pa.Table]:
        """The log's wanted fields as text, a block at a time, parsed by
        pyarrow (the pure path's stage before conversion; the benchmark
        times it alone)."""
        parse = self._parser()
        for block in self._raw_blocks():
            table = parse(block)
            if table is not None and table.num_rows:
                yield table

    def _raw_blocks(self) -> Iterator[memoryview]:
        """The log past its header in blocks of whole lines.

        The blocks are read here and cut at their last newline: pyarrow's
        own streaming CSV reader held more memory the longer the file (0.15
        GB more at 1.4 M rows, outside Arrow's pool), these blocks none."""
        with open(self.path, "rb") as handle:
            for _ in range(self.plan.header_lines):
                handle.readline()
            yield from _blocks(handle, self.block_bytes)

    def _parser(self):
        """A function parsing a block with pyarrow's CSV reader (on several
        threads) to the wanted fields as text; None for blank lines only."""
        plan = self.plan
        wanted = sorted(set(plan.telemetry.values()) | set(plan.devices.values()))
        read_options = csv.ReadOptions(column_names=plan.names)
        # UTF-8 is not checked here (it cost as much as the parsing): a
        # number or time with bytes that are not fails its cast, and the
        # text columns' distinct values are checked in `_values`.
        convert_options = csv.ConvertOptions(include_columns=wanted, column_types={n: pa.string() for n in wanted},
                                             strings_can_be_null=False, check_utf8=False)
        invalid: list[Any] = []

        def on_invalid(row: Any) -> str:
            invalid.append(row)
            return "error"

        parse_options = csv.ParseOptions(invalid_row_handler=on_invalid)

        def parse(block: memoryview) -> pa.Table | None:
            # A ragged row whose bytes are not UTF-8 cannot be handed to
            # `on_invalid` (pyarrow decodes it first): Python would print
            # that failure as "Exception ignored" beside the one line.
            undecodable: list[BaseException] = []
            previous = sys.unraisablehook

            def keep(unraisable: Any) -> None:
                if isinstance(unraisable.exc_value, UnicodeDecodeError):
                    undecodable.append(unraisable.exc_value)
                else:
                    previous(unraisable)

            sys.unraisablehook = keep
            try:
                return csv.read_csv(pa.py_buffer(block), read_options=read_options,
                                    parse_options=parse_options, convert_options=convert_options)
            except pa.ArrowInvalid as error:
                if "Empty CSV" in str(error):  # blank lines only
                    return None
                raise self._parse_error(error, invalid, bool(undecodable)) from error
            finally:
                sys.unraisablehook = previous

        return parse

    def _scanned(self, block: memoryview, polls: _Polls) -> tuple[pa.Table | None, int] | None:
        """A block read by the compiled scanner: its table and rows; None
        where the scanner is not built or does not read it (or its rows
        fail a check: the pure path then says which line)."""
        if self._scan_plan is None:
            return None
        fields, entries = self._scan_plan
        scanned = nvsmi_native.scan(block, len(self.plan.names), entries)
        if scanned is None:
            return None
        n, outputs = scanned
        if n == 0:
            return None, 0
        raw = dict(zip(fields, nvsmi_native.arrays(n, entries, outputs)))
        plan = self.plan
        dropped: dict[str, int] = {}  # counted once the block is read: else the pure path counts them
        try:
            columns: dict[str, pa.Array] = {}
            for column, name in plan.telemetry.items():
                spec = TELEMETRY_FIELDS[name]
                if spec.kind == "hex":
                    columns[column], columns["throttle_reasons"] = self._masks(raw[name], spec, None)
                elif spec.kind == "text":
                    columns[column] = self._values(raw[name], spec, _TYPES[column], None)
                elif column != "ts":
                    # The scanner reads a negative number as the pure path
                    # does: the same odd values are NULL and counted.
                    values = raw[name]
                    odd = odd_mask(spec.column, values, values.type)
                    if odd is not None:
                        dropped[spec.column] = pc.sum(odd.cast(pa.int64())).as_py()
                        values = pc.if_else(odd, pa.scalar(None, values.type), values)
                    columns[column] = values
            device_fields = list(plan.devices.values())

            def device_rows(rows: pa.Array) -> pa.Table:
                return pa.table({name: raw[name].take(rows).dictionary_decode() for name in device_fields})

            table = self._assemble(columns, self._zoned(raw[plan.telemetry["ts"]]), n, None, polls, device_rows)
        except ImportSourceError:
            return None
        for column, count in dropped.items():
            self._dropped[column] = self._dropped.get(column, 0) + count
        return table, n

    # --- conversion --------------------------------------------------------

    def _convert(self, batch: pa.Table, polls: _Polls) -> pa.Table:
        plan = self.plan
        try:
            raw_ts = pc.utf8_trim_whitespace(batch.column(plan.telemetry["ts"]))
        except pa.ArrowInvalid:  # bytes that are not UTF-8
            row = _first_invalid_utf8(batch.column(plan.telemetry["ts"]))
            raise self._row_error(row, None, f"{_cell(batch.column(plan.telemetry['ts']), row)!r} "
                                             "is not a timestamp") from None
        repeated_header = pc.equal(raw_ts, "timestamp")
        if pc.any(repeated_header).as_py():  # a log appended to by a second nvidia-smi
            keep = pc.invert(repeated_header)
            offsets = np.flatnonzero(np.asarray(keep.to_numpy(zero_copy_only=False)))
            batch = batch.filter(keep)
            raw_ts = raw_ts.filter(keep)
        else:
            offsets = None
        n = batch.num_rows
        if n == 0:
            return TELEMETRY_SCHEMA.empty_table()
        columns: dict[str, pa.Array] = {}
        for column, name in plan.telemetry.items():
            if column == "ts":
                continue
            spec = TELEMETRY_FIELDS[name]
            if spec.kind == "hex":
                columns[column], columns["throttle_reasons"] = self._masks(batch.column(name), spec, offsets)
            else:
                columns[column] = self._values(batch.column(name), spec, _TYPES[column], offsets)
        ts = self._timestamps(raw_ts, offsets)
        device_fields = list(plan.devices.values())
        return self._assemble(columns, ts, n, offsets, polls,
                              lambda rows: batch.select(device_fields).take(rows))

    def _assemble(self, columns: dict[str, pa.Array], ts: pa.Array, n: int, offsets: np.ndarray | None,
                  polls: _Polls, device_rows: Any) -> pa.Table:
        """The telemetry table of a block's converted columns (either path);
        `device_rows(rows)` gives the devices fields of those rows as text."""
        if "gpu_index" not in columns:
            columns["gpu_index"] = self._index_from_uuid(columns["gpu_uuid"])
        index = columns["gpu_index"]
        if index.null_count:
            row = int(np.flatnonzero(np.asarray(index.is_null()))[0])
            raise self._row_error(row, offsets, "no GPU index")
        host = self._hosts(columns.pop("host", None), n, offsets)
        ts_us = ts.cast(pa.int64()).to_numpy()
        aligned = polls.align(ts_us, index.to_numpy())
        arrays = []
        for f in TELEMETRY_ENCODED_SCHEMA:
            if f.name == "ts":
                arrays.append(numbers(aligned).cast(f.type))
            elif f.name == "host":
                arrays.append(host)
            elif f.name == "vendor":
                arrays.append(self._constant("nvidia", n))
            elif f.name in columns:
                arrays.append(columns[f.name])
            else:
                arrays.append(self._nulls(f.type, n))
        table = pa.Table.from_arrays(arrays, schema=TELEMETRY_ENCODED_SCHEMA)
        self._note_devices(device_rows, table)
        return table

    def _nulls(self, dtype: pa.DataType, n: int) -> pa.Array:
        """`n` NULLs of `dtype`: a slice of one array kept for every block
        (a fresh one a block and column was memory to zero each time)."""
        return self._kept(dtype, None, n)

    def _constant(self, text: str, n: int) -> pa.DictionaryArray:
        """`n` times `text` (the host, the vendor), dictionary-encoded: code
        0 of the one value, the codes kept as `_nulls` are (a scalar made
        of a Python value costs pyarrow a search for pandas)."""
        dictionary = self._dictionaries.get(text)
        if dictionary is None:
            dictionary = self._dictionaries[text] = pa.array([text], pa.string())
        return pa.DictionaryArray.from_arrays(self._kept(pa.int32(), 0, n), dictionary)

    def _kept(self, dtype: pa.DataType, value: int | None, n: int) -> pa.Array:
        kept = self._kept_columns.get((dtype, value))
        if kept is None or len(kept) < n:
            kept = self._kept_columns[(dtype, value)] = pa.repeat(pa.scalar(value, dtype), n)
        return kept.slice(0, n)

    def _values(self, raw: pa.Array | pa.ChunkedArray, spec: Field, dtype: pa.DataType, offsets: np.ndarray | None,
                count: bool = True) -> pa.Array:
        if spec.kind == "text":
            # A UUID, host or model takes few values: cleaned once each.
            encoded = _dictionary(raw)
            try:
                encoded.dictionary.validate(full=True)
            except pa.ArrowInvalid as error:
                row = _first_row_of(encoded, _first_invalid_utf8(encoded.dictionary))
                raise self._row_error(row, offsets, f"{_cell(raw, row)!r} is not UTF-8 text ({spec.column})") from error
            text = pc.utf8_trim_whitespace(encoded.dictionary)
            cleaned = pc.if_else(_missing(text), pa.scalar(None, pa.string()), text)
            if cleaned.null_count:  # the writer takes no NULL among a dictionary's values
                return pc.take(cleaned, encoded.indices).dictionary_encode()
            return pa.DictionaryArray.from_arrays(encoded.indices, cleaned)
        values = None
        # Spaces trimmed on the left, units on the right only: `inf` keeps
        # its `i`, and `MiB 40` is not a number whether or not the block
        # has a NULL marker too.
        trimmed = pc.ascii_rtrim(pc.ascii_ltrim(raw, " "), _NUMBER_TRIM)
        if spec.scale == 1:
            try:  # the usual column, all numbers: no pass to find NULL markers
                values = pc.cast(trimmed, dtype)
            except pa.ArrowInvalid:
                pass
        if values is None:
            unreadable = pc.equal(trimmed, "ERR!")
            errors = pc.sum(unreadable.cast(pa.int64())).as_py() or 0
            if errors and count:
                self._unreadable[spec.column] = self._unreadable.get(spec.column, 0) + errors
            cleaned = pc.if_else(pc.or_(_missing(trimmed), unreadable), pa.scalar(None, pa.string()), trimmed)
            try:
                values = pc.cast(cleaned, pa.float64())
            except (pa.ArrowInvalid, ValueError) as error:
                row = _first_unparsable(cleaned, spec.kind)
                raise self._row_error(row, offsets, f"{_cell(raw, row).strip()!r} is not a number "
                                                    f"({spec.column})") from error
            if spec.scale != 1:
                values = pc.multiply(values, spec.scale)
        odd = odd_mask(spec.column, values, dtype)
        if odd is not None:
            if count:
                self._dropped[spec.column] = self._dropped.get(spec.column, 0) + pc.sum(odd.cast(pa.int64())).as_py()
            values = pc.if_else(odd, pa.scalar(None, values.type), values)
        if values.type != dtype:
            values = pc.cast(pc.round(values) if pa.types.is_integer(dtype) else values, dtype)
        return values

    def _masks(self, raw: pa.Array | pa.ChunkedArray, spec: Field, offsets: np.ndarray | None) -> tuple[pa.Array, pa.Array]:
        """`0x00000000000001FF` → the mask 511 (int64) and its reasons'
        names. No Arrow kernel parses hex: the few distinct masks of a block
        are parsed once each, and taken for every row."""
        encoded = _dictionary(raw)
        masks: list[int | None] = []
        for value in encoded.dictionary.cast(pa.binary()).to_pylist():
            text = value.decode("utf-8", "replace").strip()
            if _is_missing(text):
                masks.append(None)
                continue
            try:
                mask = int(text, 16)
            except ValueError:
                row = _first_row_of(encoded, len(masks))
                raise self._row_error(row, offsets, f"{text!r} is not a number ({spec.column})") from None
            if not -(1 << 63) <= mask < (1 << 63):  # the column is int64
                row = _first_row_of(encoded, len(masks))
                raise self._row_error(row, offsets, f"{text!r} is out of range ({spec.column})")
            masks.append(mask)
        values = pa.array(masks, type=pa.int64())
        return pc.take(values, encoded.indices), pc.take(self._reason_lists(masks, values.is_null()), encoded.indices)

    def _reason_lists(self, masks: list[int | None], missing: pa.BooleanArray) -> pa.ListArray:
        """Each mask's reasons' names, as codes over one dictionary of the
        names seen (all the known ones first): every block's dictionary is
        then the same, and the writer writes the codes."""
        names = self._reason_names
        offsets, codes = [0], []
        for mask in masks:
            for name in () if mask is None else decode_clock_event_reasons(mask):
                codes.append(names.setdefault(name, len(names)))
            offsets.append(len(codes))
        dictionary = self._reason_dictionary
        if dictionary is None or len(dictionary) != len(names):
            dictionary = self._reason_dictionary = pa.array(list(names), pa.string())
        values = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), dictionary)
        # (A list of Python bools would make pyarrow look for dateutil.)
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, mask=missing)

    def _timestamps(self, raw: pa.Array, offsets: np.ndarray | None) -> pa.Array:
        iso = pc.replace_substring(raw, "/", "-")
        try:
            naive = pc.cast(iso, pa.timestamp("us"))
        except pa.ArrowInvalid as error:
            row = _first_unparsable(iso, "timestamp")
            raise self._row_error(row, offsets, f"{_cell(raw, row)!r} is not a timestamp") from error
        if naive.null_count:
            row = int(np.flatnonzero(np.asarray(naive.is_null()))[0])
            raise self._row_error(row, offsets, "no timestamp")
        return self._zoned(naive)

    def _zoned(self, naive: pa.Array) -> pa.Array:
        """Naive local times (`timestamp('us')`) of the log's zone → UTC."""
        if self.timezone == "UTC":
            return naive.cast(pa.timestamp("us", tz="UTC"))
        return pc.assume_timezone(naive, self.timezone, ambiguous="earliest", nonexistent="earliest")

    def _hosts(self, values: pa.Array | None, n: int, offsets: np.ndarray | None) -> pa.Array:
        if self.host is not None:
            return self._constant(self.host, n)
        if values is None or values.null_count:
            row = 0 if values is None else int(np.flatnonzero(np.asarray(values.is_null()))[0])
            raise self._row_error(row, offsets, "names no host (the hostname field is absent or [N/A]): give --host NAME")
        return values

    def _index_from_uuid(self, uuids: pa.Array) -> pa.Array:
        """GPU index by order of first appearance of each UUID in the log."""
        known = self._uuid_index
        for uuid in pc.unique(uuids).to_pylist():
            if uuid is not None and uuid not in known:
                known[uuid] = len(known)
        return pc.cast(pc.index_in(uuids, value_set=pa.array(list(known))), pa.int32()) if known else \
            pa.nulls(len(uuids), pa.int32())

    def _note_devices(self, device_rows: Any, table: pa.Table) -> None:
        """Keep each (host, GPU)'s last row so far (converted to its devices
        row at the end, `devices`); `device_rows(rows)`: those rows' devices
        fields as text."""
        last_rows = numbers(_last_rows(table))
        picked = table.take(last_rows)
        picked_raw = device_rows(last_rows)
        for i, (host, gpu) in enumerate(zip(picked["host"].to_pylist(), picked["gpu_index"].to_pylist())):
            self._last_rows[(host, gpu)] = (picked.slice(i, 1), picked_raw.slice(i, 1))

    @property
    def devices(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Each GPU's devices row, from its last row in the log."""
        devices = {}
        for key, (row_table, raw) in self._last_rows.items():
            # Without `ts`: Python datetimes of a zoned column would load pandas.
            row = row_table.drop_columns(["ts"]).to_pylist()[0]
            device = {
                "ts": row_table["ts"].cast(pa.int64())[0].as_py(), "host": row["host"], "gpu_index": row["gpu_index"],
                "gpu_uuid": row["gpu_uuid"], "vendor": "nvidia", "mem_total_bytes": row["mem_total_bytes"],
                "power_limit_w": row["power_limit_w"],
            }
            for column, name in self.plan.devices.items():
                spec = DEVICE_FIELDS[name]
                dtype = pa.string() if spec.kind == "text" else pa.float64() if spec.kind == "float" else pa.int32()
                device[column] = self._values(raw.column(name), spec, dtype, None, count=False)[0].as_py()
            devices[key] = device
        return devices

    # --- errors --------------------------------------------------------------

    def _row_error(self, row: int, offsets: np.ndarray | None, problem: str) -> ImportSourceError:
        row_in_block = int(offsets[row]) if offsets is not None else row
        line = data_row_line(self.path, self.plan.header_lines, self._rows_before + row_in_block)
        return ImportSourceError(self.source, problem, line)

    def _parse_error(self, error: Exception, invalid: list[Any], undecodable: bool = False) -> ImportSourceError:
        if not invalid and undecodable:
            fields = len(self.plan.names)
            line = first_ragged_line(self.path, self.plan.header_lines, fields)
            return ImportSourceError(self.source, f"a line of other than the log's {fields} fields, with bytes "
                                                  "that are not UTF-8", line)
        if invalid:
            row = invalid[0]
            # The streaming reader does not know the row's number: found here.
            line = first_ragged_line(self.path, self.plan.header_lines, row.expected_columns)
            return ImportSourceError(self.source, f"{row.actual_columns} fields where the log has "
                                                  f"{row.expected_columns}", line)
        return ImportSourceError(self.source, f"not an nvidia-smi CSV log ({one_line(error)})")


def _scan_plan(plan: Plan) -> tuple[list[str], list[tuple[int, int, float]]] | None:
    """What the compiled scanner reads of a log: the fields, and for each
    (its position, kind, scale); None where a field name repeats (the pure
    path decides what that log means)."""
    if len(set(plan.names)) != len(plan.names):
        return None
    position = {name: i for i, name in enumerate(plan.names)}
    fields, entries = [], []
    for column, name in plan.telemetry.items():
        spec = TELEMETRY_FIELDS[name]
        if spec.kind == "timestamp":
            kind = nvsmi_native.TIMESTAMP
        elif spec.kind in ("text", "hex"):
            kind = nvsmi_native.RAW
        else:
            kind = nvsmi_native.number_kind(_TYPES[column])
        fields.append(name)
        entries.append((position[name], kind, float(spec.scale)))
    for name in plan.devices.values():
        fields.append(name)
        entries.append((position[name], nvsmi_native.RAW, 1.0))
    return fields, entries


def _blocks(handle: Any, size: int) -> Iterator[memoryview]:
    """The rest of a file in blocks of about `size` bytes, each cut after a
    newline (the last one: the end of the file). In a file, the line cut
    off a block is read again with the next (a seek back) rather than the
    next block copied behind it; a pipe's is copied."""
    seekable = handle.seekable()
    pending = b""  # the start of a line not yet ended
    while True:
        block = handle.read(size)
        if not block:
            if pending.strip():
                yield memoryview(pending)
            return
        data = pending + block if pending else block
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # no newline yet: a line longer than a block
            pending = data
            continue
        pending = b""
        if cut < len(data):
            if seekable:
                handle.seek(cut - len(data), os.SEEK_CUR)
            else:
                pending = data[cut:]
        yield memoryview(data)[:cut]


def _last_rows(table: pa.Table) -> np.ndarray:
    """The row of each (host, GPU)'s last appearance in `table` (its host
    dictionary-encoded; no NULL host or index), in the order of the rows,
    so that where a host is spelt two ways (its dictionary then has it
    twice) the later row is kept last. A node's GPUs take turns in a log:
    each one's last row is found by a scan from the end, which stops at
    once; where a table has more GPUs than a node has, by a hash
    aggregation (np.unique sorted the rows: far slower)."""
    hosts = table["host"].combine_chunks()
    keys = table["gpu_index"].to_numpy().astype(np.int64)
    if len(hosts.dictionary) > 1:
        keys = (hosts.indices.to_numpy().astype(np.int64) << 32) + (keys & 0xFFFFFFFF)
    distinct = pc.unique(numbers(keys)).to_numpy()
    if len(distinct) <= 64:
        backwards = keys[::-1]
        return np.sort([len(keys) - 1 - int(np.argmax(backwards == key)) for key in distinct]).astype(np.int64)
    rows = pa.table({"key": numbers(keys), "row": numbers(np.arange(len(keys), dtype=np.int64))})
    return np.sort(rows.group_by("key", use_threads=False).aggregate([("row", "max")])["row_max"].to_numpy())


_MISSING_TEXT = pa.array(["", "N/A"])


def _missing(text: pa.Array) -> pa.Array:
    """NULL markers: `[N/A]`, `[Not Supported]` (any bracketed answer), `N/A`, empty."""
    return pc.or_(pc.starts_with(text, "["), pc.is_in(text, value_set=_MISSING_TEXT))


def _is_missing(text: str) -> bool:
    """`_missing` of one value."""
    return text.startswith("[") or text in ("", "N/A")


def _dictionary(raw: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    encoded = pc.dictionary_encode(raw)
    return encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded


def _first_row_of(encoded: pa.DictionaryArray, entry: int) -> int:
    """The first row whose value is the dictionary's `entry` (error path)."""
    return int(np.flatnonzero(encoded.indices.to_numpy(zero_copy_only=False) == entry)[0])


def _first_invalid_utf8(values: pa.Array) -> int:
    for entry, value in enumerate(values.cast(pa.binary()).to_pylist()):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return entry
    return 0


def _cell(raw: pa.Array | pa.ChunkedArray, row: int) -> str:
    """One cell as text for an error message, whatever its bytes."""
    value = raw[row].cast(pa.binary()).as_py()
    return "" if value is None else value.decode("utf-8", "replace")


def _first_unparsable(values: pa.Array, kind: str) -> int:
    """The first row of `values` that does not parse (the error path only)."""
    for row, raw in enumerate(values.cast(pa.binary()).to_pylist()):  # bytes: UTF-8 is not checked on reading
        if raw is None:
            continue
        value = raw.decode("utf-8", "replace")
        try:
            if kind == "timestamp":
                pc.cast(pa.array([value]), pa.timestamp("us"))
            else:
                float(value)
        except (ValueError, pa.ArrowInvalid):
            return row
    return 0


def data_row_line(path: Path, header_lines: int, row: int) -> int:
    """The 1-based line number of data row `row` (0-based) of a log, past
    its header and blank lines (which the CSV reader skips). The error path
    only: it reads the file up to that row."""
    line_number = 0
    seen = -1
    with open(path, "rb") as handle:
        for line_number, line in enumerate(io.BufferedReader(handle), start=1):
            if line_number <= header_lines or not line.strip():
                continue
            seen += 1
            if seen == row:
                return line_number
    return line_number


def first_ragged_line(path: Path, header_lines: int, fields: int) -> int | None:
    """The 1-based number of the first line past the header whose field
    count is not `fields` (the error path only; nvidia-smi quotes nothing)."""
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line_number > header_lines and line.strip() and line.count(b",") + 1 != fields:
                return line_number
    return None
