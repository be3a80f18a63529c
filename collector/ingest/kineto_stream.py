"""Decode a Kineto trace in batches of events, never holding it all.

A Kineto file is one JSON object: a small header (`schemaVersion`,
`deviceProperties`, `distributedInfo`), the big `traceEvents` array, and a
small trailer (`traceName`, `baseTimeNanoseconds`, ...). Decoding it in one
go holds the whole decompressed text *and* a Python object per event: for
a 216,000-event file, 53 MB of text and about 120 MB of objects.

`TraceStream` instead reads decompressed chunks, decodes the header on
its own, then cuts the event array into pieces of about `BATCH_BYTES` at
event boundaries (`}, {"ph": ...`) and decodes each piece as a JSON array,
so only one batch of event objects exists at a time. The rest of the
file after the last cut is decoded as `{"traceEvents": [` + rest, which
yields the last events and the trailer keys. A file of one batch or less
is read into one buffer instead, its event array read where it lies.

Decoded by msgspec, 2 MiB pieces (about 8,000 events) keep the per-piece
work (some forty Arrow and numpy calls to build each table's columns)
small next to the events' own: 8 ranks of 620,000 events on 2 cores took
12.3 s with 4 MiB pieces and 14.4 s with 1 MiB ones (medians of 6 and 5
runs), and 9.8 s with 2 MiB against 10.4 s with 4 MiB (medians of 3,
within the noise). A piece's events as Python objects take ~10 times its
text, so halving the piece from 4 MiB cut the process tree's peak on the
real A100 + V100 pair from 228 to 208 MiB. Read by the compiled scanner
(`kineto_native`), whose columns take about half the text, pieces are
4 MiB: one rank of 624,000 events parsed in 0.50 s, against 0.56 s with
2 MiB and 0.47 s with 8 MiB, where the real A100 + V100 pair's process
tree peaked at 228-239 MiB (205-216 MiB with 4 MiB, 185-214 with 2 MiB),
too near a third of HTA's.

A cut can only be wrong by landing inside an event (a nested object or a
string that looks like a boundary); the piece then fails to decode as a
complete array, and the next boundary is tried. Anything else that fails
(or a file laid out differently) raises `NotStreamable`, and the caller
decodes the whole file instead, which also gives the exact JSON error.

One odd value costs its value or its event, not the trace
(`decode_leniently`, `decode_events`): bytes that are not UTF-8, `NaN` and
`Infinity` tokens, times written as text, a lone UTF-16 surrogate escape
and a value nested deeper than MAX_NESTING are each read by a fallback
that runs only on the piece the fast decoders refused. The last two are
counted in REPAIRED (the file's warning says how many).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import msgspec

from gpulens.collector.ingest import kineto_native
from gpulens.collector.ingest.buffer import content_bytes, iter_chunks, read_buffer
from gpulens.collector.ingest.kineto_schema import PHASED_EVENTS, KinetoEvent, KinetoTrace, LooseTimesEvent, PhasedEvent

# Larger where the compiled scanner reads them (see above). A piece it
# refuses is decoded by msgspec whole: ~40 MB of objects at most.
BATCH_BYTES = 4 << 20 if kineto_native.available() else 2 << 20
# Bytes to read ahead of a batch for its closing boundary before giving up.
_MAX_EVENT_BYTES = 64 << 20
_MAX_WRONG_CUTS = 16
# Bytes kept beyond a batch so its closing boundary is usually at hand.
CHUNK_LOOKAHEAD = 1 << 16

_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
# The end of one event and the start of the next: `}, {"ph":`; group 1 is
# the next event's `{`.
_BOUNDARY = re.compile(rb'\}\s*,\s*(\{)\s*"(?:ph|cat|name|pid|tid|ts|dur|args|id|bp|s)"\s*:')
# How far before its event's `{` a boundary may begin (its `}`, the comma,
# whitespace). Parts of a file meet at the first boundary whose `{` is past
# their common offset (see TraceStream), so each looks this far back for
# it; where more whitespace than this lies at a part's edge, the parts do
# not meet and the file is read whole.
_BOUNDARY_REACH = 256

_HEADER = msgspec.json.Decoder(KinetoTrace)
_PHASED = msgspec.json.Decoder(PHASED_EVENTS)
_EVENTS = msgspec.json.Decoder(list[KinetoEvent])
# The fallbacks, in the order tried after those two (see `kineto_schema`).
_TEXT_TIMES = (msgspec.json.Decoder(PHASED_EVENTS, strict=False), msgspec.json.Decoder(list[KinetoEvent], strict=False))
_LOOSE_TIMES = msgspec.json.Decoder(list[LooseTimesEvent])


class _ExactTimes(msgspec.Struct, gc=False):
    """An event's times as the text wrote them: a number with a fraction as
    `decimal.Decimal` (msgspec's `float_hook` gets the number's text)."""

    ts: Any = None
    dur: Any = None


_EXACT_TIMES = msgspec.json.Decoder(list[_ExactTimes], float_hook=Decimal)
# A `ts` number whose double cannot hold every nanosecond: at or beyond
# 2**43 µs (8,796,093,022,208; matched from 8,796,000,000,000) with a
# fraction. Kineto's times relative to `baseTimeNanoseconds` stay below.
_FRACTIONAL_BEYOND_DOUBLE = re.compile(rb'"ts"\s*:\s*-?(?:[1-9]\d{13,}|9\d{12}|8[89]\d{11}|879[6-9]\d{9})\.')

# How a skipped complete event whose `ts` or `dur` is not a number is counted
# in the run's `skipped_events`: `kernel: ts or dur not a number`.
TIMES_NOT_NUMBERS = "ts or dur not a number"
# Text re-read by Python's json module (`_out_of_range_as_null`) at most: its
# objects take about ten times the text, so a whole large file is not.
_MAX_REPAIR_BYTES = 64 << 20
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
# msgspec's error points at the `I` of `-Infinity`.
_NON_FINITE_TOKENS = (b"NaN", b"Infinity")

UTF8_BOM = b"\xef\xbb\xbf"

Decoded = TypeVar("Decoded")
Events = list[PhasedEvent] | list[KinetoEvent]
# What a batch is: events decoded by msgspec, or a piece the compiled
# scanner read into columns (see `kineto_native`).
Batch = Events | kineto_native.ScannedPiece


def decode_events(data: bytes | msgspec.Raw) -> Events:
    """A JSON array of events, by the first decoder of `kineto_schema`'s list
    that reads it (each tried only where the one before refused the batch),
    and `decode_leniently`. Raises msgspec.DecodeError where none reads it.

    Times are doubles, which `arrays.us_to_ns` turns into the nanoseconds
    the text gives below 2**43 µs. Where the text holds a `ts` beyond that
    with a fraction (`1712195495502094.565`: Unix-epoch microseconds, at
    0.25 µs a double's step), the batch's times are read again from the
    text, as `decimal.Decimal` (`_exact_times`)."""
    events = decode_leniently(_typed_events, data)
    if _FRACTIONAL_BEYOND_DOUBLE.search(data):
        _exact_times(events, decode_leniently(_EXACT_TIMES.decode, data))
    return events


def _exact_times(events: Events, exact: list[_ExactTimes]) -> None:
    """Each event's float `ts` and `dur` replaced by the Decimal the text
    wrote (the same array, read by `_EXACT_TIMES`)."""
    for event, times in zip(events, exact, strict=True):
        if type(times.ts) is Decimal and type(getattr(event, "ts", None)) is float:
            event.ts = times.ts  # type: ignore[union-attr]
        if type(times.dur) is Decimal and type(getattr(event, "dur", None)) is float:
            event.dur = times.dur  # type: ignore[union-attr]


def event_array(raw: msgspec.Raw) -> Events | None:
    """The events of a `traceEvents` value; None where it is absent or null."""
    if not raw or memoryview(raw) == b"null":
        return None
    return decode_events(raw)


def _typed_events(data: bytes | msgspec.Raw) -> Events:
    for decoder in (_PHASED, _EVENTS, *_TEXT_TIMES):
        try:
            return decoder.decode(data)
        except msgspec.ValidationError:
            pass
    return _times_as_numbers(_LOOSE_TIMES.decode(data))


def _times_as_numbers(events: list[LooseTimesEvent]) -> list[LooseTimesEvent]:
    """Events whose `ts` and `dur` are numbers or None: numeric text is read
    as its number; a complete event with any other time is renamed
    `<cat>: ts or dur not a number`, a category no table reads, so the
    `Accumulator` skips it and counts it under that name. (Other phases'
    times are never read.) A loop per event, on a refused batch only."""
    for event in events:
        try:
            event.ts, event.dur = _number(event.ts), _number(event.dur)
        except ValueError:
            event.ts = event.dur = None
            if event.ph == "X":
                event.cat = f"{event.cat if event.cat is not None else '(no cat)'}: {TIMES_NOT_NUMBERS}"
    return events


def _number(value: Any) -> float | int | None:
    """A time as a number; ValueError where it is not one (or numeric text)."""
    if value is None or type(value) in (float, int):
        return value
    if isinstance(value, str):
        return float(value)
    raise ValueError(value)


# Nesting past which a value is replaced by null (Kineto writes 4 or 5
# levels): msgspec's decoder recurses once a level, and 100,000 levels of
# `[` exhaust Python's stack.
MAX_NESTING = 200
# Values replaced since the process started, by kind: a reader takes the
# difference over its own reads (`repairs_since`).
REPAIRED: dict[str, int] = {"lone UTF-16 surrogates": 0, "values nested too deep": 0}
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def repairs_since(before: dict[str, int]) -> dict[str, int]:
    """The values replaced since `before` (a copy of REPAIRED), by kind."""
    return {kind: n - before.get(kind, 0) for kind, n in REPAIRED.items() if n > before.get(kind, 0)}


def decode_leniently(decode: Callable[[Any], Decoded], data: bytes | bytearray | msgspec.Raw) -> Decoded:
    """`decode(data)`, reading two things strict JSON refuses but writers write.

    - Bytes that are not UTF-8 become U+FFFD. Names are C++ symbols and
      Python frames; a stray Latin-1 byte in one of them (a path, a
      docstring) should cost that character, not the trace.
    - `NaN`, `Infinity` and `-Infinity` tokens become null. Python's
      json.dump writes them for float('nan'), in args user code records
      (`record_function`) or in `deviceProperties`. So do numbers beyond a
      double (`1e999`). See `_non_finite_as_null`.
    Each repair copies the text, so it is made only where decoding failed.
    """
    try:
        return decode(data)
    except UnicodeDecodeError:
        return decode_leniently(decode, _invalid_utf8_replaced(data))
    except RecursionError:
        repaired = _deep_values_as_null(bytes(data))
        if repaired is None:
            raise msgspec.DecodeError(f"JSON nested deeper than {MAX_NESTING:,} levels") from None
        return decode_leniently(decode, repaired)
    except msgspec.DecodeError as error:
        # msgspec 0.23 and later say "Invalid UTF-8" as a DecodeError where
        # earlier releases raised UnicodeDecodeError.
        if "UTF-8" in str(error) and not _is_utf8(data):
            return decode_leniently(decode, _invalid_utf8_replaced(data))
        repaired = _lone_surrogates_replaced(data, error)
        if repaired is not None:
            return decode_leniently(decode, repaired)
        repaired = _non_finite_as_null(data, error)
        if repaired is None:
            raise
        # Again: a text may hold both kinds of value (each repair removes
        # every value of its kind, so this ends).
        return decode_leniently(decode, repaired)


def _is_utf8(data: bytes | bytearray | msgspec.Raw) -> bool:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _invalid_utf8_replaced(data: bytes | bytearray | msgspec.Raw) -> bytes:
    """The text with each byte sequence that is not UTF-8 written U+FFFD."""
    return bytes(data).decode("utf-8", errors="replace").encode("utf-8")


def _lone_surrogates_replaced(data: bytes | bytearray | msgspec.Raw, error: msgspec.DecodeError) -> bytes | None:
    """The text with each `\\uD800`-`\\uDFFF` escape that is not half of a
    pair written `\\uFFFD` (what a decoder writes for a character it cannot
    read), where `error` is about an escape; else None."""
    if "escape" not in str(error) and "surrogate" not in str(error):
        return None
    repaired, n = _LONE_SURROGATE.subn(rb"\\ufffd", bytes(data))
    if not n:
        return None
    REPAIRED["lone UTF-16 surrogates"] += n
    return repaired


def _deep_values_as_null(data: bytes) -> bytes | None:
    """The text with each array or object that opens deeper than
    MAX_NESTING written `null` (that value is lost, its event kept); None
    where none does. A walk of the text in Python: only where a decoder ran
    out of stack."""
    out: list[bytes] = []
    copied = depth = 0
    inside = escaped = False
    skipping_from = -1
    for at, byte in enumerate(data):
        if inside:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                inside = False
        elif byte == 0x22:
            inside = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth == MAX_NESTING and skipping_from < 0:
                skipping_from = at
        elif byte in (0x5D, 0x7D):  # ] }
            if depth == MAX_NESTING and skipping_from >= 0:
                out += (data[copied:skipping_from], b"null")
                copied, skipping_from = at + 1, -1
                REPAIRED["values nested too deep"] += 1
            depth -= 1
    if not out:
        return None
    out.append(data[copied:])
    return b"".join(out)


def _non_finite_as_null(data: bytes | bytearray | msgspec.Raw, error: msgspec.DecodeError) -> bytes | None:
    """The text with its non-finite values as null, where `error` is about
    one; else None, so a truncated text or a wrong cut is not re-read.

    - A `NaN`/`Infinity` token (msgspec's error points at it): each such
      token outside a string becomes `null`, by `_non_finite_tokens_as_null`,
      in any size of text (a whole file that cannot be streamed).
    - A number beyond a double, which msgspec refuses where a float is
      declared (`1e999`): Python's json module reads the text and msgspec
      writes it back, non-finite floats as null; only on text below
      `_MAX_REPAIR_BYTES` (a stream piece, a header, a small file).
    Either way only those values change: `"x: NaN"` inside a string stays.
    """
    if isinstance(error, msgspec.ValidationError):
        if not str(error).startswith("Number out of range") or len(data) > _MAX_REPAIR_BYTES:
            return None
        return _out_of_range_as_null(data)
    match = _ERROR_BYTE.search(str(error))
    if match is None:
        return None
    at = int(match[1])
    if not any(memoryview(data)[at : at + len(token)] == token for token in _NON_FINITE_TOKENS):
        return None
    return _non_finite_tokens_as_null(bytes(data))


def _non_finite_tokens_as_null(data: bytes) -> bytes | None:
    """`data` with every `NaN`, `Infinity` and `-Infinity` outside a string
    written `null`; None where there is none.

    Whether a token is inside a string is the parity of the quotes before
    it, less those escaped (after an odd run of backslashes), counted in C
    between one token and the next: the text is never walked in Python, so
    a file of hundreds of MB costs a pass or two of `bytes.count`. Where
    the text is not JSON around the tokens that count can be wrong, but the
    decode that follows fails on that text anyway.
    """
    pieces: list[bytes] = []
    copied = counted = 0
    inside = False
    for at, end in _non_finite_candidates(data):
        quotes = data.count(b'"', counted, at) - _escaped_quotes(data, counted, at)
        inside ^= bool(quotes & 1)
        counted = at
        if not inside:
            pieces += (data[copied:at], b"null")
            copied = end
    if not pieces:
        return None
    pieces.append(data[copied:])
    return b"".join(pieces)


def _escaped_quotes(data: bytes, start: int, end: int) -> int:
    """Quotes in `data[start:end]` that a backslash escapes: those after an
    odd run of backslashes (rare in traces, so found by `bytes.find`)."""
    escaped = 0
    at = data.find(b'\\"', start, end)
    while at >= 0:
        run_start = at
        while run_start > start and data[run_start - 1] == 0x5C:  # backslash
            run_start -= 1
        escaped += (at + 1 - run_start) & 1
        at = data.find(b'\\"', at + 2, end)
    return escaped


def _non_finite_candidates(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each `NaN`, `Infinity` and `-Infinity` in the text,
    in order, by `bytes.find` (a regex alternation scans 30 times slower)."""
    found = []
    for token in _NON_FINITE_TOKENS:
        at = data.find(token)
        while at >= 0:
            end = at + len(token)
            found.append((at - 1 if token == b"Infinity" and data[at - 1 : at] == b"-" else at, end))
            at = data.find(token, end)
    return sorted(found)


def _out_of_range_as_null(data: bytes | bytearray | msgspec.Raw) -> bytes | None:
    """The text read by Python's json module and written back by msgspec,
    which writes non-finite floats (`1e999` read as inf) as null."""
    try:
        value = json.loads(str(data, "utf-8", "replace"), parse_constant=_null)
        return msgspec.json.encode(value)
    except (ValueError, RecursionError):  # not JSON after all; a lone surrogate (UnicodeEncodeError)
        return None


def _null(token: str) -> None:
    return None


class NotStreamable(Exception):
    """The file cannot be decoded in pieces; decode it whole."""


@dataclass
class TraceStream:
    """Batches of events; `metadata` is complete once they are exhausted.

    With `start` or `end` (offsets into the decompressed content) it reads
    one part of the event array, so that several processes can read one
    big file (`kineto.read_part`): the events from the first boundary at or
    after `start` (the array's start where `start` is 0) to the first one at
    or after `end` (the array's end where none is, or `end` is None). Parts
    cut at the same offsets meet exactly: each looks for the same first
    boundary past their common offset in the same text, and a part that
    cannot tell a boundary from a nested object's raises NotStreamable. Once
    read, `first_event_at` and `end_at` say where its events begin and end
    (None: at the array's end), so a caller can check that the parts meet.
    """

    path: Path
    batch_bytes: int = BATCH_BYTES
    metadata: KinetoTrace = field(default_factory=KinetoTrace)
    has_events: bool = False
    start: int = 0
    end: int | None = None
    first_event_at: int | None = None
    end_at: int | None = None

    def batches(self) -> Iterator[Batch]:
        if self.start == 0 and self.end is None and content_bytes(self.path) <= self.batch_bytes:
            yield from self._whole()
            return
        skip = max(0, self.start - _BOUNDARY_REACH)
        chunks = iter_chunks(self.path, skip)
        window = bytearray()

        def more() -> bool:
            chunk = next(chunks, None)
            if chunk is None:
                return False
            window.extend(chunk)
            return True

        if self.start == 0:
            consumed = self._header(window, more)
        else:
            first = _boundary(window, more, self.start - skip, _MAX_EVENT_BYTES)
            if first is None:  # no event starts past `start`: nothing to read
                return
            del window[: first.start(1)]
            consumed = skip + first.start(1)
        self.first_event_at = consumed

        lookahead = min(CHUNK_LOOKAHEAD, self.batch_bytes)
        while True:
            if self.end is not None and self.end <= consumed:
                self.end_at = consumed  # the next part's first event
                return
            # The part's last cut: at the first boundary past its end.
            last = self.end is not None and self.end - consumed <= self.batch_bytes
            at = self.end - consumed if last and self.end is not None else self.batch_bytes
            while not last and len(window) < at + lookahead:
                if not more():
                    yield from self._finish(window)
                    return
            cut = self._cut(window, more, at)
            if cut is None:  # the file ended before another boundary
                yield from self._finish(window)
                return
            events, used = cut
            del window[:used]
            consumed += used
            yield events

    def _whole(self) -> Iterator[Batch]:
        """A file of one batch or less, read into one buffer and its event
        array scanned where it lies. Read in chunks, each chunk was
        allocated, copied into the window, and the window copied again
        behind a `[`: for 64 ranks of 1.4 MB, 0.10 s of CPU; read whole,
        9 ms."""
        content = read_buffer(self.path)
        start = len(UTF8_BOM) if content.startswith(UTF8_BOM) else 0  # Windows editors write one
        match = _TRACE_EVENTS.search(content, start)
        if match is None:
            raise NotStreamable  # no event array where expected: decode whole
        self._take_header(content[start : match.start()])
        self.first_event_at = match.end()
        yield from self._rest(memoryview(content)[match.end() - 1 :])  # from the array's `[`

    def _header(self, window: bytearray, more: Callable[[], bool]) -> int:
        """Decode what precedes the event array and drop it from the window;
        its length in the content."""
        while len(window) < len(UTF8_BOM) and more():
            pass
        skipped = 0
        if window.startswith(UTF8_BOM):  # Windows editors write one
            del window[: len(UTF8_BOM)]
            skipped = len(UTF8_BOM)
        match = _TRACE_EVENTS.search(window)
        while match is None:
            searched = max(0, len(window) - 64)  # the key may straddle two chunks
            if not more():
                raise NotStreamable  # no event array where expected: decode whole
            match = _TRACE_EVENTS.search(window, searched)
        self._take_header(window[: match.start()])
        del window[: match.end()]
        return skipped + match.end()

    def _take_header(self, head: bytes | bytearray) -> None:
        """The keys before the event array (`{...,` up to `"traceEvents"`)."""
        self.metadata = _decode(_HEADER.decode, bytes(head) + b'"traceEvents": null}')
        self.has_events = True

    def _cut(self, window: bytearray, more: Callable[[], bool], at: int) -> tuple[Batch, int] | None:
        """Decode the events before the first good boundary whose event
        begins at or past `at`; None where the file ends first."""
        start = at
        for _ in range(_MAX_WRONG_CUTS):
            boundary = _boundary(window, more, start, at + _MAX_EVENT_BYTES)
            if boundary is None:
                return None
            # One copy of the piece; the temporary view is gone before
            # the window is resized.
            piece = b"".join((b"[", memoryview(window)[: boundary.start() + 1], b"]"))
            scanned = kineto_native.scan(piece)
            if scanned is not None and scanned.end == len(piece):
                return scanned, boundary.start(1)  # consume up to the next event's `{`
            try:
                return decode_events(piece), boundary.start(1)
            except msgspec.DecodeError:
                start = boundary.start(1) + 1
        raise NotStreamable

    def _finish(self, window: bytearray) -> Iterator[Batch]:
        yield from self._rest(b"[" + window)

    def _rest(self, rest: bytes | memoryview) -> Iterator[Batch]:
        """The events and trailer of `rest`: the content from the event
        array's `[` to the end, or the rest of it after the last cut, with
        a `[` put before."""
        self.end_at = None  # this part reads to the array's end
        scanned = kineto_native.scan(rest)
        if scanned is not None:
            # The trailer's keys after the array's `]`.
            fill_missing(self.metadata, _decode(_HEADER.decode, b'{"traceEvents": []' + scanned.data[scanned.end :]))
            if scanned.events:
                yield scanned
            return
        tail = _decode(_HEADER.decode, b'{"traceEvents": ' + rest)
        fill_missing(self.metadata, tail)
        try:
            events = event_array(tail.traceEvents)
        except msgspec.DecodeError:
            raise NotStreamable from None
        if events:
            yield events


def fill_missing(metadata: KinetoTrace, later: KinetoTrace) -> None:
    """Give `metadata` the keys it lacks from `later` (the trailer after the
    event array: `baseTimeNanoseconds`, `traceName`, ...); keys it has win."""
    for name in KinetoTrace.__struct_fields__:
        if getattr(metadata, name) is None and name != "traceEvents":
            setattr(metadata, name, getattr(later, name))


def _boundary(window: bytearray, more: Callable[[], bool], at: int, limit: int) -> re.Match[bytes] | None:
    """The first boundary whose next event begins (its `{`) at or past `at`
    in the window, reading more as needed; None where the content ends
    first. Raises NotStreamable where the window grows past `limit`."""
    searched = max(0, at - _BOUNDARY_REACH)
    while True:
        boundary = _BOUNDARY.search(window, searched)
        if boundary is None:
            if len(window) > limit:
                raise NotStreamable
            # A boundary may straddle the old end: look back a little.
            searched = max(searched, len(window) - _BOUNDARY_REACH)
            if not more():
                return None
        elif boundary.start(1) < at:
            searched = boundary.start() + 1
        else:
            return boundary


def _decode(decode: Callable[[Any], Decoded], data: bytes | bytearray | msgspec.Raw) -> Decoded:
    try:
        return decode_leniently(decode, data)
    except msgspec.DecodeError:
        raise NotStreamable from None

