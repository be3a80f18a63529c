"""Trace ingest: kernel traces from any supported profiler → normalised tables.

    report = ingest_paths(["traces/job42/"], Path("gpulens-data"))
    for failure in report.failures:
        ...  # one line each: "<file>: <problem>"

Formats are told apart by content (`detect_format`): PyTorch profiler
(Kineto) JSON, Nsight Systems SQLite, rocprofv3 databases (rocpd) and CSV, NCCL INFO logs. Tables
land in `OUT/traces/run=<R>/<table>/<source-id>.parquet` (see `store`).
`TraceWatcher` (in `watch`) ingests files as a profiler finishes them.
"""

from __future__ import annotations

from gpulens.collector.ingest.batch import ingest_file, ingest_paths
from gpulens.collector.ingest.formats import FORMAT_MODULES, UNKNOWN_FORMAT, detect_format, format_modules
from gpulens.collector.ingest.results import FileFailure, FileResult, IngestReport, SkippedFile
from gpulens.collector.ingest.sources import find_traces
from gpulens.collector.ingest.store import source_id

__all__ = [
    "FORMAT_MODULES",
    "UNKNOWN_FORMAT",
    "FileFailure",
    "FileResult",
    "IngestReport",
    "SkippedFile",
    "detect_format",
    "find_traces",
    "format_modules",
    "ingest_file",
    "ingest_paths",
    "source_id",
]
