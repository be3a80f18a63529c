"""gpulens: where a multi-GPU job's time, watts and bandwidth go.

The installed package holds three parts, with dependencies pointing one
way: `gpulens.collector` (sampling and trace ingest) ← `gpulens.analysis`
(DuckDB views and findings over the dataset) ← `gpulens.dashboard` (the
Streamlit app, the reports and the `gpulens` command).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpulens")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
