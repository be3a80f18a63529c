-- Across runs that differ in batch size: at which batch size does the
-- workload flip from CPU-bound (the GPU waits for launches) to GPU-bound
-- (kernels queue up)?
-- requires: step_launch_summary, kernels
--
-- Runs carry no batch-size column; it is read from the run name: a number
-- after "bs", "batch", "batchsize" or "batch_size" (any case, optionally
-- joined by _, - or =, and not preceded by a letter): resnet_bs8, batch16,
-- llama-batch_size=32. Runs whose names hold none are left out. Runs whose
-- names differ only in that number form a series (the name with the number
-- replaced by *), compared in batch-size order.
-- Per run, over the steps with in_rank_totals of all its ranks:
--   verdict            the step verdict holding for the largest share of
--                      step time (verdict_share); ties go to name order
--   prev_verdict, prev_batch_size
--                      the nearest smaller batch size of the series whose
--                      verdict was cpu_bound or gpu_bound, and that verdict
--   is_flip            gpu_bound here, cpu_bound at prev_batch_size
--   flip_batch_size    per series: the smallest batch size that is a flip,
--                      flip_after_batch_size the cpu_bound one before it
with named as (
    select
        run,
        regexp_extract(run, '(?:^|[^a-z])(?:bs|batch[_-]?size|batch)[_=-]?([0-9]+)', 1, 'i') as batch_text,
        regexp_replace(run, '((?:^|[^a-z])(?:bs|batch[_-]?size|batch)[_=-]?)[0-9]+', '\1*', 'i') as series
    from (select distinct run from kernels)
),

counted as materialized (
    -- Only runs with a batch size (a dataset without any costs next to nothing).
    select *
    from step_launch_summary
    where in_rank_totals
        and run in (select run from named where batch_text <> '')
),

per_verdict as (
    select
        s.run,
        s.verdict,
        sum(s.step_ns) as verdict_ns
    from counted as s
    group by s.run, s.verdict
),

per_run as (
    select
        run,
        count(distinct rank) as rank_count,
        count(*) as step_count,
        sum(step_ns)::bigint as step_ns,
        sum(kernel_count)::bigint as kernel_count,
        sum(tklqt_ns) / nullif(sum(step_ns), 0) as tklqt_share,
        sum(gpu_idle_ns) / nullif(sum(step_ns), 0) as gpu_idle_share,
        sum(launch_delay_total_ns) / nullif(sum(kernel_count), 0) as launch_delay_mean_ns
    from counted
    group by run
),

dominant as (
    select
        run,
        verdict,
        verdict_ns,
        row_number() over (partition by run order by verdict_ns desc, verdict) as place
    from per_verdict
),

runs as (
    select
        n.series,
        n.run,
        n.batch_text::bigint as batch_size,
        p.rank_count,
        p.step_count,
        p.step_ns,
        p.kernel_count,
        p.tklqt_share,
        p.gpu_idle_share,
        p.launch_delay_mean_ns,
        d.verdict,
        d.verdict_ns / nullif(p.step_ns, 0) as verdict_share,
        case when d.verdict in ('cpu_bound', 'gpu_bound') then d.verdict end as decisive_verdict
    from named as n
    join per_run as p on p.run = n.run
    join dominant as d on d.run = n.run and d.place = 1
),

ordered as (
    select
        *,
        last_value(decisive_verdict ignore nulls) over before as prev_verdict,
        last_value(case when decisive_verdict is not null then batch_size end ignore nulls) over before
            as prev_batch_size
    from runs
    window before as (
        partition by series order by batch_size, run
        rows between unbounded preceding and 1 preceding
    )
),

flips as (
    select
        *,
        coalesce(verdict = 'gpu_bound' and prev_verdict = 'cpu_bound', false) as is_flip
    from ordered
)

select
    series,
    run,
    batch_size,
    rank_count,
    step_count,
    step_ns,
    kernel_count,
    tklqt_share,
    gpu_idle_share,
    launch_delay_mean_ns,
    verdict,
    verdict_share,
    prev_verdict,
    prev_batch_size,
    is_flip,
    min(batch_size) filter (where is_flip) over (partition by series) as flip_batch_size,
    arg_min(prev_batch_size, batch_size) filter (where is_flip) over (partition by series) as flip_after_batch_size
from flips
order by series, batch_size, run
