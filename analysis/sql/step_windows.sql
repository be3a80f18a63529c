-- Profiler steps of each rank: the ProfilerStep#N ranges of its trace.
-- is_last marks the final step, which is usually cut short when the
-- profiler stops; per-rank aggregates leave its GPU work out (as HTA does).
-- gpu_busy_ns: the time some kernel of the rank (any stream) ran within
-- the window, found when the trace file was ingested (collector/derive.py,
-- annotations.gpu_busy_ns).
with steps as (
    select
        run,
        rank,
        step,
        min(start_ns) as start_ns,
        max(end_ns) as end_ns,
        max(gpu_busy_ns) as gpu_busy_ns
    from annotations
    where kind = 'profiler_step'
    group by run, rank, step
)
select
    run,
    rank,
    step,
    start_ns,
    end_ns,
    end_ns - start_ns as step_ns,
    gpu_busy_ns,
    step = max(step) over (partition by run, rank) as is_last,
    max(start_ns) over (partition by run, rank) as last_step_start_ns
from steps
