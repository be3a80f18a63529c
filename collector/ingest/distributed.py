"""`gpulens ingest DIR --engine spark`: the trace files spread over Spark's executors.

The files are found and grouped into sources on the driver, as a serial
ingest does (`sources._expand`: the same run name, the same ranks); then
each source is one Spark task, which ingests it with the code a worker of
a serial ingest runs (`batch.ingest_task`) and writes its Parquet into the
dataset, which must be on storage every executor sees (a shared file
system; on one machine, any folder). The driver gathers the outcomes into
the same IngestReport. Parsing and writing scale with the executors; the
driver holds one small outcome per file.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from pathlib import Path

from gpulens.collector.ingest.batch import check_writable, ingest_task, sources_in_runs
from gpulens.collector.ingest.results import FileResult, IngestReport, SkippedFile
from gpulens.collector.ingest.sources import _expand
from gpulens.collector.spark_env import DEFAULT_SPARK_MASTER, spark_session


def ingest_paths_on_spark(paths: Iterable[str | Path], out: Path, run: str | None = None, host: str | None = None,
                          master: str = DEFAULT_SPARK_MASTER, session=None) -> IngestReport:
    """Ingest `paths` into the dataset at `out` with one Spark task per
    source; `session`: a SparkSession already started, else one on `master`."""
    started = time.perf_counter()
    out = Path(out).resolve()
    check_writable(out)
    tasks, failures = _expand(list(paths), out, run, host)
    report = IngestReport(failures=failures)
    if tasks:
        spark = session or spark_session(master)
        context = spark.sparkContext
        outcomes = (context.parallelize(tasks, numSlices=len(tasks))
                    .flatMap(functools.partial(_ingest_on_executor, out=str(out)))
                    .collect())
        for outcome in outcomes:
            if isinstance(outcome, FileResult):
                report.results.append(outcome)
            elif isinstance(outcome, SkippedFile):
                report.skipped.append(outcome)
            else:
                report.failures.append(outcome)
    report.results.sort(key=lambda r: r.path)
    report.failures.sort(key=lambda f: f.path)
    report.earlier = sources_in_runs(out, report.runs)
    report.seconds = time.perf_counter() - started
    return report


def _ingest_on_executor(task, out: str) -> list:
    return ingest_task(task, out)
