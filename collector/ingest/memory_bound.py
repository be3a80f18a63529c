"""Address-space bounds for the processes that read traces.

An ingest worker and the collector's trace watcher each run with their
address space capped (RLIMIT_AS): a trace that needs more (a gzip bomb, a
corrupt length) fails alone with MemoryError, and the machine, the other
files and the collector's sampling go on. Each bound is an environment
variable's value where set, else a share of the machine's memory, never
under a floor.
"""

from __future__ import annotations

import os
from fractions import Fraction


def bound_bytes(variable: str, share: Fraction, floor_bytes: int) -> int | None:
    """`variable`'s value in bytes where it is a positive integer, else
    `share` of the machine's memory, at least `floor_bytes` (None: the
    machine's size is unknown)."""
    override = os.environ.get(variable, "")
    if override.isdigit() and int(override) > 0:
        return int(override)
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(floor_bytes, int(physical * share))


def limit_address_space(memory_bytes: int | None) -> None:
    """Cap this process's address space at `memory_bytes` (never above a
    hard limit already set); past it an allocation fails with MemoryError."""
    if memory_bytes is None:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        memory_bytes = min(memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, hard))
