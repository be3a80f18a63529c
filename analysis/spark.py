"""A gpulens dataset on Apache Spark: the same views as `open_dataset`.

    con = open_spark_dataset("gpulens-data", master="spark://head:7077")
    run_analysis(con, "time_breakdown")          # the SQL file, translated
    con.sql("select host, max(power_w) from telemetry group by host").fetchall()

The dataset folder is read as it is, by any path Spark reads (a local or
shared file system, `s3a://`, `hdfs://`): every executor must see it. The
node tables (telemetry, events, processes, devices) are read with their
hive partitions discovered, `host=` and `date=` as strings, so a filter
on `host` or `date` skips the other folders' files; `date` is then a column
of those tables on Spark (DuckDB reads them with hive_partitioning off).
Trace tables carry `run` in their files. Each analysis of `analysis/sql/`
is a temporary view, made from its DuckDB SQL by `spark_sql.to_spark`, or
from its Spark twin.

`con.sql()` and `con.execute()` take DuckDB SQL too (translated the same
way) and give a result with DuckDB's `fetchall`, `fetchone` and
`to_arrow_table`, so the analysis functions run on either engine.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gpulens.analysis.dataset import NULL_FILLED_TABLES, TABLE_GLOBS, TABLES
from gpulens.analysis.spark_sql import to_spark, twin, with_params
from gpulens.collector.errors import DatasetError, QueryError, one_line
from gpulens.collector.schema import NODE_SCHEMAS, TRACE_SCHEMAS
from gpulens.collector.spark_env import spark_session

if TYPE_CHECKING:
    import polars as pl
    from pyspark.sql import DataFrame, SparkSession

# The node tables, hive-partitioned by host= (and date=).
NODE_TABLES = ("telemetry", "devices", "events", "processes")
# Analyses that others build on and whose plans Spark cannot inline beneath
# them: each becomes a local checkpoint (DataFrame.localCheckpoint, not
# eager: its rows are computed when a query first reads them, then kept by
# the executors), so that the views above see one leaf, not the plan
# beneath. Caching is not enough: Spark's analyzer still walks the whole
# inlined plan (DeduplicateRelations). DuckDB plans the same SQL as written.
MATERIALISED_VIEWS = {
    "power_trace_gpus": "its evidence joins, inlined at each of power_trace_segments' six reads of it and "
                        "again beneath step_energy's, took Spark's analyzer past a 1 GiB driver heap",
    "power_trace_segments": "step_energy reads it twice (its `segments as materialized` CTE, which Spark inlines)",
}


def open_spark_dataset(path: str | Path, master: str = "local[*]", session: SparkSession | None = None,
                       with_analyses: bool = True) -> SparkConnection:
    """A SparkConnection with one temporary view per dataset table (and
    analysis, with `with_analyses`). `session`: one already started (a
    test's, a notebook's); else one is started on `master`."""
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such dataset directory")
    con = SparkConnection(session or spark_session(master), root)
    con.register_tables()
    if with_analyses:
        con.register_analyses()
    return con


class SparkResult:
    """A Spark query's rows, with the fetch calls of a DuckDB result."""

    def __init__(self, frame: DataFrame | None) -> None:
        self._frame = frame
        self._rows: list[tuple] | None = None

    def to_arrow_table(self) -> pa.Table:
        if self._frame is None:
            return pa.table({})
        return _normalised(self._frame.toArrow())

    arrow = to_arrow_table

    @property
    def frame(self) -> DataFrame | None:
        """The Spark DataFrame, not yet computed: to write or aggregate
        on the executors rather than bring its rows to this process."""
        return self._frame

    def fetchall(self) -> list[tuple]:
        if self._rows is None:
            table = self.to_arrow_table()
            self._rows = list(zip(*(column.to_pylist() for column in table.columns))) if table.num_columns else []
        return self._rows

    def fetchone(self) -> tuple | None:
        rows = self.fetchall()
        return rows[0] if rows else None

    def pl(self) -> pl.DataFrame:
        import polars as pl

        return pl.from_arrow(self.to_arrow_table())


def _normalised(table: pa.Table) -> pa.Table:
    """Spark's Arrow as DuckDB gives it: timestamps in UTC at µs."""
    columns = []
    for field, column in zip(table.schema, table.columns):
        if pa.types.is_timestamp(field.type):
            column = column.cast(pa.timestamp("us", tz="UTC"))
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


