-- How long each profiler step waits for its next batch, and how much of
-- that wait the GPU sat idle: a training loop stalled on data loading.
--
-- The fetches are the ranges PyTorch's profiler records around each
-- `next()` on a DataLoader iterator, `enumerate(DataLoader)#<iterator
-- class>.__next__` (single-process and worker-process loaders alike). They
-- run in the training loop's thread, so a fetch is time the loop waits for
-- its batch; each counts in the profiler step whose window holds its start
-- (where `for batch in loader: ...; prof.step()` puts it: at the step's
-- start).
--
-- One row per (run, rank, step) with at least one fetch:
--   step_ns, is_last: the step (step_windows); the last is cut short;
--   load_count, load_ns: the fetches and their summed time;
--   load_gpu_idle_ns: the part of that time the rank's GPU ran no kernel:
--     the rank's idle gaps (kernels.rank_gap_ns: between the kernels of its
--     complete steps, any stream) that end at a kernel launched in the same
--     step, cut to the fetches. NULL where no gap can be known: in the
--     rank's last step (its kernels are out of scope, as in every per-rank
--     aggregate) and for a fetch that starts before the rank's first kernel;
--   load_share = load_ns / step_ns;
--   load_gpu_idle_share = load_gpu_idle_ns / step_ns: the share of the step
--     the GPU waited on data. A fetch the GPU does not notice (the queue
--     still holds work from the step before) costs nothing here.
-- requires: step_windows, loader_fetches
with in_steps as (
    select
        f.run,
        f.rank,
        s.step,
        s.step_ns,
        s.is_last,
        f.start_ns,
        f.end_ns,
        -- whether the rank's idle gaps can say what the GPU did meanwhile
        not s.is_last and f.start_ns >= r.span_start_ns as idle_known
    from loader_fetches as f
    join step_windows as s
        on s.run = f.run
        and s.rank = f.rank
        and f.start_ns >= s.start_ns
        and f.start_ns < s.end_ns
    left join rank_summary as r
        on r.run = f.run
        and r.rank = f.rank
),
gaps as (
    -- the idle gap each kernel ends, by the step that launched the kernel
    select
        run,
        rank,
        step,
        start_ns - rank_gap_ns as gap_start_ns,
        start_ns as gap_end_ns
    from kernels
    where rank_gap_ns > 0
        and step is not null
        and (run, rank) in (select run, rank from loader_fetches)
),
fetch_idle as (
    select
        f.run,
        f.rank,
        f.step,
        f.start_ns,
        sum(least(g.gap_end_ns, f.end_ns) - greatest(g.gap_start_ns, f.start_ns)) as idle_ns
    from in_steps as f
    join gaps as g
        on g.run = f.run
        and g.rank = f.rank
        and g.step = f.step
        and g.gap_start_ns < f.end_ns
        and g.gap_end_ns > f.start_ns
    group by f.run, f.rank, f.step, f.start_ns
)
select
    f.run,
    f.rank,
    f.step,
    any_value(f.step_ns) as step_ns,
    any_value(f.is_last) as is_last,
    count(*) as load_count,
    sum(f.end_ns - f.start_ns)::bigint as load_ns,
    case when bool_and(coalesce(f.idle_known, false)) then coalesce(sum(i.idle_ns), 0)::bigint end as load_gpu_idle_ns,
    sum(f.end_ns - f.start_ns) / nullif(any_value(f.step_ns), 0) as load_share,
    case when bool_and(coalesce(f.idle_known, false)) then coalesce(sum(i.idle_ns), 0) end
        / nullif(any_value(f.step_ns), 0) as load_gpu_idle_share
from in_steps as f
left join fetch_idle as i
    on i.run = f.run
    and i.rank = f.rank
    and i.step = f.step
    and i.start_ns = f.start_ns
group by f.run, f.rank, f.step
order by f.run, f.rank, f.step
