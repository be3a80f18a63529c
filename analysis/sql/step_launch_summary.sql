-- Launch and queuing time per profiler step and rank, and whether the step
-- was CPU-bound (the GPU waits for launches) or GPU-bound (kernels queue up).
-- requires: kernel_launches, step_windows, kernels
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
--                       at most short_kernel_max_call_ns
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
-- launch call to the end of its last launched kernel.
--
-- GPU busy time in [s, e) is B(e) - B(s), where B(t) is the busy time before
-- t. One sort of the rank's kernels by start, with the window bounds sorted
-- in as markers, gives each kernel the furthest end of the kernels before it
-- (prev_reach_ns: its new coverage is what lies beyond it) and the segment
-- between two bounds it starts in. Per segment: covered_ns, the union length
-- of its kernels not covered before, and reach_ns, their furthest end. With
-- both summed (and maxed) over the segments before a bound t,
-- B(t) = covered_ns - max(reach_ns - t, 0).
with launch_stats as (
    select
        run,
        rank,
        step,
        count(*) as kernel_count,
        sum(launch_queue_ns)::bigint as tklqt_ns,
        sum(launch_call_ns)::bigint as launch_call_total_ns,
        sum(launch_delay_ns)::bigint as launch_delay_total_ns,
        quantile_cont(launch_delay_ns, [0.5, 0.95]) as launch_delay_quantiles_ns,
        count(*) filter (
            where dur_ns < launch_call_ns
            and launch_call_ns <= getvariable('short_kernel_max_call_ns')
        ) as short_kernel_count,
        count(*) filter (
            where launch_delay_ns > getvariable('launch_delay_outlier_ns')
        ) as launch_delay_outlier_count,
        min(launch_call_start_ns) as first_call_start_ns,
        max(start_ns + dur_ns) as last_kernel_end_ns
    from kernel_launches
    group by run, rank, step
),

windows as (
    select run, rank, step, start_ns, end_ns, is_last
    from step_windows
    union all
    select s.run, s.rank, null, s.first_call_start_ns, s.last_kernel_end_ns, false
    from launch_stats as s
    where s.step is null
        and not exists (
            select 1 from step_windows as w where w.run = s.run and w.rank = s.rank
        )
),

bounds as (
    select hash(run, rank) as rank_key, start_ns as t from windows
    union
    select hash(run, rank) as rank_key, end_ns as t from windows
),

swept as (
    -- sort_key orders by start time, a bound before the kernels starting
    -- with it: 2 * start + 1 for a kernel, 2 * t for a bound (so the key
    -- alone says which a row is, and its time).
    select
        rank_key,
        sort_key,
        end_ns,
        max(end_ns) over before_row as prev_reach_ns,
        sum(1 - (sort_key & 1)) over through_row as segment
    from (
        select hash(run, rank) as rank_key, start_ns * 2 + 1 as sort_key, end_ns
        from kernels
        union all
        select rank_key, t * 2, null
        from bounds
    )
    window
        before_row as (
            partition by rank_key order by sort_key
            rows between unbounded preceding and 1 preceding
        ),
        through_row as (
            partition by rank_key order by sort_key
            rows between unbounded preceding and current row
        )
),

segments as (
    select
        rank_key,
        segment,
        sum(greatest(end_ns - greatest(sort_key >> 1, coalesce(prev_reach_ns, sort_key >> 1)), 0))::bigint
            as covered_ns,
        max(end_ns) as reach_ns
    from swept
    where sort_key & 1 = 1
    group by rank_key, segment
),

busy_before as (
    -- B(t) at each bound t, the k-th of its rank: segments 0 .. k-1 lie before it
    select
        b.rank_key,
        b.t,
        coalesce(sum(s.covered_ns) over upto, 0)
            - greatest(coalesce(max(s.reach_ns) over upto, b.t) - b.t, 0) as busy_before_ns
    from (
        select rank_key, t, row_number() over (partition by rank_key order by t) as k
        from bounds
    ) as b
    left join segments as s
        on s.rank_key = b.rank_key
        and s.segment = b.k - 1
    window upto as (partition by b.rank_key order by b.k)
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
        s.launch_delay_quantiles_ns[1] as launch_delay_p50_ns,
        s.launch_delay_quantiles_ns[2] as launch_delay_p95_ns,
        coalesce(s.short_kernel_count, 0) as short_kernel_count,
        coalesce(s.launch_delay_outlier_count, 0) as launch_delay_outlier_count,
        e.busy_before_ns - b.busy_before_ns as gpu_busy_ns
    from windows as w
    join busy_before as b
        on b.rank_key = hash(w.run, w.rank) and b.t = w.start_ns
    join busy_before as e
        on e.rank_key = hash(w.run, w.rank) and e.t = w.end_ns
    left join launch_stats as s
        on s.run = w.run
        and s.rank = w.rank
        and s.step is not distinct from w.step
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
