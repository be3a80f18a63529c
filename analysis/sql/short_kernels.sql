-- Short kernels: GPU work that takes less time than launching it, per
-- kernel name and rank: candidates for fusion or CUDA graphs.
-- requires: kernel_launches, launched_names
-- param: short_kernel_max_call_ns = 50000
--
-- A short kernel runs for less time on the GPU (dur_ns) than its launch call
-- takes on the CPU (launch_call_ns), and that call takes at most
-- short_kernel_max_call_ns (longer calls are launch-call outliers, see
-- launch_outliers; HTA's runtime_cutoff). Kernels replayed from a CUDA or
-- HIP graph have no launch call of their own (kernel_launches.graph_launch)
-- and are left out: they are launched together already. Like every per-rank
-- aggregate (time_breakdown, kernel_stats) and HTA's defaults, only the
-- kernels of the complete profiler steps count (kernel_launches.scoped: the
-- last, cut-short step is left out), in the short ones and in the totals
-- their shares are of (launched_names). One row per
-- (run, rank, name) with
-- short kernels, ordered by name_rank (1 = most short kernels):
--   kernel_count, gpu_ns, launch_call_total_ns   of that name's short kernels
--   kernel_share       its short kernels / all launched kernels of the rank
--   gpu_time_share     their GPU time / the GPU time of all launched kernels
--   launch_call_share  their launch-call time / all launch-call time
--   rank_short_*       the same over every short kernel of the rank
with short_counts as (
    -- the one threshold-dependent part: a scan of the short kernels only
    select
        run,
        rank,
        name,
        count(*) as kernel_count,
        sum(dur_ns) as gpu_ns,
        sum(launch_call_ns) as launch_call_total_ns
    from kernel_launches
    where dur_ns < launch_call_ns
        and launch_call_ns <= getvariable('short_kernel_max_call_ns')
        and not graph_launch
        and scoped
    group by run, rank, name
),

per_name as (
    -- every launched kernel's totals per name, found at ingest (kernel_names)
    select
        n.run,
        n.rank,
        n.name,
        n.all_kernel_count,
        n.all_gpu_ns,
        n.all_launch_call_ns,
        coalesce(s.kernel_count, 0) as kernel_count,
        s.gpu_ns,
        s.launch_call_total_ns
    from launched_names as n
    left join short_counts as s
        on s.run = n.run
        and s.rank = n.rank
        and s.name = n.name
),

per_rank as (
    select
        *,
        sum(all_kernel_count) over r as rank_kernel_count,
        sum(all_gpu_ns) over r as rank_gpu_ns,
        sum(all_launch_call_ns) over r as rank_launch_call_ns,
        sum(kernel_count) over r as rank_short_kernel_count,
        sum(gpu_ns) over r as rank_short_gpu_ns,
        sum(launch_call_total_ns) over r as rank_short_launch_call_ns
    from per_name
    window r as (partition by run, rank)
)

select
    run,
    rank,
    name,
    row_number() over (partition by run, rank order by kernel_count desc, gpu_ns desc, name) as name_rank,
    kernel_count,
    gpu_ns::bigint as gpu_ns,
    launch_call_total_ns::bigint as launch_call_total_ns,
    gpu_ns / kernel_count as gpu_mean_ns,
    kernel_count / rank_kernel_count as kernel_share,
    gpu_ns / nullif(rank_gpu_ns, 0) as gpu_time_share,
    launch_call_total_ns / nullif(rank_launch_call_ns, 0) as launch_call_share,
    rank_short_kernel_count::bigint as rank_short_kernel_count,
    rank_short_kernel_count / rank_kernel_count as rank_short_kernel_share,
    rank_short_gpu_ns / nullif(rank_gpu_ns, 0) as rank_short_gpu_time_share,
    rank_short_launch_call_ns / nullif(rank_launch_call_ns, 0) as rank_short_launch_call_share
from per_rank
where kernel_count > 0
