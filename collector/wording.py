"""Counts in words: "1 GPU", "8 GPUs", never "8 GPU(s)"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the noun plural unless the count is one
    (`plural`, where adding an s is wrong), the count with thousands
    separators: counted(1432, "kernel") is "1,432 kernels"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
