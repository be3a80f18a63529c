-- Each stream's launch queue over the whole trace: how many GPU activities
-- were launched and had not started yet, summarised as Holistic Trace
-- Analysis does (get_queue_length_summary), and the time the queue was full
-- (get_time_spent_blocked_on_full_queue).
-- requires: queued_launches
-- param: queue_full_length = 1024
--
-- Over the activities of queued_launches (every launch call but graph
-- launches; HTA lists fewer calls, see there) in the complete profiler steps
-- (scoped, as HTA's default trace filter), per (run, rank, stream): +1 when
-- a launch call starts, -1 when its activity starts on the GPU; each such
-- change is one point of the stream's series (at equal times, starts before
-- launches; HTA leaves ties in its sort's order). The statistics are HTA's,
-- over the points (not weighted by time):
--   change_count                      points: twice the activities
--   mean_queue_length, std_queue_length (sample), min_queue_length,
--   p25_queue_length, p50_queue_length, p75_queue_length (linear
--   interpolation), max_queue_length
-- And weighted by time, from the first point to the last:
--   full_queue_ns     time with queue_full_length activities or more
--                     pending: CUDA's limit, past which the next launch call
--                     blocks the CPU (HTA's duration_at_max_queue_length)
--   span_ns           first point to last
--   time_mean_queue_length   the queue averaged over span_ns
-- A max_queue_length above 1,024 cannot happen on CUDA: it would be a bug.
with points as (
    select run, rank, stream, enter_ns as ts_ns, 1 as delta from queued_launches where scoped
    union all
    select run, rank, stream, leave_ns, -1 from queued_launches where scoped
),
series as (
    select
        run,
        rank,
        stream,
        ts_ns,
        sum(delta) over (
            partition by run, rank, stream order by ts_ns, delta rows between unbounded preceding and current row
        ) as queue_length,
        lead(ts_ns) over (partition by run, rank, stream order by ts_ns, delta) - ts_ns as held_ns
    from points
)
select
    run,
    rank,
    stream,
    count(*) as change_count,
    avg(queue_length) as mean_queue_length,
    stddev_samp(queue_length) as std_queue_length,
    min(queue_length)::bigint as min_queue_length,
    quantile_cont(queue_length, 0.25) as p25_queue_length,
    quantile_cont(queue_length, 0.5) as p50_queue_length,
    quantile_cont(queue_length, 0.75) as p75_queue_length,
    max(queue_length)::bigint as max_queue_length,
    coalesce(sum(held_ns) filter (where queue_length >= getvariable('queue_full_length')), 0)::bigint as full_queue_ns,
    (max(ts_ns) - min(ts_ns))::bigint as span_ns,
    sum(queue_length * held_ns) / nullif(max(ts_ns) - min(ts_ns), 0) as time_mean_queue_length
from series
group by run, rank, stream
order by run, rank, stream
