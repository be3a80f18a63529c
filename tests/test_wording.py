"""Counts in words, as reports, findings and messages write them."""

from __future__ import annotations

import pytest

from gpulens.collector.wording import counted, noun_for


@pytest.mark.parametrize(("count", "noun", "text"), [
    (1, "GPU", "1 GPU"),
    (8, "GPU", "8 GPUs"),
    (0, "row", "0 rows"),
    (1432, "kernel", "1,432 kernels"),
])
def test_a_count_takes_the_plural_unless_it_is_one(count: int, noun: str, text: str) -> None:
    assert counted(count, noun) == text


def test_an_irregular_plural_is_given() -> None:
    assert (counted(1, "process", "processes"), counted(3, "process", "processes")) == ("1 process", "3 processes")


def test_the_noun_alone_follows_the_count() -> None:
    assert (noun_for(1, "finding"), noun_for(3, "finding")) == ("finding", "findings")
