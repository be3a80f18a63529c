"""Counts in words: "1 GPU", "8 GPUs", never "8 GPU(s)"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the noun plural unless the count is one
    (`plural`, where adding an s is wrong), the count with thousands
    separators: counted(1432, "kernel") is "1,432 kernels"."""
    return f"{count:,} {noun_for(count, noun, plural)}"


def noun_for(count: int, noun: str, plural: str | None = None) -> str:
    """`noun` as `count` of it takes it, for text that sets the two apart
    ("3 more <code>gpu_idle</code> findings")."""
    return noun if count == 1 else plural or noun + "s"
