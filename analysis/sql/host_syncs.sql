-- How often each profiler step makes the CPU wait for the GPU, and how long
-- the GPU then sits idle: the cost of `.item()`, `.cpu()`, printing a
-- tensor or `torch.cuda.synchronize()` inside the training loop.
--
-- A synchronising call returns once the GPU has finished the work it
-- waits on; where that drains the GPU's queue, the GPU then idles until
-- the CPU, released, launches again. The calls (api_calls, by name less an
-- nsys version suffix such as `_v3020`): cudaDeviceSynchronize,
-- cudaStreamSynchronize (what `.item()` and a copy to the host end in),
-- cudaEventSynchronize, the blocking cudaMemcpy and cudaMemcpy2D, cudaFree
-- (the caching allocator handing memory back: torch.cuda.empty_cache(), or
-- a retry after an out-of-memory), the driver's cuCtx/cuStream/
-- cuEventSynchronize, cuMemcpyDtoH and cuMemFree, and HIP's
-- hipDeviceSynchronize, hipStreamSynchronize, hipEventSynchronize,
-- hipMemcpy, hipMemcpyDtoH and hipFree, made on the training loop's thread
-- (the one that records the profiler steps): a pinning or watchdog thread
-- that waits stalls no launch. Each counts in the profiler step whose
-- window holds its start.
--
-- One row per (run, rank, step) with at least one such call:
--   step_ns, is_last: the step (step_windows); the last is cut short;
--   sync_count, sync_ns: the calls and the CPU time they blocked;
--   sync_gpu_idle_ns: the idle gaps of the rank's GPU (kernels.rank_gap_ns,
--     any stream, complete steps) that began while one of the calls was
--     waiting, up to the kernel that ended each: the GPU ran dry under the
--     wait and stayed idle until new work came. Less the part of those
--     gaps the loop spent fetching its next batch from a DataLoader: that
--     is data_loading's (a slow batch after the drain is the loader's
--     cost), so the two views never count one nanosecond twice. NULL where a
--     call's gap cannot be known: in the rank's last step, and where no
--     kernel of the complete steps starts after the call (the gap would end
--     in the last step, whose kernels are out of scope, as in every per-rank
--     aggregate);
--   sync_gpu_idle_share = sync_gpu_idle_ns / step_ns;
--   sync_calls: the calls' names (less the nsys suffix); sync_ops: the CPU operators that made
--     them (by the calls' External id: aten::_local_scalar_dense is
--     `.item()`, aten::copy_ or aten::_to_copy a copy to the host), where
--     the trace links them (Kineto), sorted.
-- requires: step_windows, loader_fetches
with sync_calls as (
    select run, rank, tid, regexp_replace(name, '_v[0-9]+$', '') as call_name, start_ns, end_ns, external_id
    from api_calls
    where regexp_replace(name, '_v[0-9]+$', '') in (
        'cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize', 'cudaMemcpy', 'cudaMemcpy2D',
        'cudaFree', 'cuCtxSynchronize', 'cuStreamSynchronize', 'cuEventSynchronize', 'cuMemcpyDtoH', 'cuMemFree',
        'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventSynchronize', 'hipMemcpy', 'hipMemcpyDtoH', 'hipFree'
    )
        and end_ns >= start_ns
),
loop_threads as (
    -- the threads that record the profiler steps: the training loop's
    select run, rank, list(distinct tid) filter (where tid is not null) as tids
    from annotations
    where kind = 'profiler_step'
    group by run, rank
),
syncs as (
    -- (where the trace names no thread, of the call or of the steps, every call counts)
    select s.run, s.rank, s.call_name, s.start_ns, s.end_ns, s.external_id
    from sync_calls as s
    left join loop_threads as t
        on t.run = s.run
        and t.rank = s.rank
    where s.tid is null
        or coalesce(array_length(t.tids), 0) = 0
        or list_contains(t.tids, s.tid)
),
in_steps as (
    -- as-of the last step started at or before the call; kept if inside it
    select
        s.run,
        s.rank,
        w.step,
        w.step_ns,
        w.is_last,
        s.call_name,
        s.start_ns,
        s.end_ns,
        s.external_id,
        row_number() over (order by s.run, s.rank, s.start_ns, s.end_ns, s.call_name) as call_no
    from syncs as s
    asof join step_windows as w
        on w.run = s.run
        and w.rank = s.rank
        and s.start_ns >= w.start_ns
    where s.start_ns < w.end_ns
),
gaps as (
    select run, rank, start_ns - rank_gap_ns as gap_start_ns, start_ns as gap_end_ns
    from kernels
    where rank_gap_ns > 0
        and (run, rank) in (select run, rank from syncs)
),

scope as (
    -- where the rank's known gaps end: the last start of a kernel in scope
    select run, rank, max(start_ns) as last_scoped_start_ns
    from kernels
    where scoped
        and (run, rank) in (select run, rank from syncs)
    group by run, rank
),
drained_gaps as (
    -- each gap against the last call that began before it; kept if that
    -- call was still waiting when the GPU ran dry
    select
        c.call_no,
        g.run,
        g.rank,
        g.gap_start_ns,
        g.gap_end_ns
    from gaps as g
    asof join in_steps as c
        on c.run = g.run
        and c.rank = g.rank
        and g.gap_start_ns >= c.start_ns
    where g.gap_start_ns <= c.end_ns
),
fetched as (
    -- the part of each drained gap the loop spent fetching a batch
    select
        g.call_no,
        g.gap_start_ns,
        sum(least(g.gap_end_ns, f.end_ns) - greatest(g.gap_start_ns, f.start_ns)) as fetch_ns
    from drained_gaps as g
    join loader_fetches as f
        on f.run = g.run
        and f.rank = g.rank
        and f.start_ns < g.gap_end_ns
        and f.end_ns > g.gap_start_ns
    group by g.call_no, g.gap_start_ns
),
drained as (
    select
        g.call_no,
        sum(g.gap_end_ns - g.gap_start_ns - coalesce(f.fetch_ns, 0)) as idle_ns
    from drained_gaps as g
    left join fetched as f using (call_no, gap_start_ns)
    group by g.call_no
),
ops as (
    -- the operator behind each call (one name per External id)
    select o.run, o.rank, o.external_id, min(o.name) as op_name
    from cpu_ops as o
    semi join in_steps as c
        on c.run = o.run
        and c.rank = o.rank
        and c.external_id = o.external_id
    group by o.run, o.rank, o.external_id
)
select
    c.run,
    c.rank,
    c.step,
    any_value(c.step_ns) as step_ns,
    any_value(c.is_last) as is_last,
    count(*) as sync_count,
    sum(c.end_ns - c.start_ns)::bigint as sync_ns,
    case when bool_and(c.idle_known) then coalesce(sum(d.idle_ns), 0)::bigint end as sync_gpu_idle_ns,
    case when bool_and(c.idle_known) then coalesce(sum(d.idle_ns), 0) end / nullif(any_value(c.step_ns), 0)
        as sync_gpu_idle_share,
    list_sort(list(distinct c.call_name)) as sync_calls,
    coalesce(list_sort(list(distinct o.op_name) filter (where o.op_name is not null)), []) as sync_ops
from (
    select
        in_steps.*,
        not in_steps.is_last and coalesce(in_steps.end_ns < scope.last_scoped_start_ns, false) as idle_known
    from in_steps
    left join scope using (run, rank)
) as c
left join drained as d using (call_no)
left join ops as o
    on o.run = c.run
    and o.rank = c.rank
    and o.external_id = c.external_id
group by c.run, c.rank, c.step
order by c.run, c.rank, c.step
