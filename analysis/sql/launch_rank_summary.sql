-- Launch and queuing time per rank of a run, over its complete profiler
-- steps, and the rank's dominant verdict.
-- requires: step_launch_summary
--
-- Totals over the steps with in_rank_totals (all but the last, cut short by
-- the profiler, unless it is the only one; the whole trace where the rank
-- has no steps):
--   tklqt_share, gpu_idle_share   summed over those steps, / summed step_ns
--   launch_delay_mean_ns          summed launch delay / kernel count
--   step_launch_delay_p50_ns      the median over those steps of each
--                                 step's median launch delay (the typical
--                                 delay, which the mean's outliers hide)
--   verdict                       the verdict that holds for the largest
--                                 share of that step time (verdict_share);
--                                 ties go to the first in name order
with counted as materialized (
    select *
    from step_launch_summary
    where in_rank_totals
),

totals as (
    select
        run,
        rank,
        count(*) as step_count,
        sum(step_ns)::bigint as step_ns,
        sum(kernel_count)::bigint as kernel_count,
        sum(tklqt_ns)::bigint as tklqt_ns,
        sum(gpu_busy_ns)::bigint as gpu_busy_ns,
        sum(gpu_idle_ns)::bigint as gpu_idle_ns,
        sum(launch_call_total_ns)::bigint as launch_call_total_ns,
        sum(launch_delay_total_ns)::bigint as launch_delay_total_ns,
        median(launch_delay_p50_ns) as step_launch_delay_p50_ns,
        sum(short_kernel_count)::bigint as short_kernel_count,
        sum(launch_delay_outlier_count)::bigint as launch_delay_outlier_count,
        count(*) filter (where verdict = 'cpu_bound') as cpu_bound_steps,
        count(*) filter (where verdict = 'gpu_bound') as gpu_bound_steps,
        count(*) filter (where verdict = 'balanced') as balanced_steps,
        count(*) filter (where verdict = 'unknown') as unknown_steps
    from counted
    group by run, rank
),

by_verdict as (
    select
        run,
        rank,
        verdict,
        sum(step_ns) as verdict_ns,
        row_number() over (partition by run, rank order by sum(step_ns) desc, verdict) as place
    from counted
    group by run, rank, verdict
)

select
    t.run,
    t.rank,
    t.step_count,
    t.step_ns,
    t.kernel_count,
    t.tklqt_ns,
    t.tklqt_ns / nullif(t.step_ns, 0) as tklqt_share,
    t.gpu_busy_ns,
    t.gpu_idle_ns,
    t.gpu_idle_ns / nullif(t.step_ns, 0) as gpu_idle_share,
    t.launch_call_total_ns,
    t.launch_delay_total_ns,
    t.launch_delay_total_ns / nullif(t.kernel_count, 0) as launch_delay_mean_ns,
    t.step_launch_delay_p50_ns,
    t.short_kernel_count,
    t.launch_delay_outlier_count,
    t.cpu_bound_steps,
    t.gpu_bound_steps,
    t.balanced_steps,
    t.unknown_steps,
    v.verdict,
    v.verdict_ns / nullif(t.step_ns, 0) as verdict_share
from totals as t
join by_verdict as v
    on v.run = t.run
    and v.rank = t.rank
    and v.place = 1