class SparkConnection:
    """The dataset at `root` as temporary views of `session`."""

    engine = "spark"

    def __init__(self, session: SparkSession, root: Path) -> None:
        self.session = session
        self.root = root
        self._params: dict[str, Any] = {}

    # --- what DuckDB's connection offers the analysis functions ------------
    def sql(self, sql: str) -> SparkResult:
        if hasattr(self, "_created"):
            self._ensure_views(sql)
        return SparkResult(self._frame(to_spark(sql, self._params)))

    def execute(self, sql: str, parameters: list[Any] | None = None) -> SparkResult:
        if parameters:
            raise QueryError("Spark connection: prepared parameters are not supported; pass literals")
        return self.sql(sql)

    def close(self) -> None:
        """Drop the views of MATERIALISED_VIEWS (Spark's cleaner then frees
        their rows); leave the session running: it is the process's
        (getOrCreate)."""
        for name in MATERIALISED_VIEWS:
            with contextlib.suppress(Exception):  # a session stopped already
                self.session.catalog.dropTempView(name)

    def interrupt(self) -> None:
        with contextlib.suppress(Exception):
            self.session.sparkContext.cancelAllJobs()

    def _frame(self, spark_sql: str) -> DataFrame:
        from pyspark.errors import PySparkException

        try:
            return self.session.sql(spark_sql)
        except PySparkException as error:
            raise QueryError(f"Spark SQL error: {one_line(error)[:500]}") from error

    # --- views -------------------------------------------------------------
    def register_tables(self) -> None:
        from gpulens.analysis.dataset import table_files

        for table in TABLES:
            schema = {**NODE_SCHEMAS, **TRACE_SCHEMAS}[table]
            if table_files(self.root, table):
                frame = self._read_table(table)
                if table in NULL_FILLED_TABLES:
                    frame = self._null_filled(frame, schema)
            else:
                frame = self.session.createDataFrame(schema.empty_table())
            frame.createOrReplaceTempView(table)
        self._register_hardware_peaks()

    def _read_table(self, table: str) -> DataFrame:
        reader = self.session.read.option("mergeSchema", "true")
        location = self.root.resolve()
        if table in NODE_TABLES:
            # Partition discovery from the table's folder: host= and date=.
            return reader.parquet(str(location / table))
        return reader.parquet(str(location / TABLE_GLOBS[table]))

    def _null_filled(self, frame: DataFrame, schema: pa.Schema) -> DataFrame:
        """`frame` with the columns of `schema` that its files (an older
        schema version's) lack, NULL: as open_dataset reads them."""
        missing = pa.schema([field for field in schema if field.name not in frame.columns])
        if not len(missing):
            return frame
        from pyspark.sql.functions import lit

        types = self.session.createDataFrame(missing.empty_table()).schema
        return frame.withColumns({field.name: lit(None).cast(field.dataType) for field in types.fields})

    def _register_hardware_peaks(self) -> None:
        from gpulens.analysis.peaks import hardware_peaks_table

        names = [row[0] for row in self.sql(
            "select distinct device_name from runs where device_name is not null "
            "union select distinct model from devices where model is not null"
        ).fetchall()]
        self.session.createDataFrame(hardware_peaks_table(names)).createOrReplaceTempView("hardware_peaks")

    def register_analyses(self, params: dict[str, Any] | None = None) -> None:
        """Set the parameters; each analysis view (and those it requires)
        is made when SQL first names it (binding all 50 reads every table's
        footers, which a query of one table never needs)."""
        from gpulens.analysis.registry import all_params

        self._params = {**all_params(), **(params or {})}
        self._created: set[str] = set()

    def _ensure_views(self, sql: str) -> None:
        from gpulens.analysis.registry import analyses_named_in, with_requirements

        for name in analyses_named_in(sql):
            for analysis in with_requirements(name):
                if analysis.name not in self._created:
                    self._create_view(analysis.name, analysis.sql)
                    self._created.add(analysis.name)

    def _create_view(self, name: str, duckdb_sql: str) -> None:
        spark_sql = spark_text(name, duckdb_sql, self._params)
        try:
            frame = self.session.sql(spark_sql)
            if name in MATERIALISED_VIEWS:
                frame = frame.localCheckpoint(eager=False)
            frame.createOrReplaceTempView(name)
        except Exception as error:  # Spark's analysis error, py4j's
            raise QueryError(f"analysis/sql/{name}.sql on Spark: {one_line(error)[:500]}") from error

    def run_analysis(self, name: str, **params: Any) -> pl.DataFrame:
        """The analysis `name` with thresholds overridden (the registry
        checks the names); the views go back to the defaults afterwards."""
        if not params:
            return self.sql(f"select * from {name}").pl()
        defaults = self._params
        try:
            self.register_analyses({**defaults, **params})
            return self.sql(f"select * from {name}").pl()
        finally:
            self.register_analyses(defaults)


def spark_text(name: str, duckdb_sql: str, params: dict[str, Any]) -> str:
    """The Spark SQL of analysis `name`: its twin, else its translation."""
    text = twin(name)
    if text is not None:
        return with_params(text, params)
    return to_spark(_strip_semicolon(duckdb_sql), params)


def _strip_semicolon(sql: str) -> str:
    return re.sub(r";\s*$", "", sql.strip())
