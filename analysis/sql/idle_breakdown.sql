-- Why each stream of a rank sits idle between its kernels: waiting on the
-- host, waiting on the previous kernel, or other. HTA's idle-time breakdown
-- (get_idle_time_breakdown), one row per stream.
-- requires: scoped_kernels, api_calls
-- param: breakdown_kernel_wait_max_gap_ns = 30000
--
-- Kernels of the complete profiler steps (scoped_kernels), per stream,
-- ordered by start (ties: lowest correlation id first). A gap is the time
-- between the end of the stream's previous kernels and a kernel's start,
-- classified by the kernel that ends it:
--   host wait    its launch call (api_calls, by correlation id) started
--                after the gap began: the CPU had not issued it yet
--   kernel wait  otherwise, a gap shorter than
--                breakdown_kernel_wait_max_gap_ns (HTA's
--                consecutive_kernel_delay, 30 µs)
--   other        otherwise, e.g. a kernel waiting on another stream's event
-- A kernel without a known launch call is never host wait (as in HTA).
-- idle_*_share are fractions of the stream's idle_ns (HTA's
-- idle_time_ratio), NULL for a stream that never idles.
--
-- Two differences from HTA, both where HTA is wrong: times stay at full
-- nanosecond precision (HTA rounds nanosecond traces to whole µs, start up
-- and end down), and where kernels of one stream overlap, the gap starts at
-- the furthest end so far, not at the previous kernel's end (HTA counts the
-- negative "gap" of an overlap as idle time). Gaps on one stream can be
-- covered by kernels on another: time_breakdown splits the idle time of the
-- whole rank instead.
with reaches as (
    select
        run,
        rank,
        stream,
        correlation_id,
        start_ns,
        max(end_ns) over (
            partition by run, rank, stream
            order by start_ns, correlation_id
            rows between unbounded preceding and 1 preceding
        ) as reach_ns
    from scoped_kernels
    where start_ns is not null
        and end_ns >= start_ns
),

stream_kernels as (
    select run, rank, stream, count(*) as kernel_count
    from reaches
    group by run, rank, stream
),

gaps as (
    select
        run,
        rank,
        stream,
        correlation_id,
        reach_ns as gap_start_ns,
        start_ns - reach_ns as gap_ns
    from reaches
    where start_ns > reach_ns
),

classified_gaps as (
    select
        g.run,
        g.rank,
        g.stream,
        g.gap_ns,
        case
            when exists (
                select 1
                from api_calls as a
                where a.run = g.run
                    and a.rank = g.rank
                    and a.correlation_id = g.correlation_id
                    and a.start_ns > g.gap_start_ns
            ) then 'host_wait'
            when g.gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns') then 'kernel_wait'
            else 'other'
        end as cause
    from gaps as g
),

idle_by_cause as (
    select
        run,
        rank,
        stream,
        count(*) as idle_gap_count,
        sum(gap_ns)::bigint as idle_ns,
        coalesce(sum(gap_ns) filter (where cause = 'host_wait'), 0)::bigint as idle_host_wait_ns,
        coalesce(sum(gap_ns) filter (where cause = 'kernel_wait'), 0)::bigint as idle_kernel_wait_ns,
        coalesce(sum(gap_ns) filter (where cause = 'other'), 0)::bigint as idle_other_ns
    from classified_gaps
    group by run, rank, stream
)

select
    s.run,
    s.rank,
    s.stream,
    s.kernel_count,
    coalesce(i.idle_gap_count, 0) as idle_gap_count,
    coalesce(i.idle_ns, 0) as idle_ns,
    coalesce(i.idle_host_wait_ns, 0) as idle_host_wait_ns,
    coalesce(i.idle_kernel_wait_ns, 0) as idle_kernel_wait_ns,
    coalesce(i.idle_other_ns, 0) as idle_other_ns,
    i.idle_host_wait_ns / nullif(i.idle_ns, 0) as idle_host_wait_share,
    i.idle_kernel_wait_ns / nullif(i.idle_ns, 0) as idle_kernel_wait_share,
    i.idle_other_ns / nullif(i.idle_ns, 0) as idle_other_share
from stream_kernels as s
left join idle_by_cause as i
    on i.run = s.run
    and i.rank = s.rank
    and i.stream = s.stream
order by s.run, s.rank, s.stream
