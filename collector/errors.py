"""Typed errors raised by library code.

Only the command line turns these into a one-line message and an exit code
(see `dashboard/cli.py`); library code never prints or exits.
"""

from __future__ import annotations


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


class QueryError(GpulensError):
    """A SQL statement failed; the message is DuckDB's, on one line."""

    exit_code = 2
