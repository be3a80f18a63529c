-- Launch and queuing time per profiler step and rank, and whether the step
-- was CPU-bound (the GPU waits for launches) or GPU-bound (kernels queue up).
-- requires: kernel_launches, step_windows, rank_summary, step_launches
-- param: short_kernel_max_call_ns = 50000
-- param: launch_delay_outlier_ns = 100000
-- param: launch_cpu_bound_min_idle_share = 0.2
-- param: launch_cpu_bound_max_delay_ns = 20000
-- param: launch_gpu_bound_max_idle_share = 0.1
-- param: launch_gpu_bound_min_delay_ns = 100000
--
-- One row per step window of each rank:
--   kernels of a step   those whose launch call starts in the step window
--                       (kernel_launches.step)
--   tklqt_ns            total kernel launch and queuing time: the sum of
--                       launch_queue_ns (kernel start - call start) over them
--   tklqt_share         tklqt_ns / step_ns (can exceed 1: queues overlap)
--   gpu_busy_ns         the union of all kernel intervals of the rank (all
--                       streams, launched in the step or not) within the
--                       step window
--   gpu_idle_ns         step_ns - gpu_busy_ns; gpu_idle_share = idle / step
--   short kernels       GPU time shorter than the launch call, and the call
--                       at most short_kernel_max_call_ns (kernels replayed
--                       from a graph left out, as in short_kernels and the
--                       launch-delay outliers)
--   verdict             cpu_bound: idle share >= launch_cpu_bound_min_idle_share
--                         and median launch delay <= launch_cpu_bound_max_delay_ns
--                       gpu_bound: idle share <= launch_gpu_bound_max_idle_share
--                         and median launch delay >= launch_gpu_bound_min_delay_ns
--                       unknown: no kernels, or much idle time and long
--                         delays at once (launches do not explain the idling)
--                       balanced: anything else
--   in_rank_totals      whether per-rank totals (launch_rank_summary,
--                       launch_flip) count the step: all but the last, which
--                       the profiler cuts short, unless it is the only one
-- A rank without profiler steps has one window, step NULL, from its first
-- launch call or kernel start to the end of its last kernel.
--
-- GPU busy time within a step comes with the step (step_windows.gpu_busy_ns,
-- found at ingest); a rank without steps is busy for the union of all its
-- kernels (rank_summary.busy_ns: all its kernels count).
with launch_stats as (
    -- what no threshold changes, per step, found at ingest (step_launches;
    -- a step traced in several files: sums add, its quantiles are unknown)
    select
        run,
        rank,
        step,
        sum(kernel_count)::bigint as kernel_count,
        sum(tklqt_ns)::bigint as tklqt_ns,
        sum(launch_call_total_ns)::bigint as launch_call_total_ns,
        sum(launch_delay_total_ns)::bigint as launch_delay_total_ns,
        case when count(*) = 1 then any_value(launch_delay_p50_ns) end as launch_delay_p50_ns,
        case when count(*) = 1 then any_value(launch_delay_p95_ns) end as launch_delay_p95_ns
    from step_launches
    group by run, rank, step
),

threshold_counts as (
    select
        run,
        rank,
        step,
        count(*) filter (
            where dur_ns < launch_call_ns
            and launch_call_ns <= getvariable('short_kernel_max_call_ns')
        ) as short_kernel_count,
        count(*) filter (
            where launch_delay_ns > getvariable('launch_delay_outlier_ns')
        ) as launch_delay_outlier_count
    from kernel_launches
    where ((dur_ns < launch_call_ns and launch_call_ns <= getvariable('short_kernel_max_call_ns'))
        or launch_delay_ns > getvariable('launch_delay_outlier_ns'))
        and not graph_launch
    group by run, rank, step
),

unstepped_ranks as (
    -- ranks without profiler steps: one window over all their kernels,
    -- all of which count (rank_summary, found at ingest)
    select
        r.run,
        r.rank,
        least(min(r.span_start_ns), min(r.first_launch_call_start_ns)) as start_ns,
        max(r.span_end_ns) as end_ns,
        sum(r.busy_ns)::bigint as gpu_busy_ns
    from rank_summary as r
    anti join (select distinct run, rank from step_windows) as w
        on w.run = r.run
        and w.rank = r.rank
    group by r.run, r.rank
),

windows as (
    select run, rank, step, start_ns, end_ns, is_last, coalesce(gpu_busy_ns, 0) as gpu_busy_ns
    from step_windows
    union all
    select run, rank, null, start_ns, end_ns, false, gpu_busy_ns
    from unstepped_ranks
),

measured as (
    select
        w.run,
        w.rank,
        w.step,
        w.is_last,
        w.is_last and count(*) over (partition by w.run, w.rank) > 1 as cut_short,
        w.start_ns,
        w.end_ns,
        w.end_ns - w.start_ns as step_ns,
        coalesce(s.kernel_count, 0) as kernel_count,
        coalesce(s.tklqt_ns, 0) as tklqt_ns,
        coalesce(s.launch_call_total_ns, 0) as launch_call_total_ns,
        coalesce(s.launch_delay_total_ns, 0) as launch_delay_total_ns,
        s.launch_delay_total_ns / s.kernel_count as launch_delay_mean_ns,
        s.launch_delay_p50_ns,
        s.launch_delay_p95_ns,
        coalesce(t.short_kernel_count, 0) as short_kernel_count,
        coalesce(t.launch_delay_outlier_count, 0) as launch_delay_outlier_count,
        w.gpu_busy_ns
    from windows as w
    left join launch_stats as s
        on s.run = w.run
        and s.rank = w.rank
        and s.step is not distinct from w.step
    left join threshold_counts as t
        on t.run = w.run
        and t.rank = w.rank
        and t.step is not distinct from w.step
)

select
    run,
    rank,
    step,
    start_ns,
    end_ns,
    step_ns,
    is_last,
    not cut_short as in_rank_totals,
    kernel_count,
    tklqt_ns,
    tklqt_ns / nullif(step_ns, 0) as tklqt_share,
    gpu_busy_ns,
    step_ns - gpu_busy_ns as gpu_idle_ns,
    (step_ns - gpu_busy_ns) / nullif(step_ns, 0) as gpu_idle_share,
    launch_call_total_ns,
    launch_delay_total_ns,
    launch_delay_mean_ns,
    launch_delay_p50_ns,
    launch_delay_p95_ns,
    short_kernel_count,
    launch_delay_outlier_count,
    case
        when kernel_count = 0 or step_ns <= 0 then 'unknown'
        when (step_ns - gpu_busy_ns) / step_ns >= getvariable('launch_cpu_bound_min_idle_share')
            and launch_delay_p50_ns <= getvariable('launch_cpu_bound_max_delay_ns') then 'cpu_bound'
        when (step_ns - gpu_busy_ns) / step_ns <= getvariable('launch_gpu_bound_max_idle_share')
            and launch_delay_p50_ns >= getvariable('launch_gpu_bound_min_delay_ns') then 'gpu_bound'
        when (step_ns - gpu_busy_ns) / step_ns >= getvariable('launch_cpu_bound_min_idle_share')
            and launch_delay_p50_ns >= getvariable('launch_gpu_bound_min_delay_ns') then 'unknown'
        else 'balanced'
    end as verdict
from measured
