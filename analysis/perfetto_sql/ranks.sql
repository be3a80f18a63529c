-- The ranks a Perfetto export covers, each with its time window.
--
-- One row per rank of the run named by the variable export_run, limited to
-- export_ranks (an INTEGER[]; NULL: every rank).
--   window_start_ns, window_end_ns: epoch ns. With export_first_step and
--     export_last_step (NULL: no limit), from the start of the first of
--     those profiler steps to the end of the last; otherwise the span of
--     everything the rank's trace holds (kernels, runtime calls, CPU ops,
--     annotations). NULL where the rank has no such step or no events.
--   step_count: the profiler steps inside the window.
--   os_pid, host, device_name, world_size: from runs.
with rank_runs as (
    select
        rank,
        any_value(host) as host,
        any_value(pid) as os_pid,
        any_value(device_name) as device_name,
        max(world_size) as world_size
    from runs
    where run = getvariable('export_run')
        and (getvariable('export_ranks') is null or list_contains(getvariable('export_ranks'), rank))
    group by rank
),
steps as (
    select rank, step, min(start_ns) as start_ns, max(end_ns) as end_ns
    from annotations
    where run = getvariable('export_run') and kind = 'profiler_step' and step is not null
    group by rank, step
),
chosen_steps as (
    select rank, min(start_ns) as start_ns, max(end_ns) as end_ns, count(*) as step_count
    from steps
    where step >= coalesce(getvariable('export_first_step'), step)
        and step <= coalesce(getvariable('export_last_step'), step)
    group by rank
),
spans as (
    select rank, min(start_ns) as start_ns, max(end_ns) as end_ns
    from (
        select rank, start_ns, end_ns from kernels where run = getvariable('export_run')
        union all
        select rank, start_ns, end_ns from api_calls where run = getvariable('export_run')
        union all
        select rank, start_ns, end_ns from cpu_ops where run = getvariable('export_run')
        union all
        select rank, start_ns, end_ns from annotations where run = getvariable('export_run')
    )
    group by rank
),
limited as (
    select getvariable('export_first_step') is not null or getvariable('export_last_step') is not null as by_steps
)
select
    rank_runs.rank,
    rank_runs.host,
    rank_runs.os_pid,
    rank_runs.device_name,
    rank_runs.world_size,
    case when limited.by_steps then chosen_steps.start_ns else spans.start_ns end as window_start_ns,
    case when limited.by_steps then chosen_steps.end_ns else spans.end_ns end as window_end_ns,
    coalesce(chosen_steps.step_count, 0) as step_count
from rank_runs
cross join limited
left join chosen_steps using (rank)
left join spans using (rank)
order by rank_runs.rank
