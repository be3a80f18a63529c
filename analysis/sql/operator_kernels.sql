-- Which operators launched which kernels: per CPU operator (`aten::mm`,
-- ...) and kernel name, the GPU activities, their time and their launch
-- delay.
-- requires: launched_on_thread, cpu_ops
--
-- A GPU activity belongs to the innermost CPU op running, on the same
-- process and thread, when its launch call started (launched_on_thread):
-- of the ops with start_ns <= call start < end_ns, the one that started
-- last (then the shortest). This is the op's call stack, as
-- HTA links kernels to operators; it needs no `External id` (which older
-- Kineto writes in different spaces for ops and for runtime calls).
-- Activities of the complete profiler steps only (kernels.scoped); those
-- without a launch call in the trace, or launched outside every op, belong
-- to no operator.
-- One row per (run, rank, operator, kernel):
--   kernel_count           the activities
--   gpu_ns                 their summed duration
--   launch_delay_mean_ns, launch_delay_p50_ns, launch_delay_max_ns
--                          their launch delay (kernel_launches: call end to
--                          kernel start, clipped at 0), where they have one
with op_tiles as (
    -- each op with the tiles of 2^24 ns (16.8 ms) its span touches, so that
    -- a launch is matched against the ops of its own tile, not every op of
    -- its thread (both engines then join on an equality: the v100 trace's
    -- thread pairs 550 M op-launch candidates without it). An op with
    -- end_ns <= start_ns holds no instant.
    select run, rank, pid, tid, name, start_ns, end_ns,
        unnest(generate_series(start_ns >> 24, (end_ns - 1) >> 24)) as tile
    from cpu_ops
    where end_ns > start_ns
),

owner as (
    select
        l.run,
        l.rank,
        l.correlation_id,
        l.name,
        l.dur_ns,
        l.launch_delay_ns,
        arg_max(o.name, (o.start_ns, -o.end_ns, o.name)) as operator  -- of equal ops, the same whatever the order
    from launched_on_thread as l
    join op_tiles as o
        on o.run = l.run
        and o.rank = l.rank
        and o.pid = l.pid
        and o.tid = l.tid
        and o.tile = l.call_start_ns >> 24
        and o.start_ns <= l.call_start_ns
        and o.end_ns > l.call_start_ns
    group by l.run, l.rank, l.correlation_id, l.name, l.dur_ns, l.launch_delay_ns, l.call_start_ns
)

select
    run,
    rank,
    operator,
    name as kernel,
    count(*) as kernel_count,
    sum(dur_ns)::bigint as gpu_ns,
    avg(launch_delay_ns) as launch_delay_mean_ns,
    quantile_cont(launch_delay_ns, 0.5) as launch_delay_p50_ns,
    max(launch_delay_ns) as launch_delay_max_ns
from owner
group by run, rank, operator, name
order by run, rank, gpu_ns desc, operator, kernel
