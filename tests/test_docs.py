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
from conftest import bench_module

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


# --- links, sizes, and the benchmark tables -----------------------------------------

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
README_MAX_BYTES = 15 * 1024
HISTORY_MAX_BYTES = 15 * 1024
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """`text` without its fenced code blocks, where `#` and `[x](y)` are code."""
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped
    (hyphens and underscores kept), spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    for line in _prose(path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            slug = _slug(match.group(1))
            suffix, n = slug, 0
            while suffix in anchors:  # a repeated heading gets -1, -2, ...
                n += 1
                suffix = f"{slug}-{n}"
            anchors.add(suffix)
    return anchors


def _relative_links() -> list[tuple[str, str]]:
    links = []
    for page in PAGES:
        prose = _INLINE_CODE.sub("", _prose(page.read_text(encoding="utf-8")))
        for target in _LINK.findall(prose):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                links.append((str(page.relative_to(REPO_ROOT)), target))
    return links


def test_the_pages_have_relative_links() -> None:
    # Guards the pattern: were it to match nothing, the link test would pass vacuously.
    assert ("README.md", "docs/commands.md") in _relative_links()


@pytest.mark.parametrize(("page", "target"), _relative_links())
def test_every_relative_link_points_at_a_file_and_anchor(page: str, target: str) -> None:
    path_part, _, anchor = target.partition("#")
    path = (REPO_ROOT / page).parent / path_part if path_part else REPO_ROOT / page
    assert path.exists(), f"{page}: {target} points at no file"
    if anchor and path.suffix == ".md":
        assert anchor in _anchors(path), f"{page}: {target}: no heading makes #{anchor}"


def test_slug_is_githubs_for_a_command_heading() -> None:
    assert _slug("`gpulens collect`: the node daemon") == "gpulens-collect-the-node-daemon"


def test_readme_is_at_most_15_kib() -> None:
    assert (REPO_ROOT / "README.md").stat().st_size <= README_MAX_BYTES


def test_performance_history_is_at_most_15_kib() -> None:
    assert (REPO_ROOT / "docs" / "performance-history.md").stat().st_size <= HISTORY_MAX_BYTES


def _make_docs():
    return bench_module("make_docs")


def test_performance_tables_equal_what_the_latest_results_make() -> None:
    make_docs = _make_docs()
    for page in make_docs.PAGES:
        text = page.read_text(encoding="utf-8")
        assert make_docs.render(text) == text, f"{page.name}: run python bench/make_docs.py after a bench"


def test_performance_page_holds_a_region_for_every_bench_table() -> None:
    make_docs = _make_docs()
    found = [name for page in make_docs.PAGES for name in make_docs.regions(page.read_text(encoding="utf-8"))]
    assert sorted(found) == sorted(make_docs.REGIONS)


def test_every_bench_script_records_its_results() -> None:
    helpers = ("results.py", "make_docs.py", "node_site.py", "spark_cluster.py", "processes.py")  # what the benches use, not benches
    scripts = sorted(p.name for p in (REPO_ROOT / "bench").glob("*.py") if p.name not in helpers)
    silent = [name for name in scripts if "results.start(" not in (REPO_ROOT / "bench" / name).read_text(encoding="utf-8")]
    assert silent == []
