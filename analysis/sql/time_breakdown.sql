-- Where each rank's GPU time goes: compute, communication, memory and idle,
-- and the idle time split by cause.
-- requires: breakdown_totals
--
-- Over the kernels of the complete profiler steps (scoped_kernels: the last,
-- cut-short step is left out), all streams of the rank together, at full
-- nanosecond precision.
--
-- Where this differs from HTA's temporal breakdown: a GPU activity whose
-- launch call the trace lacks (its correlation id is on no runtime call:
-- launched before the profiler started, while the GPU ran behind the CPU)
-- counts here when it starts before the last step does; HTA keeps only
-- activities whose launch call starts before the last step, so it drops
-- them. That GPU time was spent, so gpulens counts it:
--   unlaunched_count     those activities
--   unlaunched_busy_ns   the busy time only they cover (busy_ns minus the
--                        union of the launched activities); HTA's idle time
--                        is idle_ns + unlaunched_busy_ns less the part of
--                        it before HTA's first kernel (its span is shorter)
--
-- The four parts partition the span, each instant counted once, compute
-- first:
--   span_ns            first kernel start to last kernel end
--   busy_ns            the union of all kernel intervals: some activity runs
--   compute_ns         at least one compute kernel runs
--   communication_ns   communication runs and no compute (the exposed
--                      communication of comm_overlap)
--   memory_ns          only memcpy/memset activities run
--   idle_ns            nothing runs: span_ns - busy_ns
--   non_compute_ns     communication_ns + memory_ns: busy but no compute
--                      (HTA's non-compute time)
-- Shares of span_ns: busy_share, idle_share, compute_share,
-- communication_share, memory_share, non_compute_share (the idle, compute
-- and non-compute shares are HTA's temporal breakdown).
--
-- idle_host_wait_ns + idle_kernel_wait_ns + idle_other_ns = idle_ns: each
-- gap of the rank's timeline classified as in HTA's idle-time breakdown (see
-- breakdown_totals); idle_host_wait_share, idle_kernel_wait_share and
-- idle_other_share are fractions of idle_ns (NULL when the rank never idles).
with parts as (
    select
        run,
        rank,
        kernel_count,
        span_start_ns,
        span_end_ns,
        span_ns,
        busy_ns,
        compute_union_ns as compute_ns,
        compute_comm_union_ns - compute_union_ns as communication_ns,
        busy_ns - compute_comm_union_ns as memory_ns,
        span_ns - busy_ns as idle_ns,
        busy_ns - compute_union_ns as non_compute_ns,
        idle_gap_count,
        idle_host_wait_ns,
        idle_kernel_wait_ns,
        idle_other_ns,
        unlaunched_count,
        unlaunched_busy_ns
    from breakdown_totals
)

select
    run,
    rank,
    kernel_count,
    span_start_ns,
    span_end_ns,
    span_ns,
    busy_ns,
    compute_ns,
    communication_ns,
    memory_ns,
    idle_ns,
    non_compute_ns,
    idle_gap_count,
    idle_host_wait_ns,
    idle_kernel_wait_ns,
    idle_other_ns,
    unlaunched_count,
    unlaunched_busy_ns,
    busy_ns / nullif(span_ns, 0) as busy_share,
    idle_ns / nullif(span_ns, 0) as idle_share,
    compute_ns / nullif(span_ns, 0) as compute_share,
    communication_ns / nullif(span_ns, 0) as communication_share,
    memory_ns / nullif(span_ns, 0) as memory_share,
    non_compute_ns / nullif(span_ns, 0) as non_compute_share,
    idle_host_wait_ns / nullif(idle_ns, 0) as idle_host_wait_share,
    idle_kernel_wait_ns / nullif(idle_ns, 0) as idle_kernel_wait_share,
    idle_other_ns / nullif(idle_ns, 0) as idle_other_share
from parts
order by run, rank
