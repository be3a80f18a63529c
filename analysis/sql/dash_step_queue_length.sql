-- The launch queue of each stream of one rank in one profiler step: how many
-- GPU activities were launched and had not started yet, over time.
--
-- As HTA counts its "queue length" (see queued_launches): a kernel (memcpy,
-- memset) joins its stream's queue when its launch call starts and leaves
-- it when it starts on the GPU; kernels replayed from a CUDA graph, and
-- activities without a launch call in the trace, are not counted. A queue
-- that stays near 0 or 1 means the GPU waits for the CPU to launch
-- (CPU-bound); a deep one means the CPU runs ahead of the GPU (GPU-bound).
-- At 1,024 pending launches CUDA blocks the next launch call, so the CPU
-- stalls until the GPU drains the queue; no value here can exceed that.
--
-- The window is the step, or the part of it from dash_window_start_ns to
-- dash_window_end_ns after the step's start, as in dash_step_kernel_runs;
-- what was queued before the window counts from its start. For drawing,
-- the changes of each stream are gathered per pixel (the window's span /
-- dash_pixels). One row per stream and pixel with a change:
--   offset_ns, end_offset_ns: the pixel's first and last change, after the step's start.
--   queue_max, queue_min: the deepest and shallowest queue set in the pixel;
--   queue_last: the queue after its last change, held until the next row.
--   window_offset_ns, window_end_offset_ns: the window, after the step's start.
-- And per stream, exact over the window (the same on each of its rows):
--   mean_queue_length: the queue averaged over the window's time;
--   max_queue_length: its deepest; empty_share: the share of the window
--   with nothing queued.
-- param: dash_run = null
-- param: dash_rank = null
-- param: dash_step = null
-- param: dash_window_start_ns = null
-- param: dash_window_end_ns = null
-- param: dash_pixels = 1500
-- requires: queued_launches, dash_step_window
with window_ as (
    select * from dash_step_window
),
queued as (
    -- In the queue at some time in the window: launched before its end and
    -- started after its start.
    select
        q.device,
        q.stream,
        greatest(q.enter_ns, w.window_start_ns) as enter_ns,
        q.leave_ns
    from queued_launches q, window_ w
    where q.run = getvariable('dash_run')
        and q.rank = getvariable('dash_rank')
        and q.enter_ns < w.window_end_ns
        and q.leave_ns > w.window_start_ns
),
changes as (
    select stream, enter_ns as ts_ns, 1 as delta from queued
    union all
    select stream, leave_ns, -1 from queued, window_ where leave_ns < window_end_ns
    union all
    -- Each stream's level at the window's start, even when nothing is queued then.
    select distinct stream, window_start_ns, 0 from queued, window_
),
levels as (
    select
        stream,
        ts_ns,
        (sum(sum(delta)) over (partition by stream order by ts_ns))::bigint as queue_length
    from changes
    group by stream, ts_ns
),
held as (
    select
        levels.*,
        coalesce(lead(ts_ns) over (partition by stream order by ts_ns), w.window_end_ns) - ts_ns as held_ns,
        (ts_ns - w.window_start_ns) // greatest((w.window_end_ns - w.window_start_ns) // greatest(getvariable('dash_pixels'), 1), 1) as pixel,
        w.step_start_ns,
        w.window_start_ns - w.step_start_ns as window_offset_ns,
        w.window_end_ns - w.step_start_ns as window_end_offset_ns,
        w.window_end_ns - w.window_start_ns as window_ns
    from levels, window_ w
),
per_stream as (
    select
        stream,
        sum(queue_length * held_ns) / nullif(any_value(window_ns), 0) as mean_queue_length,
        max(queue_length) as max_queue_length,
        coalesce(sum(held_ns) filter (where queue_length = 0), 0) / nullif(any_value(window_ns), 0) as empty_share
    from held
    group by stream
),
stream_devices as (
    select stream, any_value(device) as device from queued group by stream
)
select
    getvariable('dash_run') as run,
    getvariable('dash_rank')::bigint as rank,
    getvariable('dash_step')::bigint as step,
    any_value(stream_devices.device) as device,
    held.stream,
    min(ts_ns) - any_value(step_start_ns) as offset_ns,
    max(ts_ns) - any_value(step_start_ns) as end_offset_ns,
    max(queue_length) as queue_max,
    min(queue_length) as queue_min,
    arg_max(queue_length, ts_ns) as queue_last,
    any_value(per_stream.mean_queue_length) as mean_queue_length,
    any_value(per_stream.max_queue_length) as max_queue_length,
    any_value(per_stream.empty_share) as empty_share,
    any_value(window_offset_ns) as window_offset_ns,
    any_value(window_end_offset_ns) as window_end_offset_ns
from held
join per_stream using (stream)
join stream_devices using (stream)
group by held.stream, pixel
order by held.stream, offset_ns
