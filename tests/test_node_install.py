"""What `pip install gpulens` (no extra) gives a node is enough for the
node's commands.

The test environment holds every extra (Streamlit, pyspark, HTA and their
trees), so a module gpulens imports but does not declare is found here and
missing on a user's machine. Each command below runs with only gpulens,
its core dependencies and what they require on its path, as on a fresh
node (bench/node_site.py).
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "sample_traces" / "demo-training"



def _run_on_a_node(python: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from gpulens.dashboard.cli import entry; sys.exit(entry(sys.argv[1:]))"
    return subprocess.run([str(python), "-c", code, *arguments], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["streamlit", "pandas", "pyspark", "hta"])
def test_a_module_of_an_extra_is_not_found_on_the_node(node_python: Path, tmp_path: Path, name: str) -> None:
    # Else the commands below would prove nothing: this environment has them.
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is not None)"
    done = subprocess.run([str(node_python), "-c", code], cwd=tmp_path)
    assert done.returncode == 0


def test_numpy_is_a_core_dependency_as_ingest_and_the_collector_import_it(node_python: Path, tmp_path: Path) -> None:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('numpy') is None)"
    assert subprocess.run([str(node_python), "-c", code], cwd=tmp_path).returncode == 0


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
def test_a_node_command_runs_with_the_core_dependencies_alone(node_python: Path, command: str, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _run_on_a_node(node_python, *(a.format(port=port) for a in NODE_COMMANDS[command]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_command_needing_an_extra_names_it_on_a_node(node_python: Path, tmp_path: Path) -> None:
    done = _run_on_a_node(node_python, "dashboard", str(SAMPLE), cwd=tmp_path)
    assert done.returncode != 0
    assert "gpulens[dashboard]" in done.stderr and "Traceback" not in done.stderr
