"""The import graph of the gpulens package: no cycles, and the layers
point one way (collector ← analysis ← dashboard).

The graph is grimp's (the library behind import-linter), built from the
source: every import counts, those inside functions and under
TYPE_CHECKING too, since each is a dependency a reader must follow.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Runs in a child process: grimp finds a package by importing it, and the
# source folders install under one name, so the child sees a folder that
# lays them out as installed.
_GRAPH_PROGRAM = r"""
import json, sys
import grimp

graph = grimp.build_graph(sys.argv[1], cache_dir=None)
edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in sorted(graph.modules)}
layers = sys.argv[2:]
illegal = sorted((d.importer, d.imported) for d in graph.find_illegal_dependencies_for_layers(layers=layers)) if layers else []
print(json.dumps({"edges": edges, "illegal": illegal}))
"""


def import_graph(root: Path, package: str, layers: list[str]) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", _GRAPH_PROGRAM, package, *layers], cwd=root, env={"PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, []):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def gpulens_graph(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("installed")
    package = root / "gpulens"
    package.mkdir()
    for path in (REPO_ROOT / "gpulens").glob("*.py"):
        (package / path.name).symlink_to(path)
    for part in ("collector", "analysis", "dashboard"):
        (package / part).symlink_to(REPO_ROOT / part, target_is_directory=True)
    return import_graph(root, "gpulens", ["gpulens.dashboard", "gpulens.analysis", "gpulens.collector"])


def test_the_graph_holds_every_module(gpulens_graph: dict) -> None:
    # Guards the tests below: a graph of a few modules would have no cycle.
    modules = set(gpulens_graph["edges"])
    assert {"gpulens.collector.ingest.pool", "gpulens.analysis.registry", "gpulens.dashboard.report.build",
            "gpulens.dashboard.app_pages.kernels"} <= modules
    assert len(modules) > 120


def test_gpulens_has_no_import_cycle(gpulens_graph: dict) -> None:
    assert cycles(gpulens_graph["edges"]) == []


def test_collector_analysis_and_dashboard_import_one_way(gpulens_graph: dict) -> None:
    assert gpulens_graph["illegal"] == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "loop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from loop.b import helper\n")
    (package / "b.py").write_text("def helper():\n    from loop import a\n")
    (package / "c.py").write_text("from loop import b\n")
    assert cycles(import_graph(tmp_path, "loop", [])["edges"]) == [["loop.a", "loop.b"]]


def _private_imports(path: Path) -> list[str]:
    """The private modules of other packages that `path` imports (a name
    with a leading underscore, below a top-level package not ours nor
    Python's own)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            top, *rest = module.split(".")
            if top in ("gpulens", "__future__") or top in sys.stdlib_module_names:
                continue
            if any(part.startswith("_") and not part.startswith("__") for part in rest):
                found.append(module)
    return sorted({module.split("._")[0] + "._" + module.split("._")[1].split(".")[0] for module in found})


def test_only_pyarrow_internals_imports_a_dependencys_private_modules() -> None:
    offenders = {}
    for part in ("gpulens", "collector", "analysis", "dashboard"):
        for path in (REPO_ROOT / part).rglob("*.py"):
            found = _private_imports(path)
            if found and path != REPO_ROOT / "collector" / "pyarrow_internals.py":
                offenders[str(path.relative_to(REPO_ROOT))] = found
    assert offenders == {}
    assert _private_imports(REPO_ROOT / "collector" / "pyarrow_internals.py") == ["pyarrow._compute",
                                                                                 "pyarrow._parquet"]
