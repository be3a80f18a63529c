"""The `gpulens` command: wires the collector, analysis and dashboard layers.

Library code raises `GpulensError`; this module alone turns it into one
line on stderr (`gpulens: error: <file or device>: <problem>`) and an exit
code, so every subcommand fails the same way.
"""

from __future__ import annotations

import sys

import click

from analysis.cli import query
from collector.cli import _IngestFailed, collect, compact, devices, ingest
from collector.demo import demo
from dashboard.report.command import report
from dashboard.serve import dashboard


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gpulens")
def cli() -> None:
    """gpulens: where a multi-GPU job's time, watts and bandwidth go.

    Sample GPUs with `collect`, ingest kernel traces with `ingest`, ask
    questions of the dataset with `query`, write findings with `report`,
    explore it with `dashboard`, and make the built-in sample data with `demo`.
    """


cli.add_command(collect)
cli.add_command(devices)
cli.add_command(ingest)
cli.add_command(compact)
cli.add_command(query)
cli.add_command(report)
cli.add_command(demo)
cli.add_command(dashboard)


def main(argv: list[str] | None = None) -> int:
    from collector.errors import GpulensError

    try:
        status = cli.main(args=argv, prog_name="gpulens", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("gpulens: aborted", err=True)
        return 130
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except _IngestFailed as error:
        click.echo(f"gpulens: error: {error}", err=True)
        return 1
    except GpulensError as error:
        click.echo(f"gpulens: error: {error}", err=True)
        return error.exit_code
    except BrokenPipeError:
        return 0
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
