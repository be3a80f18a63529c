-- The window of one rank's profiler step that the step views draw
-- (dash_step_kernel_runs, dash_step_queue_length): the step, or the part of
-- it from dash_window_start_ns to dash_window_end_ns after its start,
-- clipped to the step. One row, or none for a step that does not exist.
-- Both views read it, so the kernels and the launch queue drawn under them
-- always cover the same time.
-- param: dash_run = null
-- param: dash_rank = null
-- param: dash_step = null
-- param: dash_window_start_ns = null
-- param: dash_window_end_ns = null
-- requires: step_windows
select
    start_ns as step_start_ns,
    step_ns,
    start_ns + greatest(coalesce(getvariable('dash_window_start_ns'), 0), 0) as window_start_ns,
    start_ns + least(coalesce(getvariable('dash_window_end_ns'), step_ns), step_ns) as window_end_ns
from step_windows
where run = getvariable('dash_run')
    and rank = getvariable('dash_rank')
    and step = getvariable('dash_step')
