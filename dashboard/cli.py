"""The `gpulens` command: wires the collector, analysis and dashboard layers.

Library code raises `GpulensError`; this module alone turns it into one
line on stderr (`gpulens: error: <file or device>: <problem>`) and an exit
code, so every subcommand fails the same way.
"""

from __future__ import annotations

import importlib
import sys

import click

from collector.cli import _IngestFailed

# Each subcommand's module, imported only when that command runs: the
# report and demo modules pull in pandas and polars (0.7 s of imports),
# which `gpulens ingest` or `collect` never use and should not wait for.
COMMANDS: dict[str, str] = {
    "collect": "collector.cli:collect",
    "devices": "collector.cli:devices",
    "ingest": "collector.cli:ingest",
    "compact": "collector.cli:compact",
    "query": "analysis.cli:query",
    "report": "dashboard.report.command:report",
    "demo": "collector.demo:demo",
    "dashboard": "dashboard.serve:dashboard",
}


class _LazyGroup(click.Group):
    """A group whose commands are imported when first looked up."""

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
