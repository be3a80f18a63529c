-- Launch outliers, per kernel name and rank: kernels that started long after
-- their launch call returned, and launch calls that took long themselves.
-- requires: kernel_launches, launched_names
-- param: launch_delay_outlier_ns = 100000
-- param: launch_call_outlier_ns = 50000
--
-- outlier_kind (HTA's cutoffs, get_cuda_kernel_launch_stats):
--   launch_delay  launch_delay_ns > launch_delay_outlier_ns: the kernel
--                 waited (behind other work on the GPU, or for a dependency)
--   launch_call   launch_call_ns > launch_call_outlier_ns: the runtime call
--                 itself was slow (allocation, lazy module loading, a lock)
-- Kernels replayed from a CUDA or HIP graph are left out of both
-- (kernel_launches.graph_launch): one call launched them all, and each
-- waited for the graph's earlier kernels rather than for the CPU. Like every
-- per-rank aggregate and HTA's defaults, only the kernels of the complete
-- profiler steps count (kernel_launches.scoped: the last, cut-short step is
-- left out), in the outliers and in the totals (launched_names).
-- One row per (run, rank, name, outlier_kind) with outliers, ordered by
-- name_rank within the kind (1 = most outliers):
--   kernel_count           outliers of that name
--   total_ns, max_ns       their delay (or call time), summed and largest
--   kernel_share           outliers / all launched kernels of the rank
--   rank_outlier_count     outliers of that kind on the rank
with outlier_counts as (
    -- a scan of the outliers only (the thresholds are parameters)
    select
        run,
        rank,
        name,
        count(*) filter (where launch_delay_ns > getvariable('launch_delay_outlier_ns')) as delay_count,
        sum(launch_delay_ns) filter (where launch_delay_ns > getvariable('launch_delay_outlier_ns')) as delay_ns,
        max(launch_delay_ns) filter (where launch_delay_ns > getvariable('launch_delay_outlier_ns')) as delay_max_ns,
        count(*) filter (where launch_call_ns > getvariable('launch_call_outlier_ns')) as call_count,
        sum(launch_call_ns) filter (where launch_call_ns > getvariable('launch_call_outlier_ns')) as call_ns,
        max(launch_call_ns) filter (where launch_call_ns > getvariable('launch_call_outlier_ns')) as call_max_ns
    from kernel_launches
    where (launch_delay_ns > getvariable('launch_delay_outlier_ns')
        or launch_call_ns > getvariable('launch_call_outlier_ns'))
        and not graph_launch
        and scoped
    group by run, rank, name
),

per_name as (
    -- launched kernels per name, counted at ingest (kernel_names)
    select
        n.run,
        n.rank,
        n.name,
        n.all_kernel_count,
        coalesce(o.delay_count, 0) as delay_count,
        o.delay_ns,
        o.delay_max_ns,
        coalesce(o.call_count, 0) as call_count,
        o.call_ns,
        o.call_max_ns
    from launched_names as n
    left join outlier_counts as o
        on o.run = n.run
        and o.rank = n.rank
        and o.name = n.name
),

with_totals as (
    select *, sum(all_kernel_count) over (partition by run, rank) as rank_kernel_count
    from per_name
),

outliers as (
    select run, rank, name, 'launch_delay' as outlier_kind, delay_count as kernel_count,
        delay_ns as total_ns, delay_max_ns as max_ns, rank_kernel_count
    from with_totals
    where delay_count > 0
    union all
    select run, rank, name, 'launch_call', call_count, call_ns, call_max_ns, rank_kernel_count
    from with_totals
    where call_count > 0
)

select
    run,
    rank,
    outlier_kind,
    name,
    row_number() over (partition by run, rank, outlier_kind order by kernel_count desc, total_ns desc, name) as name_rank,
    kernel_count,
    total_ns::bigint as total_ns,
    max_ns,
    total_ns / kernel_count as mean_ns,
    kernel_count / rank_kernel_count as kernel_share,
    sum(kernel_count) over (partition by run, rank, outlier_kind) as rank_outlier_count
from outliers
