"""What `pip install gpulens` (no extra) gives a node is enough for the
node's commands.

The test environment holds every extra (Streamlit, pyspark, HTA and their
trees), so a module gpulens imports but does not declare is found here and
missing on a user's machine. Each command below runs with only gpulens,
its core dependencies and what they require on its path, as on a fresh
node.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "sample_traces" / "demo-training"


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _core_closure() -> set[str]:
    """gpulens and every distribution its core dependencies pull in, without extras."""
    wanted, seen = ["gpulens"], set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        wanted.extend(_requirement_name(r) for r in requires if "extra ==" not in r.replace('"', "").replace("'", ""))
    return seen


@pytest.fixture(scope="module")
def node_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding, by links, gpulens and the distributions a node
    install has (the core closure), and nothing else: with `python -S`
    and this folder as its path, a module of any other distribution is
    not found, as on a fresh node."""
    site = tmp_path_factory.mktemp("node-site")
    package = site / "gpulens"
    package.mkdir()
    for path in (REPO_ROOT / "gpulens").glob("*.py"):
        (package / path.name).symlink_to(path)
    for part in ("collector", "analysis", "dashboard"):
        (package / part).symlink_to(REPO_ROOT / part, target_is_directory=True)
    for name in _core_closure() - {"gpulens"}:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in distribution.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth") or (site / top).exists():
                continue
            (site / top).symlink_to(Path(distribution.locate_file(top)))
    return site


def _run_on_a_node(site: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from gpulens.dashboard.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-S", "-c", code, *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(site)})


@pytest.mark.parametrize("name", ["streamlit", "pandas", "pyspark", "hta"])
def test_a_module_of_an_extra_is_not_found_on_the_node(node_site: Path, tmp_path: Path, name: str) -> None:
    # Else the commands below would prove nothing: this environment has them.
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is not None)"
    done = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(node_site)})
    assert done.returncode == 0


def test_numpy_is_a_core_dependency_as_ingest_and_the_collector_import_it() -> None:
    assert "numpy" in _core_closure()


NODE_COMMANDS = {
    "report": ["report", str(SAMPLE), "--format", "md", "-o", "report.md"],
    "ingest": ["ingest", str(SAMPLE / "raw" / "kineto"), "--out", "traces", "--run", "train"],
    "collect": ["collect", "--backend", "sim", "--duration", "1", "--interval", "0.1", "--out", "telemetry",
                "--metrics-address", "127.0.0.1:{port}"],
    "import": ["import", str(REPO_ROOT / "tests" / "data" / "import" / "nvidia-smi-2gpu.csv"), "--out", "imported"],
    "query": ["query", str(SAMPLE), "select count(*) as kernels from kernels"],
    "demo": ["demo", "--out", "demo"],
}


@pytest.mark.parametrize("command", NODE_COMMANDS)
def test_a_node_command_runs_with_the_core_dependencies_alone(node_site: Path, command: str, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _run_on_a_node(node_site, *(a.format(port=port) for a in NODE_COMMANDS[command]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_command_needing_an_extra_names_it_on_a_node(node_site: Path, tmp_path: Path) -> None:
    done = _run_on_a_node(node_site, "dashboard", str(SAMPLE), cwd=tmp_path)
    assert done.returncode != 0
    assert "gpulens[dashboard]" in done.stderr and "Traceback" not in done.stderr
