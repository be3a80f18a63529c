"""A progress bar on stderr for commands that run a while (ingest, report).

Drawn by rich only where it is enabled (a terminal); elsewhere every call
is a no-op, so callers never check. rich is imported only when a bar is
drawn.
"""

from __future__ import annotations

from typing import Any


class StderrProgress:
    """One task's bar: `text` before it (rich's column markup: `{task.description}`),
    `total` steps, the count (`counted`) and the elapsed time after it.
    A context manager: the bar shows between enter and exit."""

    def __init__(self, enabled: bool, total: int, text: str, counted: bool = False) -> None:
        self._bar = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn(text), BarColumn(), *([MofNCompleteColumn()] if counted else []), TimeElapsedColumn()]
            self._bar = Progress(*columns, console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task("", total=total)

    def __enter__(self) -> StderrProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, **fields: Any) -> None:
        """rich's `Progress.update` of the task (completed=, advance=, description=)."""
        if self._bar is not None:
            self._bar.update(self._task, **fields)
