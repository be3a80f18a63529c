-- Kernels of the complete profiler steps: the GPU activities (kernels,
-- memcpy, memset) that per-rank aggregates count (time_breakdown,
-- comm_overlap, kernel_stats).
-- requires: kernels, api_calls, step_windows
--
-- The profiler usually stops in the middle of the last ProfilerStep#N, so,
-- like HTA, GPU work whose launching runtime call starts at or after the
-- start of the rank's last profiler step is left out. A kernel that starts
-- before that moment was launched before it and stays; a kernel that starts
-- later stays only if its launch call (api_calls, by run, rank and
-- correlation_id) started before it; one without a known launch call is
-- left out. A rank with no profiler step, or with a single one, counts
-- whole (HTA also filters only when the trace has two steps or more).
--
-- Only the kernels that start after the last step began need their launch
-- call looked up, so the join with api_calls stays small.
with step_counts as (
    select
        run,
        rank,
        count(*) as step_count,
        max(last_step_start_ns) as last_step_start_ns
    from step_windows
    group by run, rank
),

cut_ranks as (
    select run, rank, last_step_start_ns
    from step_counts
    where step_count >= 2
),

started_before_last_step as (
    select k.*
    from kernels as k
    left join cut_ranks as c
        on c.run = k.run
        and c.rank = k.rank
    where c.last_step_start_ns is null
        or k.start_ns < c.last_step_start_ns
),

late_kernels as (
    select k.*, c.last_step_start_ns
    from kernels as k
    join cut_ranks as c
        on c.run = k.run
        and c.rank = k.rank
    where k.start_ns >= c.last_step_start_ns
),

launched_before_last_step as (
    select k.* exclude (last_step_start_ns)
    from late_kernels as k
    semi join api_calls as a
        on a.run = k.run
        and a.rank = k.rank
        and a.correlation_id = k.correlation_id
        and a.start_ns < k.last_step_start_ns
)

select * from started_before_last_step
union all
select * from launched_before_last_step
