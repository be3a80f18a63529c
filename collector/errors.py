"""Typed errors raised by library code.

Only the command line turns these into a one-line message and an exit code
(see `dashboard/cli.py`); library code never prints or exits.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator


def one_line(message: object) -> str:
    """`message` (an error, a library's text) as one line: its runs of
    whitespace, newlines included, as single spaces."""
    return " ".join(str(message).split())


class GpulensError(Exception):
    """Base class for every error a user can cause or meet.

    `str(error)` is the one line the command prints: it names the file or
    device and the problem.
    """

    exit_code = 1


class UsageError(GpulensError):
    """A bad flag value or combination."""

    exit_code = 2


class MissingDependency(GpulensError):
    """An optional part of gpulens is not installed: the message says what to install."""


class BackendUnavailable(GpulensError):
    """No sampling backend could be initialised (no driver, no GPU)."""


class DatasetError(GpulensError):
    """The dataset directory cannot be read or written."""


class TraceError(GpulensError):
    """A trace file cannot be ingested: unreadable, corrupt or unknown."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class ImportSourceError(GpulensError):
    """Telemetry to import cannot be read: a bad line of a log or scrape
    file (`line` set), an unknown format, or a server that answered badly."""

    def __init__(self, source: str, problem: str, line: int | None = None) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.problem = problem
        self.line = line


class Terminated(BaseException):
    """SIGTERM reached a command that stops cleanly on it (`gpulens ingest`).
    A BaseException, as KeyboardInterrupt is, so that no handler of a
    file's failure (`except Exception`) takes it for one."""

    exit_code = 143  # 128 + SIGTERM, as a shell reports a process it ended
    # Set by the SIGTERM handler as it raises this. Raised inside a __del__
    # or a weakref callback (where the signal happened to land), the
    # exception is only printed, and the command would go on to the end:
    # it checks this between files instead (`raise_if_terminated`).
    requested = False
    # The same for Ctrl-C's KeyboardInterrupt, where `terminated_on_sigterm`
    # handles SIGINT too.
    interrupted = False


def raise_if_terminated() -> None:
    """Raise Terminated (or KeyboardInterrupt) if SIGTERM (or Ctrl-C) came
    and its exception was swallowed where it was raised."""
    if Terminated.requested:
        raise Terminated()
    if Terminated.interrupted:
        raise KeyboardInterrupt


def even_if_interrupted(step: Callable[..., object], *args: object, **kwargs: object) -> None:
    """`step(*args, **kwargs)`; stopped by a signal's exception, done again
    to the end before that is raised (a second SIGTERM is ignored), for
    steps that must not stop halfway: removing a staging folder, or the
    files a merged file has replaced."""
    try:
        step(*args, **kwargs)
    except BaseException:
        step(*args, **kwargs)
        raise


@contextlib.contextmanager
def terminated_on_sigterm(on_stop: Callable[[], object] | None = None) -> Iterator[None]:
    """SIGTERM raises Terminated here, so that a command unwinds as on Ctrl-C:
    an ingest stops its workers and removes its staging files (killed
    outright, its workers would wait for their next file forever), a report
    its scratch folder, a query its DuckDB. A second SIGTERM while it does
    is ignored.

    Both signals' exceptions are also noted (`Terminated.requested`,
    `.interrupted`): raised inside a __del__ or a weakref callback, Python
    only prints them, and the command checks the note between files
    (`raise_if_terminated`). An error that leaves the block after a stop
    came is that stop: DuckDB ends a query on the signal with a
    KeyboardInterrupt or its own "Query interrupted". Ctrl-C is handled so
    only where SIGINT has Python's own handler (not in a background job,
    which ignores it). `on_stop` is called first on either (`query`
    interrupts its DuckDB query, which would otherwise run on where the
    exception was swallowed in one of DuckDB's own Python callbacks)."""

    def terminate(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Terminated.requested = True
        stopping()
        raise Terminated()

    def interrupt(signum: int, frame: object) -> None:
        Terminated.interrupted = True
        stopping()
        raise KeyboardInterrupt

    def stopping() -> None:
        if on_stop is not None:
            with contextlib.suppress(Exception):  # the stop goes on whatever this meets
                on_stop()

    def unraisable(hooked: object) -> None:
        # A stop raised where Python can only print it: not a traceback for
        # the user, as the command stops at its next file all the same.
        stop = getattr(hooked, "exc_value", None)
        if not (isinstance(stop, Terminated) or (isinstance(stop, KeyboardInterrupt) and Terminated.interrupted)):
            previous_hook(hooked)

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread (a caller's): the signals stay as they were
        yield
        return
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupt)
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    except (Exception, KeyboardInterrupt):
        raise_if_terminated()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
        sys.unraisablehook = previous_hook
        Terminated.requested = Terminated.interrupted = False


class QueryError(GpulensError):
    """A SQL statement failed; the message is DuckDB's, on one line."""

    exit_code = 2
