-- Per rank, the union lengths and idle gaps its trace files' sweeps found
-- at ingest (rank_summary), added up over the files: the base of
-- breakdown_totals and comm_overlap.
-- requires: rank_summary
--
-- One row per (run, rank) with kernels in its complete profiler steps.
--   kernel_count         the kernels counted (kernels.scoped, start <= end)
--   span_start_ns, span_end_ns   the first start and last end among them
--   busy_ns              the length of the union of their intervals
--   compute_union_ns, comm_union_ns, memory_union_ns   of each category's
--   compute_comm_union_ns        of compute and communication together
--   idle_gap_count, idle_ns      the gaps between the union's islands
--   idle_host_wait_ns    the gaps whose closing kernel was launched after
--                        the gap began
--   unlaunched_count     the kernels counted whose launch call the trace
--                        lacks (no runtime call has their correlation id)
--   unlaunched_busy_ns   the busy time only those cover: busy_ns minus the
--                        union of the launched kernels
select
    run,
    rank,
    sum(scoped_kernel_count)::bigint as kernel_count,
    min(span_start_ns) as span_start_ns,
    max(span_end_ns) as span_end_ns,
    sum(busy_ns)::bigint as busy_ns,
    sum(compute_union_ns)::bigint as compute_union_ns,
    sum(comm_union_ns)::bigint as comm_union_ns,
    sum(memory_union_ns)::bigint as memory_union_ns,
    sum(compute_comm_union_ns)::bigint as compute_comm_union_ns,
    sum(idle_gap_count)::bigint as idle_gap_count,
    sum(idle_ns)::bigint as idle_ns,
    sum(idle_host_wait_ns)::bigint as idle_host_wait_ns,
    sum(unlaunched_count)::bigint as unlaunched_count,
    sum(unlaunched_busy_ns)::bigint as unlaunched_busy_ns
from rank_summary
where scoped_kernel_count > 0
group by run, rank
