-- When each job, and each of its Slurm steps, held each GPU: the base of
-- job_gpus and job_energy.
--
-- A job is what the collector read for the processes it saw on a GPU
-- (processes; collector.jobs reads /proc once per process):
--   job: 'slurm-<job id>', or for a Kubernetes pod 'pod-<namespace>/<pod
--     name>' ('pod-<pod uid>' where the names are unknown); processes of
--     neither are no job's and left out;
--   scheduler: slurm | kubernetes; job_user: SLURM_JOB_USER where known;
--   step: the Slurm step (a number, batch, extern); NULL in the rows over
--     the whole job (every job has those; a Slurm job has a row per step
--     as well);
--   hold_no: holds of one job on one GPU numbered in time order: process
--     sightings more than job_hold_gap_s apart (the collector lists
--     processes every --slow-every, 10 s by default) start a new hold;
--   start_ns, end_ns: epoch ns of the hold's first and last sighting; the
--     hold is (start_ns, end_ns], so a job seen once holds its GPU for 0 s;
--   held_s = (end_ns - start_ns) / 1e9; sightings: the samples that saw
--     it; pids: its processes' pids (the host's).
-- requires: processes
-- param: job_hold_gap_s = 60
with sightings as (
    select
        case
            when slurm_job_id is not null then 'slurm-' || slurm_job_id
            else 'pod-' || coalesce(k8s_namespace || '/' || k8s_pod_name, k8s_pod_uid)
        end as job,
        case when slurm_job_id is not null then 'slurm' else 'kubernetes' end as scheduler,
        case when slurm_job_id is not null then slurm_step_id end as step,
        slurm_job_user as job_user,
        host,
        gpu_index,
        gpu_uuid,
        pid,
        epoch_ns(ts) as ts_ns
    from processes
    where slurm_job_id is not null or k8s_pod_uid is not null
),
levels as (
    -- each sighting counts for the whole job, and for its step
    select job, scheduler, null::varchar as step, job_user, host, gpu_index, gpu_uuid, pid, ts_ns
    from sightings
    union all
    select job, scheduler, step, job_user, host, gpu_index, gpu_uuid, pid, ts_ns
    from sightings
    where step is not null
),
ticks as (
    -- one row per sample that saw the job (or step) on the GPU, however
    -- many of its processes it saw
    select
        job,
        scheduler,
        step,
        host,
        gpu_index,
        ts_ns,
        any_value(job_user) as job_user,
        any_value(gpu_uuid) as gpu_uuid,
        list(distinct pid) as pids
    from levels
    group by job, scheduler, step, host, gpu_index, ts_ns
),
marked as (
    select
        *,
        case
            when (ts_ns - lag(ts_ns) over hold_order) / 1e9 <= getvariable('job_hold_gap_s') then 0
            else 1
        end as starts_hold
    from ticks
    window hold_order as (partition by job, step, host, gpu_index order by ts_ns)
),
numbered as (
    select
        *,
        sum(starts_hold) over (
            partition by job, step, host, gpu_index order by ts_ns rows between unbounded preceding and current row
        ) as hold_no
    from marked
)
select
    job,
    any_value(scheduler) as scheduler,
    step,
    any_value(job_user) as job_user,
    host,
    gpu_index,
    any_value(gpu_uuid) as gpu_uuid,
    hold_no::bigint as hold_no,
    min(ts_ns) as start_ns,
    max(ts_ns) as end_ns,
    (max(ts_ns) - min(ts_ns)) / 1e9 as held_s,
    count(*) as sightings,
    list_sort(list_distinct(flatten(list(pids)))) as pids
from numbered
group by job, step, host, gpu_index, hold_no
order by job, step nulls first, host, gpu_index, hold_no
