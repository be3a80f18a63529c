-- Which GPUs did each job hold, when, and did they sit idle while held?
--
-- One row per hold of a GPU by a job (job_holds, the rows over the whole
-- job: step NULL), with the GPU's telemetry over the hold:
--   job, scheduler, job_user, host, gpu_index, gpu_uuid, hold_no,
--   start_ns, end_ns, held_s, pids: as in job_holds;
--   samples: telemetry samples in (start_ns, end_ns];
--   mean_util_pct: their mean GPU utilisation;
--   idle_s: the time of the samples below job_idle_util_pct (a sample
--     closes the interval since the GPU's previous sample, as in
--     power_samples); longest_idle_s: the longest unbroken stretch of such
--     samples. The finding job_gpus_idle fires on longest_idle_s.
-- requires: job_holds, host_telemetry
-- param: job_idle_util_pct = 5
with holds as (
    select *
    from job_holds
    where step is null
),
samples as (
    select
        holds.job,
        holds.host,
        holds.gpu_index,
        holds.hold_no,
        epoch_ns(telemetry.ts) as ts_ns,
        telemetry.gpu_util_pct,
        telemetry.gpu_util_pct < getvariable('job_idle_util_pct') as idle
    from holds
    join host_telemetry as telemetry
        on telemetry.host = holds.host
        and telemetry.gpu_index = holds.gpu_index
        and epoch_ns(telemetry.ts) >= holds.start_ns
        and epoch_ns(telemetry.ts) <= holds.end_ns
),
intervals as (
    -- the sample at start_ns only opens the hold: its interval is before it
    select
        *,
        (ts_ns - lag(ts_ns) over sample_order) / 1e9 as interval_s,
        sum(case when idle then 0 else 1 end) over (
            partition by job, host, gpu_index, hold_no order by ts_ns rows between unbounded preceding and current row
        ) as busy_before
    from samples
    window sample_order as (partition by job, host, gpu_index, hold_no order by ts_ns)
),
stretches as (
    select job, host, gpu_index, hold_no, busy_before, sum(interval_s) as idle_s
    from intervals
    where idle and interval_s is not null
    group by job, host, gpu_index, hold_no, busy_before
),
per_hold as (
    select
        job,
        host,
        gpu_index,
        hold_no,
        count(interval_s) as samples,
        avg(gpu_util_pct) filter (where interval_s is not null) as mean_util_pct,
        coalesce(sum(interval_s) filter (where idle), 0) as idle_s
    from intervals
    group by job, host, gpu_index, hold_no
),
longest as (
    select job, host, gpu_index, hold_no, max(idle_s) as longest_idle_s
    from stretches
    group by job, host, gpu_index, hold_no
)
select
    holds.job,
    holds.scheduler,
    holds.job_user,
    holds.host,
    holds.gpu_index,
    holds.gpu_uuid,
    holds.hold_no,
    holds.start_ns,
    holds.end_ns,
    holds.held_s,
    holds.pids,
    coalesce(per_hold.samples, 0) as samples,
    per_hold.mean_util_pct,
    coalesce(per_hold.idle_s, 0) as idle_s,
    coalesce(longest.longest_idle_s, 0) as longest_idle_s
from holds
left join per_hold using (job, host, gpu_index, hold_no)
left join longest using (job, host, gpu_index, hold_no)
order by holds.job, holds.host, holds.gpu_index, holds.hold_no
