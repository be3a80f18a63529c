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
