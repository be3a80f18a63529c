"""`gpulens ingest DIR --engine spark`: the trace files spread over Spark's executors.

The files are found and grouped into sources on the driver, as a serial
ingest does (`batch.plan_ingest`: the same run name, the same ranks); then
each source is one Spark task, which ingests it with the code a worker of
a serial ingest runs (`batch.ingest_task`) and writes its Parquet into the
dataset, which must be on storage every executor sees (a shared file
system; on one machine, any folder). The driver gathers the outcomes into
the same IngestReport (what moved between runs included). Parsing and
writing scale with the executors; the driver holds one small outcome per
file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from gpulens.collector.ingest.batch import ingest_task, plan_ingest
from gpulens.collector.ingest.results import IngestReport
from gpulens.collector.spark_env import DEFAULT_SPARK_MASTER, spark_session


def ingest_paths_on_spark(paths: Iterable[str | Path], out: Path, run: str | None = None, host: str | None = None,
                          master: str = DEFAULT_SPARK_MASTER, session=None) -> IngestReport:
    """Ingest `paths` into the dataset at `out` with one Spark task per
    source; `session`: a SparkSession already started, else one on `master`."""
    # Planned as a serial ingest plans (batch.plan_ingest); the folder by its
    # full path, which the executors' working folders do not change.
    plan = plan_ingest(paths, Path(out).resolve(), run, host)
    if plan.tasks:
        spark = session or spark_session(master)
        outcomes = (spark.sparkContext.parallelize(plan.tasks, numSlices=len(plan.tasks))
                    .flatMap(functools.partial(_ingest_on_executor, out=str(plan.out)))
                    .collect())
        for outcome in outcomes:
            plan.add(outcome)
    return plan.finished()


def _ingest_on_executor(task, out: str) -> list:
    return ingest_task(task, out)
