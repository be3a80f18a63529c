"""A Chrome trace-event JSON file, written as its events come.

The JSON object format of the trace-event format (what chrome://tracing,
ui.perfetto.dev and PyTorch's profiler read): header keys, then the
`traceEvents` array, then trailer keys. Events are encoded and written one
at a time (gzip-compressed where the file name ends in `.gz`), so memory
does not grow with the events. The file is written under a temporary name
beside its place and renamed into place when closed, so a reader never
sees half a file and a failed export leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path
from typing import IO, Any

import orjson

from gpulens.collector.errors import DatasetError

GZIP_LEVEL = 6
# Encoded events are gathered up to this many bytes before each write:
# gzip's write per event took half an export's time.
BUFFER_BYTES = 1 << 20


class TraceEventWriter:
    """Writes `header`'s keys, then each event given to `add`, at most
    `max_events` of them (None: no limit), then `close(trailer)`'s keys.

    `add` returns False, and writes nothing, once `max_events` events are
    written; `cut` then says so."""

    def __init__(self, path: str | Path, header: dict[str, Any], max_events: int | None = None) -> None:
        self.path = Path(path)
        self.max_events = max_events
        self.events = 0
        self.cut = False
        self._temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            raw: IO[bytes] = open(self._temporary, "wb")
        except OSError as error:
            raise DatasetError(f"{self.path}: cannot write ({error.strerror})") from None
        self._file: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) \
            if self.path.name.endswith(".gz") else raw
        self._raw = raw
        opening = orjson.dumps(header)[:-1]  # the header object, left open
        self._pending = bytearray(opening + (b"," if header else b"") + b'"traceEvents":[\n')
        self._separator = b""

    def add(self, event: dict[str, Any]) -> bool:
        if self.max_events is not None and self.events >= self.max_events:
            self.cut = True
            return False
        self._pending += self._separator
        self._pending += orjson.dumps(event)
        self._separator = b",\n"
        if len(self._pending) >= BUFFER_BYTES:
            self._flush()
        self.events += 1
        return True

    def close(self, trailer: dict[str, Any]) -> None:
        """Write the trailer, and move the file into place."""
        closing = orjson.dumps(trailer)[1:]  # the trailer object's keys and its closing brace
        self._pending += b"\n]" + (b"," if trailer else b"") + closing + b"\n"
        self._flush()
        try:
            self._file.close()
            self._raw.close()
            os.replace(self._temporary, self.path)
        except OSError as error:
            self.discard()
            raise DatasetError(f"{self.path}: cannot write ({error.strerror})") from None

    def discard(self) -> None:
        """Remove what was written (an export that failed)."""
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self._raw.close()
        with contextlib.suppress(FileNotFoundError):
            self._temporary.unlink()

    def _flush(self) -> None:
        try:
            self._file.write(self._pending)
            self._pending.clear()
        except OSError as error:
            self.discard()
            raise DatasetError(f"{self.path}: cannot write ({error.strerror})") from None
