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
yields the last events and the trailer keys.

2 MiB pieces (about 8,000 events) keep the per-piece work (some forty
Arrow and numpy calls to build each table's columns) small next to the
events' own: 8 ranks of 620,000 events on 2 cores took 12.3 s with 4 MiB
pieces and 14.4 s with 1 MiB ones (medians of 6 and 5 runs), and 9.8 s
with 2 MiB against 10.4 s with 4 MiB (medians of 3, within the noise).
A piece's events as Python objects take ~10 times its text, so halving
the piece from 4 MiB cut the process tree's peak on the real A100 + V100
pair from 228 to 208 MiB.

A cut can only be wrong by landing inside an event (a nested object or a
string that looks like a boundary); the piece then fails to decode as a
complete array, and the next boundary is tried. Anything else that fails
(or a file laid out differently) raises `NotStreamable`, and the caller
decodes the whole file instead, which also gives the exact JSON error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import msgspec

from collector.ingest.buffer import iter_chunks
from collector.ingest.kineto_schema import PHASED_EVENTS, KinetoEvent, KinetoTrace, PhasedEvent

BATCH_BYTES = 2 << 20
# Bytes to read ahead of a batch for its closing boundary before giving up.
_MAX_EVENT_BYTES = 64 << 20
_MAX_WRONG_CUTS = 16
# Bytes kept beyond a batch so its closing boundary is usually at hand.
CHUNK_LOOKAHEAD = 1 << 16

_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb'\}\s*,\s*\{\s*"(?:ph|cat|name|pid|tid|ts|dur|args|id|bp|s)"\s*:')

_HEADER = msgspec.json.Decoder(KinetoTrace)
_EVENTS = msgspec.json.Decoder(list[KinetoEvent])
_PHASED = msgspec.json.Decoder(PHASED_EVENTS)


UTF8_BOM = b"\xef\xbb\xbf"


def decode_events(data: bytes) -> list[PhasedEvent] | list[KinetoEvent]:
    """A JSON array of events: by phase (fast), else with the lenient decoder
    (an event without `ph` or of an unknown phase; see `kineto_schema`).
    Raises msgspec.DecodeError where the lenient decoder does too."""
    try:
        return decode_utf8_leniently(_PHASED, data)
    except msgspec.ValidationError:
        return decode_utf8_leniently(_EVENTS, data)


def decode_utf8_leniently(decoder: msgspec.json.Decoder, data: bytes | bytearray):
    """`decoder.decode(data)`, where bytes that are not UTF-8 become U+FFFD.

    Names are C++ symbols and Python frames; a stray Latin-1 byte in one of
    them (a path, a docstring) should cost that character, not the trace.
    The repair copies the text, so it is made only where decoding failed.
    """
    try:
        return decoder.decode(data)
    except UnicodeDecodeError:
        return decoder.decode(bytes(data).decode("utf-8", errors="replace").encode("utf-8"))


class NotStreamable(Exception):
    """The file cannot be decoded in pieces; decode it whole."""


@dataclass
class TraceStream:
    """Batches of events; `metadata` is complete once they are exhausted."""

    path: Path
    batch_bytes: int = BATCH_BYTES
    metadata: KinetoTrace = field(default_factory=KinetoTrace)
    has_events: bool = False

    def batches(self) -> Iterator[list[PhasedEvent] | list[KinetoEvent]]:
        chunks = iter_chunks(self.path)
        window = bytearray()

        def more() -> bool:
            chunk = next(chunks, None)
            if chunk is None:
                return False
            window.extend(chunk)
            return True

        while len(window) < len(UTF8_BOM) and more():
            pass
        if window.startswith(UTF8_BOM):  # Windows editors write one
            del window[: len(UTF8_BOM)]
        match = _TRACE_EVENTS.search(window)
        while match is None:
            searched = max(0, len(window) - 64)  # the key may straddle two chunks
            if not more():
                raise NotStreamable  # no event array where expected: decode whole
            match = _TRACE_EVENTS.search(window, searched)
        self.metadata = _decode(_HEADER, bytes(window[: match.start()]) + b'"traceEvents": null}')
        self.has_events = True
        del window[: match.end()]

        lookahead = min(CHUNK_LOOKAHEAD, self.batch_bytes)
        while True:
            while len(window) < self.batch_bytes + lookahead:
                if not more():
                    yield from self._finish(window)
                    return
            cut = self._cut(window, more)
            if cut is None:  # the file ended before another boundary
                yield from self._finish(window)
                return
            events, used = cut
            del window[:used]
            yield events

    def _cut(self, window: bytearray, more: Callable[[], bool]) -> tuple[list[PhasedEvent] | list[KinetoEvent], int] | None:
        """Decode the events before the first good boundary past the batch size."""
        start = self.batch_bytes
        for _ in range(_MAX_WRONG_CUTS):
            boundary = _BOUNDARY.search(window, start)
            while boundary is None:
                # A boundary may straddle the old end: look back a little.
                searched = max(start, len(window) - 256)
                if len(window) > self.batch_bytes + _MAX_EVENT_BYTES:
                    raise NotStreamable
                if not more():
                    return None
                boundary = _BOUNDARY.search(window, searched)
            try:
                # One copy of the piece; the temporary view is gone before
                # the window is resized.
                events = decode_events(b"".join((b"[", memoryview(window)[: boundary.start() + 1], b"]")))
                # Consume up to the next event's `{`.
                return events, boundary.start() + boundary.group(0).index(b"{")
            except msgspec.DecodeError:
                start = boundary.end()
        raise NotStreamable

    def _finish(self, window: bytearray) -> Iterator[list[KinetoEvent]]:
        tail = _decode(_HEADER, b'{"traceEvents": [' + window)
        for name in KinetoTrace.__struct_fields__:
            if getattr(self.metadata, name) is None and name != "traceEvents":
                setattr(self.metadata, name, getattr(tail, name))
        if tail.traceEvents:
            yield tail.traceEvents


def _decode(decoder: msgspec.json.Decoder, data: bytes | bytearray) -> KinetoTrace:
    try:
        return decode_utf8_leniently(decoder, data)
    except msgspec.DecodeError:
        raise NotStreamable from None

