-- The kernels of one rank in one profiler step, merged at drawing resolution
-- for a timeline per stream.
--
-- A step can hold a hundred thousand kernels; drawn one by one they take
-- the browser seconds, and keeping only the longest hides most of the time
-- when the step is many short kernels. So, as trace viewers do when zoomed
-- out, the kernels of each stream and category that follow each other with
-- a gap under one pixel (the window's span / dash_pixels) become one run;
-- every kernel is in exactly one run, and a run of one kernel keeps its name.
--
-- The window is the step, or the part of it from dash_window_start_ns to
-- dash_window_end_ns after the step's start; kernels are clipped to it.
-- One row per run:
--   offset_ns, end_offset_ns: the run's start and end after the step's start.
--   kernel_count, busy_ns: its kernels and the time they ran (within the window).
--   name: its one kernel's name, or its longest kernel's; longest_ns that kernel's time.
--   window_offset_ns, window_end_offset_ns: the window, after the step's start.
--   kernels_in_window, pixel_ns: all kernels drawn, and the merging gap.
-- param: dash_run = null
-- param: dash_rank = null
-- param: dash_step = null
-- param: dash_window_start_ns = null
-- param: dash_window_end_ns = null
-- param: dash_pixels = 1500
-- requires: kernels, dash_step_window
with window_ as (
    select * from dash_step_window
),
in_window as (
    select
        k.device,
        k.stream,
        k.name,
        k.category,
        greatest(k.start_ns, w.window_start_ns) as start_ns,
        least(k.end_ns, w.window_end_ns) as end_ns,
        k.end_ns - k.start_ns as kernel_ns,
        w.step_start_ns,
        w.step_ns,
        w.window_start_ns - w.step_start_ns as window_offset_ns,
        w.window_end_ns - w.step_start_ns as window_end_offset_ns,
        greatest((w.window_end_ns - w.window_start_ns) // greatest(getvariable('dash_pixels'), 1), 1) as pixel_ns
    from kernels k, window_ w
    where k.run = getvariable('dash_run')
        and k.rank = getvariable('dash_rank')
        and k.start_ns < w.window_end_ns
        and k.end_ns > w.window_start_ns
),
gaps as (
    select
        *,
        -- A new run starts where this kernel begins more than a pixel after
        -- everything before it on the stream (in its category) has ended.
        coalesce(start_ns > max(end_ns) over earlier + pixel_ns, true) as starts_run
    from in_window
    window earlier as (partition by stream, category order by start_ns, end_ns
                       rows between unbounded preceding and 1 preceding)
),
numbered as (
    select
        *,
        sum(starts_run::int) over (partition by stream, category order by start_ns, end_ns
                                   rows between unbounded preceding and current row) as run_number
    from gaps
)
select
    getvariable('dash_run') as run,
    getvariable('dash_rank')::bigint as rank,
    getvariable('dash_step')::bigint as step,
    any_value(device) as device,
    stream,
    category,
    arg_max(name, (kernel_ns, name)) as name,  -- of equal times, the last name: the same whatever the files' order
    max(kernel_ns) as longest_ns,
    count(*) as kernel_count,
    sum(end_ns - start_ns)::bigint as busy_ns,
    min(start_ns) as start_ns,
    max(end_ns) as end_ns,
    min(start_ns) - any_value(step_start_ns) as offset_ns,
    max(end_ns) - any_value(step_start_ns) as end_offset_ns,
    any_value(step_ns) as step_ns,
    any_value(window_offset_ns) as window_offset_ns,
    any_value(window_end_offset_ns) as window_end_offset_ns,
    sum(count(*)) over ()::bigint as kernels_in_window,
    any_value(pixel_ns) as pixel_ns
from numbered
group by stream, category, run_number
order by stream, category, start_ns
