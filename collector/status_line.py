"""`gpulens collect`'s one-line status on a terminal.

    gpulens collect: 1,234 samples · 8 GPUs · last flush 12 s ago · 0 ticks skipped

Redrawn in place (a carriage return, the line, and an erase to its end)
at most once a second. The command draws it only where stderr is a
terminal: run as a service (systemd, a pipe, a file), it writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

# Seconds between redraws: a tick every 0.1 s need not redraw ten times.
REDRAW_EVERY_S = 1.0
_ERASE_TO_END = "\x1b[K"


def status_text(samples: int, gpus: int, last_flush_age_s: float | None, ticks_skipped: int) -> str:
    flushed = "not flushed yet" if last_flush_age_s is None else f"last flush {last_flush_age_s:.0f} s ago"
    return (f"gpulens collect: {samples:,} samples · {gpus} GPU{'' if gpus == 1 else 's'} · {flushed} · "
            f"{ticks_skipped:,} tick{'' if ticks_skipped == 1 else 's'} skipped")


class StatusLine:
    """Draws `status_text` on `stream`, in place, at most every REDRAW_EVERY_S."""

    def __init__(self, stream: TextIO, clock_s: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self._clock_s = clock_s
        self._drawn_at: float | None = None

    def show(self, text: str) -> None:
        now = self._clock_s()
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_EVERY_S:
            return
        self._drawn_at = now
        self.stream.write(f"\r{text}{_ERASE_TO_END}")
        self.stream.flush()

    def close(self) -> None:
        """End the line, so that what follows starts on its own."""
        if self._drawn_at is not None:
            self.stream.write("\n")
            self.stream.flush()
