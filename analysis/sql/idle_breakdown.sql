-- Why each stream of a rank sits idle between its kernels: waiting on the
-- host, waiting on the previous kernel, or other. HTA's idle-time breakdown
-- (get_idle_time_breakdown), one row per stream.
-- requires: kernels
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
--
-- The per-stream sweep is done when the trace file is ingested
-- (collector/derive.py): kernels.stream_gap_ns is the gap a kernel ends,
-- kernels.stream_gap_host_wait whether its launch call came after the gap
-- began. Here they are summed.
with per_stream as (
    select
        run,
        rank,
        stream,
        count(*) as kernel_count,
        count(stream_gap_ns) as idle_gap_count,
        coalesce(sum(stream_gap_ns), 0)::bigint as idle_ns,
        coalesce(sum(stream_gap_ns) filter (where stream_gap_host_wait), 0)::bigint as idle_host_wait_ns,
        coalesce(sum(stream_gap_ns) filter (
            where not stream_gap_host_wait and stream_gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns')
        ), 0)::bigint as idle_kernel_wait_ns
    from kernels
    where scoped
        and start_ns is not null
        and end_ns >= start_ns
    group by run, rank, stream
)

select
    run,
    rank,
    stream,
    kernel_count,
    idle_gap_count,
    idle_ns,
    idle_host_wait_ns,
    idle_kernel_wait_ns,
    idle_ns - idle_host_wait_ns - idle_kernel_wait_ns as idle_other_ns,
    idle_host_wait_ns / nullif(idle_ns, 0) as idle_host_wait_share,
    idle_kernel_wait_ns / nullif(idle_ns, 0) as idle_kernel_wait_share,
    (idle_ns - idle_host_wait_ns - idle_kernel_wait_ns) / nullif(idle_ns, 0) as idle_other_share
from per_stream
order by run, rank, stream
