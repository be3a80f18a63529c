"""Streamlit renders the label, help text and some options of its widgets,
and the body of its text elements, as Markdown: a run, host, kernel, job or
GPU name there must pass through `dashboard/escape.py` (`markdown_text`,
`markdown_code`), or `**x**`, `[a](javascript:...)` and `<img onerror>`
would render. This test reads the dashboard's source (its AST): every
value put into such an argument is text written in the source, a number
or time formatted with a format spec, an escape call, or one of
`OWN_TEXT` below, each with why it holds no dataset text. A new call that
interpolates anything else fails here, naming the file, the line and the
expression: escape it, or add it to `OWN_TEXT` with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
SOURCES = [DASHBOARD / "app.py", *sorted((DASHBOARD / "app_pages").glob("*.py"))]

# Streamlit calls whose first argument (a label or a body) is Markdown.
MARKDOWN_FIRST = frozenset({
    "title", "header", "subheader", "caption", "markdown", "write", "info", "warning", "error", "success", "toast",
    "expander", "popover", "status", "metric", "button", "download_button", "link_button", "page_link",
    "form_submit_button", "checkbox", "toggle", "radio", "selectbox", "multiselect", "slider", "select_slider",
    "text_input", "text_area", "number_input", "date_input", "time_input", "color_picker", "file_uploader", "pills",
    "segmented_control", "tabs",
})
# Keyword arguments that are Markdown wherever they appear on those calls
# (`options` only where Streamlit renders options as Markdown).
MARKDOWN_KEYWORDS = frozenset({"label", "help", "body"})
MARKDOWN_OPTIONS = frozenset({"radio", "pills", "segmented_control", "tabs"})
ESCAPES = frozenset({"markdown_text", "markdown_code", "evidence_markdown"})
NOT_STREAMLIT = frozenset({"log", "logger", "logging", "warnings"})

# (file, expression) → why it holds no dataset text.
OWN_TEXT: dict[tuple[str, str], str] = {
    ("common.py", "label"): "run_picker's label: each caller passes a literal",
    ("common.py", "problem"): "data.problem: gpulens's sentence, the dataset path in markdown_code",
    ("common.py", "func.__name__"): "the name of a gpulens analysis function",
    ("common.py", "len(hosts)"): "a count",
    ("common.py", "len(hosts_all)"): "a count",
    ("common.py", "what"): "require_tables' callers pass literals",
    ("common.py", "how"): "require_tables' callers pass literals",
    ("communication.py", "fmt_share(top['share_last'])"): "a percentage",
    ("communication.py", "fmt_share(top['expected_share_last'])"): "a percentage",
    ("communication.py", "outliers.height"): "a count",
    ("communication.py", "balance['process_group'].n_unique()"): "a count",
    ("compare.py", "counted(len(names), 'run')"): "a count and a literal noun",
    ("interconnect.py", "[charts.LINK_NAMES.get(link, link) for link in links]"):
        "link kinds are the telemetry's column families (nvlink, xgmi, pcie), named by charts.LINK_NAMES",
    ("interconnect.py", "charts.LINK_NAMES.get(link, link)"): "as above",
    ("kernels.py", "outliers.height"): "a count",
    ("kernels.py", "queue.height"): "a count",
    ("kernels.py", "len(run_findings)"): "a count",
    ("kernels.py", "step"): "a profiler step number (int)",
    ("kernels.py", "format_duration_ns(kernel_runs['pixel_ns'][0])"): "a duration formatted by gpulens",
    ("kernels.py", "label"): "_stall_expander: a literal title and a percentage",
    ("kernels.py", "caption"): "_stall_expander's callers pass literals",
    ("kernels.py", "SEVERITY_BADGES[finding.severity]"): "a colour of gpulens's own table",
    ("kernels.py", "finding.severity"): "one of gpulens's severities (info, warning, critical)",
    ("live.py", "_age(age_s)"): "a duration formatted by gpulens",
    ("live.py", "refresh_s"): "a number of seconds chosen from literal options",
    ("live.py", "problem"): "data.problem: gpulens's sentence, the dataset path in markdown_code",
    ("live.py", "NO_TELEMETRY"): "a literal sentence",
    ("overview.py", "span"): "a duration formatted by gpulens",
    ("overview.py", "'; '.join(spans)"): "each span: markdown_code(run) and formatted times",
    ("overview.py", "BADGE_COLOURS[s]"): "a colour of gpulens's own table",
    ("overview.py", "n"): "a count",
    ("overview.py", "s"): "a severity",
    ("overview.py", "BADGE_COLOURS[finding.severity]"): "a colour of gpulens's own table",
    ("overview.py", "SEVERITY_ICONS[finding.severity]"): "an icon of gpulens's own table",
    ("overview.py", "finding.severity"): "a severity",
    ("overview.py", "finding.id"): "a finding id of gpulens's own registry",
    ("overview.py", "script"): "a page script path of the dashboard",
    ("overview.py", "title"): "a page title of the dashboard's own list",
    ("overview.py", "more"): "a count",
    ("overview.py", "finding_id.replace('_', ' ')"): "a finding id of gpulens's own registry",
    ("overview.py", "noun_for(more, 'finding')"): "a literal noun",
    ("overview.py", "severity"): "a severity",
    ("power.py", "DEFAULT_GPUS_MAX"): "a constant",
    ("power.py", "cap_w"): "a number from a number input",
    ("power.py", "counted(fleet.height, 'node')"): "a count and a literal noun",
    ("power.py", "counted(fleet['fleet_extra_nodes_at_p99'][0], 'more node')"): "a count and a literal noun",
    ("telemetry.py", "counted(len(picked), 'GPU')"): "a count and a literal noun",
    ("telemetry.py", "DEFAULT_GPUS_MAX"): "a constant",
}


def _is_streamlit_call(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in MARKDOWN_FIRST
            and ast.unparse(func.value) not in NOT_STREAMLIT)


def _markdown_arguments(call: ast.Call) -> list[ast.expr]:
    name = call.func.attr  # type: ignore[attr-defined]
    found = [call.args[0]] if call.args else []
    found += [k.value for k in call.keywords if k.arg in MARKDOWN_KEYWORDS
              or (k.arg == "options" and name in MARKDOWN_OPTIONS)]
    if name in MARKDOWN_OPTIONS and len(call.args) > 1:
        found.append(call.args[1])
    return found


def _unescaped(node: ast.expr) -> list[ast.expr]:
    """The parts of `node` that are neither literal text, a formatted
    number or time, nor an escape call."""
    if isinstance(node, ast.Constant):
        return []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ESCAPES:
        return []
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue) and value.format_spec is None:
                parts += _unescaped(value.value)
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _unescaped(node.left) + _unescaped(node.right)
    if isinstance(node, ast.IfExp):
        return _unescaped(node.body) + _unescaped(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and isinstance(node.args[0], ast.GeneratorExp) and isinstance(node.func.value, ast.Constant):
        return _unescaped(node.args[0].elt)  # "sep".join(f"..." for ...): the text of each item
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return []
    return [node]


def unescaped_markdown() -> list[tuple[str, int, str]]:
    """(file, line, expression) of every value put into a Streamlit
    Markdown argument that `_unescaped` does not clear."""
    found = []
    for path in SOURCES:
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(call, ast.Call) and _is_streamlit_call(call):
                for argument in _markdown_arguments(call):
                    found += [(path.name, part.lineno, ast.unparse(part)) for part in _unescaped(argument)]
    return sorted(found)


def test_widget_labels_pass_dataset_text_through_the_escape():
    unknown = [f"dashboard/.../{name}:{line}: {expression}" for name, line, expression in unescaped_markdown()
               if (name, expression) not in OWN_TEXT]
    assert unknown == []


def test_widget_labels_own_text_list_has_no_stale_entry():
    seen = {(name, expression) for name, _, expression in unescaped_markdown()}
    assert sorted(set(OWN_TEXT) - seen) == []


def test_widget_labels_check_finds_an_unescaped_name(tmp_path, monkeypatch):
    page = tmp_path / "page.py"
    page.write_text("import streamlit as st\n"
                    "with st.expander(f'The GPUs {job} held'):\n    pass\n"
                    "cols[0].metric(markdown_text(host), f'{power:.0f} W', help=f'host {host}')\n"
                    "st.tabs([name for name in runs])\n")
    monkeypatch.setitem(globals(), "SOURCES", [page])
    assert unescaped_markdown() == [("page.py", 2, "job"), ("page.py", 4, "host"),
                                    ("page.py", 5, "[name for name in runs]")]


# --- in a real browser ---------------------------------------------------------------------

RUN = "**bold** [a](javascript:alert(2)) <img src=x onerror=alert(1)> `tick"


@pytest.mark.slow
def test_widget_labels_a_hostile_run_name_shows_literally_in_chromium(tmp_path):
    """The overview names each trace run in Markdown: served by `gpulens
    dashboard` and opened in Chromium, a run named with bold, a javascript:
    link, an `<img onerror>` and a backtick shows as that text."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import free_port, write_telemetry, write_trace_table
    from test_dashboard_e2e import CHROMIUM, CHROMIUM_ARGS, _gpulens_dashboard_command, _serving, _wait_until_rendered

    playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    root = tmp_path / "data"
    rows = 50
    write_trace_table(root, RUN, "kernels", {
        "run": [RUN] * rows, "rank": [0] * rows, "name": ["gemm"] * rows, "category": ["compute"] * rows,
        "kind": ["kernel"] * rows, "stream": [7] * rows, "device": [0] * rows,
        "start_ns": [k * 1_000 for k in range(rows)], "end_ns": [k * 1_000 + 600 for k in range(rows)],
        "dur_ns": [600] * rows})
    write_trace_table(root, RUN, "runs", {"run": [RUN], "rank": [0], "world_size": [1], "host": ["node-a"],
                                          "source_path": ["rank0.json"], "source_format": ["kineto"],
                                          "time_base": ["trace"]})
    write_telemetry(root, "node-a", [{"ts": 1_767_225_600_000_000 + k * 1_000_000, "gpu_index": 0, "power_w": 300.0}
                                     for k in range(5)])
    port = free_port()
    with _serving(_gpulens_dashboard_command(root, port), port, tmp_path / "server.log") as url, \
            playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(url, wait_until="domcontentloaded")
            page.get_by_text("Traces:", exact=False).first.wait_for(timeout=60_000)
            _wait_until_rendered(page)
            shown = page.locator('[data-testid="stMarkdownContainer"]', has_text="Traces").first.inner_text()
            live = (page.locator('img[src="x"]').count(), page.locator('a[href^="javascript"]').count())
        finally:
            browser.close()
    assert (RUN in shown, live, dialogs) == (True, (0, 0), [])
