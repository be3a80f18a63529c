"""The trace formats gpulens reads, and telling them apart by content.

Each format is a module in this package with `FORMAT`, `sniff(head, path)`
and `parse(path, run)` (see `base`). Modules are imported on first use, and
one that is not there (yet) is skipped, so a partial install still reads
the formats it has.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import open_maybe_gzip

# Sniffed in this order: cheap, unambiguous checks first.
FORMAT_MODULES: tuple[str, ...] = ("kineto", "rocprof_json", "nsys", "rocpd", "rocprof", "nccl_log")
HEAD_BYTES = 64 * 1024
UNKNOWN_FORMAT = (
    "unknown trace format (expected Kineto JSON, Nsight Systems SQLite, a rocprofv3 database, CSV or JSON, or an NCCL log)"
)

_loaded: dict[str, ModuleType | None] = {}


def format_modules() -> list[ModuleType]:
    """The format modules that can be imported, in sniffing order."""
    return [module for module in map(_load, FORMAT_MODULES) if module is not None]


def _load(name: str) -> ModuleType | None:
    """One format module, imported on first use; None where it is not there."""
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as error:
            # Only "that module is not there"; a module that exists but
            # fails to import is a bug to surface, not a format to skip.
            if error.name != f"{__package__}.{name}":
                raise
            _loaded[name] = None
    return _loaded[name]


def module_for(format_name: str) -> ModuleType:
    """The module that parses `format_name` (each module is named after its format)."""
    module = _load(format_name) if format_name in FORMAT_MODULES else None
    if module is None:
        raise KeyError(format_name)
    return module


def read_head(path: Path) -> bytes:
    """The first 64 KiB of the decompressed content."""
    try:
        with open_maybe_gzip(path) as handle:
            return handle.read(HEAD_BYTES)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as error:
        raise TraceError(str(path), f"cannot read: {error.strerror}") from None
    except (EOFError, OSError, ValueError) as error:
        raise TraceError(str(path), f"truncated or corrupt gzip ({error})") from None


def detect_format(path: str | Path) -> str:
    """The format of a trace file, from its content (not its name)."""
    path = Path(path)
    head = read_head(path)
    if not head.strip():
        raise TraceError(str(path), "empty file")
    # Each module is imported only when the ones before it have said no:
    # a Kineto file never pays for the NCCL log's regular expressions.
    for name in FORMAT_MODULES:
        module = _load(name)
        if module is not None and module.sniff(head, path):
            return module.FORMAT
    raise TraceError(str(path), UNKNOWN_FORMAT)
