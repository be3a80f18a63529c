-- The idle gaps of each stream, by cause: whether a stream's idle time is
-- many tiny gaps or a few long ones.
-- requires: kernels
-- param: breakdown_kernel_wait_max_gap_ns = 30000
--
-- The gaps are idle_breakdown's (kernels of the complete profiler steps,
-- per stream, from the furthest end of the kernels before to the start of
-- the kernel that ends the gap: kernels.stream_gap_ns), with its causes:
--   host_wait    the closing kernel's launch call started after the gap began
--   kernel_wait  otherwise, a gap shorter than breakdown_kernel_wait_max_gap_ns
--   other        otherwise
-- One row per (run, rank, stream, cause) with gaps:
--   gap_count, total_ns          how many and their sum (idle_breakdown's
--                                idle_<cause>_ns)
--   p50_ns, p95_ns               quantiles of a gap's length (linear
--                                interpolation, quantile_cont)
--   max_ns                       the longest
with gaps as (
    select
        run,
        rank,
        stream,
        stream_gap_ns as gap_ns,
        case
            when stream_gap_host_wait then 'host_wait'
            when stream_gap_ns < getvariable('breakdown_kernel_wait_max_gap_ns') then 'kernel_wait'
            else 'other'
        end as cause
    from kernels
    where scoped
        and stream_gap_ns is not null
        and start_ns is not null
        and end_ns >= start_ns
)

select
    run,
    rank,
    stream,
    cause,
    count(*) as gap_count,
    sum(gap_ns)::bigint as total_ns,
    quantile_cont(gap_ns, 0.5) as p50_ns,
    quantile_cont(gap_ns, 0.95) as p95_ns,
    max(gap_ns) as max_ns
from gaps
group by run, rank, stream, cause
order by run, rank, stream, cause
