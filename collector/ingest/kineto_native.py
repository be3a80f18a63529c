"""The compiled fast path for Kineto events (`_kineto_scan.c`), if built.

A piece of the event array (`[{...}, ...]`, as `kineto_stream` cuts it)
is read by C into columns, one row per event (`ScannedPiece`), and
`kineto_scanned` builds the tables from those with Arrow and numpy, never
touching an event in Python. It reads what the msgspec decoders read and
refuses the rest (`scan` returns None): a piece that is not valid JSON,
a time written as text (or one it cannot turn into int64 nanoseconds
exactly), a name that is not UTF-8, an escaped or
duplicated key. That piece then takes the msgspec path, as does one where
a table reads an id written as text, so both give the same tables (the
tests compare them on every trace at hand) and odd input is decided in
one place.

The extension is optional: `pip install` builds it where a C compiler and
Python's headers are at hand, and goes on without it elsewhere.
`GPULENS_PURE_PYTHON=1` turns it off (to compare, or to rule it out).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.collector.compiled import load_compiled
from gpulens.collector.ingest.kineto_schema import BULK_SKIPPED, EVENT_TABLES


# The scanner's output this module reads (`SCAN_VERSION` in the C file).
VERSION = 3


# Kineto events ingested at once past which `gpulens ingest` says, where
# the scanner was never built, what building it would save.
HINT_EVENTS = 1_000_000
NOT_BUILT_HINT = ("Kineto traces were read without the compiled scanner, which was not built at install "
                  "(no C compiler or Python headers): with them (`apt-get install gcc python3-dev`), "
                  "`pip install` again for about twice the speed")


_SCANNER, _NOT_BUILT = load_compiled(f"{__package__}._kineto_scan", VERSION, "Kineto scanner")

# The categories the scanner codes, by code: the routed ones first (their
# complete events are read in full), then those skipped in bulk.
CATS: tuple[str, ...] = (*EVENT_TABLES, *BULK_SKIPPED)
_CAT_BYTES = tuple(cat.encode() for cat in CATS)
ROUTED = len(EVENT_TABLES)
# Codes the scanner gives where no listed category applies.
CAT_MISSING, CAT_OTHER = -1, -2

# Bits of the `present` column (see `_kineto_scan.c`).
TS, DUR, PID, TID, NAME, EXTERNAL, CORRELATION, DEVICE, STREAM, BYTES, GRID, BLOCK, COLLECTIVE = (
    1 << bit for bit in range(13))


@dataclass
class ScannedPiece:
    """A piece's events as columns (bytes, one value per event), and the
    piece's text, where each event's span (`span_start`/`span_end`) lies."""

    data: bytes | memoryview
    columns: dict[str, bytes]
    events: int
    other_cats: dict[str, int]
    # Where the event array ends in `data`: just past its `]`.
    end: int

    def __len__(self) -> int:
        return self.events

    def text(self) -> bytes | memoryview:
        """The event array's text alone (what a msgspec decode of it reads)."""
        return self.data[: self.end]


def available() -> bool:
    return _SCANNER is not None


def not_built_hint(kineto_events: int) -> str | None:
    """What to tell a user who ingested `kineto_events` without the scanner
    because it was never built; None where that does not apply."""
    return NOT_BUILT_HINT if _NOT_BUILT and _SCANNER is None and kineto_events >= HINT_EVENTS else None


def scan(data: bytes | memoryview) -> ScannedPiece | None:
    """The event array at the start of `data` (`[` ... `]`), or None where
    the fast path is off or does not read this text."""
    if _SCANNER is None:
        return None
    columns = _SCANNER.scan(data, _CAT_BYTES, ROUTED)
    if columns is None:
        return None
    return ScannedPiece(data, columns, columns.pop("events"), columns.pop("other_cats"), columns.pop("end"))
