"""gpulens: where a multi-GPU job's time, watts and bandwidth go.

The installed package holds three parts, with dependencies pointing one
way: `gpulens.collector` (sampling and trace ingest) ← `gpulens.analysis`
(DuckDB views and findings over the dataset) ← `gpulens.dashboard` (the
Streamlit app, the reports and the `gpulens` command).

From Python (a notebook, a script): `gpulens.open(path)` gives a
`Dataset` whose `.analysis(name, **params)`, `.sql(text)` and
`.findings()` answer the same questions as the commands (see
docs/notebook.md).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulens.api import Dataset, open  # noqa: A004

try:
    __version__ = version("gpulens")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Dataset", "__version__", "open"]


def __getattr__(name: str) -> Any:
    # `import gpulens` stays cheap (the collector daemon imports its parts);
    # the API and its DuckDB and Polars load at first use.
    if name in ("open", "Dataset"):
        from gpulens import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpulens' has no attribute {name!r}")
