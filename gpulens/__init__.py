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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulens.api import Dataset, open  # noqa: A004

__all__ = ["Dataset", "__version__", "open"]


def __getattr__(name: str) -> Any:
    # `import gpulens` stays cheap (the collector daemon imports its parts);
    # the API and its DuckDB and Polars load at first use.
    if name in ("open", "Dataset"):
        from gpulens import api

        return getattr(api, name)
    if name == "__version__":
        # Read at first use: importlib.metadata costs every command ~40 ms
        # and a few MiB (email, zipfile...), forked ingest workers included.
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("gpulens")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'gpulens' has no attribute {name!r}")
