-- The trace runs in the dataset: one row per run with its ranks, hosts,
-- device, source format, time base and span, and how many kernels,
-- profiler steps and collectives it holds. The dashboard's Overview lists
-- it and every trace page offers its runs.
--   first_ns, last_ns: the run's first kernel start and last kernel end
--     (epoch ns where time_base = 'epoch', else trace-relative);
--   time_note: how its times were placed (runs.metadata_json's time_note:
--     on the epoch from the trace's base time, or kept on the trace's own
--     clock and why), its distinct notes joined by '; ';
--   steps: distinct profiler steps over its ranks.
-- requires: runs, rank_summary, step_windows, collectives
with run_info as (
    select
        run,
        count(distinct rank) as ranks,
        max(world_size) as world_size,
        string_agg(distinct host, ', ' order by host) as hosts,
        any_value(device_name) as device_name,
        string_agg(distinct source_format, ', ' order by source_format) as source_format,
        any_value(time_base) as time_base,
        string_agg(distinct json_extract_string(metadata_json, '$.time_note'), '; ') as time_note
    from runs
    group by run
),
kernel_info as (
    -- counted at ingest (rank_summary), not by a scan of every kernel
    select
        run,
        sum(kernel_count)::bigint as kernels,
        min(first_kernel_start_ns) as first_ns,
        max(last_kernel_end_ns) as last_ns
    from rank_summary
    group by run
),
step_info as (
    select run, count(distinct step) as steps
    from step_windows
    group by run
),
collective_info as (
    select run, count(*) as collectives
    from collectives
    group by run
)
select
    run_info.run,
    run_info.ranks,
    run_info.world_size,
    run_info.hosts,
    run_info.device_name,
    run_info.source_format,
    run_info.time_base,
    run_info.time_note,
    kernel_info.first_ns,
    kernel_info.last_ns,
    coalesce(kernel_info.kernels, 0) as kernels,
    coalesce(step_info.steps, 0) as steps,
    coalesce(collective_info.collectives, 0) as collectives
from run_info
left join kernel_info using (run)
left join step_info using (run)
left join collective_info using (run)
order by run_info.run
