"""deploy/: the Kubernetes manifests parse, their container runs the command
docs/jobs.md documents, and the Dockerfile installs what the docs say."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = REPO_ROOT / "deploy"
DOCS = (REPO_ROOT / "docs" / "jobs.md").read_text(encoding="utf-8")
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def _daemonset() -> dict:
    return next(doc for path in MANIFESTS for doc in _documents(path) if doc["kind"] == "DaemonSet")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_parses_into_kubernetes_objects(path: Path) -> None:
    documents = _documents(path)
    assert documents
    assert all({"apiVersion", "kind", "metadata"} <= set(doc) for doc in documents)


def test_daemonset_runs_the_documented_collect_command() -> None:
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    command = shlex.join(container["command"])
    assert command.startswith("gpulens collect ")
    assert f"    {command}\n" in DOCS


def test_daemonset_reads_the_hosts_processes_through_a_read_only_proc() -> None:
    spec = _daemonset()["spec"]["template"]["spec"]
    container = spec["containers"][0]
    proc_volume = next(v["name"] for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/proc")
    mount = next(m for m in container["volumeMounts"] if m["name"] == proc_volume)
    assert spec["hostPID"] is True
    assert mount["readOnly"] is True
    assert container["command"][container["command"].index("--proc-root") + 1] == mount["mountPath"]


def test_dockerfile_installs_the_package_spec_the_docs_name() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    installed = re.findall(r'pip install --no-cache-dir "([^"]+)"', dockerfile)
    documented = re.findall(r'pip install "(gpulens[^"]*)"', DOCS)
    assert installed == ["gpulens==${GPULENS_VERSION}"]
    assert documented == installed


@pytest.mark.parametrize("script", sorted((DEPLOY / "slurm").glob("*.sh")), ids=lambda path: path.name)
def test_slurm_scripts_are_valid_sh(script: Path) -> None:
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
