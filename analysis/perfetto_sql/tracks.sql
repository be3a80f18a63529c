-- The tracks of each exported rank's process: its GPU streams and its CPU
-- threads, over the events activities.sql exports.
--
-- One row per (rank, track): kind is stream (device, stream set) or
-- thread (tid set); events: how many slices it holds.
select 'stream' as kind, k.rank, k.device, k.stream, null::bigint as tid, count(*) as events
from kernels as k
join export_windows as w
    on k.rank = w.rank and k.start_ns < w.window_end_ns and k.end_ns > w.window_start_ns
where k.run = getvariable('export_run')
group by k.rank, k.device, k.stream
union all
select 'thread', rank, null, null, tid, sum(events)
from (
    select a.rank, a.tid, count(*) as events
    from api_calls as a
    join export_windows as w
        on a.rank = w.rank and a.start_ns < w.window_end_ns and a.end_ns > w.window_start_ns
    where a.run = getvariable('export_run')
    group by a.rank, a.tid
    union all
    select o.rank, o.tid, count(*)
    from cpu_ops as o
    join export_windows as w
        on o.rank = w.rank and o.start_ns < w.window_end_ns and o.end_ns > w.window_start_ns
    where o.run = getvariable('export_run')
    group by o.rank, o.tid
)
group by rank, tid
order by rank, kind, device, stream, tid
