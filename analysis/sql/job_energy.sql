-- How much energy did each job, and each of its Slurm steps, draw, over
-- how many GPU-hours, at what power?
--
-- One row per job (step NULL) and per Slurm step of a job, over the holds
-- of job_holds: each GPU's power samples in (start_ns, end_ns] of each of
-- its holds (power_samples: a sample closes the interval since the GPU's
-- previous one; intervals longer than power_max_gap_s are left out).
--   hosts, gpus: distinct hosts and (host, GPU) pairs held;
--   start_ns, end_ns: the first and last sighting over all its holds;
--   gpu_hours: the holds' time summed over GPUs, in hours;
--   energy_j: power × interval summed over those samples;
--   mean_power_w: energy_j over the time those samples cover, per GPU;
--   p99_power_w: the 99th percentile of those samples' power (all its
--     GPUs' samples together);
--   throttled_s: the time the GPUs were held back by power or heat, from
--     their violation counters (NULL where no GPU has them);
--   covered_s: GPU-seconds with a power sample (gpu_hours × 3600 where
--     telemetry has no gaps).
-- requires: job_holds, power_samples
with samples as (
    select
        holds.job,
        holds.scheduler,
        holds.step,
        holds.job_user,
        holds.host,
        holds.gpu_index,
        samples.power_w,
        case when not samples.gap and samples.power_w is not null then samples.interval_s end as interval_s,
        samples.power_violation_increment_ns + coalesce(samples.thermal_violation_increment_ns, 0)
            as violation_ns
    from job_holds as holds
    join power_samples as samples
        on samples.host = holds.host
        and samples.gpu_index = holds.gpu_index
        and samples.ts_ns > holds.start_ns
        and samples.ts_ns <= holds.end_ns
),
per_job as (
    select
        job,
        step,
        sum(power_w * interval_s) as energy_j,
        sum(interval_s) as covered_s,
        quantile_cont(power_w, 0.99) as p99_power_w,
        sum(violation_ns) / 1e9 as throttled_s
    from samples
    group by job, step
),
held as (
    select
        job,
        any_value(scheduler) as scheduler,
        step,
        any_value(job_user) as job_user,
        count(distinct host) as hosts,
        count(distinct (host, gpu_index)) as gpus,
        min(start_ns) as start_ns,
        max(end_ns) as end_ns,
        sum(held_s) / 3600 as gpu_hours
    from job_holds
    group by job, step
)
select
    held.job,
    held.scheduler,
    held.step,
    held.job_user,
    held.hosts,
    held.gpus,
    held.start_ns,
    held.end_ns,
    held.gpu_hours,
    per_job.energy_j,
    per_job.energy_j / nullif(per_job.covered_s, 0) as mean_power_w,
    per_job.p99_power_w,
    per_job.throttled_s,
    coalesce(per_job.covered_s, 0) as covered_s
from held
left join per_job
    on per_job.job = held.job
    and per_job.step is not distinct from held.step
order by held.job, held.step nulls first
