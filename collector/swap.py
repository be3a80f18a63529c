"""Swapping two directories in one step: Linux's `renameat2(2)` with
`RENAME_EXCHANGE` (Linux 3.15, glibc 2.28), called through ctypes, as
Python's `os` module does not offer it.

After `exchange(a, b)` each path names the other's directory, and no
process ever finds either path missing or half-swapped: a reader that
lists `b` lists either the old directory or the new one, whole. A file
system that cannot (NFS, some FUSE file systems), or a C library without
the call, raises `SwapUnsupported`; the caller falls back.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# What renameat2 answers where the file system or kernel cannot exchange.
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EPERM}


class SwapUnsupported(OSError):
    """This system cannot exchange two directories atomically."""


def _renameat2():
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None


_RENAMEAT2 = _renameat2()


def exchange(a: Path, b: Path) -> None:
    """Swap the directories at `a` and `b` (both exist, one file system)."""
    if _RENAMEAT2 is None:
        raise SwapUnsupported(errno.ENOSYS, "renameat2 is not in this C library", str(a))
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return
    code = ctypes.get_errno()
    kind = SwapUnsupported if code in _UNSUPPORTED else OSError
    raise kind(code, os.strerror(code), str(a), None, str(b))
