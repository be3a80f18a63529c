"""Counts in words: "1 GPU", "8 GPUs", never "8 GPU(s)"; and text made safe
to show on a terminal (`visible_controls`)."""

from __future__ import annotations

import re


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the noun plural unless the count is one
    (`plural`, where adding an s is wrong), the count with thousands
    separators: counted(1432, "kernel") is "1,432 kernels"."""
    return f"{count:,} {noun_for(count, noun, plural)}"


def noun_for(count: int, noun: str, plural: str | None = None) -> str:
    """`noun` as `count` of it takes it, for text that sets the two apart
    ("3 more <code>gpu_idle</code> findings")."""
    return noun if count == 1 else plural or noun + "s"


# Characters a terminal acts on instead of showing: C0 and C1 controls, DEL,
# and the bidirectional overrides that reorder what follows them.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def visible_controls(text: str, keep_newlines: bool = False) -> str:
    """`text` for a terminal: each control character written as a visible
    escape (`\\x1b`, `\\x07`, `\\x00`, `\\n`), so a name cannot move the
    cursor, ring the bell, recolour the screen or split a table's row.
    `keep_newlines` leaves `\\n` as it is (an EXPLAIN plan's lines)."""
    if text.isprintable():
        return text
    return _INVISIBLE.sub(lambda match: _escape(match.group(), keep_newlines), text)


def _escape(char: str, keep_newlines: bool) -> str:
    if char == "\n" and keep_newlines:
        return char
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
