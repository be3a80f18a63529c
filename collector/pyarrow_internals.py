"""The one place gpulens imports a dependency's private modules: pyarrow's
compiled compute registry (`pyarrow._compute`) and Parquet reader and
writer (`pyarrow._parquet`).

Why: importing the public `pyarrow.compute` builds a Python wrapper and a
parsed docstring for each of its ~290 functions (21 ms and 1.7 MB), and
`pyarrow.parquet` imports `pyarrow.fs`, with the S3, GCS, Azure and HDFS
filesystems and OpenSSL (13 ms and 8.6 MB). Together about a sixth of
`gpulens ingest`'s fixed cost on a small trace, and 7-10 MB in each ingest
process and in the collector daemon, which need none of it
(docs/performance-history.md). `collector.arrow_compute` and
`collector.parquet_io` call what these modules hold, with the public
modules' defaults, and give the same results and bytes.

Where a pyarrow release moves them, each name here falls back to its
public home (or None, for the Parquet classes: `parquet_io` then uses
`pyarrow.parquet`), so users lose only the milliseconds; and
`tests/test_arrow_compute.py` and `tests/test_parquet_io.py` fail, so we
notice.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ParquetReader", "ParquetWriter", "compute_registry"]

try:
    from pyarrow import _compute as compute_registry
except ImportError:  # moved in a later pyarrow: the same names, public, at the import's cost
    import pyarrow.compute as compute_registry  # type: ignore[no-redef]

ParquetReader: Any
ParquetWriter: Any
try:
    from pyarrow._parquet import ParquetReader, ParquetWriter
except ImportError:  # a pyarrow without them: collector.parquet_io reads and writes through pyarrow.parquet
    ParquetReader = ParquetWriter = None
