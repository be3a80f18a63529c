"""How numbers read: one duration format for findings, reports and the dashboard."""

from __future__ import annotations

import pytest

from gpulens.analysis.findings import format_duration_ns
from gpulens.dashboard.report.format import format_subjects, format_value


@pytest.mark.parametrize(("ns", "text"), [
    (1_234_567_890, "1.23 s"),
    (38_240_000, "38.2 ms"),
    (388_200, "388 µs"),
    (12, "12 ns"),
    (1_234_000_000_000, "1,234 s"),
    (-2_500_000, "-2.50 ms"),
    (0, "0 ns"),
])
def test_duration_has_three_significant_digits_in_the_largest_unit(ns: float, text: str) -> None:
    assert format_duration_ns(ns) == text


def test_missing_duration_reads_as_the_caller_says() -> None:
    assert (format_duration_ns(None), format_duration_ns(float("nan"), missing="–")) == ("an unknown time", "–")


def test_report_formats_ns_columns_as_durations() -> None:
    assert format_value("exposed_ns", 38_240_000) == "38.2 ms"


@pytest.mark.parametrize("column", ["start_ns", "window_end_ns", "ts_ns", "telemetry_first_ns"])
def test_report_formats_epoch_ns_instants_as_utc_times(column: str) -> None:
    assert format_value(column, 1_767_229_205_752_000_123) == "2026-01-01 01:00:05.752 UTC"


def test_report_keeps_trace_relative_instants_as_read() -> None:
    assert format_value("start_ns", 38_240_000) == "38240000"


@pytest.mark.parametrize(("column", "value", "text"), [
    ("extra_nodes_at_p99", 0.000672, "+0.00"),
    ("capped_extra_nodes_at_p99", 1.6789, "+1.68"),
    ("fleet_extra_nodes_at_p99", -0.25, "-0.25"),
])
def test_report_formats_extra_nodes_as_signed_two_decimals_like_the_dashboard(column: str, value: float, text: str) -> None:
    assert format_value(column, value) == text


def test_subjects_that_differ_in_rank_read_as_rank_ranges() -> None:
    subjects = [{"run": "train", "rank": rank} for rank in (7, 2, 3, 4, 6)]
    assert format_subjects(subjects) == "run train, ranks 2-4, 6-7"


def test_gpus_of_one_host_read_as_index_ranges() -> None:
    subjects = [{"host": "node-07", "gpu_index": index} for index in (0, 1, 5)]
    assert format_subjects(subjects) == "host node-07, GPUs 0-1, 5"


def test_subjects_that_differ_in_more_than_one_key_are_listed_in_turn() -> None:
    subjects = [{"host": "node-01", "gpu_index": 3}, {"host": "node-02", "gpu_index": 0}]
    assert format_subjects(subjects) == "host node-01, gpu index 3; host node-02, gpu index 0"


def test_report_formats_a_bytes_column_as_a_size() -> None:
    # memcpy_stats' and collectives' `bytes`, beside mean_bytes.
    assert (format_value("bytes", 3 * 2**30), format_value("mean_bytes", 512)) == ("3.0 GiB", "512 B")
