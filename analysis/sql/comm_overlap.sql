-- How much of each rank's communication runs under computation, and how
-- much is exposed (the GPU communicates with nothing to compute).
-- requires: rank_unions
--
-- C and K: the merged intervals of the rank's communication and compute
-- kernels (all streams, complete profiler steps only: scoped_kernels).
--   comm_ns          |C|, the time some communication kernel runs
--   overlapped_ns    |C ∩ K| = |C| + |K| - |C ∪ K|
--   exposed_ns       |C \ K| = comm_ns - overlapped_ns (time_breakdown's
--                    communication_ns)
--   overlap_share    overlapped_ns / comm_ns (HTA's communication-computation
--                    overlap); NULL for a rank without communication
--   exposed_share    exposed_ns / span_ns, the part of the rank's span lost
--                    to communication nothing hides
select
    run,
    rank,
    span_end_ns - span_start_ns as span_ns,
    comm_union_ns as comm_ns,
    comm_union_ns + compute_union_ns - compute_comm_union_ns as overlapped_ns,
    compute_comm_union_ns - compute_union_ns as exposed_ns,
    (comm_union_ns + compute_union_ns - compute_comm_union_ns) / nullif(comm_union_ns, 0) as overlap_share,
    (compute_comm_union_ns - compute_union_ns) / nullif(span_end_ns - span_start_ns, 0) as exposed_share
from rank_unions
order by run, rank
