"""collector.ingest.memory_bound: the address-space bounds of the trace readers."""

from __future__ import annotations

import os
from fractions import Fraction

from gpulens.collector.ingest.memory_bound import bound_bytes
from gpulens.collector.ingest.pool import WORKER_MIN_MEMORY_BYTES, worker_memory_bytes
from gpulens.collector.ingest.watch_process import WATCH_MEMORY_VARIABLE, watch_memory_bytes

MACHINE_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_variable_sets_the_bound_in_bytes(monkeypatch) -> None:
    monkeypatch.setenv(WATCH_MEMORY_VARIABLE, "734003200")
    assert watch_memory_bytes() == 734_003_200


def test_a_variable_that_is_not_a_positive_integer_is_ignored(monkeypatch) -> None:
    monkeypatch.setenv("GPULENS_TEST_BOUND", "2G")
    assert bound_bytes("GPULENS_TEST_BOUND", Fraction(1, 4), 0) == MACHINE_BYTES // 4


def test_workers_share_three_quarters_of_the_machine_above_the_floor(monkeypatch) -> None:
    monkeypatch.delenv("GPULENS_INGEST_WORKER_MEMORY_BYTES", raising=False)
    assert worker_memory_bytes(2) == max(WORKER_MIN_MEMORY_BYTES, MACHINE_BYTES * 3 // 8)
    assert worker_memory_bytes(10_000) == WORKER_MIN_MEMORY_BYTES
