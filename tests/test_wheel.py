"""The wheel people install: one top-level package, gpulens, that works
outside the source tree (its SQL files and schemas inside it)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # This environment's setuptools (the test extra pins one that reads
    # ext-modules from pyproject.toml): no download, as CI has it already.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(REPO_ROOT)], check=True, timeout=600, capture_output=True)
    (built,) = out.glob("gpulens-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel alone; its
    dependencies come from this environment's site-packages, by path."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # A plain path line: this environment's packages, without running its
    # .pth files (so not the editable install of the source tree).
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _run(venv: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / "python", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}
        names = archive.namelist()
    assert tops == {"gpulens"}
    assert "gpulens/analysis/sql/time_breakdown.sql" in names
    assert "gpulens/dashboard/report/schema/report.schema.json" in names
    assert "gpulens/dashboard/app_pages/overview.py" in names


@pytest.mark.parametrize("name", ["collector", "analysis", "dashboard"])
def test_no_generic_top_level_name_is_importable(installed: Path, tmp_path: Path, name: str) -> None:
    done = _run(installed, f"import {name}", tmp_path)
    assert done.returncode == 1 and f"No module named '{name}'" in done.stderr


def test_the_installed_package_comes_from_site_packages_not_the_source(installed: Path, tmp_path: Path) -> None:
    done = _run(installed, "import gpulens.collector, gpulens.analysis.registry as r; "
                           "print(gpulens.collector.__file__); print(len(r.load_analyses()))", tmp_path)
    where, analyses = done.stdout.split()
    assert Path(where).is_relative_to(installed) and int(analyses) == len(list((REPO_ROOT / "analysis" / "sql").glob("*.sql")))


def test_the_installed_command_writes_a_report_on_the_sample(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run([installed / "bin" / "gpulens", "report", str(REPO_ROOT / "sample_traces" / "demo-training"),
                           "--format", "md"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "straggler" in done.stdout.lower()
