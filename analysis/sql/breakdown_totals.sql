-- Per rank, the lengths of the interval unions that time_breakdown and
-- comm_overlap are made of, and the rank's idle gaps by cause.
-- requires: rank_unions, kernels
-- param: breakdown_kernel_wait_max_gap_ns = 30000
--
-- Kernels of the complete profiler steps (scoped_kernels), all streams
-- together, at full nanosecond precision. K, C and M are the merged
-- intervals of the compute, communication and memory activities; A of all.
--
-- One sweep, done when the trace file is ingested (collector/derive.py):
-- with a rank's kernels ordered by (start, correlation id), the running
-- maximum of the end over the kernels before (reach) is where the union of
-- those kernels stops. A kernel adds max(0, end - max(start, reach)) to the
-- union, and one that starts after the reach opens a new island: the gap
-- between reach and its start is idle time (kernels.rank_gap_ns). Keeping a
-- reach per set gives every union length from the same pass (stored in
-- rank_summary); intersections follow: |C ∩ K| = |C| + |K| - |C ∪ K|.
-- Every kernel that is not communication or memory counts as compute.
--
-- Idle gaps by cause, HTA's idle-time categories applied to the gaps of the
-- whole rank (HTA applies them to the gaps of each stream; see
-- idle_breakdown). The gap ends with the kernel that starts it (ties: the
-- lowest correlation id, the first launched):
--   host wait    its launch call started after the gap began: the CPU had
--                not issued the work yet (kernels.rank_gap_host_wait)
--   kernel wait  otherwise, a gap shorter than
--                breakdown_kernel_wait_max_gap_ns (HTA's
--                consecutive_kernel_delay, 30 µs: HTA's docstring says
--                30 ns, but it compares microseconds), the overhead of
--                launching back-to-back kernels
--   other        otherwise (e.g. a kernel waiting on an event)
-- A kernel without a known launch call is never host wait (as in HTA).
with kernel_wait as (
    -- the one part that depends on a threshold, so it is summed here
    select
        run,
        rank,
        sum(rank_gap_ns)::bigint as kernel_wait_ns
    from kernels
    where rank_gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns')
        and not rank_gap_host_wait
    group by run, rank
)

select
    r.run,
    r.rank,
    r.kernel_count,
    r.span_start_ns,
    r.span_end_ns,
    r.span_end_ns - r.span_start_ns as span_ns,
    r.busy_ns,
    r.compute_union_ns,
    r.comm_union_ns,
    r.memory_union_ns,
    r.compute_comm_union_ns,
    r.idle_gap_count,
    r.idle_host_wait_ns,
    coalesce(w.kernel_wait_ns, 0) as idle_kernel_wait_ns,
    r.idle_ns - r.idle_host_wait_ns - coalesce(w.kernel_wait_ns, 0) as idle_other_ns,
    r.unlaunched_count,
    r.unlaunched_busy_ns
from rank_unions as r
left join kernel_wait as w
    on w.run = r.run
    and w.rank = r.rank
