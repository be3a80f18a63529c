-- GPU time per user annotation: for each `record_function` range (and any
-- other user range on the CPU), the GPU activities launched inside it.
-- requires: launched_on_thread, annotations
--
-- A GPU activity belongs to a range when its launch call
-- (launched_on_thread) started within the range, on the same process and
-- thread: start_ns <= call start < end_ns. Ranges nest, so an
-- activity counts for every range around its call (a `forward` range and
-- the `attention` range inside it both count the attention kernels).
-- Activities of the complete profiler steps only (kernels.scoped); those
-- without a launch call in the trace belong to no range. Profiler steps
-- (`ProfilerStep#N`: step_windows) and the GPU-side copies of the ranges
-- (kind gpu_user) are not ranges here.
-- One row per (run, rank, name):
--   range_count        the ranges of that name
--   range_ns           their summed length on the CPU
--   kernel_count       the activities launched inside them
--   gpu_ns             those activities' summed duration (not a union: two
--                      running at once count twice)
--   launch_delay_mean_ns   their mean launch delay (kernel_launches)
with ranges as (
    select run, rank, pid, tid, name, start_ns, end_ns
    from annotations
    where kind = 'user'
        and start_ns is not null
        and end_ns >= start_ns
),

per_range as (
    select
        r.run,
        r.rank,
        r.name,
        r.end_ns - r.start_ns as range_ns,
        count(l.call_start_ns) as kernel_count,
        sum(l.dur_ns) as gpu_ns,
        sum(l.launch_delay_ns) as launch_delay_ns,
        count(l.launch_delay_ns) as delay_count
    from ranges as r
    left join launched_on_thread as l
        on l.run = r.run
        and l.rank = r.rank
        and l.pid = r.pid
        and l.tid = r.tid
        and l.call_start_ns >= r.start_ns
        and l.call_start_ns < r.end_ns
    group by r.run, r.rank, r.name, r.pid, r.tid, r.start_ns, r.end_ns
)

select
    run,
    rank,
    name,
    count(*) as range_count,
    sum(range_ns)::bigint as range_ns,
    sum(kernel_count)::bigint as kernel_count,
    coalesce(sum(gpu_ns), 0)::bigint as gpu_ns,
    sum(launch_delay_ns) / nullif(sum(delay_count), 0) as launch_delay_mean_ns
from per_range
group by run, rank, name
order by run, rank, gpu_ns desc, name
