-- The bulk of a Perfetto export, in time order: each exported rank's GPU
-- activities (kernels, memcpys, memsets), runtime calls and CPU operators
-- that overlap its window (the table export_windows: rank,
-- window_start_ns, window_end_ns).
--
-- One row per event, ordered by start_ns (longer first on a tie, so that
-- a parent comes before the slices it holds).
--   source: kernel | api_call | cpu_op;
--   kind: kernels.kind (kernel, memcpy, memset) for GPU activities;
--   tid: the CPU thread of runtime calls and CPU ops;
--   launch_tid, launch_start_ns: a GPU activity's launch call (joined by
--     correlation id and the call's start, kernels.launch_call_start_ns),
--     where that call is exported too (it overlaps the window), else NULL.
with gpu as (
    select
        'kernel' as source,
        k.rank,
        k.kind,
        k.device,
        k.stream,
        null::bigint as tid,
        k.name,
        k.category,
        k.start_ns,
        k.dur_ns,
        k.correlation_id,
        k.external_id,
        k.bytes,
        k.grid,
        k.block,
        k.launch_delay_ns,
        k.launch_call_start_ns,
        k.launch_call_name
    from kernels as k
    join export_windows as w
        on k.rank = w.rank and k.start_ns < w.window_end_ns and k.end_ns > w.window_start_ns
    where k.run = getvariable('export_run')
),
calls as (
    select a.rank, a.tid, a.name, a.start_ns, a.dur_ns, a.correlation_id, a.external_id
    from api_calls as a
    join export_windows as w
        on a.rank = w.rank and a.start_ns < w.window_end_ns and a.end_ns > w.window_start_ns
    where a.run = getvariable('export_run')
),
launched as (
    select
        gpu.*,
        calls.tid as launch_tid,
        calls.start_ns as launch_start_ns
    from gpu
    left join calls
        on calls.rank = gpu.rank
        and calls.correlation_id = gpu.correlation_id
        and calls.start_ns = gpu.launch_call_start_ns
)
select
    source, rank, kind, device, stream, tid, name, category, start_ns, dur_ns, correlation_id, external_id,
    bytes, grid, block, launch_delay_ns, launch_tid, launch_start_ns
from launched
union all
select
    'api_call', rank, null, null, null, tid, name, null, start_ns, dur_ns, correlation_id, external_id,
    null, null, null, null, null, null
from calls
union all
select
    'cpu_op', o.rank, null, null, null, o.tid, o.name, null, o.start_ns, o.dur_ns, null, o.external_id,
    null, null, null, null, null, null
from cpu_ops as o
join export_windows as w
    on o.rank = w.rank and o.start_ns < w.window_end_ns and o.end_ns > w.window_start_ns
where o.run = getvariable('export_run')
order by start_ns, dur_ns desc, source
