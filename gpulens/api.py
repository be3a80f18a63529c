"""gpulens from Python: a dataset opened once, its questions asked as
Polars frames.

    import gpulens

    ds = gpulens.open("gpulens-data")
    ds.analysis("time_breakdown")                   # any view of analysis/sql/
    ds.analysis("short_kernels", short_kernel_max_ns=20_000)
    ds.sql("select host, max(power_w) from telemetry group by host")
    ds.findings()                                   # the report's findings

Each call runs the same SQL as `gpulens query` and `gpulens report`, on
one DuckDB connection the dataset keeps open until `close()` (or the end
of a `with` block).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from gpulens.analysis.findings import Finding


class Dataset:
    """A gpulens dataset (a folder of Parquet tables), open for questions."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection) -> None:
        self.path = path
        self._con: duckdb.DuckDBPyConnection | None = con

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, with a view per table and per analysis."""
        if self._con is None:
            from gpulens.collector.errors import UsageError

            raise UsageError(f"{self.path}: the dataset was closed")
        return self._con

    def analyses(self) -> list[str]:
        """The names `analysis` takes: one per file of analysis/sql/."""
        from gpulens.analysis.registry import load_analyses

        return sorted(load_analyses())

    def params(self) -> dict[str, Any]:
        """Every threshold an analysis takes, with its default."""
        from gpulens.analysis.registry import all_params

        return dict(all_params())

    def analysis(self, name: str, **params: Any) -> pl.DataFrame:
        """The view `name` of analysis/sql/ as a Polars frame, its thresholds
        overridden by `params` (an unknown name raises UsageError)."""
        from gpulens.analysis.registry import run_analysis

        return run_analysis(self.connection, name, **params)

    def sql(self, text: str) -> pl.DataFrame:
        """The result of `text` (DuckDB SQL over the tables and the analysis
        views) as a Polars frame; as `gpulens query`, it writes no file."""
        import polars as pl

        from gpulens.analysis.dataset import run_sql
        from gpulens.analysis.registry import create_views_named_in

        create_views_named_in(self.connection, text)
        return pl.from_arrow(run_sql(self.connection, text))

    def findings(self) -> list[Finding]:
        """The report's findings, most severe first."""
        from gpulens.analysis.all_findings import all_findings

        return all_findings(self.connection)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._con is None else "open"
        return f"<gpulens.Dataset {str(self.path)!r} ({state})>"


def open(path: str | Path) -> Dataset:  # noqa: A001  # gpulens.open, as the docs name it
    """Open the dataset at `path` (what `gpulens collect`, `ingest` or
    `demo` wrote). A missing folder, or a folder of raw traces, raises
    DatasetError saying what to do."""
    from gpulens.analysis.dataset import open_dataset

    folder = Path(path).expanduser()
    return Dataset(folder, open_dataset(folder, analyses_on_demand=True))
