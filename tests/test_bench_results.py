"""bench/results.py writes what a benchmark measured, and bench/make_docs.py
makes the docs' tables from the latest such file."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import bench_module

REPO_ROOT = Path(__file__).resolve().parents[1]

results = bench_module("results")
make_docs = bench_module("make_docs")

MACHINE = {"cpus": 2, "model": "AMD EPYC", "memory_bytes": 24 * 2**30, "load_average": [8.5, 7.25, 4.0], "python": "3.11.7"}


def _record(date: str, value: float) -> "results.Record":
    record = results.Record("collector_overhead", {"gpus": 16, "hz": 10.0, "seconds": 5.0, "nvml": None}, date,
                            "0123456789abcdef", MACHINE)
    record.add({"measure": "(b) bytes per value", "value": value, "unit": "bytes", "target": "≤ 1.5", "met": value <= 1.5})
    return record


def test_results_file_holds_bench_date_commit_machine_params_rows(tmp_path: Path) -> None:
    path = _record("2026-11-29T07:30:00Z", 1.17).write(tmp_path)
    assert path.name == "collector_overhead-2026-11-29T07-30-00Z.json"
    assert list(json.loads(path.read_text())) == ["bench", "date", "commit", "machine", "params", "rows"]


def test_results_latest_is_the_last_started_run(tmp_path: Path) -> None:
    _record("2026-11-29T09:00:00Z", 1.30).write(tmp_path)
    _record("2026-11-29T07:30:00Z", 1.17).write(tmp_path)
    assert results.latest("collector_overhead", tmp_path)["rows"][0]["value"] == 1.30


def test_results_latest_of_a_bench_never_run_is_none(tmp_path: Path) -> None:
    assert results.latest("analysis_latency", tmp_path) is None


def test_results_start_records_the_load_average_at_start() -> None:
    record = results.start("ingest_vs_hta", {})
    assert len(record.machine["load_average"]) == 3


def test_make_docs_renders_a_region_from_the_latest_file(tmp_path: Path) -> None:
    _record("2026-11-29T07:30:00Z", 1.6).write(tmp_path)
    page = "before\n<!-- bench:collector_overhead -->\nold figures\n<!-- /bench:collector_overhead -->\nafter\n"
    assert make_docs.render(page, tmp_path) == (
        "before\n<!-- bench:collector_overhead -->\n"
        "Run 2026-11-29T07:30:00Z, commit `0123456789ab`, on AMD EPYC, 2 cores, 24.0 GiB; "
        "load average (1, 5, 15 min) at start 8.50, 7.25, 4.00.\n\n"
        "Options: `--gpus 16` `--hz 10.0` `--seconds 5.0`.\n\n"
        "| measure | result | target | verdict |\n|---|---|---|---|\n"
        "| (b) bytes per value | 1.60 bytes | ≤ 1.5 | **missed** |\n"
        "<!-- /bench:collector_overhead -->\nafter\n")


def test_make_docs_says_where_a_bench_has_no_results_yet(tmp_path: Path) -> None:
    page = "<!-- bench:nvml_read_costs -->\n<!-- /bench:nvml_read_costs -->\n"
    assert make_docs.render(page, tmp_path) == (
        "<!-- bench:nvml_read_costs -->\nNo results file yet: `python bench/nvml_read_costs.py` writes one.\n"
        "<!-- /bench:nvml_read_costs -->\n")
