-- Which telemetry GPU each trace rank ran on: the key that joins kernel
-- traces to telemetry (step_energy, phase_energy).
--
-- One row per (run, rank) of the runs table.
--   host: runs.host; where that is NULL and exactly one host has power
--     telemetry, that host (host_inferred says so);
--   device: the device most of the rank's kernels ran on (kernels.device),
--     as the process numbered it: under CUDA_VISIBLE_DEVICES,
--     ROCR_VISIBLE_DEVICES, a Slurm --gpus-per-task binding or a Kubernetes
--     device plugin that is seldom the physical GPU's index;
--   gpu_index, gpu_uuid: the telemetry GPU, found by evidence, first that
--     which matched_by names:
--     'uuid': the trace names the device's UUID or PCI bus id (nsys:
--       runs.metadata_json's gpus, from TARGET_INFO_GPU), and the host's
--       devices table holds it;
--     'pid': the host's processes table shows the rank's process (runs.pid,
--       as the host numbers it or as the innermost of its NSpid, the pid a
--       trace recorded inside a container has) on exactly one GPU within
--       process_match_slack_s of the rank's window (processes are sampled
--       on the collector's slow cadence, 10 s by default);
--     'index_assumed': neither evidence exists (no pid in the trace, or no
--       process rows of the host around the window): the device index is
--       taken as the telemetry gpu_index, which a binding makes wrong;
--   pid_gpus: how many GPUs the host's process rows around the window show
--     the rank's pid on (NULL: no pid, or no process rows around the
--     window); a rank placed by neither UUID nor a pid_gpus of 1 is not
--     guessed (see unmatched_reason);
--   window_start_ns, window_end_ns: epoch ns, the span of the rank's kernels
--     on that device and of its profiler steps;
--   telemetry_first_ns, telemetry_last_ns: the span of power telemetry of
--     that host and GPU; telemetry_covers: it covers the whole window;
--   unmatched_reason: why the rank cannot be joined to telemetry, NULL when
--     it can. Trace times must be on the epoch (runs.time_base = 'epoch');
--     where they are not, the runs row's time_note says why. A rank whose
--     pid two GPUs show, or that the host's process rows around the window
--     do not show at all, is not guessed: gpu_index is NULL and the reason
--     says so.
-- requires: step_windows, rank_summary
-- param: process_match_slack_s = 30
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
        any_value(pid) as pid,
        any_value(time_base) as time_base,
        any_value(json_extract_string(metadata_json, '$.time_note')) as time_note
    from runs
    group by run, rank
),
trace_gpus as (
    -- the GPUs a trace names with their UUID or PCI bus id (nsys)
    select run, rank, json_extract_string(gpu, '$.id') as id, gpu
    from (
        select run, rank, unnest(json_extract(metadata_json, '$.gpus[*]')) as gpu
        from runs
        where json_extract(metadata_json, '$.gpus') is not null
    )
),
rank_devices as (
    -- the device most of the rank's kernels ran on, and their span there
    -- (rank_summary, found at ingest; a rank traced in several files takes
    -- the lowest such device)
    select
        run,
        rank,
        min(main_device) as device,
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
        rank_runs.pid,
        rank_devices.device,
        least(rank_devices.start_ns, step_spans.start_ns) as window_start_ns,
        greatest(rank_devices.end_ns, step_spans.end_ns) as window_end_ns
    from rank_runs
    cross join single_host
    left join rank_devices using (run, rank)
    left join step_spans using (run, rank)
),
known_devices as (
    -- each GPU of each host, keyed by its UUID and by its PCI bus id, in one
    -- spelling ('GPU-' and dashes dropped; the bus id's domain without its
    -- leading zeros), lower case
    select distinct
        host,
        gpu_index,
        gpu_uuid,
        replace(regexp_replace(lower(gpu_uuid), '^gpu-', ''), '-', '') as uuid_key,
        ltrim(regexp_extract(lower(pci_bus_id), '([0-9a-f]+):[0-9a-f]+:[0-9a-f]+\.[0-9a-f]+$', 1), '0')
            || regexp_extract(lower(pci_bus_id), ':[0-9a-f]+:[0-9a-f]+\.[0-9a-f]+$') as bus_key
    from devices
),
by_uuid as (
    select
        matched.run,
        matched.rank,
        min(known_devices.gpu_index) as gpu_index,
        count(distinct known_devices.gpu_index) as gpus
    from matched
    join trace_gpus
        on trace_gpus.run = matched.run
        and trace_gpus.rank = matched.rank
        and trace_gpus.id = matched.device::varchar
    join known_devices
        on known_devices.host = matched.host
        and (
            known_devices.uuid_key
                = replace(regexp_replace(lower(json_extract_string(trace_gpus.gpu, '$.uuid')), '^gpu-', ''), '-', '')
            or known_devices.bus_key = ltrim(regexp_extract(lower(json_extract_string(trace_gpus.gpu, '$.busLocation')),
                    '([0-9a-f]+):[0-9a-f]+:[0-9a-f]+\.[0-9a-f]+$', 1), '0')
                || regexp_extract(lower(json_extract_string(trace_gpus.gpu, '$.busLocation')),
                    ':[0-9a-f]+:[0-9a-f]+\.[0-9a-f]+$')
        )
    group by matched.run, matched.rank
),
near_processes as (
    -- the host's process rows around each rank's window
    select
        matched.run,
        matched.rank,
        processes.gpu_index,
        processes.pid = matched.pid or list_extract(processes.nspid, -1) = matched.pid as is_rank
    from matched
    join processes
        on processes.host = matched.host
        and epoch_ns(processes.ts) >= matched.window_start_ns - getvariable('process_match_slack_s') * 1e9
        and epoch_ns(processes.ts) <= matched.window_end_ns + getvariable('process_match_slack_s') * 1e9
    where matched.pid is not null
),
by_pid as (
    select
        run,
        rank,
        min(gpu_index) filter (where is_rank) as gpu_index,
        count(distinct gpu_index) filter (where is_rank) as gpus,
        -- the filter inside the argument (NULLs are skipped): one form both engines read
        string_agg(distinct case when is_rank then gpu_index::varchar end, ', '
                   order by case when is_rank then gpu_index::varchar end) as gpu_list
    from near_processes
    group by run, rank
),
resolved as (
    select
        matched.*,
        case
            when by_uuid.gpus = 1 then 'uuid'
            when by_pid.gpus = 1 then 'pid'
            when by_pid.run is null and matched.device is not null then 'index_assumed'
        end as matched_by,
        case
            when by_uuid.gpus = 1 then by_uuid.gpu_index
            when by_pid.gpus = 1 then by_pid.gpu_index
            when by_pid.run is null then matched.device
        end as gpu_index,
        case
            when by_uuid.gpus = 1 then null
            when by_pid.gpus > 1 then 'pid ' || matched.pid || ' ran on GPUs ' || by_pid.gpu_list
                || ' during the trace: which one was the rank''s is not known'
            when by_pid.gpus = 0 then 'the processes on ' || matched.host || '''s GPUs during the trace do not '
                || 'include pid ' || matched.pid
        end as evidence_conflict,
        by_pid.gpus as pid_gpus
    from matched
    left join by_uuid using (run, rank)
    left join by_pid using (run, rank)
)
select
    resolved.run,
    resolved.rank,
    resolved.host,
    resolved.host_inferred,
    resolved.device,
    resolved.gpu_index,
    inventory.gpu_uuid,
    resolved.matched_by,
    resolved.pid_gpus,
    resolved.window_start_ns,
    resolved.window_end_ns,
    telemetry_gpus.first_ns as telemetry_first_ns,
    telemetry_gpus.last_ns as telemetry_last_ns,
    coalesce(
        telemetry_gpus.first_ns <= resolved.window_start_ns and telemetry_gpus.last_ns >= resolved.window_end_ns,
        false
    ) as telemetry_covers,
    case
        when resolved.time_base is distinct from 'epoch' then 'trace times are not on the epoch (runs.time_base)'
            || coalesce(': ' || resolved.time_note, '')
        when resolved.host is null then 'no host: runs.host is empty and telemetry has no single host'
        when resolved.device is null then 'no kernels with a device index'
        when resolved.evidence_conflict is not null then resolved.evidence_conflict
        when telemetry_gpus.host is null then 'no power telemetry for this host and GPU'
        when telemetry_gpus.last_ns <= resolved.window_start_ns or telemetry_gpus.first_ns >= resolved.window_end_ns
            then 'power telemetry does not overlap the trace'
    end as unmatched_reason
from resolved
left join telemetry_gpus
    on telemetry_gpus.host = resolved.host
    and telemetry_gpus.gpu_index = resolved.gpu_index
left join (
    -- each GPU's UUID as the inventory last recorded it
    select host, gpu_index, arg_max(gpu_uuid, ts) as gpu_uuid
    from devices
    group by host, gpu_index
) as inventory
    on inventory.host = resolved.host
    and inventory.gpu_index = resolved.gpu_index
order by resolved.run, resolved.rank
