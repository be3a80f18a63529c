"""The `gpulens` command: wires the collector, analysis and dashboard layers.

Library code raises `GpulensError`; this module alone turns it into one
line on stderr (`gpulens: error: <file or device>: <problem>`) and an exit
code, so every subcommand fails the same way.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import sys

import click

from gpulens.collector.cli import _IngestFailed

# Each subcommand's module, imported only when that command runs: the
# report and demo modules pull in pandas and polars (0.7 s of imports),
# which `gpulens ingest` or `collect` never use and should not wait for.
COMMANDS: dict[str, str] = {
    "collect": "gpulens.collector.cli:collect",
    "devices": "gpulens.collector.cli:devices",
    "ingest": "gpulens.collector.cli:ingest",
    "import": "gpulens.collector.cli:import_telemetry",
    "compact": "gpulens.collector.cli:compact",
    "query": "gpulens.analysis.cli:query",
    "report": "gpulens.dashboard.report.command:report",
    "demo": "gpulens.collector.demo:demo",
    "dashboard": "gpulens.dashboard.serve:dashboard",
    "export": "gpulens.dashboard.export:export",
}


class _OutputClosed(Exception):
    """Standard output was closed by its reader (`gpulens query ... | head`)."""


class _StdoutFailed(OSError):
    """Writing to standard output failed (a full disk, an I/O error): told
    apart from the OSErrors of other files, which are not its to report."""


class _StdoutFile(io.FileIO):
    """Standard output's file descriptor, whose write errors are _StdoutFailed."""

    def write(self, data) -> int | None:
        try:
            return super().write(data)
        except BrokenPipeError:
            raise  # a reader that stopped early: see _LazyGroup.invoke
        except OSError as error:
            raise _StdoutFailed(error.errno, error.strerror) from None


class _LazyGroup(click.Group):
    """A group whose commands are imported when first looked up."""

    def invoke(self, ctx: click.Context):
        # Click turns a closed pipe into exit status 1; a reader that stops
        # early (`head`) is not a failure, so take it before click does.
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _OutputClosed from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gpulens")
def cli() -> None:
    """gpulens: where a multi-GPU job's time, watts and bandwidth go.

    Sample GPUs with `collect`, ingest kernel traces with `ingest`, ask
    questions of the dataset with `query`, write findings with `report`,
    explore it with `dashboard`, and make the built-in sample data with `demo`.
    """



def entry(argv: list[str] | None = None) -> int:
    """The `gpulens` command's process: `main`, then every object still
    alive frozen (gc.freeze), since the process ends next: the
    interpreter's exit then skips its full collections over them. After an
    ingest, whose worker pool unfreezes what it froze, that was most of
    the exit: A100 + V100 pair, 302 -> 91 ms from the last atexit handler
    to the process' end (medians of 8, busy 2-core VM). Not in `main`: a
    caller's process (a test, a notebook) goes on and must keep collecting."""
    status = main(argv)
    gc.freeze()
    return status


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    command = next((a for a in arguments if not a.startswith("-")), None)
    return _run(argv, command)


def _run(argv: list[str] | None, command: str | None) -> int:
    _no_blas_pool()
    if command in _FORKING_COMMANDS:
        _no_idle_native_threads()
    from gpulens.collector.errors import GpulensError, Terminated

    try:
        with _stdout_errors_marked():
            status = cli.main(args=argv, prog_name="gpulens", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("gpulens: aborted", err=True)
        return 130
    except Terminated:
        click.echo("gpulens: terminated", err=True)
        return Terminated.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except _IngestFailed as error:
        click.echo(f"gpulens: error: {error}", err=True)
        return 1
    except GpulensError as error:
        click.echo(f"gpulens: error: {error}", err=True)
        return error.exit_code
    except (BrokenPipeError, _OutputClosed):
        _silence_stdout()
        return 0
    except _StdoutFailed as error:
        _silence_stdout()
        click.echo(f"gpulens: error: cannot write to standard output ({error.strerror})", err=True)
        return 1
    return status if isinstance(status, int) else 0


# The commands that ingest traces, so may fork workers (see below).
_FORKING_COMMANDS = ("ingest", "report", "demo")


def _no_blas_pool() -> None:
    """Before numpy loads (pyarrow loads it), keep OpenBLAS from starting
    its pool of a thread per core: no gpulens command does linear algebra,
    and each of those threads spins about 0.1 s of CPU before it first
    sleeps. On this 2-core VM a command paid 0.11 s of CPU for it
    (`import pyarrow` then 0.5 s asleep: 0.35 -> 0.25 s, five runs each);
    a node with more cores pays more. A user's own setting stands."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _no_idle_native_threads() -> None:
    """Before pyarrow loads, keep Arrow's jemalloc from starting the
    background purger, which ingest never uses: ingest forks its workers,
    and a fork copies other threads' locks but not the threads (Python 3.12
    warns of it); RSS is the same without it. Long-lived commands
    (dashboard, collect) keep the purger, which returns memory while they
    idle. A user's own setting stands."""
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")


@contextlib.contextmanager
def _stdout_errors_marked():
    """Standard output, while inside, as a stream whose write errors are
    _StdoutFailed, flushed before it is left (so that the last write fails
    here, not at exit, where Python reports it itself and exits 120). Only
    the process's own stdout: one a caller put in its place is left alone."""
    original = sys.stdout
    if original is None or original is not sys.__stdout__:
        yield
        return
    try:
        descriptor = original.fileno()
        original.flush()
    except (OSError, ValueError):
        yield
        return
    marked = io.TextIOWrapper(
        io.BufferedWriter(_StdoutFile(descriptor, "wb", closefd=False)), encoding=original.encoding,
        errors=original.errors, line_buffering=original.line_buffering, write_through=original.write_through)
    sys.stdout = marked
    try:
        yield
        marked.flush()
    finally:
        sys.stdout = original
        # Closed here (the descriptor stays open): where a write failed, its
        # bytes are still buffered, and Python 3.13 would flush them when
        # the wrapper is collected and print the error as "Exception ignored".
        with contextlib.suppress(OSError):
            marked.close()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is left of it at
    exit does not fail on the closed pipe again (Python would print an
    error and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(entry())
