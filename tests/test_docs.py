"""The docs (README.md and the pages of docs/) document every command,
option, analysis view, finding and environment variable a user can reach:
scripts are written against these names, so none may appear without its
entry."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpulens.dashboard.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
# Every page a user can reach: the README and docs/, one page per topic.
DOCS = "\n".join([README, *(path.read_text(encoding="utf-8") for path in sorted((REPO_ROOT / "docs").glob("*.md")))])


def _commands() -> list[tuple[str, click.Command]]:
    context = click.Context(cli)
    return [(name, cli.get_command(context, name)) for name in cli.list_commands(context)]


def _options() -> list[tuple[str, str]]:
    return [(name, option) for name, command in _commands() for param in command.params
            for option in param.opts if option.startswith("--") and option != "--help"]


def _code_names(pattern: str, folder: str, suffix: str = ".py") -> set[str]:
    names: set[str] = set()
    for path in (REPO_ROOT / folder).rglob(f"*{suffix}"):
        names.update(re.findall(pattern, path.read_text(encoding="utf-8")))
    return names


@pytest.mark.parametrize("name", [name for name, _ in _commands()])
def test_every_command_has_a_readme_section(name: str) -> None:
    assert f"### `gpulens {name}`" in DOCS


@pytest.mark.parametrize(("command", "option"), _options())
def test_every_option_is_in_the_readme(command: str, option: str) -> None:
    assert option in DOCS, f"gpulens {command} {option} is not documented in DOCS.md"


ANALYSIS_VIEWS = sorted(path.stem for path in (REPO_ROOT / "analysis" / "sql").glob("*.sql")
                        if not path.stem.startswith("dash_"))


@pytest.mark.parametrize("view", ANALYSIS_VIEWS)
def test_every_analysis_view_is_in_the_readme(view: str) -> None:
    assert f"`{view}`" in DOCS


FINDING_IDS = sorted(_code_names(r'\bid="([a-z_]+)"', "analysis"))


def test_the_finding_ids_are_found_in_the_code() -> None:
    # Guards the pattern above: were it to match nothing, the next test would pass vacuously.
    assert {"straggler_rank", "power_capped_gpu", "cpu_bound_launches", "trace_not_joined"} <= set(FINDING_IDS)


@pytest.mark.parametrize("finding_id", FINDING_IDS)
def test_every_finding_has_a_row_in_the_readme(finding_id: str) -> None:
    assert f"| `{finding_id}` |" in DOCS


ENVIRONMENT = sorted(_code_names(r'"(GPULENS_[A-Z_]+)"', "collector") | _code_names(r'"(GPULENS_[A-Z_]+)"', "analysis")
                     | _code_names(r'"(GPULENS_[A-Z_]+)"', "dashboard"))


@pytest.mark.parametrize("variable", ENVIRONMENT)
def test_every_environment_variable_is_in_the_readme(variable: str) -> None:
    assert variable in DOCS


@pytest.mark.parametrize("name", [name for name, _ in _commands()])
def test_help_text_shows_a_percent_sign_once(name: str) -> None:
    # click prints help as written: an argparse-style `%%` would show doubled.
    shown = CliRunner().invoke(cli, [name, "--help"], terminal_width=200).output
    assert "%%" not in shown


def test_report_help_names_every_metric_fail_on_takes() -> None:
    from gpulens.analysis.metrics import METRICS

    shown = CliRunner().invoke(cli, ["report", "--help"], terminal_width=1000).output
    assert [m.name for m in METRICS if m.name not in shown] == []
