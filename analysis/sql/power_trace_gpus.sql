-- Which telemetry GPU each trace rank ran on: the key that joins kernel
-- traces to telemetry (step_energy, phase_energy).
--
-- One row per (run, rank) of the runs table.
--   host: runs.host; where that is NULL and exactly one host has power
--     telemetry, that host (host_inferred says so);
--   gpu_index: the device most of the rank's kernels ran on
--     (kernels.device), taken as the telemetry gpu_index. A process that saw
--     renumbered devices (CUDA_VISIBLE_DEVICES) would be matched to the
--     wrong GPU: the trace does not say which physical GPU it was;
--   window_start_ns, window_end_ns: epoch ns, the span of the rank's kernels
--     on that device and of its profiler steps;
--   telemetry_first_ns, telemetry_last_ns: the span of power telemetry of
--     that host and GPU; telemetry_covers: it covers the whole window;
--   unmatched_reason: why the rank cannot be joined to telemetry, NULL when
--     it can. Trace times must be on the epoch (runs.time_base = 'epoch');
--     where they are not, the runs row's time_note says why.
-- requires: step_windows, rank_summary
with telemetry_gpus as (
    select
        host,
        gpu_index,
        min(epoch_ns(ts)) as first_ns,
        max(epoch_ns(ts)) as last_ns
    from telemetry
    where power_w is not null
    group by host, gpu_index
),
single_host as (
    select case when count(distinct host) = 1 then any_value(host) end as host
    from telemetry_gpus
),
rank_runs as (
    select
        run,
        rank,
        any_value(host) as host,
        any_value(time_base) as time_base,
        any_value(json_extract_string(metadata_json, '$.time_note')) as time_note
    from runs
    group by run, rank
),
rank_devices as (
    -- the device most of the rank's kernels ran on, and their span there
    -- (rank_summary, found at ingest; a rank traced in several files takes
    -- the lowest such device)
    select
        run,
        rank,
        min(main_device) as gpu_index,
        min(main_device_start_ns) as start_ns,
        max(main_device_end_ns) as end_ns
    from rank_summary
    where main_device is not null
    group by run, rank
),
step_spans as (
    select run, rank, min(start_ns) as start_ns, max(end_ns) as end_ns
    from step_windows
    group by run, rank
),
matched as (
    select
        rank_runs.run,
        rank_runs.rank,
        rank_runs.time_base,
        rank_runs.time_note,
        coalesce(rank_runs.host, single_host.host) as host,
        rank_runs.host is null and single_host.host is not null as host_inferred,
        rank_devices.gpu_index,
        least(rank_devices.start_ns, step_spans.start_ns) as window_start_ns,
        greatest(rank_devices.end_ns, step_spans.end_ns) as window_end_ns
    from rank_runs
    cross join single_host
    left join rank_devices using (run, rank)
    left join step_spans using (run, rank)
)
select
    matched.run,
    matched.rank,
    matched.host,
    matched.host_inferred,
    matched.gpu_index,
    matched.window_start_ns,
    matched.window_end_ns,
    telemetry_gpus.first_ns as telemetry_first_ns,
    telemetry_gpus.last_ns as telemetry_last_ns,
    coalesce(
        telemetry_gpus.first_ns <= matched.window_start_ns and telemetry_gpus.last_ns >= matched.window_end_ns,
        false
    ) as telemetry_covers,
    case
        when matched.time_base is distinct from 'epoch' then 'trace times are not on the epoch (runs.time_base)'
            || coalesce(': ' || matched.time_note, '')
        when matched.host is null then 'no host: runs.host is empty and telemetry has no single host'
        when matched.gpu_index is null then 'no kernels with a device index'
        when telemetry_gpus.host is null then 'no power telemetry for this host and GPU'
        when telemetry_gpus.last_ns <= matched.window_start_ns or telemetry_gpus.first_ns >= matched.window_end_ns
            then 'power telemetry does not overlap the trace'
    end as unmatched_reason
from matched
left join telemetry_gpus
    on telemetry_gpus.host = matched.host
    and telemetry_gpus.gpu_index = matched.gpu_index
order by matched.run, matched.rank
