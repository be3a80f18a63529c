"""Jobs: which Slurm job or Kubernetes pod held which GPUs, and what it drew.

The collector records each GPU process's job (`collector.jobs`, columns of
`processes`); these questions read it. Each is one SQL file in
`analysis/sql/` (a view of the same name):

- `job_holds`: when each job, and each Slurm step, held each GPU;
- `job_gpus`: per hold, the GPU's utilisation, and how long it sat idle;
- `job_energy`: per job and step, energy, GPU-hours, mean and p99 power
  per GPU, time throttled.

`job_findings` turns them into verdicts: `job_gpus_idle` (a job's GPU below
5 % utilisation for more than 10 minutes while held) and
`rank_gpu_unresolved` (a trace rank whose process two GPUs show, or none,
so its energy is not guessed).
"""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl

from gpulens.analysis.findings import Finding, format_duration_ns
from gpulens.analysis.registry import run_analysis

POWER_PAGE = "power"


def job_gpus(con: duckdb.DuckDBPyConnection, idle_util_pct: float | None = None) -> pl.DataFrame:
    """Per hold of a GPU by a job: when, its mean utilisation, idle time."""
    params: dict[str, Any] = {} if idle_util_pct is None else {"job_idle_util_pct": idle_util_pct}
    return run_analysis(con, "job_gpus", **params)


def job_energy(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per job (step NULL) and Slurm step: energy, GPU-hours, power, throttled time."""
    return run_analysis(con, "job_energy")


def idle_job_findings(gpus: pl.DataFrame, min_idle_s: float = 600) -> list[Finding]:
    """`job_gpus_idle`: a job whose GPU stayed below the idle utilisation for
    more than `min_idle_s` in one stretch while the job held it."""
    idle = gpus.filter(pl.col("longest_idle_s") > min_idle_s)
    findings = []
    for (job,), group in idle.group_by("job", maintain_order=True):
        longest = group.sort("longest_idle_s", descending=True).row(0, named=True)
        gpu_names = sorted(f"{row['host']}:{row['gpu_index']}" for row in group.iter_rows(named=True))
        findings.append(
            Finding(
                id="job_gpus_idle",
                severity="warning",
                title=(f"Job {job} held {len(gpu_names)} GPU(s) idle for up to "
                       f"{format_duration_ns(longest['longest_idle_s'] * 1e9)} at a stretch"),
                detail=(
                    "The job's processes stayed on these GPUs while the GPUs did (almost) nothing: allocated "
                    "but unused, which no other job could use. A job waiting on data, on a peer or on a person "
                    "(an idle notebook) looks like this; release the GPUs, or find what it waits for."
                ),
                subject={"job": job},
                evidence={
                    "gpus": gpu_names,
                    "longest_idle_s": longest["longest_idle_s"],
                    "idle_s": float(group["idle_s"].sum()),
                    "held_s": float(group["held_s"].sum()),
                },
                page=POWER_PAGE,
            )
        )
    return findings


def unresolved_rank_findings(matched: pl.DataFrame) -> list[Finding]:
    """`rank_gpu_unresolved`: ranks no UUID placed whose pid the host's
    processes show on two GPUs or more, or on none (power_trace_gpus.pid_gpus)."""
    unresolved = matched.filter(pl.col("matched_by").is_null() & pl.col("pid_gpus").is_not_null()
                                & (pl.col("pid_gpus") != 1))
    findings = []
    for (run,), group in unresolved.group_by("run", maintain_order=True):
        findings.append(
            Finding(
                id="rank_gpu_unresolved",
                severity="warning",
                title=f"Run {run}: {len(group)} rank(s) cannot be placed on a physical GPU: {group['unmatched_reason'][0]}",
                detail=(
                    "The collector's process list is the evidence of which GPU a rank ran on. Where it shows the "
                    "rank's pid on two GPUs (a process that opened a context on a second GPU), or on none "
                    "(the trace recorded a pid of another PID namespace that the processes' NSpid does not "
                    "name), the rank's energy is left out rather than put on a guessed GPU."
                ),
                subject={"run": run},
                evidence={"ranks": group["rank"].to_list(), "reasons": group["unmatched_reason"].to_list()},
                page=POWER_PAGE,
            )
        )
    return findings


def job_findings(con: duckdb.DuckDBPyConnection, min_idle_s: float = 600) -> list[Finding]:
    """Job verdicts, with the threshold as a keyword argument."""
    return (idle_job_findings(job_gpus(con), min_idle_s)
            + unresolved_rank_findings(run_analysis(con, "power_trace_gpus")))


def job_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The jobs of the dataset's processes, sorted."""
    return [job for (job,) in con.execute("select distinct job from job_holds order by job").fetchall()]


def restrict_to_job(con: duckdb.DuckDBPyConnection, job: str) -> None:
    """Limit `con`'s dataset views to one job, for every analysis after it.

    `telemetry` keeps the samples of the GPUs the job held, over its holds
    (job_holds); `processes` the job's rows; each trace table the runs one
    of whose ranks the job's processes ran (runs.host and runs.pid against
    the processes' host and pid, or the innermost of their NSpid). The
    original views stay as `_all_<table>`. Raises UsageError naming the
    jobs there are when the dataset has no such job.
    """
    from gpulens.analysis.dataset import quote_identifier, quote_literal
    from gpulens.collector.errors import UsageError
    from gpulens.collector.schema import TRACE_SCHEMAS

    known = job_names(con)
    if job not in known:
        listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "") if known else "none"
        raise UsageError(f"no job {job!r} in the dataset's processes (jobs: {listed})")
    literal = quote_literal(job)
    # The holds, fixed before processes is limited (job_holds reads it).
    con.execute(f"create or replace temporary table _job_holds as select * from job_holds "
                f"where job = {literal} and step is null")
    con.execute(f"""create or replace temporary table _job_pids as
        select distinct host, pid, list_extract(nspid, -1) as inner_pid
        from processes
        where 'slurm-' || slurm_job_id = {literal}
            or 'pod-' || coalesce(k8s_namespace || '/' || k8s_pod_name, k8s_pod_uid) = {literal}""")
    con.execute("""create or replace temporary table _job_runs as
        select distinct runs.run
        from runs
        join _job_pids on _job_pids.host = runs.host and runs.pid in (_job_pids.pid, _job_pids.inner_pid)""")
    filters = {
        "telemetry": """exists (select 1 from _job_holds h where h.host = t.host and h.gpu_index = t.gpu_index
                        and epoch_ns(t.ts) between h.start_ns and h.end_ns)""",
        "processes": "exists (select 1 from _job_pids p where p.host = t.host and p.pid = t.pid)",
        **{table: "t.run in (select run from _job_runs)" for table in TRACE_SCHEMAS},
    }
    for table, condition in filters.items():
        name = quote_identifier(table)
        original = quote_identifier(f"_all_{table}")
        con.execute(f"alter view {name} rename to {original}")
        con.execute(f"create view {name} as select t.* from {original} as t where {condition}")
