-- Per rank, the lengths of the interval unions that time_breakdown and
-- comm_overlap are made of, and the rank's idle gaps by cause.
-- requires: scoped_kernels, api_calls
-- param: breakdown_kernel_wait_max_gap_ns = 30000
--
-- Kernels of the complete profiler steps (scoped_kernels), all streams
-- together, at full nanosecond precision. K, C and M are the merged
-- intervals of the compute, communication and memory activities; A of all.
--
-- One sort: with a rank's kernels ordered by start, the running maximum of
-- the end over the kernels before (reach) is where the union of those
-- kernels stops. A kernel adds max(0, end - max(start, reach)) to the union,
-- and one that starts after the reach opens a new island: the gap between
-- reach and its start is idle time. Keeping a reach per set (A, K, C, M,
-- K or C) gives every union length from the same window pass, and
-- intersections follow: |C ∩ K| = |C| + |K| - |C ∪ K|. Only three running
-- maxima are kept (compute, communication, memory); the others are the
-- greatest of those. Every kernel that is not communication or memory
-- counts as compute.
--
-- Idle gaps by cause, HTA's idle-time categories applied to the gaps of the
-- whole rank (HTA applies them to the gaps of each stream; see
-- idle_breakdown). The gap ends with the kernel that starts it (ties: the
-- lowest correlation id, the first launched):
--   host wait    its launch call started after the gap began: the CPU had
--                not issued the work yet
--   kernel wait  otherwise, a gap shorter than
--                breakdown_kernel_wait_max_gap_ns (HTA's
--                consecutive_kernel_delay, 30 µs: HTA's docstring says
--                30 ns, but it compares microseconds), the overhead of
--                launching back-to-back kernels
--   other        otherwise (e.g. a kernel waiting on an event)
-- A kernel without a known launch call is never host wait (as in HTA).
with intervals as (
    select
        run,
        rank,
        correlation_id,
        start_ns,
        end_ns,
        -- 0 compute, 1 communication, 2 memory
        case category when 'communication' then 1 when 'memory' then 2 else 0 end as set_code
    from scoped_kernels
    where start_ns is not null
        and end_ns >= start_ns
),

reaches as (
    select
        run,
        rank,
        correlation_id,
        start_ns,
        end_ns,
        set_code,
        max(case when set_code = 0 then end_ns end) over before as compute_reach_ns,
        max(case when set_code = 1 then end_ns end) over before as comm_reach_ns,
        max(case when set_code = 2 then end_ns end) over before as memory_reach_ns
    from intervals
    window before as (
        partition by run, rank
        order by start_ns, correlation_id
        rows between unbounded preceding and 1 preceding
    )
),

-- The reach of a union of sets is the greatest of their reaches (greatest
-- skips NULL: a set with no kernel yet reaches nowhere, and a kernel that
-- starts past the reach adds all of itself).
added as materialized (
    select
        run,
        rank,
        correlation_id,
        start_ns,
        end_ns,
        greatest(compute_reach_ns, comm_reach_ns, memory_reach_ns) as gap_start_ns,
        case when start_ns > gap_start_ns then start_ns - gap_start_ns end as gap_ns,
        greatest(end_ns - greatest(start_ns, gap_start_ns), 0) as all_added_ns,
        case when set_code = 0
            then greatest(end_ns - greatest(start_ns, compute_reach_ns), 0)
        end as compute_added_ns,
        case when set_code = 1
            then greatest(end_ns - greatest(start_ns, comm_reach_ns), 0)
        end as comm_added_ns,
        case when set_code = 2
            then greatest(end_ns - greatest(start_ns, memory_reach_ns), 0)
        end as memory_added_ns,
        case when set_code < 2
            then greatest(end_ns - greatest(start_ns, compute_reach_ns, comm_reach_ns), 0)
        end as compute_comm_added_ns
    from reaches
),

unions as (
    select
        run,
        rank,
        count(*) as kernel_count,
        min(start_ns) as span_start_ns,
        max(end_ns) as span_end_ns,
        sum(all_added_ns)::bigint as busy_ns,
        coalesce(sum(compute_added_ns), 0)::bigint as compute_union_ns,
        coalesce(sum(comm_added_ns), 0)::bigint as comm_union_ns,
        coalesce(sum(memory_added_ns), 0)::bigint as memory_union_ns,
        coalesce(sum(compute_comm_added_ns), 0)::bigint as compute_comm_union_ns,
        count(gap_ns) as idle_gap_count,
        coalesce(sum(gap_ns), 0)::bigint as gap_total_ns,
        coalesce(sum(gap_ns) filter (
            where gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns')
        ), 0)::bigint as short_gap_total_ns
    from added
    group by run, rank
),

-- Gaps whose closing kernel was launched after the gap began. A semi join:
-- a kernel counts once however many runtime calls share its correlation id.
host_wait_gaps as (
    select g.run, g.rank, g.gap_ns
    from added as g
    semi join api_calls as a
        on a.run = g.run
        and a.rank = g.rank
        and a.correlation_id = g.correlation_id
        and a.start_ns > g.gap_start_ns
    where g.gap_ns is not null
),

host_wait as (
    select
        run,
        rank,
        sum(gap_ns)::bigint as host_wait_ns,
        coalesce(sum(gap_ns) filter (
            where gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns')
        ), 0)::bigint as short_host_wait_ns
    from host_wait_gaps
    group by run, rank
)

select
    u.run,
    u.rank,
    u.kernel_count,
    u.span_start_ns,
    u.span_end_ns,
    u.span_end_ns - u.span_start_ns as span_ns,
    u.busy_ns,
    u.compute_union_ns,
    u.comm_union_ns,
    u.memory_union_ns,
    u.compute_comm_union_ns,
    u.idle_gap_count,
    coalesce(h.host_wait_ns, 0) as idle_host_wait_ns,
    u.short_gap_total_ns - coalesce(h.short_host_wait_ns, 0) as idle_kernel_wait_ns,
    u.gap_total_ns - coalesce(h.host_wait_ns, 0)
        - (u.short_gap_total_ns - coalesce(h.short_host_wait_ns, 0)) as idle_other_ns
from unions as u
left join host_wait as h
    on h.run = u.run
    and h.rank = u.rank
