"""The headline metrics' own words (analysis.metrics)."""

from __future__ import annotations

from gpulens.analysis.metrics import metric


def test_tklqt_per_step_says_it_is_a_sum_over_kernels_that_can_exceed_the_step() -> None:
    # Shown beside a step time of 15 ms, 400 ms read as a bug without it.
    label = metric("tklqt_per_step").label
    assert label.startswith("Launch and queuing time per step, summed over its kernels")
    assert "many times the step time" in label
