-- The kernels of one rank in one profiler step, for a timeline per stream.
--
-- One row per GPU activity of run dash_run, rank dash_rank that overlaps
-- the window of step dash_step (step_windows), at most dash_max_kernels of
-- them: the longest, so a step of a hundred thousand tiny kernels still
-- draws what takes its time. kernels_in_step says how many there were.
--   offset_ns, end_offset_ns: start and end relative to the step's start.
-- param: dash_run = null
-- param: dash_rank = null
-- param: dash_step = null
-- param: dash_max_kernels = 5000
-- requires: kernels, step_windows
with window_ as (
    select start_ns as step_start_ns, end_ns as step_end_ns
    from step_windows
    where run = getvariable('dash_run')
        and rank = getvariable('dash_rank')
        and step = getvariable('dash_step')
),
in_step as (
    select k.*, w.step_start_ns, w.step_end_ns
    from kernels k, window_ w
    where k.run = getvariable('dash_run')
        and k.rank = getvariable('dash_rank')
        and k.start_ns < w.step_end_ns
        and k.end_ns > w.step_start_ns
)
select
    run,
    rank,
    getvariable('dash_step')::bigint as step,
    device,
    stream,
    name,
    category,
    start_ns,
    end_ns,
    end_ns - start_ns as dur_ns,
    start_ns - step_start_ns as offset_ns,
    end_ns - step_start_ns as end_offset_ns,
    step_end_ns - step_start_ns as step_ns,
    count(*) over () as kernels_in_step
from in_step
order by end_ns - start_ns desc, start_ns
limit getvariable('dash_max_kernels')
