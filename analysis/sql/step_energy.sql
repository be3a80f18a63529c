-- How much energy did each profiler step take on its GPU, and at what power?
--
-- One row per profiler step (step_windows) of each rank joined to a
-- telemetry GPU (power_trace_gpus: trace on the epoch, host known, device
-- matched to gpu_index). Telemetry is aligned to trace time by an as-of
-- match (power_trace_segments): each part of the step gets the power of the
-- sample whose interval covers it.
--   coverage_share: the share of the step's time covered by telemetry;
--   energy_j: the step's energy, NULL unless telemetry covers the whole step
--     (a partial sum would read as a cheap step);
--   mean_power_w: energy over the covered time / that time (also for a
--     partly covered step);
--   compute_energy_j, communication_energy_j, memory_energy_j, idle_energy_j:
--     energy_j split by the GPU's phase (time-weighted within each sample
--     interval, see power_trace_segments), NULL like energy_j;
--   samples: telemetry samples whose intervals overlap the step.
-- is_last marks the final step, usually cut short when the profiler stops.
-- requires: step_windows, power_trace_segments
with segments as materialized (
    select * from power_trace_segments
),
per_step as (
    select
        run,
        rank,
        step,
        sum(dur_ns) filter (where power_w is not null) as covered_ns,
        sum(energy_j) as covered_energy_j,
        sum(energy_j) filter (where phase = 'compute') as compute_energy_j,
        sum(energy_j) filter (where phase = 'communication') as communication_energy_j,
        sum(energy_j) filter (where phase = 'memory') as memory_energy_j,
        sum(energy_j) filter (where phase = 'idle') as idle_energy_j,
        count(distinct sample_ts_ns) filter (where power_w is not null) as samples
    from segments
    where step is not null
    group by run, rank, step
),
steps as (
    -- the steps of the ranks joined to telemetry (every such rank has segments)
    select
        step_windows.*,
        ranks.host,
        ranks.gpu_index
    from step_windows
    join (select distinct run, rank, host, gpu_index from segments) as ranks using (run, rank)
),
joined as (
    select
        steps.*,
        coalesce(per_step.covered_ns, 0) as covered_ns,
        per_step.covered_ns = steps.step_ns as fully_covered,
        per_step.covered_energy_j,
        per_step.compute_energy_j,
        per_step.communication_energy_j,
        per_step.memory_energy_j,
        per_step.idle_energy_j,
        coalesce(per_step.samples, 0) as samples
    from steps
    left join per_step using (run, rank, step)
)
select
    run,
    rank,
    host,
    gpu_index,
    step,
    start_ns,
    end_ns,
    step_ns,
    is_last,
    case when fully_covered then covered_energy_j end as energy_j,
    covered_energy_j / nullif(covered_ns / 1e9, 0) as mean_power_w,
    covered_ns / nullif(step_ns, 0) as coverage_share,
    case when fully_covered then coalesce(compute_energy_j, 0) end as compute_energy_j,
    case when fully_covered then coalesce(communication_energy_j, 0) end as communication_energy_j,
    case when fully_covered then coalesce(memory_energy_j, 0) end as memory_energy_j,
    case when fully_covered then coalesce(idle_energy_j, 0) end as idle_energy_j,
    samples
from joined
order by run, rank, step
