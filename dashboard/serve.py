"""`gpulens dashboard [DATASET]`: start the Streamlit app on a dataset.

It runs `python -m dashboard.launch run dashboard/app.py` (Streamlit's own
`streamlit run`, after importing what the pages need and starting on the
first page's results: see dashboard/launch.py) in place of this process
(so Ctrl-C and SIGTERM reach Streamlit directly), with the dataset in
`GPULENS_DATASET`, bound to localhost unless `--address` says otherwise.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import socket
import sys
from pathlib import Path

import click

from gpulens.collector.errors import DatasetError, MissingDependency, UsageError, one_line
from gpulens.dashboard.data import DATASET_ENV

APP = Path(__file__).resolve().parent / "app.py"


def streamlit_command(port: int, address: str) -> list[str]:
    """The command line that serves the app."""
    return [
        sys.executable, "-m", "gpulens.dashboard.launch", "run", str(APP),
        "--server.address", address,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
        # No "Deploy" button, rerun or clear-cache items: people read this
        # dashboard, they do not develop it.
        "--client.toolbarMode", "viewer",
    ]


def check_address(address: str) -> None:
    """Raise UsageError unless this machine can serve on `address` (a name
    that does not resolve, an address of no interface of it): Streamlit,
    run in place of this process, fails there with a traceback, after the
    dashboard was announced. Bound as Streamlit binds it, on a spare port:
    whether --port is free is `check_port`'s to say."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.bind((address, 0))
    except OSError as error:  # IPv6 off makes the socket fail too
        raise UsageError(f"--address {address}: cannot serve there ({error.strerror or one_line(error)})") from None
    except (UnicodeError, TypeError, ValueError):  # a name that cannot be encoded for the DNS
        raise UsageError(f"--address {address}: cannot serve there (not a host name or address)") from None


def check_port(address: str, port: int) -> None:
    """Raise UsageError where another server already listens on `port` at
    `address`: Streamlit, told the port, would only log a timestamped
    'Port N is not available' and exit. Bound with SO_REUSEADDR, as
    Tornado binds, so a port left in TIME_WAIT by the last dashboard passes."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address, port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: in use on {address} (another server listens there; choose another "
                             "--port)") from None
        raise UsageError(f"--port {port}: cannot serve there ({error.strerror or one_line(error)})") from None


def check_dataset(dataset: Path) -> None:
    """Raise DatasetError where `dataset` is no directory, in the words of
    `gpulens query` and `report` (analysis.dataset.open_dataset): serving a
    path that is not there would only show an error page."""
    if not dataset.exists():
        raise DatasetError(f"{dataset}: no such dataset directory")
    if not dataset.is_dir():
        raise DatasetError(f"{dataset}: not a directory (a dataset is a folder of Parquet tables)")


@click.command("dashboard")
@click.argument("dataset", required=False, type=click.Path(path_type=Path))
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535), help="Port to serve on.")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to bind; 0.0.0.0 serves every interface (anyone who can reach the port sees the data).")
def dashboard(dataset: Path | None, port: int, address: str) -> None:
    """Open the dashboard on DATASET (default: the built-in sample data).

    Pages: overview of the findings, telemetry, power headroom,
    interconnect, kernels and launches, communication, compare runs, and a
    live view of a dataset a collector is writing.
    """
    if importlib.util.find_spec("streamlit") is None:
        raise MissingDependency("gpulens dashboard needs Streamlit, which this install lacks: "
                                "pip install 'gpulens[dashboard]'")
    if dataset is not None:
        check_dataset(dataset)
    check_address(address)
    check_port(address, port)
    env = dict(os.environ)
    if dataset is None:
        from gpulens.dashboard.data import default_dataset

        click.echo("gpulens: no dataset given: opening the built-in sample data", err=True)
        dataset = default_dataset()
    env[DATASET_ENV] = str(dataset.expanduser().resolve())
    command = streamlit_command(port, address)
    click.echo(f"gpulens: dashboard on http://{address}:{port} for {env[DATASET_ENV]}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
if __name__ == "__main__":
    dashboard()
