"""Shared fixtures: paths to the real traces in ../shared (optional)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """`../shared/traces`; tests using it skip where the folder is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return SHARED_TRACES


def write_trace_table(root: Path, run: str, table: str, columns: dict, source: str = "test") -> Path:
    """Write one trace table of `run` into the dataset at `root`, as ingest lays it out."""
    import pyarrow.parquet as pq

    from collector.ingest.base import build_table

    folder = root / "traces" / f"run={run}" / table
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{source}.parquet"
    pq.write_table(build_table(table, columns), path)
    return path


def write_telemetry(root: Path, host: str, rows: list[dict]) -> None:
    """Write telemetry rows (ts in epoch µs, gpu_index, metrics) for `host`."""
    from collector.writer import DatasetWriter

    writer = DatasetWriter(root, host)
    for row in rows:
        writer.add("telemetry", {"gpu_uuid": f"GPU-{row['gpu_index']}", "vendor": "sim", **row})
    writer.flush()
