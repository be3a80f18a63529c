-- Kernel launches: for every GPU activity (kernel, memcpy, memset), how long
-- its launching runtime call took and how long it waited before it started.
-- requires: step_windows
--
-- A GPU activity links to the runtime call that launched it (cudaLaunchKernel,
-- cudaMemcpyAsync, hipLaunchKernel, ...) by (run, rank, correlation_id);
-- activities without such a call are left out.
--   launch_call_ns   the launch call's duration (CPU time spent launching)
--   launch_delay_ns  kernel start - (call start + call duration), clipped at
--                    0: the time from the call's return to the kernel's start
--                    (HTA's "launch delay")
--   launch_queue_ns  kernel start - call start: launch plus queuing time; its
--                    sum over a step is the TKLQT (step_launch_summary)
--   step             the profiler step whose window contains the call's
--                    start; NULL outside every step or without steps
-- Full nanosecond precision; nothing is rounded. For the kernel's other
-- columns (end_ns, device, external_id) join kernels on (run, rank,
-- correlation_id); this view keeps to what launch analyses read, as it has
-- a row per kernel.
--
-- Speed (10 million kernels): the joins are hash joins on integers. Run and
-- rank enter them as one key, hash(run, rank), which DuckDB computes cheaply
-- from the files' dictionary-encoded run names (two (run, rank) pairs with
-- the same 64-bit hash would be needed to mix them up). The step is found by
-- an equi-join on a time bucket: each step is listed under every bucket of
-- width bucket_ns it overlaps, so a call meets only the one or two steps of
-- its bucket, not every step of its rank.
with steps as (
    -- Steps made disjoint: a step ends no later than the next one starts.
    select
        hash(run, rank) as rank_key,
        step,
        start_ns,
        least(end_ns, coalesce(lead(start_ns) over (partition by run, rank order by start_ns), end_ns)) as end_ns
    from step_windows
),

bucket_width as (
    -- The shortest step, or wider where that would list more than ~100,000 buckets.
    select greatest(min(end_ns - start_ns), (sum(end_ns - start_ns) // 100000)::bigint, 1) as bucket_ns
    from steps
),

step_buckets as (
    select
        s.rank_key,
        s.step,
        s.start_ns,
        s.end_ns,
        unnest(range(s.start_ns // b.bucket_ns, (s.end_ns - 1) // b.bucket_ns + 1)) as bucket
    from steps as s
    cross join bucket_width as b
    where s.end_ns > s.start_ns
),

launched as (
    select
        k.run,
        k.rank,
        k.stream,
        k.name,
        k.kind,
        k.category,
        k.correlation_id,
        k.start_ns,
        k.dur_ns,
        c.name as launch_call_name,
        c.start_ns as launch_call_start_ns,
        c.dur_ns as launch_call_ns
    from kernels as k
    join api_calls as c
        on hash(c.run, c.rank) = hash(k.run, k.rank)
        and c.correlation_id = k.correlation_id
)

select
    l.run,
    l.rank,
    l.stream,
    l.name,
    l.kind,
    l.category,
    l.correlation_id,
    l.start_ns,
    l.dur_ns,
    l.launch_call_name,
    l.launch_call_start_ns,
    l.launch_call_ns,
    greatest(l.start_ns - (l.launch_call_start_ns + l.launch_call_ns), 0) as launch_delay_ns,
    l.start_ns - l.launch_call_start_ns as launch_queue_ns,
    s.step
from launched as l
cross join bucket_width as b
left join step_buckets as s
    on s.rank_key = hash(l.run, l.rank)
    and s.bucket = l.launch_call_start_ns // b.bucket_ns
    and l.launch_call_start_ns >= s.start_ns
    and l.launch_call_start_ns < s.end_ns
