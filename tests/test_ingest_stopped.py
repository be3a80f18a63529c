"""An ingest stopped by a signal leaves no worker process running and no
staging file behind; what a killed one left, the next ingest removes."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.ingest import store
from collector.ingest.store import STAGING_DIR
from tests.test_ingest import kineto_json, write


def test_a_write_stopped_while_staging_leaves_no_staging_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collector.ingest import kineto

    parsed = kineto.parse(write(tmp_path / "rank0.json", kineto_json()), "r")

    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_fsync_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.write_source(tmp_path / "out", "r", "source", parsed.tables)
    assert list((tmp_path / "out" / STAGING_DIR).iterdir()) == []
