-- Per run and kernel name, the figures two runs are compared on (the
-- Compare page puts two runs' rows side by side).
--
-- One row per (run, name) over the complete profiler steps
-- (kernel_stats). Runs differ in ranks and steps, so times are also given
-- per rank and step: per_step_ns = total_ns / (ranks x steps), where
-- steps are the rank's steps in scope (all but the last, unless it is the
-- only one; the mean over ranks) and ranks the ranks with kernels.
--   kernel_count, total_ns: summed over the ranks;
--   mean_ns: total_ns / kernel_count; per_step_count likewise per rank-step.
-- requires: kernel_stats, step_windows
with rank_steps as (
    select run, rank, greatest(count(*) filter (where not is_last), 1) as steps
    from step_windows
    group by run, rank
),
scope as (
    select run, avg(steps) as steps
    from rank_steps
    group by run
),
per_name as (
    select
        run,
        name,
        any_value(category) as category,
        count(distinct rank) as ranks,
        sum(kernel_count)::bigint as kernel_count,
        sum(total_ns)::bigint as total_ns
    from kernel_stats
    group by run, name
),
run_ranks as (
    select run, count(distinct rank) as ranks from kernel_stats group by run
)
select
    per_name.run,
    per_name.name,
    per_name.category,
    run_ranks.ranks,
    coalesce(scope.steps, 1) as steps,
    per_name.kernel_count,
    per_name.total_ns,
    per_name.total_ns / per_name.kernel_count as mean_ns,
    per_name.total_ns / (run_ranks.ranks * coalesce(scope.steps, 1)) as per_step_ns,
    per_name.kernel_count / (run_ranks.ranks * coalesce(scope.steps, 1)) as per_step_count
from per_name
join run_ranks using (run)
left join scope using (run)
order by per_name.run, per_name.total_ns desc
