"""Run names from the scheduler: under Slurm, `gpulens ingest` and
`collect --watch-traces` name a run `slurm-<job id>` by default."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.collector.cli import ingest
from gpulens.collector.ingest.sources import default_run_name
from gpulens.collector.ingest.watch import TraceWatcher
from test_ingest_nsys import build_export

REPO_ROOT = Path(__file__).resolve().parents[1]
KINETO = sorted((REPO_ROOT / "sample_traces" / "demo-training" / "raw" / "kineto").glob("rank-0.*"))


def _export_with_env(path: Path, env: dict[str, str]) -> Path:
    build_export(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, value TEXT)")
        conn.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, NULL, ?, ?)", list(env.items()))
    conn.close()
    return path


def test_default_run_name_is_the_slurm_job_of_the_environment(tmp_path: Path) -> None:
    trace = tmp_path / "traces" / "rank0.json"
    assert default_run_name([trace], [trace], {"SLURM_JOB_ID": "81234"}) == "slurm-81234"


def test_default_run_name_takes_the_job_an_nsys_export_recorded_over_the_environment(tmp_path: Path) -> None:
    export = _export_with_env(tmp_path / "report.sqlite", {"Hostname": "node-a", "SLURM_JOB_ID": "555"})
    assert default_run_name([export], [export], {"SLURM_JOB_ID": "81234"}) == "slurm-555"


def test_default_run_name_outside_slurm_is_the_files_stem(tmp_path: Path) -> None:
    export = _export_with_env(tmp_path / "report.sqlite", {"Hostname": "node-a"})
    assert default_run_name([export], [export], {}) == "report"


def test_ingest_under_slurm_names_the_run_after_the_job(tmp_path: Path) -> None:
    if not KINETO:
        pytest.skip("sample_traces/demo-training is not present")
    trace = Path(shutil.copy(KINETO[0], tmp_path))
    result = CliRunner().invoke(ingest, [str(trace), "--out", str(tmp_path / "data"), "-q"], env={"SLURM_JOB_ID": "777"})
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "data" / "traces").iterdir()] == ["run=slurm-777"]


def test_watched_traces_under_slurm_default_to_the_jobs_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert TraceWatcher(tmp_path, tmp_path / "data").run == "slurm-4242"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert TraceWatcher(tmp_path, tmp_path / "data").run == tmp_path.name
